"""One listening turn as a library: record until the speaker stops, then transcribe.

`listen(source, stt=...)` consumes `vocal.audio.devices.Block`s from any source (a `Microphone`, a
`WavSource`, or a microphone whose callback runs echo cancellation), endpoints them with Silero
VAD (`vocal.audio.vad.Endpointer`), and transcribes the utterance with an STT engine that
`SttLoader` imports and loads in a background thread while the recording runs, so the
microphone opens at once and the model's cost hides behind the speaker's own words (docs/design.md).
An external "end now" (`stop`, a `threading.Event`: Ctrl-C, the control channel's skip) ends
the recording and still transcribes what was heard. Each stage is timed: `ListenResult.timings`
holds durations, `ListenResult.clock` the `time.monotonic()` instants (one clock for every
process on Linux, so a benchmark can compare them with its own).

Used by `vocal listen`, and built to be reused by `vocal converse`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field, replace
from types import FrameType
from typing import Protocol

import numpy as np

from vocal.audio.devices import Block
from vocal.audio.vad import (
    Confidence,
    Endpointer,
    EndpointOptions,
    EndReason,
    VadState,
    endpoint_options,
)
from vocal.audio.wav import STT_SAMPLE_RATE, Audio
from vocal.config import Settings, bad_setting
from vocal.errors import VocalError
from vocal.hearing import DEFAULT_FIXED_SECONDS
from vocal.hearing.early import TurnTranscripts
from vocal.hearing.endofturn import EndOfTurnOptions, PauseJudge
from vocal.hearing.stt_loading import SttLoader
from vocal.hearing.turn_models import EndOfTurnModels
from vocal.stt import SttEngine, Transcript


class BlockSource(Protocol):
    """What `listen` reads from: `Microphone`, `WavSource`, or anything alike."""

    sample_rate: int
    opened_at_s: float | None

    def blocks(self, timeout_s: float = 2.0) -> Iterator[Block]: ...

    def close(self) -> None: ...


@dataclass(frozen=True)
class ListenOptions:
    """How to listen: endpointed by VAD, or a fixed window of `seconds`."""

    vad: bool = True
    seconds: float = DEFAULT_FIXED_SECONDS
    endpoint: EndpointOptions = field(default_factory=EndpointOptions)
    #: Start Whisper during the silence window (see EarlyTranscriber); VAD mode only.
    early_transcription: bool = True
    #: How long a pause lasts before Whisper starts on the utterance so far (whole 32 ms
    #: chunks; at most the endpointer's post-roll). One chunk: the early transcript is what
    #: confirms or vetoes the end of a turn (vocal.hearing.endofturn), so every chunk it waits is on
    #: the person's clock. On the real-speech corpus the tail Whisper gets made no difference
    #: (beam 5, 39 complete and paused turns: WER 0.343 with 32 ms of tail, 0.341 with 96 ms,
    #: 0.337 with 64), since the last speech chunk already holds the word's tail (it is the
    #: last chunk above the stop threshold); `benchmarks/turns --parts wer` checks it end to end.
    early_after_ms: int = Settings.early_transcription_ms
    #: The end-of-turn stage (vocal.hearing.endofturn): after `check_ms` of silence, is the turn
    #: complete? VAD mode only; `enabled=False` is the plain silence window.
    end_of_turn: EndOfTurnOptions = field(default_factory=EndOfTurnOptions)

    def endpointer_options(self) -> EndpointOptions:
        """Fixed-window mode still runs VAD (to know whether anyone spoke), but only the
        window ends the recording."""
        if self.vad:
            return self.endpoint
        window = self.seconds
        return replace(
            self.endpoint,
            min_silence_ms=int(window * 1000) + 1000,
            max_duration_s=window,
            no_speech_timeout_s=window + 1.0,
        )


def listen_options(
    settings: Settings,
    *,
    vad: bool = True,
    seconds: float = DEFAULT_FIXED_SECONDS,
) -> ListenOptions:
    """`ListenOptions` from `vocal.config.Settings`: the one place `listen` and `converse` build
    their endpointing and end-of-turn options, both commands' flags reaching it as settings
    (`load_settings(silence_ms=...)`). A bad value (from a flag, `VOCAL_*` or config.toml) is a
    `UsageError`."""
    endpoint = endpoint_options(settings)
    with bad_setting("listening"):
        end_of_turn = EndOfTurnOptions(
            enabled=settings.turn_model,
            check_ms=settings.turn_check_ms,
            max_pause_ms=settings.max_pause_ms,
        )
    return ListenOptions(
        vad=vad,
        seconds=seconds,
        endpoint=endpoint,
        early_after_ms=settings.early_transcription_ms,
        end_of_turn=end_of_turn,
    )


# -- the result ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ListenResult:
    """One turn: what was said, whether anyone spoke, and what each stage cost.

    `audio` is what was transcribed (the utterance with its pre-roll, or the whole window in
    fixed mode); `recording` everything captured. Durations are seconds.
    """

    text: str
    language: str | None
    speech_heard: bool
    end_reason: str
    audio: Audio
    recording: Audio
    durations: dict[str, float | None]
    timings: dict[str, float | bool | None]
    clock: dict[str, float | None]
    transcript: Transcript | None = None
    overflows: int = 0
    #: The end-of-turn stage's verdict on every pause (None: the stage was off).
    turn: dict[str, object] | None = None
    #: The engine that made the transcript (None: nothing was transcribed); with a remote
    #: engine's local fallback (vocal.stt.fallback), the local one, and why the remote failed.
    stt_engine: str | None = None
    stt_fallback_reason: str | None = None
    #: The vocabulary hints the recognizer was given (vocal.stt.hints): text, source, whether
    #: the text was the prompt, and the names respelled.
    hints: dict[str, object] | None = None

    def to_dict(self) -> dict[str, object]:
        """What `vocal listen --json` prints."""
        return {
            "text": self.text,
            "language": self.language,
            "speech_heard": self.speech_heard,
            "end_reason": self.end_reason,
            "durations": _rounded(self.durations),
            "timings": _rounded(self.timings),
            "clock": self.clock,
            "overflows": self.overflows,
            "turn": self.turn,
            "stt_engine": self.stt_engine,
            "stt_fallback_reason": self.stt_fallback_reason,
            # A decode that said a phrase twice and was retried or mended (vocal.stt.repeats).
            "stt_repaired": self.transcript.repaired if self.transcript else None,
            "hints": self.hints,
        }


def _rounded(values: Mapping[str, float | bool | None]) -> dict[str, float | bool | None]:
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in values.items()}


def process_started_at() -> float | None:
    """This process's start on the `time.monotonic()` clock (Linux; None elsewhere).

    /proc/self/stat's start time counts clock ticks (10 ms) since boot, on the same clock as
    CLOCK_BOOTTIME; the difference between BOOTTIME and MONOTONIC (time suspended) is removed.
    """
    try:
        with open("/proc/self/stat", "rb") as stat:
            fields = stat.read().rsplit(b")", 1)[1].split()
        start_ticks = int(fields[19])  # field 22 of the whole line; fields[0] is field 3
        ticks = os.sysconf("SC_CLK_TCK")
        boot_now = time.clock_gettime(time.CLOCK_BOOTTIME)
        monotonic_now = time.monotonic()
    except (OSError, ValueError, IndexError, AttributeError):
        return None
    return monotonic_now - (boot_now - start_ticks / ticks)


# -- Ctrl-C ---------------------------------------------------------------------------------
@contextlib.contextmanager
def ctrl_c_ends(stop: threading.Event) -> Iterator[threading.Event]:
    """While inside: the first Ctrl-C sets `stop` (end the recording, still transcribe); a
    second one interrupts as usual. A no-op outside the main thread."""
    if threading.current_thread() is not threading.main_thread():
        yield stop
        return

    def handler(signum: int, frame: FrameType | None) -> None:
        if stop.is_set():
            raise KeyboardInterrupt
        stop.set()

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield stop
    finally:
        signal.signal(signal.SIGINT, previous)


# -- recording ------------------------------------------------------------------------------------
BlockHook = Callable[[np.ndarray, VadState], None]


@dataclass
class _Marks:
    speech_start_at: float | None = None
    speech_end_at: float | None = None
    recorded_at: float | None = None


def record(
    source: BlockSource,
    *,
    options: ListenOptions,
    confidence: Confidence | None = None,
    stop: threading.Event | None = None,
    on_block: BlockHook | None = None,
    check: Callable[[], None] | None = None,
    on_pause: Callable[[Endpointer], None] | None = None,
    judge: PauseJudge | None = None,
    watch: Callable[[Endpointer], None] | None = None,
) -> tuple[Endpointer, _Marks]:
    """Feed `source`'s blocks to an endpointer until it is done, the source ends or `stop`.

    `confidence` is the speech probability of one 512-sample chunk; None loads a `SileroVad`
    here, after the source opened, so its load (onnxruntime, ~0.3 s) happens while the first
    blocks queue up instead of before the microphone opens. `check` runs after every block and
    may raise to abandon the recording (an engine that failed to load: no point listening on).
    `on_pause` is called once per pause, as soon as the pause has lasted
    `options.early_after_ms` (the utterance so far is then complete but for the rest of its
    post-roll, which is silence), while the silence window still runs. `judge` (the end-of-turn
    stage) looks at every block's pause after that and may end the turn or hold it open.
    `watch` sees the endpointer after every block (the partial transcripts of `listen`).
    """
    if confidence is None:
        from vocal.audio.vad import SileroVad

        confidence = SileroVad()
    endpointer = Endpointer(
        confidence, options.endpointer_options(), sample_rate=source.sample_rate
    )
    marks = _Marks()
    early_ms = min(options.early_after_ms, endpointer.options.post_roll_ms)
    early_frames = max(1, round(early_ms * source.sample_rate / 1000))
    last_end_frame = None
    paused_at_frame = None  # speech_end_frame of the last pause reported to on_pause
    for block in source.blocks():
        endpointer.feed(block.samples)
        pending = endpointer.fed_frames  # frames fed up to the end of the last whole chunk
        if marks.speech_start_at is None and endpointer.speech_start_frame is not None:
            marks.speech_start_at = block.captured_at_s
        if (
            endpointer.speech_end_frame is not None
            and endpointer.speech_end_frame != last_end_frame
        ):
            last_end_frame = endpointer.speech_end_frame
            lag_s = (pending - last_end_frame) / source.sample_rate
            marks.speech_end_at = block.captured_at_s - lag_s
        if on_block is not None:
            on_block(block.samples, endpointer.state)
        if check is not None:
            check()
        if (
            on_pause is not None
            and endpointer.silence_frames >= early_frames
            and endpointer.speech_end_frame != paused_at_frame
        ):
            paused_at_frame = endpointer.speech_end_frame
            on_pause(endpointer)
        if judge is not None:
            judge.update(endpointer)
        if watch is not None:
            watch(endpointer)
        if endpointer.done:
            break
        if stop is not None and stop.is_set():
            endpointer.finish(EndReason.REQUESTED)
            break
    else:
        endpointer.finish(EndReason.END_OF_INPUT)
    marks.recorded_at = time.monotonic()
    if not options.vad and endpointer.end_reason is EndReason.MAX_DURATION:
        endpointer.end_reason = EndReason.FIXED_WINDOW
    return endpointer, marks


# -- one turn ------------------------------------------------------------------------------------
def listen(
    source: BlockSource,
    *,
    stt: SttLoader | SttEngine,
    options: ListenOptions | None = None,
    confidence: Confidence | None = None,
    stop: threading.Event | None = None,
    on_block: BlockHook | None = None,
    close_source: bool = True,
    models: EndOfTurnModels | None = None,
    context: str | None = None,
    on_words: Callable[[str], object] | None = None,
) -> ListenResult:
    """Record one utterance from the opened `source`, then transcribe it.

    Args:
        source: an opened block source; closed when the recording ends (`close_source`), before
            transcription, so the device is free while Whisper runs.
        stt: a loaded engine, or an `SttLoader` still loading in the background.
        options: VAD endpointing (default) or a fixed window.
        confidence: speech probability per 512-sample chunk; default a `SileroVad`, loaded
            once the source is open.
        stop: set it to end the recording now (Ctrl-C, the control channel).
        on_block: called with each block and the endpointer's state (a level meter).
        models: the end-of-turn stage's models loading in the background, and the person's
            rhythm, learnt further in this turn (`options.end_of_turn`); None judges pauses
            by the last word alone.
        context: the line the person answers (the agent's), for the words' model.
        on_words: called (from another thread) with each transcript made while the person
            speaks, partial ones included (vocal.hearing.early.TurnTranscripts); None makes
            no partial ones.

    A source that is not live (`source.live` False: a WAV file, fed faster than real time)
    is endpointed on its own clock, and the end-of-turn stage waits for the model and the
    early transcript wherever a live turn would have waited for them, so a file ends where
    the same sound from a microphone would.

    Returns a `ListenResult`; `speech_heard` is False (and nothing was transcribed) when nobody
    spoke. Engine failures raise `EngineError` (exit 5).
    """
    options = options or ListenOptions()
    if source.sample_rate != STT_SAMPLE_RATE:
        raise VocalError(f"listen needs a {STT_SAMPLE_RATE} Hz source, got {source.sample_rate}")
    live = getattr(source, "live", True)
    transcripts = TurnTranscripts(stt, live=live, on_words=on_words)
    judge = None
    if options.vad and options.end_of_turn.enabled:
        models = models or EndOfTurnModels()
        judge = PauseJudge(
            options.end_of_turn,
            model=models.audio_model,
            words=models.words_model,
            context=context,
            rhythm=models.rhythm,
            texts=transcripts,
            wait=not live,
        )
        if not live:
            models.wait()  # a live turn's models load while the person speaks

    try:
        endpointer, marks = record(
            source,
            options=options,
            confidence=confidence,
            stop=stop,
            on_block=on_block,
            check=stt.raise_if_failed if isinstance(stt, SttLoader) else None,
            on_pause=transcripts.on_pause if options.vad and options.early_transcription else None,
            judge=judge,
            watch=transcripts.watch if options.vad and options.early_transcription else None,
        )
    finally:
        if close_source:
            source.close()
        if judge is not None:
            judge.close()

    rate = source.sample_rate
    recording = Audio(endpointer.recording(), rate)
    speech_heard = endpointer.speech_heard
    audio = recording if not options.vad else Audio(endpointer.utterance(), rate)

    transcript: Transcript | None = None
    stt_wait_s = None
    transcribed_at = None
    early_used = False
    stt_name = None  # the engine that made the transcript
    try:
        early = transcripts.early
        if speech_heard and early is not None:
            key = (endpointer.speech_start_frame, endpointer.speech_end_frame)
            transcript = early.result(key)
            early_used = transcript is not None
            stt_wait_s = 0.0
            stt_name = early.engine.name
        if speech_heard and transcript is None:
            waited = time.monotonic()
            engine = stt.engine() if isinstance(stt, SttLoader) else stt
            stt_wait_s = time.monotonic() - waited
            transcript = engine.transcribe(audio)
            stt_name = engine.name
        transcribed_at = time.monotonic() if speech_heard else None
    finally:
        transcripts.close()

    opened_at = source.opened_at_s
    started_at = process_started_at()
    speech_s = None
    if endpointer.speech_start_frame is not None and endpointer.speech_end_frame is not None:
        speech_s = (endpointer.speech_end_frame - endpointer.speech_start_frame) / rate

    def span(start: float | None, end: float | None) -> float | None:
        return None if start is None or end is None else end - start

    return ListenResult(
        text=transcript.text if transcript else "",
        language=transcript.language if transcript else None,
        speech_heard=speech_heard,
        end_reason=(endpointer.end_reason or EndReason.END_OF_INPUT).value,
        audio=audio,
        recording=recording,
        durations={
            "recording_s": recording.duration_s,
            # Where speech began and ended in the recording (positions, seconds).
            "speech_start_s": endpointer.frames_to_s(endpointer.speech_start_frame),
            "speech_end_s": endpointer.frames_to_s(endpointer.speech_end_frame),
            "speech_s": speech_s,
            "transcribed_s": audio.duration_s if speech_heard else None,
        },
        timings={
            "startup_s": span(started_at, opened_at),
            "listen_s": span(opened_at, marks.recorded_at),
            "endpoint_s": span(marks.speech_end_at, marks.recorded_at),
            "stt_load_s": stt.load_s if isinstance(stt, SttLoader) else None,
            "stt_wait_s": stt_wait_s,
            "transcribe_s": transcript.transcribe_s if transcript else None,
            # True when the transcript was made during the silence window (EarlyTranscriber).
            "transcribed_early": early_used,
            # Partial transcripts made while the person spoke (words shown on a terminal).
            "partials": transcripts.partials,
            "end_to_text_s": span(marks.speech_end_at, transcribed_at),
        },
        clock={
            "process_started": started_at,
            "opened": opened_at,
            "speech_started": marks.speech_start_at,
            "speech_ended": marks.speech_end_at,
            "recorded": marks.recorded_at,
            "transcribed": transcribed_at,
            # When the recognizer had loaded, and had run its warm-up (None: none, or not
            # loaded in the background): a file is fed faster than the loader, so a benchmark
            # tells the engine's own latency from its load with these.
            "stt_ready": stt.ready_at_s if isinstance(stt, SttLoader) else None,
            "stt_warmed": stt.warmed_at_s if isinstance(stt, SttLoader) else None,
        },
        transcript=transcript,
        overflows=getattr(source, "overflows", 0),
        turn=judge.summary() if judge is not None else None,
        stt_engine=(transcript.engine or stt_name) if transcript else None,
        stt_fallback_reason=transcript.fallback_reason if transcript else None,
        hints=_used_hints(stt),
    )


def _used_hints(stt: SttLoader | SttEngine) -> dict[str, object] | None:
    hints = stt.used_hints if isinstance(stt, SttLoader) else None
    return hints.to_dict() if hints is not None else None


__all__ = [
    "BlockSource",
    "ListenOptions",
    "ListenResult",
    "ctrl_c_ends",
    "listen",
    "listen_options",
    "process_started_at",
    "record",
]
