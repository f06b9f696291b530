"""`vocal wake` as a library: wait for the phrase, then hand back what was said after it.

`wake_turn(settings, ...)` opens the microphone (or reads a WAV on its own clock), starts
loading Whisper in the background (the request after the phrase is transcribed by it, and the
any-phrase detector hears with it), builds the detector and the floor's gate, and runs
`listen_for_wake`, which tests call with any block source. A bundled phrase is heard by its
microWakeWord model (vocal.wake.micro), any other by Whisper (vocal.wake.spotter).

Whisper is always a local engine here (the platform's, with the `stt_model` setting), even
when `stt_engine` names a remote one: the any-phrase detector transcribes every stretch of
speech, which is not to be uploaded.
"""

from __future__ import annotations

import importlib.util
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from vocal.wake.detection import MICRO, WHISPER, Detection
from vocal.wake.micro import bundled_model
from vocal.wake.request import RequestOptions
from vocal.wake.spotter import SpotOptions

if TYPE_CHECKING:
    from pathlib import Path

    import numpy as np

    from vocal.audio.vad import Confidence
    from vocal.config import Settings
    from vocal.hearing.listening import BlockSource
    from vocal.hearing.stt_loading import SttLoader
    from vocal.stt import SttEngine
    from vocal.wake.detection import PhraseDetector
    from vocal.wake.gate import WakeGate

AUTO = "auto"
#: What `--detector` takes.
DETECTORS = (AUTO, MICRO, WHISPER)
SAMPLE_RATE = 16_000
#: Seconds of the stream kept to go back to: the longest stretch the any-phrase detector
#: checks (its window, 4 s at most, and its pre-roll, gap and post-roll) with room to spare.
RECENT_S = 8.0


@dataclass(frozen=True)
class WakeOptions:
    """What to listen for and for how long.

    Attributes:
        phrase: the words that wake.
        timeout_s: give up after this much of the stream (None: wait for ever).
        request: how the request after the phrase is heard.
        spot: how the any-phrase detector finds stretches of speech.
    """

    phrase: str
    timeout_s: float | None = None
    request: RequestOptions = field(default_factory=RequestOptions)
    spot: SpotOptions = field(default_factory=SpotOptions)


@dataclass(frozen=True)
class WakeResult:
    """One wait: whether the phrase was heard, and what was said after it.

    Stream positions (`woke_at_s`, `durations`) are seconds from the start of the input, on
    its own clock; `timings` are wall-clock seconds.
    """

    woke: bool
    text: str
    phrase: str
    detector: str
    end_reason: str
    score: float | None = None
    woke_at_s: float | None = None
    heard: str | None = None
    transcribed: bool = False
    stt_engine: str | None = None
    ignored: list[dict[str, object]] = field(default_factory=list)
    #: The room's level the request's endpointer was gated by (vocal.wake.request; None: not
    #: gated), and the chunks Silero called speech that it made silence.
    room_floor_db: float | None = None
    room_gated_chunks: int = 0
    durations: dict[str, float | None] = field(default_factory=dict)
    timings: dict[str, float | None] = field(default_factory=dict)
    #: What Whisper transcribed after the phrase was heard, the phrase included (16 kHz
    #: samples; None: nothing was transcribed). Not in `to_dict`.
    utterance: np.ndarray | None = field(default=None, repr=False, compare=False)

    def to_dict(self) -> dict[str, object]:
        """What `vocal wake --json` prints."""
        return {
            "text": self.text if self.woke else None,
            "phrase": self.phrase,
            "detector": self.detector,
            "woke": self.woke,
            "score": self.score,
            "woke_at_s": self.woke_at_s,
            "heard": self.heard,
            "end_reason": self.end_reason,
            "transcribed": self.transcribed,
            "stt_engine": self.stt_engine,
            "ignored": self.ignored,
            "room": {"floor_db": self.room_floor_db, "gated_chunks": self.room_gated_chunks},
            "durations": _rounded(self.durations),
            "timings": _rounded(self.timings),
        }


def _rounded(values: dict[str, float | None]) -> dict[str, float | None]:
    return {k: round(v, 4) if isinstance(v, float) else v for k, v in values.items()}


