"""Barge-in: stop the reply when the person talks over it, and keep what they said.

`BargeInDetector` watches the echo-cancelled capture while the reply plays. It asks a speech
probability function (Silero VAD, `vocal.audio.vad.SileroVad`; any `chunk -> float`) about each
512-sample chunk and, after `consecutive_chunks` speech chunks in a row (`fast_chunks` while
the canceller is known to cancel the echo well: `EchoCanceller.attenuation_db`), calls the stop
callback once (`Player.stop`, the kill handle) and returns a `BargeIn` holding the chunks that
made it fire plus `pre_roll_ms` before them, so the interrupting words reach the transcript.

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

Outside those windows AEC3 can still lose the echo path for a moment, and Silero can take what
it lets through for speech (1 long reply in 10 on the room harness, ~2 s in). A double-talk
test tells that from a person (`BargeInOptions.double_talk_db`, `echo_levels`): a person adds
energy at the raw microphone beyond what the played level predicts through the echo path's
gain (learnt from the chunks that are not speech-like); residual echo does not, since the raw
microphone holds only echo. A run of speech chunks fires only once one of its chunks passes it.

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

from vocal.audio.chunks import Chunker
from vocal.audio.room_gate import ROOM_MARGIN_DB
from vocal.config import Settings
from vocal.duplex.bargein.ambient import AmbientFloor

if TYPE_CHECKING:
    import numpy as np

SpeechProbability = Callable[["np.ndarray"], float]

#: Chunks at or above this speech probability just before a barge-in's deciding run belong
#: to the same speech (Silero rises over 2-3 chunks at an onset: 0.16, 0.59, ... measured).
ONSET_PROBABILITY = 0.3


class FarEndActivity(Protocol):
    """What the detector needs to know about playback
    (`vocal.duplex.canceller.aec_frames.RenderActivity`)."""

    first_loud_s: float | None
    quiet_since_s: float | None


@dataclass(frozen=True)
class BargeInOptions:
    """Thresholds and windows of the barge-in detector. Each value's measurement is in
    docs/design.md ("Measured facts behind the constants") and benchmarks/RESULTS.md.

    A run of `consecutive_chunks` Silero chunks at or over `threshold` fires; fewer
    (`fast_chunks`) while the canceller is known to cancel well, since residual echo that
    Silero takes for speech comes where AEC3 has lost the echo path. The windows
    (convergence, resume, tail, glitch) cover where that residual echo was seen.
    """

    threshold: float = Settings.barge_in_threshold
    consecutive_chunks: int = Settings.barge_in_chunks
    #: A run may begin with one chunk at this lower probability (Silero rises over 2-3 chunks
    #: at an onset); None: every chunk must reach `threshold`.
    onset_threshold: float | None = Settings.barge_in_onset_threshold
    #: Chunks enough when the canceller took `healthy_attenuation_db` out of the median of the
    #: `health_chunks` chunks before the run (`BargeInDetector(attenuation=...)`); None:
    #: always `consecutive_chunks`.
    fast_chunks: int | None = Settings.barge_in_fast_chunks
    healthy_attenuation_db: float = 30.0
    health_chunks: int = 8
    #: The double-talk test (None: off): a run fires only once a chunk is this many dB louder
    #: at the raw microphone than the echo the played level predicts. A person adds energy the
    #: played level does not predict; residual echo does not. The echo path's gain is the
    #: `double_talk_percentile` of the last `double_talk_history` chunks that were not
    #: speech-like with the far end playing; until `double_talk_min_chunks` of them, or while
    #: nothing plays, no run is held back.
    double_talk_db: float | None = Settings.barge_in_double_talk_db
    #: A speech chunk this many dB over the predicted echo decides alone (None: never).
    strong_chunk_db: float | None = Settings.barge_in_strong_chunk_db
    double_talk_percentile: float = 95.0
    double_talk_history: int = 150
    double_talk_min_chunks: int = 10
    #: A played level below this (dB of mean square, ~-60 dBFS RMS) predicts no echo.
    double_talk_min_render_db: float = -60.0
    convergence_inhibit_ms: int = 1200
    #: After a resume (`BargeInDetector.hold`) residual echo made speech-like runs.
    resume_inhibit_ms: int = 2500
    tail_inhibit_ms: int = 300
    #: A speech chunk inside a tail or glitch window counts all the same this many dB over the
    #: predicted echo (None: never): the raw level does not depend on the canceller.
    tail_override_db: float | None = 6.0
    glitch_inhibit_ms: int = 1500
    #: A speech chunk counts only this many dB over the room's own level (the median raw
    #: level while nothing played: vocal.duplex.bargein.ambient, kept by room_level; None:
    #: off), so other people talking in the room do not cut the reply.
    ambient_margin_db: float | None = ROOM_MARGIN_DB
    #: Audio kept from before the deciding run's first chunk: in double talk Silero is sure
    #: of the person only after AEC3's suppressor lets their onset through.
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
        if self.fast_chunks is not None and not 1 <= self.fast_chunks <= self.consecutive_chunks:
            raise ValueError("fast_chunks must be between 1 and consecutive_chunks")
        if self.health_chunks < 1:
            raise ValueError("health_chunks must be at least 1")
        if not 0.0 <= self.double_talk_percentile <= 100.0:
            raise ValueError("double_talk_percentile must be between 0 and 100")
        if self.double_talk_history < 1 or self.double_talk_min_chunks < 1:
            raise ValueError("double_talk_history and double_talk_min_chunks must be at least 1")
        durations = (
            self.convergence_inhibit_ms,
            self.tail_inhibit_ms,
            self.glitch_inhibit_ms,
            self.pre_roll_ms,
        )
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


def barge_in_options(settings: Settings) -> BargeInOptions:
    """`BargeInOptions` from the `barge_in_*` settings (VOCAL_BARGE_IN_* or config.toml), the
    one place they are built; a bad value is a `UsageError` (vocal.config.bad_setting)."""
    from vocal.config import bad_setting

    with bad_setting("barge-in"):
        return BargeInOptions(
            threshold=settings.barge_in_threshold,
            consecutive_chunks=settings.barge_in_chunks,
            onset_threshold=settings.barge_in_onset_threshold,
            fast_chunks=settings.barge_in_fast_chunks,
            double_talk_db=settings.barge_in_double_talk_db,
            strong_chunk_db=settings.barge_in_strong_chunk_db,
        )


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
        attenuation: the canceller's attenuation of the block captured at a time
            (`EchoCanceller.attenuation_db`), for `fast_chunks`.
        echo_levels: (raw level, loudest played level that can echo in it) of the block
            captured at a time (`EchoCanceller.echo_levels_db`), for `double_talk_db`.
        delay_frames: how late the samples fed are against their capture time
            (`EchoCanceller.capture_delay_frames`), so chunk times are capture times.
        room_level_db: the room's level a recent turn heard (vocal.duplex.bargein.room_level), a
            start for `ambient`.
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
        attenuation: Callable[[float], float | None] | None = None,
        echo_levels: Callable[[float], tuple[float, float | None] | None] | None = None,
        delay_frames: int = 0,
        room_level_db: float | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        import numpy as np

        self._np = np
        self.speech_probability = speech_probability
        self.on_barge_in = on_barge_in
        self.options = options or BargeInOptions()
        self.activity = activity
        self.glitches = glitches
        self.attenuation = attenuation
        self._attenuation_db: float | None = None
        self.echo_levels = echo_levels
        self._echo_levels: tuple[float, float | None] | None = None
        #: Raw minus played level of recent echo-only chunks (the echo path's gain, dB).
        self._echo_gains: collections.deque[float] = collections.deque(
            maxlen=self.options.double_talk_history
        )
        #: Whether a chunk of the current run passed the double-talk test.
        self._run_heard = False
        #: Runs long enough to fire that the double-talk test held back (each counted once).
        self.double_talk_vetoes = 0
        #: Runs long enough to fire whose chunks all stayed within the room's level (`ambient`).
        self.room_vetoes = 0
        self._run_vetoed = False
        self._run_above_room = False
        self._glitch_count = glitches() if glitches is not None else 0
        self._glitch_until_s = -math.inf
        #: When each glitch was noticed (clock time).
        self.glitch_at_s: list[float] = []
        self.delay_frames = delay_frames
        self._clock = clock
        self.fired: BargeIn | None = None
        self.chunks = 0
        self.inhibited_chunks = 0
        #: (capture end time of the chunk, probability, inhibited, the canceller's attenuation
        #: of its block in dB or None, its raw level above the echo predicted in dB or None:
        #: `excess_db`) for every chunk seen.
        self.trace: list[tuple[float, float, bool, float | None, float | None]] = []
        o = self.options
        keep = math.ceil(o.pre_roll_ms / 1000 / o.chunk_s) + o.consecutive_chunks
        self._recent: collections.deque[np.ndarray] = collections.deque(maxlen=keep)
        self._run: list[float] = []
        #: Chunks the current run needs (fixed at its first chunk; see `fast_chunks`).
        self._run_needs = o.consecutive_chunks
        #: Speech chunks in a tail or glitch window counted for being far above the echo
        #: predicted (`tail_override_db`).
        self.tail_overrides = self.glitch_overrides = 0
        #: Runs that were judged with the canceller healthy (`fast_chunks`).
        self.fast_runs = 0
        #: Runs decided by one chunk far above the predicted echo (`strong_chunk_db`).
        self.strong_chunks = 0
        self._chunker = Chunker(o.chunk_frames, o.sample_rate)
        #: The room's own level (`ambient_margin_db`), from the last turn's (`room_level_db`,
        #: vocal.duplex.bargein.room_level) until this one has heard its own.
        self.ambient = AmbientFloor(o.ambient_margin_db, prior_db=room_level_db)

    def onset_s(self) -> float:
        """Where the speech that made it fire began (capture time): the first chunk of the run
        of likely-speech chunks (`ONSET_PROBABILITY`) ending in the deciding run, inhibited
        chunks included: an inhibit window (convergence, a sentence's tail, a glitch) may have
        held the decision back, but the person was already talking."""
        fired = self.fired
        assert fired is not None, "onset_s() before the detector fired"
        trace = self.trace
        start = len(trace) - len(fired.probabilities)
        while start > 0 and trace[start - 1][1] >= ONSET_PROBABILITY:
            start -= 1
        return min(fired.speech_start_s, trace[start][0] - self.options.chunk_s)

    def rearm(self) -> None:
        """Watch again after a barge-in that turned out not to be one (a backchannel, and the
        reply resumed: vocal.duplex.bargein.backchannel); the trace and counters go on."""
        self.fired = None
        self._run.clear()
        self._chunker.clear()

    def hold(self, duration_s: float) -> None:
        """Count no chunk captured in the next `duration_s` (from now): the far end restarts
        (a resume after a pause) and the canceller must find the echo path again."""
        self._glitch_until_s = max(self._glitch_until_s, self._clock() + duration_s)

    def inhibited(self, at_s: float) -> bool:
        """True if a chunk captured at `at_s` must not count towards a barge-in."""
        return self.window(at_s) is not None

    def window(self, at_s: float) -> str | None:
        """The inhibit window a chunk captured at `at_s` falls in: "glitch" (or a resume's
        hold), "before" (the far end has not sounded yet), "convergence", "tail", or None."""
        activity, o = self.activity, self.options
        first_loud_s = activity.first_loud_s if activity is not None else None
        if activity is not None and (first_loud_s is None or at_s < first_loud_s):
            # Captured before the reply's first sound (and maybe looked at after it).
            if o.ambient_margin_db is not None:
                return "before"
        elif first_loud_s is not None and at_s < first_loud_s + o.convergence_inhibit_ms / 1000:
            return "convergence"
        if at_s < self._glitch_until_s:
            return "glitch"
        if activity is None:
            return None
        quiet_since = activity.quiet_since_s
        if quiet_since is not None and at_s < quiet_since + o.tail_inhibit_ms / 1000:
            return "tail"
        return None

    def feed(self, samples: np.ndarray, captured_at_s: float | None = None) -> BargeIn | None:
        """Take cleaned samples (any length) whose last one was captured at `captured_at_s`
        (default: now); returns the `BargeIn` once it has fired, else None."""
        if self.fired is not None:
            return self.fired
        o = self.options
        if self.glitches is not None:
            count = self.glitches()
            if count != self._glitch_count:
                self._glitch_count = count
                now = self._clock()
                self.glitch_at_s.append(now)
                self._glitch_until_s = now + o.glitch_inhibit_ms / 1000
        if self.attenuation is not None and captured_at_s is not None:
            self._attenuation_db = self.attenuation(captured_at_s)
        if self.echo_levels is not None and captured_at_s is not None:
            self._echo_levels = self.echo_levels(captured_at_s)
        delay_s = self.delay_frames / o.sample_rate
        end_s = (self._clock() if captured_at_s is None else captured_at_s) - delay_s
        for chunk, chunk_end_s in self._chunker.feed(samples, end_s):
            if self._step(chunk, chunk_end_s):
                return self.fired  # the rest of `samples` is not looked at
        return None

    def _step(self, chunk: np.ndarray, end_s: float) -> bool:
        o = self.options
        probability = float(self.speech_probability(chunk))
        self._recent.append(chunk)
        self.chunks += 1
        start_s = end_s - o.chunk_s
        windows = {self.window(start_s), self.window(end_s)} - {None}
        inhibited = bool(windows)
        excess = None
        speech_like = probability >= o.threshold
        override_db = o.tail_override_db
        if windows and windows <= {"tail", "glitch"} and override_db is not None and speech_like:
            # Far louder at the raw microphone than the echo the played level predicts: a
            # person, not residual echo (see `tail_override_db`).
            excess = self.excess_db(echo_only=False)
            inhibited = excess is None or excess < override_db
            if not inhibited:
                self.tail_overrides += "tail" in windows
                self.glitch_overrides += "glitch" in windows
        if excess is None or inhibited:
            excess = self.excess_db(echo_only=probability < o.threshold, maybe_echo=inhibited)
        raw_db = None if self._echo_levels is None else self._echo_levels[0]
        quiet = math.isinf(excess or 0.0)  # nothing plays that can echo in this chunk
        above = self.ambient.above(raw_db, playing=not quiet)
        if raw_db is not None and quiet and windows <= {"before", "glitch"}:
            # Nothing plays, nor rings on: the room alone, unless a person speaks in a pause;
            # their speech must not become the room's level (see `AmbientFloor.teach`). A
            # glitch (a late callback as the stream starts, often) matters to the canceller,
            # not to a raw level.
            self.ambient.teach(raw_db, speech=speech_like and not windows, above=above)
        self.trace.append((end_s, probability, inhibited, self._attenuation_db, excess))
        if inhibited:
            self.inhibited_chunks += 1
            self._run.clear()
            return False
        if probability < o.threshold:
            self._run.clear()
            if o.onset_threshold is not None and probability >= o.onset_threshold:
                self._open_run(probability)  # may open the next run
                self._hear(excess, above)
            return False
        if self._run:
            self._run.append(probability)
        else:
            self._open_run(probability)
        self._hear(excess, above)
        if len(self._run) < self._run_needs and not (above and self._strong(excess)):
            return False
        if not self._run_heard:
            if not self._run_vetoed:
                self._run_vetoed = True
                if self._run_above_room:
                    self.double_talk_vetoes += 1
                else:
                    self.room_vetoes += 1
            return False
        self.on_barge_in()
        now = self._clock()
        pre_roll = self._np.concatenate(list(self._recent))
        run_s = len(self._run) * o.chunk_s
        self.fired = BargeIn(now, end_s - run_s, pre_roll, list(self._run))
        return True

    def excess_db(self, *, echo_only: bool, maybe_echo: bool = False) -> float | None:
        """How far the current chunk's raw level rises above the echo the played level
        predicts (dB; inf while nothing plays; None: unknown). An `echo_only` chunk (not
        speech-like) teaches the echo path's gain (see `BargeInOptions.double_talk_db`); a
        `maybe_echo` one (speech-like, but inside an inhibit window, where residual echo looks
        like speech) teaches it only while its level fits the echo known so far: a person
        talking through a 1.5 s window would otherwise raise the gain by their own level and be
        held back as echo once the window ends (seen live: +6 dB vetoed at -6 dB)."""
        levels = self._echo_levels
        if levels is None:
            return None
        raw_db, render_db = levels
        o = self.options
        if render_db is None or render_db < o.double_talk_min_render_db:
            return math.inf
        excess = self._over_echo_db(raw_db, render_db)
        fits_echo = excess is None or o.double_talk_db is None or excess < o.double_talk_db
        echo_db = self.ambient.minus(raw_db)  # the echo's share of the raw level
        if echo_db is not None and (echo_only or (maybe_echo and fits_echo)):
            self._echo_gains.append(echo_db - render_db)
            excess = self._over_echo_db(raw_db, render_db)
        return excess

    def _over_echo_db(self, raw_db: float, render_db: float) -> float | None:
        """How far `raw_db` is above the echo `render_db` predicts, the room's own level added
        (None: the echo path's gain is not known yet)."""
        gain_db = self._echo_gain_db()
        return None if gain_db is None else raw_db - self.ambient.plus(render_db + gain_db)

    def _echo_gain_db(self) -> float | None:
        """The echo path's gain as learnt so far (None: too few echo chunks seen)."""
        if len(self._echo_gains) < self.options.double_talk_min_chunks:
            return None
        return float(self._np.percentile(self._echo_gains, self.options.double_talk_percentile))

    def _strong(self, excess: float | None) -> bool:
        """Whether the current speech chunk decides alone (`strong_chunk_db`); counted."""
        limit = self.options.strong_chunk_db
        # Not while nothing plays (excess inf): there, the raw level says nothing of a person.
        if limit is None or excess is None or math.isinf(excess) or excess < limit:
            return False
        self.strong_chunks += 1
        return True

    def _hear(self, excess: float | None, above_room: bool) -> None:
        """Note a chunk of the current run for the double-talk test (and the room's level)."""
        threshold = self.options.double_talk_db
        if not above_room:
            return
        self._run_above_room = True
        if threshold is None or self.echo_levels is None or excess is None or excess >= threshold:
            self._run_heard = True

    def _open_run(self, probability: float) -> None:
        self._run_heard = False
        self._run_above_room = False
        self._run_vetoed = False
        self._run.append(probability)
        self._run_needs = self.options.consecutive_chunks
        if self.options.fast_chunks is not None and self.healthy():
            self._run_needs = self.options.fast_chunks
            self.fast_runs += 1

    def healthy(self) -> bool:
        """Whether the canceller was cancelling well over the `health_chunks` chunks before the
        current one (see `BargeInOptions.fast_chunks`)."""
        o = self.options
        before = self.trace[-1 - o.health_chunks : -1]
        known = sorted(row[3] for row in before if row[3] is not None and not row[2])
        # Every one of them known: not right after the far end resumed from a pause, nor
        # across an inhibit window (AEC3 re-converging).
        if len(known) < o.health_chunks:
            return False
        return known[len(known) // 2] >= o.healthy_attenuation_db
