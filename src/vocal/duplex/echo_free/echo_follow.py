"""The fitted echo path followed to the end of a reply: where an underrun moved it.

An output that runs dry for a moment (an underflow: the machine was busy) carries on later, so
the reply's echo arrives that much later from then on; the room's shape (`EchoPath.h`) stays.
A fit made before the move leaves the reply's words after it in the "echo-free" capture at
nearly their full level, which the near-end test takes for a person (vocal.duplex.handover) and
the recognizer transcribes. `follow_path` reads, in short windows after the fit, by how much
the fitted echo must be shifted to explain the raw capture (`shift_in_window`), and turns the
readings into steps (`PathSteps`), each placed where it explains the capture best.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

#: The capture's rate (the Microphone's).
SAMPLE_RATE = 16_000
#: The shift is read in windows this long, this far apart.
WINDOW_S, HOP_S = 0.2, 0.1
#: How far (either way) a shift is looked for: an underflow's step is tens of ms here; the
#: room harness's stalls reach 0.3 s (tests/harness/room.py "resync").
REACH_S = 0.3
#: A window whose fitted echo is below this (dBFS, mean square) says nothing: the reply paused.
QUIET_DBFS = -55.0
#: The best shift must take this much out of the window (dB): the echo alone leaves 20-60 dB
#: with a fit that holds; a person as loud as the echo, 3 dB.
EXPLAINED_DB = 2.0
#: ... and this much more than the next best shift farther than `APART_MS` from it: speech is
#: self-similar over a pitch period, so a shift near the true one explains part of it too.
DISTINCT_DB = 1.5
APART_MS = 5.0
#: A reading that explains this much (dB) shows where the echo is for sure: a step is only
#: taken from such readings. With the shift right: over the reply's words alone 20-65 dB
#: (hibari's reply through the room harness), 11-20 dB a little after the fit's stretch
#: (espeak-ng's, narrower band: tests/test_handover.py); with a person as loud as the echo
#: over it, 3 dB at most (10 dB: 10 dB under it). Where the path moved in a way no shift
#: follows (the harness stalling), readings of 3-10 dB at scattered shifts.
FIRM_DB = 10.0
#: Readings within this of each other are one shift (samples): the fit's own lag is only known
#: to about a sample, and drift moves it a fraction of a sample a second.
SAME_SAMPLES = 4


@dataclass(frozen=True)
class Reading:
    """One window's reading: its first raw index, the fitted echo's level in it (dBFS, mean
    square), the shift that explains the capture there (samples; None: none stands out, as
    with a person over the echo, or a path no shift explains) and how much of the window's
    energy it explains (dB; 0 with no shift)."""

    start: int
    echo_dbfs: float
    shift: int | None
    explained_db: float = 0.0

    @property
    def firm(self) -> bool:
        """Its shift is read for sure (`FIRM_DB`)."""
        return self.shift is not None and self.explained_db >= FIRM_DB


@dataclass(frozen=True)
class PathSteps:
    """Where the echo moved after the fit: `steps` is (raw index, shift in samples from the
    fit's lag) from that index on, in order; `readings` every window that held echo."""

    steps: tuple[tuple[int, int], ...] = ()
    readings: tuple[Reading, ...] = ()

    def shift_at(self, index: int) -> int:
        """The step in force at raw index `index` (samples; 0 before the first)."""
        shift = 0
        for at, size in self.steps:
            if index >= at:
                shift = size
        return shift

    def holds_over(self, earliest: int, latest: int, words_db: float) -> bool:
        """Whether the echo is where the steps put it although something (a glitch) may have
        moved it between raw indices `earliest` and `latest`: every window centred in that
        span that holds the reply's words (echo within `words_db` of the loudest window's) is
        a firm reading that agrees with the steps, or straddles one of them (it hears both
        shifts); and no firm reading centred after `earliest` disagrees. A window no shift
        explains there may be a person, or the reply moved in a way no shift follows: it is
        not known which."""
        window = round(WINDOW_S * SAMPLE_RATE)

        def agrees(r: Reading) -> bool:  # with a shift in force inside its window
            return r.firm and any(
                abs((r.shift or 0) - self.shift_at(at)) <= SAME_SAMPLES
                for at in (r.start, r.start + window - 1)
            )

        def straddles(r: Reading) -> bool:
            return any(r.start < at < r.start + window for at, _ in self.steps)

        centred = [(r, r.start + window // 2) for r in self.readings]
        if any(r.firm and not agrees(r) for r, centre in centred if centre >= earliest):
            return False
        if not self.readings:
            return True
        words = max(r.echo_dbfs for r in self.readings) - words_db
        vouched = [
            agrees(r) or straddles(r)
            for r, centre in centred
            if earliest <= centre <= latest and r.echo_dbfs >= words
        ]
        return all(vouched)


def shift_in_window(raw: np.ndarray, estimate: np.ndarray, reach: int) -> tuple[int, float] | None:
    """By how much `estimate` (the fitted echo over the window, plus `reach` samples either
    side) must be delayed to explain `raw` (the window) best, and how much of the window's
    energy it then explains (dB); None when no shift stands out (`EXPLAINED_DB`,
    `DISTINCT_DB`) or the estimate is quiet (`QUIET_DBFS`)."""
    import numpy as np

    n = raw.shape[0]
    if estimate.shape[0] != n + 2 * reach:
        raise ValueError("the estimate must cover the window and `reach` either side")
    r = raw.astype(np.float64)
    seg = estimate.astype(np.float64)
    total = float(np.dot(r, r))
    if total <= 0.0 or float(np.mean(np.square(seg[reach : reach + n]))) < 10 ** (QUIET_DBFS / 10):
        return None
    size = 1 << math.ceil(math.log2(seg.shape[0] + n))
    # corr[k] = sum r[m] seg[k + m]: the estimate delayed by reach - k.
    corr = np.fft.irfft(np.fft.rfft(seg, size) * np.conj(np.fft.rfft(r, size)), size)
    corr = corr[: 2 * reach + 1]
    energy = np.concatenate([[0.0], np.cumsum(np.square(seg))])
    power = energy[n : n + 2 * reach + 1] - energy[: 2 * reach + 1]
    left = np.maximum(total - 2 * corr + power, total * 1e-9)
    explained = 10 * np.log10(total / left)
    k = int(np.argmax(explained))
    apart = round(APART_MS * SAMPLE_RATE / 1000)
    others = np.concatenate([explained[: max(0, k - apart)], explained[k + apart + 1 :]])
    best = float(explained[k])
    if best < EXPLAINED_DB or (others.size and best - float(np.max(others)) < DISTINCT_DB):
        return None
    return reach - k, best


def follow_path(
    raw: np.ndarray, estimate_at: Callable[[int, int], np.ndarray], start: int, stop: int
) -> PathSteps:
    """Follow the fitted echo through `raw[start:stop]`.

    `estimate_at(begin, end)` gives the fitted echo (no shift) at raw samples `begin` to
    `end` (any range: zeros where nothing played). Each window that holds echo is read
    (`shift_in_window`); each firm reading of another shift than the one in force is a step,
    placed between it and the firm reading before it where the capture is explained best."""
    import numpy as np

    window, hop = round(WINDOW_S * SAMPLE_RATE), round(HOP_S * SAMPLE_RATE)
    reach = round(REACH_S * SAMPLE_RATE)
    stop = min(stop, raw.shape[0])
    if stop - start < window:
        return PathSteps()
    estimate = estimate_at(start - reach, stop + reach)
    readings: list[Reading] = []
    for at in range(start, stop - window + 1, hop):
        seg = estimate[at - start : at - start + window + 2 * reach]
        level = float(np.mean(np.square(seg[reach : reach + window], dtype=np.float64)))
        if level < 10 ** (QUIET_DBFS / 10):
            continue
        found = shift_in_window(raw[at : at + window], seg, reach)
        shift, explained = (None, 0.0) if found is None else (found[0], round(found[1], 1))
        readings.append(Reading(at, 10 * math.log10(level), shift, explained))
    firm = [r for r in readings if r.firm]
    steps: list[tuple[int, int]] = []
    current, begin = 0, start
    for reading in firm:
        shift = reading.shift
        assert shift is not None
        if abs(shift - current) > SAME_SAMPLES:
            span = (begin, reading.start + window)
            steps.append((_best_place(raw, estimate, start - reach, span, current, shift), shift))
            current = shift
        begin = reading.start
    return PathSteps(tuple(steps), tuple(readings))


def _best_place(
    raw: np.ndarray,
    estimate: np.ndarray,
    estimate_from: int,
    span: tuple[int, int],
    before: int,
    after: int,
) -> int:
    """The raw index in `span` from which shift `after` explains the capture better than
    `before` does up to it: the least squared residual over the span (`estimate` starts at
    raw index `estimate_from`)."""
    import numpy as np

    begin, end = span
    r = raw[begin:end].astype(np.float64)
    lo = begin - estimate_from

    def residual(shift: int) -> np.ndarray:
        return np.square(r - estimate[lo - shift : lo - shift + r.shape[0]])

    first, second = residual(before), residual(after)
    before_sums = np.concatenate([[0.0], np.cumsum(first)])
    after_sums = np.sum(second) - np.concatenate([[0.0], np.cumsum(second)])
    return begin + int(np.argmin(before_sums + after_sums))


__all__ = ["PathSteps", "Reading", "follow_path", "shift_in_window"]