def choose_detector(phrase: str, detector: str = AUTO) -> tuple[str, str | None]:
    """(the detector for `phrase`, a note to show when "auto" could not use its model).

    "auto": a bundled phrase's model when pymicro-wakeword is installed, else Whisper.

    Raises:
        UsageError: an unknown detector, or "micro" for a phrase no model hears (exit 2).
    """
    from vocal.errors import UsageError

    if detector not in DETECTORS:
        raise UsageError(f"--detector must be one of {', '.join(DETECTORS)}, got {detector!r}")
    if detector == WHISPER or (detector == AUTO and bundled_model(phrase) is None):
        return WHISPER, None
    if bundled_model(phrase) is None:
        from vocal.wake.micro import BUNDLED_PHRASES

        known = ", ".join(BUNDLED_PHRASES)
        raise UsageError(f"no bundled model hears {phrase!r}", hint=f"one of {known}")
    if detector == AUTO and importlib.util.find_spec("pymicro_wakeword") is None:
        note = "microWakeWord is not installed (pip install 'vocal[wake]'): Whisper listens"
        return WHISPER, note
    return MICRO, None


def listen_for_wake(
    source: BlockSource,
    detector: PhraseDetector,
    *,
    stt: SttLoader | SttEngine,
    gate: WakeGate,
    confidence: Confidence,
    options: WakeOptions,
    on_wake: Callable[[Detection], object] | None = None,
    on_ignored: Callable[[dict[str, object]], object] | None = None,
) -> WakeResult:
    """Wait on the opened `source` for `detector` to hear the phrase while `gate` lets it
    count, then hear the request after it (vocal.wake.request).

    Args:
        source: 16 kHz blocks (a `Microphone`, a `WavSource`); not closed here.
        stt: Whisper (or its loader) for the request, the phrase as its prompt.
        confidence: the speech probability the request's endpointer uses (a `SileroVad`).
        on_wake: called once the phrase counts, before the request is heard (the cue).
        on_ignored: told of each phrase the gate ignored.

    Returns a `WakeResult`; `woke` is False when the time ran out or the input ended.
    """
    from vocal.hearing.stt_loading import SttLoader
    from vocal.wake.recent import RecentAudio
    from vocal.wake.request import hear_request
    from vocal.wake.waiting import wait_for_phrase

    opened = source.opened_at_s or time.monotonic()
    blocks = iter(source.blocks())
    recent = RecentAudio(RECENT_S, SAMPLE_RATE)
    waited = wait_for_phrase(
        blocks,
        detector,
        gate=gate,
        recent=recent,
        lookback_s=options.request.lookback_s,
        timeout_s=options.timeout_s,
        on_ignored=on_ignored,
    )
    load_s = stt.load_s if isinstance(stt, SttLoader) else None
    detection = waited.detection
    if detection is None:
        return WakeResult(
            woke=False,
            text="",
            phrase=options.phrase,
            detector=detector.name,
            end_reason=waited.end_reason,
            ignored=waited.ignored,
            durations={"listened_s": waited.frames / SAMPLE_RATE},
            timings={"listen_s": time.monotonic() - opened, "stt_load_s": load_s},
        )
    woke = time.monotonic()
    if on_wake is not None:
        on_wake(detection)
    request = hear_request(
        blocks,
        detection,
        phrase=options.phrase,
        recent=recent,
        stt=stt,
        confidence=confidence,
        options=options.request,
    )
    done = time.monotonic()

    def seconds(frame: int | None) -> float | None:
        return None if frame is None else frame / SAMPLE_RATE

    return WakeResult(
        woke=True,
        text=request.text,
        phrase=options.phrase,
        detector=detection.detector,
        end_reason=request.end_reason,
        score=detection.score,
        woke_at_s=seconds(detection.end_frame),
        heard=request.heard,
        transcribed=request.transcribed,
        stt_engine=request.stt_engine,
        ignored=waited.ignored,
        room_floor_db=request.room_floor_db,
        room_gated_chunks=request.room_gated_chunks,
        durations={
            "listened_s": seconds(max(request.end_frame, waited.frames)),
            "speech_start_s": seconds(request.speech_start_frame),
            "speech_end_s": seconds(request.speech_end_frame),
        },
        timings={
            "listen_s": woke - opened,
            # From the capture of the block the phrase was heard in to the decision (the
            # detector's own latency on a live stream; ~0 for a file, read faster than real time).
            "detect_lag_s": woke - waited.woke_at if waited.woke_at is not None else None,
            "request_s": done - woke,
            "transcribe_s": request.transcribe_s,
            "stt_load_s": stt.load_s if isinstance(stt, SttLoader) else None,
        },
        utterance=request.utterance,
    )


