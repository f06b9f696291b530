"""The reply's echo path: a linear filter fitted from the blocks as played to the raw microphone
(least squares over a stretch of reply, from the strongest cross-correlation on), the echo it
predicts, and the echo's delay now (GCC-PHAT). An interruption's rebuilt onset
(vocal.duplex.echo_free.onset) and the doctor's probe (vocal.duplex.measure.probe) both fit it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: The capture rate the fit works at (the microphone's).
SAMPLE_RATE = 16_000
#: The echo path's length the filter models: the direct sound and early reflections (96 ms).
TAPS = 1536
#: Taps before the strongest correlation (the path's onset is not sharp once resampled).
LEAD_TAPS = 64
#: Where the echo of a played sample can arrive, relative to the mapped clock: output and input
#: latency plus the room (the harness: ~0.1-0.2 s; issue 20's long rooms: up to 0.6 s).
LAG_RANGE_S = (-0.25, 0.75)
#: Each candidate fit uses this much reply; candidates end this far before the estimated onset
#: (the detector's onset can be late by a second when the person started under the echo, and
#: the output can slip early in the reply: the best candidate wins).
FIT_S = 2.0
FIT_ENDS_BEFORE_ONSET_S = (0.1, 0.6, 1.1)
#: (ends this far before the onset, this long), tried in order. The last two, 1 s: early in a
#: reply, or in a short one, the output's latency can still move (it slipped 60-80 ms within
#: the first seconds live), and a 2 s stretch then spans two echo paths. A 2 s question's
#: answer begun at its end: 6-11 dB removed with the 2 s stretches, 37-60 dB with 1 s.
FIT_CANDIDATES = (*((before, FIT_S) for before in FIT_ENDS_BEFORE_ONSET_S), (0.1, 1.0), (0.6, 1.0))
#: A fit needs at least this much reply.
FIT_MIN_S = 1.0
#: The echo's delay over this much reply, ending `FIT_ENDS_BEFORE_ONSET_S[0]` before the
#: onset, must be a candidate's within `MOVED_MS`, else that candidate fitted a path that has
#: moved since (an output that ran dry for a moment and carries on later; the harness's
#: drifting room does so 2 s into each reply): its "echo-free" capture kept the reply's words
#: from there on ("Few tests passed. Go forward 10 meters.", +6 dB over a 42 dB fit).
RECENT_S = 0.5
MOVED_MS = 2.0
#: How far the echo's peak must stand over any other for `echo_lag_now` to trust it (over
#: 0.5 s, 6 dB of a person over the echo: 2.2-12 where the path was found, 1.1-1.4 where not).
DISTINCT = 1.5
#: A candidate this good ends the search (live on the room harness: 24-56 dB when it held).
GOOD_ENOUGH_DB = 35.0
#: Diagonal loading of the normal equations, relative to the reference's energy per tap.
_LOADING = 1e-4


def shifted_reference(
    reference: np.ndarray, heard_after: int, steps: tuple[tuple[int, int], ...]
) -> np.ndarray:
    """`reference` as played where the echo moved: from each step's raw index on (a reference
    sample is heard `heard_after` samples later), later by its shift (samples)."""
    out = reference.copy()
    for i, (at, shift) in enumerate(steps):
        start = max(0, at - heard_after)
        stop = steps[i + 1][0] - heard_after if i + 1 < len(steps) else out.shape[0]
        if stop > start:
            out[start:stop] = _window(reference, start - shift, stop - shift)
    return out


def _window(signal: np.ndarray, start: int, stop: int) -> np.ndarray:
    """`signal[start:stop]` with zeros outside it."""
    out = np.zeros(max(0, stop - start), signal.dtype)
    lo, hi = max(start, 0), min(stop, signal.shape[0])
    if lo < hi:
        out[lo - start : hi - start] = signal[lo:hi]
    return out


@dataclass(frozen=True)
class EchoPath:
    """A fitted linear echo path: raw[n] holds sum_j h[j] * reference[n - lag - j]."""

    lag: int
    h: np.ndarray
    removed_db: float

    @property
    def delay_samples(self) -> int:
        """The strongest tap: where the direct sound of a played sample comes back."""
        return self.lag + int(np.argmax(np.abs(self.h)))


def fit_echo_path(
    reference: np.ndarray, raw: np.ndarray, fit: slice, lags: tuple[int, int]
) -> EchoPath | None:
    """Fit the echo of `reference` in `raw` (same grid, same rate) over `raw[fit]`.

    The delay is the strongest cross-correlation within `lags` (samples); the filter, `TAPS`
    long from `LEAD_TAPS` before it, solves the normal equations built from the reference's
    autocorrelation (a Toeplitz matrix) and the cross-correlation. None when the stretch holds
    no reference or no sound."""
    start, stop = fit.start or 0, fit.stop if fit.stop is not None else raw.shape[0]
    y = raw[start:stop].astype(np.float64)
    corr = _correlation(reference, raw, fit, lags)
    if corr is None:
        return None
    first = lags[1] - int(np.argmax(corr)) - LEAD_TAPS
    x = _window(reference, start - first - TAPS + 1, stop - first).astype(np.float64)
    size = 1 << math.ceil(math.log2(2 * x.shape[0]))
    spectrum = np.fft.rfft(x, size)
    auto = np.fft.irfft(spectrum * np.conj(spectrum), size)[:TAPS]
    gram = auto[np.abs(np.arange(TAPS)[:, None] - np.arange(TAPS)[None, :])]
    gram[np.diag_indices(TAPS)] += _LOADING * auto[0] + 1e-12
    # p[j] = sum y[n] x[n + TAPS - 1 - j]: the cross-correlation read backwards.
    cross = np.fft.irfft(spectrum * np.conj(np.fft.rfft(y, size)), size)
    h = np.linalg.solve(gram, cross[TAPS - 1 :: -1][:TAPS])
    estimate = np.convolve(x, h, mode="valid")[: y.shape[0]]
    return EchoPath(lag=first, h=h.astype(np.float32), removed_db=_removed_db(y, y - estimate))


def _correlation(
    reference: np.ndarray,
    raw: np.ndarray,
    stretch: slice,
    lags: tuple[int, int],
    phat: bool = False,
) -> np.ndarray | None:
    """|cross-correlation| of `reference` with `raw[stretch]`, index k at lag lags[1] - k (k up
    to lags[1] - lags[0]); with `phat`, of their spectra's phases alone (GCC-PHAT). None when
    the stretch holds no sound or the reference nothing over -60 dBFS (a pause in the reply
    says nothing of the path)."""
    start, stop = stretch.start or 0, stretch.stop if stretch.stop is not None else raw.shape[0]
    y = raw[start:stop].astype(np.float64)
    low, high = lags
    # reference[start - high : stop - low] covers every lag in range.
    span = _window(reference, start - high, stop - low).astype(np.float64)
    if not y.any() or float(np.mean(span**2)) < 1e-6:
        return None
    size = 1 << math.ceil(math.log2(span.shape[0] + y.shape[0]))
    cross = np.fft.rfft(span, size) * np.conj(np.fft.rfft(y, size))
    if phat:
        cross /= np.maximum(np.abs(cross), 1e-12 * float(np.max(np.abs(cross))))
    # corr[k] = sum y[n] span[n + k] = sum y[n] reference[start + n + k - high]: lag high - k.
    return np.abs(np.fft.irfft(cross, size)[: high - low + 1])


def echo_lag_now(
    reference: np.ndarray,
    raw: np.ndarray,
    stretch: slice,
    lags: tuple[int, int],
    rate: int = SAMPLE_RATE,
) -> int | None:
    """The echo's delay (samples, within `lags`) over a short stretch that may hold the person
    too: the peak of GCC-PHAT, which whitens both, so that a person talking over the echo does
    not pull the peak to wherever their voice and the reply's happen to match (the plain
    correlation did, over 0.5 s with a person 6 dB over the echo, in 4 of 18 stretches of a
    still path). None when the peak is not `DISTINCT` times any other more than `MOVED_MS`
    away (the stretch is mostly the person, or a pause in the reply), or `_correlation` says
    nothing."""
    corr = _correlation(reference, raw, stretch, lags, phat=True)
    if corr is None:
        return None
    k = int(np.argmax(corr))
    away = round(MOVED_MS * rate / 1000)
    others = np.concatenate([corr[: max(0, k - away)], corr[k + away + 1 :]])
    stands_out = not others.size or corr[k] >= DISTINCT * float(np.max(others))
    if not stands_out:  # a match among many, not one clear echo
        return None
    return lags[1] - k


def _removed_db(raw: np.ndarray, residual: np.ndarray) -> float:
    """Echo removed: the median over 100 ms windows with echo in them, so that one loud
    moment the reference does not explain (a breath, a click) does not hide a fit that holds
    everywhere else."""
    window = SAMPLE_RATE // 10
    count = raw.shape[0] // window
    if count == 0:
        return 0.0
    raw_energy = np.sum(raw[: count * window].reshape(count, window) ** 2, axis=1)
    left = np.sum(residual[: count * window].reshape(count, window) ** 2, axis=1)
    echo = raw_energy > 1e-3 * float(np.max(raw_energy))  # within 30 dB of the loudest
    if not echo.any():
        return 0.0
    return float(10 * np.log10(np.median(raw_energy[echo] / np.maximum(left[echo], 1e-20))))


def echo_estimate(reference: np.ndarray, path: EchoPath, start: int, stop: int) -> np.ndarray:
    """The fitted echo at raw samples `start` to `stop`."""
    x = _window(reference, start - path.lag - TAPS + 1, stop - path.lag)
    return np.convolve(x, path.h, mode="valid")[: stop - start].astype(np.float32)


def best_echo_path(
    reference: np.ndarray,
    raw: np.ndarray,
    onset: int,
    *,
    earliest: int = 0,
    rate: int = SAMPLE_RATE,
) -> EchoPath | None:
    """The best of the candidate fits (`FIT_S` of reply ending `FIT_ENDS_BEFORE_ONSET_S`
    before raw sample `onset`, none before `earliest`) whose delay is the echo's just before
    the onset (`RECENT_S`, `MOVED_MS`), or None if none could be made."""
    lags = (round(LAG_RANGE_S[0] * rate), round(LAG_RANGE_S[1] * rate))
    recent_end = onset - round(FIT_ENDS_BEFORE_ONSET_S[0] * rate)
    recent = echo_lag_now(
        reference,
        raw,
        slice(max(earliest, recent_end - round(RECENT_S * rate)), recent_end),
        lags,
        rate,
    )
    best = None
    for before_s, fit_s in FIT_CANDIDATES:
        end = onset - round(before_s * rate)
        begin = max(earliest, end - round(fit_s * rate))
        if end - begin < FIT_MIN_S * rate:
            continue
        path = fit_echo_path(reference, raw, slice(begin, end), lags)
        if path is None or (
            recent is not None and abs(path.lag + LEAD_TAPS - recent) > MOVED_MS * rate / 1000
        ):
            continue
        if best is None or path.removed_db > best.removed_db:
            best = path
        if best is not None and best.removed_db >= GOOD_ENOUGH_DB:
            break  # each fit is ~0.1 s of CPU while the person talks
    return best


__all__ = [
    "EchoPath",
    "best_echo_path",
    "echo_estimate",
    "echo_lag_now",
    "fit_echo_path",
    "shifted_reference",
]
