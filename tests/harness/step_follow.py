"""A canceller that follows output underruns' steps in the echo: tried for issue 20 and not
adopted (`benchmarks/aec_warmup --study steps`; benchmarks/RESULTS.md).

An output that runs dry plays on later than before, and from then on its echo comes that much
later against what the output callback handed AEC3. Offline, putting the step's gap into
AEC3's far end as it happens keeps the path still for AEC3 (69.3 against 49.0 dB on the
drifting room, `--study moves`). `StepFollower` finds the step in the echo itself, as
`vocal.duplex.measure.delay_track` finds it in the doctor's probe: every `EVERY_S` it
cross-correlates the last `WINDOW_S` of the microphone with what was played, around the echo's lag;
a new lag two looks in a row agree on, with the echo clearly there (`MIN_CORRELATION`,
`PROMINENCE`), is a step, and the far end handed AEC3 is delayed (or advanced) by it. It finds every
step, and none where a person talks over a still echo, but by the time the echo shows the step,
AEC3 has seen it too and moved: following it then gains nothing (`--study steps`). Only an
output that reports its underrun before the echo comes back would let a canceller keep up.

`FollowingCanceller` puts a `StepFollower` in front of an `EchoCanceller`'s two callbacks.
"""

from __future__ import annotations

import collections

import numpy as np

from vocal.duplex.canceller.aec import EchoCanceller
from vocal.duplex.echo_free.echo_path import peak_stands_out
from vocal.duplex.measure.delay_track import peak_between

#: The microphone's rate (vocal.duplex.canceller.aec_frames.CAPTURE_SAMPLE_RATE); lags are in
#: its samples.
SAMPLE_RATE = 16_000
#: Each look correlates this much of the microphone, this often.
WINDOW_S, EVERY_S = 0.2, 0.05
#: Where the echo is first looked for: from this little to this long after it was played
#: (callback to callback, the harness's long-delay room included).
FIRST_REACH_S = (0.0, 0.8)
#: A step this large either way is followed (an underrun's: tens of ms).
REACH_S = 0.05
#: A move this large (samples) is a step; the lag agreed within `AGREE_SAMPLES` by two looks.
STEP_MIN_SAMPLES, AGREE_SAMPLES = 8, 2
#: The echo must be there: the window's normalized correlation with the far end at the peak,
#: and the peak over the next highest one more than `_APART` samples from it.
MIN_CORRELATION, PROMINENCE = 0.3, 1.1
_APART = 16
#: A look needs the far end playing: its window's mean square over this (-50 dBFS).
FAR_MIN_POWER = 1e-5
#: The far history kept (s): the first look reaches this far back.
KEEP_S = 2.0


class _Ring:
    """The last `size` samples of a stream and how many it has had."""

    def __init__(self, size: int) -> None:
        self.data = np.zeros(size, np.float32)
        self.count = 0

    def append(self, block: np.ndarray) -> None:
        size, n = self.data.shape[0], block.shape[0]
        if n >= size:
            block, self.count = block[-size:], self.count + n - size
            n = size
        at = self.count % size
        first = min(n, size - at)
        self.data[at : at + first] = block[:first]
        self.data[: n - first] = block[first:]
        self.count += n

    def span(self, start: int, stop: int) -> np.ndarray | None:
        """Samples `start` to `stop` (absolute), or None if not all of them are kept."""
        if start < max(0, self.count - self.data.shape[0]) or stop > self.count:
            return None
        return self.data[np.arange(start, stop) % self.data.shape[0]]