def wake_phrase(settings: Settings, phrase: str | None = None) -> str:
    """`phrase` (default: the `wake_phrase` setting) with its blanks made single.

    Raises:
        UsageError: a phrase with no words (exit 2).
    """
    from vocal.errors import UsageError
    from vocal.wake.soundalike import words

    phrase = " ".join((phrase if phrase is not None else settings.wake_phrase).split())
    if not words(phrase):
        raise UsageError("the wake phrase has no words", hint='say one, e.g. "hey jarvis"')
    return phrase


def wake_turn(
    settings: Settings,
    *,
    phrase: str | None = None,
    detector: str = AUTO,
    timeout_s: float | None = None,
    input_file: Path | None = None,
    source: BlockSource | None = None,
    on_wake: Callable[[Detection], object] | None = None,
    on_ignored: Callable[[dict[str, object]], object] | None = None,
    on_note: Callable[[str], object] | None = None,
) -> WakeResult:
    """Listen on the microphone (or `input_file`, or `source`) for `phrase` (default: the
    `wake_phrase` setting) and return what was said after it.

    `source`: an opened block source to listen on instead, read once (`blocks()` is called
    once) and left open, so that its caller reads on from where the request ended
    (vocal.duplex.hands_free).

    Raises:
        UsageError: an empty phrase, a bad `detector`, an unreadable input WAV (exit 2).
        DeviceError / EngineError: no microphone, a model that will not load (exit 5).
    """
    from vocal.audio.devices import Microphone
    from vocal.audio.file_devices import WavSource
    from vocal.audio.vad import endpoint_options

    phrase = wake_phrase(settings, phrase)
    kind, note = choose_detector(phrase, detector)
    if note and on_note is not None:
        on_note(note)
    options = WakeOptions(
        phrase=phrase,
        timeout_s=timeout_s,
        request=RequestOptions(endpoint=endpoint_options(settings)),
    )
    own = source is None
    if source is None:
        if input_file is not None:
            source = WavSource(input_file).open()
        else:
            source = Microphone(device=settings.input_device).open()
    stt = None
    found: PhraseDetector | None = None
    try:
        from vocal.audio.vad import SileroVad
        from vocal.wake.gate import WakeGate, floor_busy

        stt = _whisper(settings, phrase)
        confidence = SileroVad()
        if kind == MICRO:
            found = _micro(phrase, fall_back=detector == AUTO, on_note=on_note)
        if found is None:
            from vocal.wake.spotter import WhisperPhraseDetector

            found = WhisperPhraseDetector(phrase, stt, confidence=SileroVad(), options=options.spot)
        gate = WakeGate(lambda: floor_busy(settings))
        return listen_for_wake(
            source,
            found,
            stt=stt,
            gate=gate,
            confidence=confidence,
            options=options,
            on_wake=on_wake,
            on_ignored=on_ignored,
        )
    finally:
        if own:
            source.close()
        if found is not None:
            found.close()
        if stt is not None:
            stt.wait()  # never exit while the engine loads in native code (it aborts)


def _micro(
    phrase: str, *, fall_back: bool, on_note: Callable[[str], object] | None
) -> PhraseDetector | None:
    """The bundled phrase's model; None when it will not load and `fall_back` lets Whisper
    listen instead (pymicro-wakeword's library is for Linux x86-64: its sdist installs
    elsewhere, and its library fails to load there)."""
    from vocal.errors import EngineError
    from vocal.wake.micro import MicroWakeDetector

    try:
        return MicroWakeDetector(phrase)
    except EngineError as exc:
        if not fall_back:
            raise
        if on_note is not None:
            on_note(f"{exc}: Whisper listens")
        return None


def _whisper(settings: Settings, phrase: str) -> SttLoader:
    """The local Whisper engine, loading in the background, the phrase as its prompt."""
    from vocal.hearing.stt_loading import SttLoader, local_options
    from vocal.stt import local_engine_name
    from vocal.stt.hints import Hints

    name = local_engine_name(settings.stt_engine)
    return SttLoader(
        name,
        settings.stt_model,
        warm_up=settings.stt_warm_up,
        hints=lambda: Hints(text=phrase, source="wake"),
        **local_options(settings, name),
    )


__all__ = [
    "AUTO",
    "DETECTORS",
    "WakeOptions",
    "WakeResult",
    "choose_detector",
    "listen_for_wake",
    "wake_phrase",
    "wake_turn",
]
