"""Barge-in: stop the reply when the person talks over it, and keep what they said.

`BargeInDetector` watches the echo-cancelled capture while the reply plays. It asks a speech
probability function (Silero VAD, `vocal.vad.SileroVad`; any `chunk -> float`) about each
512-sample chunk and, after `consecutive_chunks` speech chunks in a row, calls the stop callback
once (`Player.stop`, the kill handle) and returns a `BargeIn` holding the chunks that made it
fire plus `pre_roll_ms` before them, so the interrupting words reach the transcript.

Two windows are inhibited, where what is left of the echo after cancellation can look like
speech (values measured on the room harness, benchmarks/aec; see `BargeInOptions`):
- the start of playback, while AEC3 converges (`convergence_inhibit_ms` from the first loud
  block played), since each turn is a new process with a fresh canceller;
- the room's tail after the far end turns quiet (`tail_inhibit_ms` after the end of each
  sentence, or any pause in it);
- after an audio glitch (an output underflow or input overflow shifts the echo path, and AEC3
  re-converges: `glitch_inhibit_ms` from when the detector sees the glitch counter move).
An inhibited chunk is still given to the probability function (Silero is recurrent and must
follow the stream) but breaks a run of speech chunks, so echo on either side of a window never
adds up to a barge-in. When the far end's state is unknown (no `activity`), nothing is inhibited.

The detector runs in the consumer thread that reads `Microphone.blocks()`, never in the audio
callback: it stops playback within one capture block (32 ms) of the deciding chunk.
"""

from __future__ import annotations

import collections
import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np

SpeechProbability = Callable[["np.ndarray"], float]


class FarEndActivity(Protocol):
    """What the detector needs to know about playback (`vocal.aec.RenderActivity`)."""

    first_loud_s: float | None
    quiet_since_s: float | None


@dataclass(frozen=True)
class BargeInOptions:
    """Thresholds and windows of the barge-in detector.

    Defaults, from benchmarks/aec on the room harness (benchmarks/RESULTS.md, "echo cancellation
    and barge-in"): 3 chunks of Silero >= 0.5 (96 ms; DESIGN.md saw 3-5 chunks fire 0.25-0.29 s
    after the person starts; 2 chunks added false barge-ins). On a glitch-free path the residual
    echo almost never made 3 speech chunks in a row (1 run in 69); after glitches (ours or the
    room's) it did, at light load up to 1.2 s after playback started, 0.27 s into a pause of the
    far end and 0.4-1.9 s after a glitch was noticed (the longer ones with the room stalling
    too): the windows cover most of those.
    """

    threshold: float = 0.5
    consecutive_chunks: int = 3
    #: A run may begin with one chunk at or above this lower probability (Silero rises over
    #: 2-3 chunks at an onset: 0.16, 0.59, ...), which fires one chunk (32 ms) earlier when
    #: the onset passes through it; None: every chunk of the run must reach `threshold`.
    onset_threshold: float | None = None
    convergence_inhibit_ms: int = 1200
    tail_inhibit_ms: int = 300
    glitch_inhibit_ms: int = 1500
    #: Audio kept from before the first chunk of the deciding run. Silero is sure of the person
    #: 0.17-0.37 s after their first sound in double talk (up to 0.7 s on a loaded machine),
    #: since AEC3's suppressor holds the near end down at first: 600 ms keeps the onset.
    pre_roll_ms: int = 600
    sample_rate: int = 16_000
    chunk_frames: int = 512

    def __post_init__(self) -> None:
        if not 0.0 < self.threshold < 1.0:
            raise ValueError("threshold must be between 0 and 1")
        if self.onset_threshold is not None and not 0.0 < self.onset_threshold <= self.threshold:
            raise ValueError("onset_threshold must be between 0 and threshold")
        if self.consecutive_chunks < 1:
            raise ValueError("consecutive_chunks must be at least 1")
        durations = (self.convergence_inhibit_ms, self.tail_inhibit_ms, self.glitch_inhibit_ms,
                     self.pre_roll_ms)  # fmt: skip
        if min(durations) < 0:
            raise ValueError("durations must not be negative")

    @property
    def chunk_s(self) -> float:
        return self.chunk_frames / self.sample_rate


@dataclass
class BargeIn:
    """A barge-in: when it fired, when the speech that fired it began, and that speech."""

    #: time.monotonic() when the stop callback was called.
    at_s: float
    #: Capture time of the start of the first chunk of the deciding run.
    speech_start_s: float
    #: The cleaned samples from `pre_roll_ms` before the run to the end of the deciding chunk.
    pre_roll: np.ndarray
    #: Speech probabilities of the deciding run.
    probabilities: list[float] = field(default_factory=list)