class StepFollower:
    """Keeps AEC3's far end in step with the echo across output underruns (module docstring).

    Args:
        far_sample_rate: the rate of the blocks `far` is given (the Player's).
    """

    def __init__(self, far_sample_rate: int) -> None:
        self.far_sample_rate = far_sample_rate
        self._far = _Ring(round(KEEP_S * far_sample_rate) + far_sample_rate)
        self._near = _Ring(round((WINDOW_S + EVERY_S) * SAMPLE_RATE) + SAMPLE_RATE)
        self._window = round(WINDOW_S * SAMPLE_RATE)
        self._every = round(EVERY_S * SAMPLE_RATE)
        self._next_look = self._window
        #: The echo's lag: near sample n holds the echo of far sample n - lag (in near samples
        #: on both sides); None until two looks agree on it.
        self.lag: float | None = None
        self._candidate: float | None = None
        self._settle_until = 0
        self._pending: collections.deque[int] = collections.deque()
        self._drop = 0
        #: The steps followed: (near sample, size in near samples).
        self.steps: list[tuple[int, int]] = []

    # -- the output callback -----------------------------------------------------------------
    def far(self, block: np.ndarray) -> np.ndarray:
        """`block` as AEC3 should get it: later by a step's gap, or with a step back skipped."""
        while self._pending:
            size = round(self._pending.popleft() * self.far_sample_rate / SAMPLE_RATE)
            if size > 0:
                block = np.concatenate([np.zeros(size, np.float32), block])
            else:
                self._drop -= size
        if self._drop:
            skip = min(self._drop, block.shape[0])
            block, self._drop = block[skip:], self._drop - skip
        self._far.append(block)
        return block

    # -- the input callback ------------------------------------------------------------------
    def near(self, block: np.ndarray) -> None:
        """Take one captured block (at `SAMPLE_RATE`); look for the echo every `EVERY_S`."""
        self._near.append(block)
        while self._near.count >= self._next_look:
            stop = self._next_look
            self._next_look += self._every
            if stop >= self._settle_until:
                self._look(stop)

    def _look(self, stop: int) -> None:
        mic = self._near.span(stop - self._window, stop)
        if mic is None:
            return
        if self.lag is None:
            lo, hi = (round(s * SAMPLE_RATE) for s in FIRST_REACH_S)
        else:
            reach = round(REACH_S * SAMPLE_RATE)
            lo, hi = round(self.lag) - reach, round(self.lag) + reach
        found = self._peak(mic, stop, lo, hi)
        if found is None:
            self._candidate = None
            return
        if self.lag is not None and abs(found - self.lag) < STEP_MIN_SAMPLES:
            self.lag, self._candidate = found, None  # still (or drifting): keep up with it
            return
        if self._candidate is None or abs(found - self._candidate) > AGREE_SAMPLES:
            self._candidate = found
            return
        if self.lag is None:
            self.lag = found
        else:
            size = round(found - self.lag)
            self._pending.append(size)
            self.steps.append((stop, size))
            # Looks whose far end went to AEC3 before the gap still read the step: wait until
            # the microphone is past it (the far end written so far, a look behind).
            ahead = round(self._far.count * SAMPLE_RATE / self.far_sample_rate)
            self._settle_until = ahead + round(found) + self._window + self._every
        self._candidate = None

    def _peak(self, mic: np.ndarray, stop: int, lo: int, hi: int) -> float | None:
        """The lag (near samples, to a fraction) in [lo, hi] where the far end best matches
        `mic` (the window ending at near sample `stop`), or None if the echo is not clearly
        there."""
        window = mic.shape[0]
        ratio = self.far_sample_rate / SAMPLE_RATE
        first, last = stop - window - hi, stop - lo  # near-clock positions of the far end
        begin = int(np.floor(first * ratio)) - 1
        played = self._far.span(begin, int(np.ceil(last * ratio)) + 2)
        if played is None:  # not kept, or before the stream's first sample
            return None
        # The far end on the microphone's grid (linear interpolation: the peak, not the sound).
        far = np.interp(np.arange(first, last) * ratio - begin, np.arange(played.shape[0]),
                        played).astype(np.float64)  # fmt: skip
        if float(np.mean(far * far)) < FAR_MIN_POWER:
            return None
        y = mic.astype(np.float64)
        size = 1 << int(np.ceil(np.log2(far.shape[0] + window)))
        corr = np.fft.irfft(np.fft.rfft(far, size) * np.conj(np.fft.rfft(y, size)), size)
        corr = np.abs(corr[: hi - lo + 1])[::-1]  # corr[k]: lag lo + k
        k = int(np.argmax(corr))
        segment = far[hi - lo - k : hi - lo - k + window]
        energy = float(np.dot(segment, segment) * np.dot(y, y))
        if energy <= 0 or corr[k] / np.sqrt(energy) < MIN_CORRELATION:
            return None
        if not peak_stands_out(corr, k, _APART, PROMINENCE):
            return None
        return lo + k + peak_between(corr, k)


class FollowingCanceller:
    """`canceller` (an `EchoCanceller` with a 16 kHz capture) with a `StepFollower` in front of
    its two callbacks; anything else is the canceller's."""

    def __init__(self, canceller: EchoCanceller) -> None:
        self.canceller = canceller
        self.follower = StepFollower(canceller.render_sample_rate)

    def render(self, block: np.ndarray) -> None:
        self.canceller.render(self.follower.far(block))

    def capture(self, block: np.ndarray) -> np.ndarray:
        self.follower.near(block)
        return self.canceller.capture(block)

    def __getattr__(self, name: str):
        return getattr(self.canceller, name)
