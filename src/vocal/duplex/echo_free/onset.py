"""An interruption's words, rebuilt from the raw microphone once a barge-in has stopped the reply.

Where the onset was lost (issue 19; room harness, hibari reply, "please stop and open the
settings file" 1.5-7 s in; benchmarks/RESULTS.md): AEC3's output came back "please top/up..."
in most runs. The person's "s" falls right after the reply stops, and for 0.1-0.2 s after that
AEC3's suppressor takes 40-60 dB out of the band above 3 kHz. The raw microphone keeps every
word, and the reply with them. A linear echo path fitted on the reply before the person started
(the blocks as played against the raw microphone, least squares) takes the reply out and leaves
the person alone.

So after a barge-in the endpointer hears the raw microphone minus the fitted echo, from the
pre-roll on (`EchoFreeOnset`), rather than AEC3's output. Where no fit removes at least
`MIN_ECHO_REMOVED_DB` (a loudspeaker that distorts, an output that slipped, too little reply
before the person spoke) it hears the canceller's output, as before.

`OnsetTaps` keeps the last seconds of both streams from the audio callbacks: the raw capture
(copied before the canceller cleans it in place) and the blocks as played, each with the count
of samples before it, so positions within a stream are exact and only the one mapping between
the two streams comes from the clock (the fitted delay absorbs its error).
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from vocal.duplex.echo_free.echo_follow import PathSteps, follow_path
from vocal.duplex.echo_free.taps import StreamTap, clock_offset, joined, position_at

if TYPE_CHECKING:
    from vocal.audio.devices import Block

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
FIT_CANDIDATES = (*((before, FIT_S) for before in FIT_ENDS_BEFORE_ONSET_S), (0.1, 1.0),
                  (0.6, 1.0))  # fmt: skip
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
#: Below this much echo removed by the best fit, the canceller's output is used instead.
MIN_ECHO_REMOVED_DB = 20.0
#: A candidate this good ends the search (live on the room harness: 24-56 dB when it held).
GOOD_ENOUGH_DB = 35.0
#: Diagonal loading of the normal equations, relative to the reference's energy per tap.
_LOADING = 1e-4


def _shifted(
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


def fit_echo_path(reference: np.ndarray, raw: np.ndarray, fit: slice,
                  lags: tuple[int, int]) -> EchoPath | None:  # fmt: skip
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


def _correlation(reference: np.ndarray, raw: np.ndarray, stretch: slice,
                 lags: tuple[int, int], phat: bool = False) -> np.ndarray | None:  # fmt: skip
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


def echo_lag_now(reference: np.ndarray, raw: np.ndarray, stretch: slice, lags: tuple[int, int],
                 rate: int = SAMPLE_RATE) -> int | None:  # fmt: skip
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
    from vocal.duplex.echo_track import peak_stands_out

    k = int(np.argmax(corr))
    if not peak_stands_out(corr, k, round(MOVED_MS * rate / 1000), DISTINCT):
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


def best_echo_path(reference: np.ndarray, raw: np.ndarray, onset: int, *, earliest: int = 0,
                   rate: int = SAMPLE_RATE) -> EchoPath | None:  # fmt: skip
    """The best of the candidate fits (`FIT_S` of reply ending `FIT_ENDS_BEFORE_ONSET_S`
    before raw sample `onset`, none before `earliest`) whose delay is the echo's just before
    the onset (`RECENT_S`, `MOVED_MS`), or None if none could be made."""
    lags = (round(LAG_RANGE_S[0] * rate), round(LAG_RANGE_S[1] * rate))
    recent_end = onset - round(FIT_ENDS_BEFORE_ONSET_S[0] * rate)
    recent = echo_lag_now(reference, raw, slice(max(earliest, recent_end - round(RECENT_S * rate)),
                                                 recent_end), lags, rate)  # fmt: skip
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


class OnsetTaps:
    """The raw capture and the played blocks of a turn, kept for `EchoFreeOnset`.

    `capture` and `render` run in the audio callbacks (a copy and an append each). With the
    output's clock drift known (`drift_ppm`, an echo profile's), the played blocks are put on
    the capture's grid as that clock played them (`vocal.duplex.canceller.drift.warped`): at 100 ppm
    the echo moves 0.1 ms a second, and a fit on the blocks as handed over removed 1-8 dB of the
    echo half a second on where one on the drifting clock removed 28-47 dB (the harness's drifting
    room, offline, hibari's reply; benchmarks/RESULTS.md)."""

    def __init__(self, render_sample_rate: int, capture_sample_rate: int = SAMPLE_RATE,
                 drift_ppm: float = 0.0) -> None:  # fmt: skip
        self.raw = StreamTap(capture_sample_rate)
        self.played = StreamTap(render_sample_rate)
        self.drift_ppm = drift_ppm

    def capture(self, block: np.ndarray) -> None:
        self.raw.add(block, time.monotonic())

    def render(self, block: np.ndarray) -> None:
        self.played.add(block, time.monotonic())

    def aligned(self) -> AlignedStreams | None:
        """The raw capture kept and the blocks as played on its grid; None before both ran."""
        from vocal.audio.wav import resample
        from vocal.duplex.canceller.drift import warped

        raw_blocks, played_blocks = self.raw.snapshot(), self.played.snapshot()
        if not raw_blocks or not played_blocks:
            return None
        rate, played_rate = self.raw.sample_rate, self.played.sample_rate
        base = raw_blocks[0][1]
        raw = joined(raw_blocks, base, self.raw.total)
        # The reply as played, on the raw stream's grid, through the clock.
        frame = round((base - clock_offset(raw_blocks, played_blocks, rate, played_rate))
                      * played_rate / rate)  # fmt: skip
        count = math.ceil(raw.shape[0] * played_rate / rate) + played_rate
        played = joined(played_blocks, frame, frame + count)
        reference = played if played_rate == rate else resample(played, played_rate, rate)
        if self.drift_ppm:
            # Anchored at the newest capture: the path's delay there (the one a turn learns
            # from a fit) is the delay as the callbacks saw it, whatever the drift.
            reference = warped(reference, self.drift_ppm, raw.shape[0])
        return AlignedStreams(raw, reference, base, raw_blocks, rate)

    def rebuild(self, onset_s: float, reply_started_s: float | None,
                after_s: float | None = None) -> EchoFreeOnset | None:  # fmt: skip
        """The raw capture with the reply's fitted echo taken out, fitted on the reply before
        `onset_s` and after `after_s` (a glitch moved the echo path before it); None when
        there was nothing to fit (see `EchoFreeOnset.usable`)."""
        streams = self.aligned()
        if streams is None:
            return None
        onset = streams.index(onset_s)
        starts = [t for t in (reply_started_s, after_s) if t is not None]
        earliest = max(0, streams.index(max(starts))) if starts else 0
        path = best_echo_path(streams.reference, streams.raw, onset, earliest=earliest,
                              rate=streams.rate)  # fmt: skip
        if path is None:
            return None
        return EchoFreeOnset(self, streams.base, streams.reference, path, fitted_from=earliest)


@dataclass(frozen=True)
class AlignedStreams:
    """The raw capture (`raw`, from raw sample `base` of the stream on) and what was played
    over it (`reference`, on the same grid: a played sample sits where the capture stood when
    the output callback handed it over, so an echo comes `delay` samples after it)."""

    raw: np.ndarray
    reference: np.ndarray
    base: int
    raw_blocks: list[tuple[float, int, np.ndarray]]
    rate: int

    def index(self, at_s: float) -> int:
        """The index in `raw` of the sample captured at monotonic time `at_s`."""
        return round(position_at(self.raw_blocks, at_s, self.rate)) - self.base


class EchoFreeOnset:
    """Raw capture minus the fitted echo, block by block, for the blocks a Microphone hands
    out (matched to the raw tap by their stamps); the echo shifted where the path was followed
    to have moved (`steps`, vocal.duplex.echo_free.echo_follow: raw indices from base)."""

    def __init__(
        self,
        taps: OnsetTaps,
        base: int,
        reference: np.ndarray,
        path: EchoPath,
        steps: PathSteps | None = None,
        fitted_from: int = 0,
        moves: tuple[tuple[int, int], ...] = (),
    ) -> None:
        self._taps, self._base, self._reference = taps, base, reference
        self.path = path
        self.steps = steps or PathSteps()
        #: The raw index (from base) the fit's stretches could start at (the reply's start).
        self.fitted_from = fitted_from
        #: The moves (raw index, samples) the reference was shifted by before it was fitted
        #: (`refitted`).
        self.moves = moves

    def followed(self, steps: PathSteps) -> EchoFreeOnset:
        """The same fit with the echo shifted by each step's samples from its index on."""
        return EchoFreeOnset(
            self._taps, self._base, self._reference, self.path, steps, self.fitted_from, self.moves
        )

    def refitted(self, onset_s: float) -> EchoFreeOnset | None:
        """The echo fitted again on the reply before `onset_s`, on the reference as the output
        played it: where this fit, followed, shows the echo moved (an output's latency moves
        in a reply's first seconds, even between two sentences), the reference is shifted to
        match, so that one path fits across the move (a stretch holding a 19-sample move fitted
        4-6 dB, either side alone 59 dB). None where nothing moved or nothing fits."""
        blocks = self._taps.raw.snapshot()
        if not blocks:
            return None
        onset = self.index_at(onset_s)
        steps = self.follow(self.fitted_from, onset)
        if not steps.steps:
            return None
        warped = _shifted(self._reference, self.path.lag + LEAD_TAPS, steps.steps)
        raw = joined(blocks, self._base, self._base + onset)
        path = best_echo_path(warped, raw, onset, earliest=self.fitted_from)
        if path is None:
            return None
        return EchoFreeOnset(
            self._taps, self._base, warped, path, fitted_from=self.fitted_from, moves=steps.steps
        )

    def estimate(self, start: int, stop: int) -> np.ndarray:
        """The fitted echo (steps applied) at raw samples `start` to `stop` (from base)."""
        pieces, at = [], start
        bounds = [i for i, _ in self.steps.steps if start < i < stop] + [stop]
        for bound in bounds:
            path = self.path
            shift = self.steps.shift_at(at)
            if shift:
                path = EchoPath(path.lag + shift, path.h, path.removed_db)
            pieces.append(echo_estimate(self._reference, path, at, bound))
            at = bound
        return pieces[0] if len(pieces) == 1 else np.concatenate(pieces)

    def follow(self, start: int, stop: int | None = None) -> PathSteps:
        """Where the echo moved from raw index `start` (from base) to `stop` (default: the
        newest capture), by the fitted echo's shift in windows (vocal.duplex.echo_free.echo_follow);
        `followed` applies it."""
        blocks = self._taps.raw.snapshot()
        if not blocks:
            return PathSteps()
        newest = blocks[-1][1] + blocks[-1][2].shape[0] - self._base
        stop = newest if stop is None else min(stop, newest)
        raw = joined(blocks, self._base, self._base + stop)
        return follow_path(raw, self.estimate, max(0, start), stop)

    def index_at(self, at_s: float) -> int:
        """The raw index (from base) of the sample captured at monotonic time `at_s`."""
        blocks = self._taps.raw.snapshot()
        return round(position_at(blocks, at_s, self._taps.raw.sample_rate)) - self._base

    @property
    def usable(self) -> bool:
        """Whether the fit removed enough echo to hear the person from the raw capture."""
        return self.path.removed_db >= MIN_ECHO_REMOVED_DB

    @property
    def removed_db(self) -> float:
        """Echo removed on the fit stretch, dB."""
        return round(self.path.removed_db, 1)

    @property
    def delay_ms(self) -> float:
        """The echo's delay from the output callback to the input callback, ms (what an echo
        profile keeps: vocal.duplex.canceller.profile)."""
        return round(self.path.delay_samples * 1000 / SAMPLE_RATE, 1)

    def raw_for(self, block: Block) -> tuple[int, np.ndarray] | None:
        """The raw record made in the same callback as a captured block (the last one stamped
        at or before it): (its first sample's index in the tap, its samples), or None if the
        tap no longer has it."""
        for stamp, before, samples in reversed(self._taps.raw.snapshot()):
            if stamp <= block.captured_at_s:
                if samples.shape[0] != block.samples.shape[0]:
                    return None
                return before - self._base, samples
        return None

    def samples_for(self, block: Block) -> np.ndarray | None:
        """The echo-free raw samples of a captured block (None if the tap no longer has it)."""
        found = self.raw_for(block)
        if found is None:
            return None
        start, samples = found
        return samples - self.estimate(start, start + samples.shape[0])


class OnsetFit:
    """A fit (`rebuild`, 0.3-0.5 s of CPU here) run in a thread from the moment a barge-in
    fires, so that it overlaps the person's words instead of delaying what follows them."""

    def __init__(self, rebuild: Callable[[], EchoFreeOnset | None]) -> None:
        self._rebuild = rebuild
        self._result: EchoFreeOnset | None = None
        #: How long the fit took (None until it has ended).
        self.fit_s: float | None = None
        self._thread = threading.Thread(target=self._run, name="vocal-onset-fit", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        started = time.monotonic()
        try:
            self._result = self._rebuild()
        except Exception:  # a failed fit only means the canceller's output
            self._result = None
        self.fit_s = time.monotonic() - started

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def result(self, timeout_s: float | None = None) -> EchoFreeOnset | None:
        """The fit, once it has ended (None: none possible, failed, or not within
        `timeout_s`)."""
        self._thread.join(timeout_s)
        return None if self._thread.is_alive() else self._result


__all__ = [
    "EchoFreeOnset",
    "OnsetFit",
    "EchoPath",
    "MIN_ECHO_REMOVED_DB",
    "OnsetTaps",
    "best_echo_path",
    "echo_lag_now",
    "echo_estimate",
    "fit_echo_path",
]