class BargeInDetector:
    """Counts consecutive speech chunks in the cleaned capture and stops playback.

    Args:
        speech_probability: chunk (512 float32 samples at 16 kHz) -> probability of speech.
        on_barge_in: called once, when it fires (`Player.stop`).
        options: thresholds and windows.
        activity: the far end's state (`EchoCanceller.activity`), for the inhibit windows.
        glitches: a count of audio glitches so far (`lambda: aec.glitches +
            player.underflows + mic.overflows`); each increase inhibits for
            `glitch_inhibit_ms` from when it is noticed.
        delay_frames: how late the samples fed are against their capture time
            (`EchoCanceller.capture_delay_frames`), so chunk times are capture times.
        clock: monotonic time source (tests).
    """

    def __init__(
        self,
        speech_probability: SpeechProbability,
        on_barge_in: Callable[[], object],
        options: BargeInOptions | None = None,
        *,
        activity: FarEndActivity | None = None,
        glitches: Callable[[], int] | None = None,
        delay_frames: int = 0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        import numpy as np

        self._np = np
        self.speech_probability = speech_probability
        self.on_barge_in = on_barge_in
        self.options = options or BargeInOptions()
        self.activity = activity
        self.glitches = glitches
        self._glitch_count = glitches() if glitches is not None else 0
        self._glitch_until_s = -math.inf
        #: When each glitch was noticed (clock time).
        self.glitch_at_s: list[float] = []
        self.delay_frames = delay_frames
        self._clock = clock
        self.fired: BargeIn | None = None
        self.chunks = 0
        self.inhibited_chunks = 0
        #: (capture end time of the chunk, probability, inhibited) for every chunk seen.
        self.trace: list[tuple[float, float, bool]] = []
        o = self.options
        keep = math.ceil(o.pre_roll_ms / 1000 / o.chunk_s) + o.consecutive_chunks
        self._recent: collections.deque[np.ndarray] = collections.deque(maxlen=keep)
        self._run: list[float] = []
        self._pending = np.zeros(o.chunk_frames, np.float32)
        self._pending_fill = 0

    def inhibited(self, at_s: float) -> bool:
        """True if a chunk captured at `at_s` must not count towards a barge-in."""
        if at_s < self._glitch_until_s:
            return True
        activity = self.activity
        if activity is None or activity.first_loud_s is None:
            return False
        o = self.options
        if activity.first_loud_s <= at_s < activity.first_loud_s + o.convergence_inhibit_ms / 1000:
            return True
        quiet_since = activity.quiet_since_s
        return quiet_since is not None and at_s < quiet_since + o.tail_inhibit_ms / 1000

    def feed(self, samples: np.ndarray, captured_at_s: float | None = None) -> BargeIn | None:
        """Take cleaned samples (any length) whose last one was captured at `captured_at_s`
        (default: now); returns the `BargeIn` once it has fired, else None."""
        if self.fired is not None:
            return self.fired
        np = self._np
        o = self.options
        samples = np.asarray(samples, np.float32).reshape(-1)
        if self.glitches is not None:
            count = self.glitches()
            if count != self._glitch_count:
                self._glitch_count = count
                now = self._clock()
                self.glitch_at_s.append(now)
                self._glitch_until_s = now + o.glitch_inhibit_ms / 1000
        end_s = (self._clock() if captured_at_s is None else captured_at_s) - (
            self.delay_frames / o.sample_rate
        )
        n, pos = samples.shape[0], 0
        while pos < n:
            take = min(o.chunk_frames - self._pending_fill, n - pos)
            self._pending[self._pending_fill : self._pending_fill + take] = samples[
                pos : pos + take
            ]
            self._pending_fill += take
            pos += take
            if self._pending_fill == o.chunk_frames:
                self._pending_fill = 0
                chunk_end_s = end_s - (n - pos) / o.sample_rate
                if self._step(self._pending.copy(), chunk_end_s):
                    return self.fired
        return None

    def _step(self, chunk: np.ndarray, end_s: float) -> bool:
        o = self.options
        probability = float(self.speech_probability(chunk))
        self._recent.append(chunk)
        self.chunks += 1
        start_s = end_s - o.chunk_s
        inhibited = self.inhibited(start_s) or self.inhibited(end_s)
        self.trace.append((end_s, probability, inhibited))
        if inhibited:
            self.inhibited_chunks += 1
            self._run.clear()
            return False
        if probability < o.threshold:
            self._run.clear()
            if o.onset_threshold is not None and probability >= o.onset_threshold:
                self._run.append(probability)  # may open the next run
            return False
        self._run.append(probability)
        if len(self._run) < o.consecutive_chunks:
            return False
        self.on_barge_in()
        now = self._clock()
        pre_roll = self._np.concatenate(list(self._recent))
        run_s = len(self._run) * o.chunk_s
        self.fired = BargeIn(now, end_s - run_s, pre_roll, list(self._run))
        return True
