"""After the phrase: listen on until the speaker stops, and keep what they said after it.

"Hey jarvis, run the tests" gives "run the tests"; "hey jarvis" alone gives "". The speech is
endpointed as `vocal listen` endpoints it (vocal.audio.vad.Endpointer: Silero, `silence_ms`,
pre-roll, `max_seconds`), from where the phrase began: the stretch of speech it was heard in
(Whisper), or `lookback_s` before the model fired (micro). While nothing has been said after the
phrase, the pause may last `first_pause_ms`: a person who says the phrase and waits for the cue
starts the request later than a pause in a sentence lasts. Once the request has begun, a pause
of `silence_ms` ends it.

Whisper (the phrase as its prompt, so it writes the phrase as spelled) then transcribes the
utterance, phrase and all, and the words after the phrase (vocal.wake.soundalike) are the
request; where it did not write the phrase recognisably, the audio after the detector fired
is transcribed on its own instead. When nothing was said after the phrase, Whisper is not run
for it: the text is what the detector heard after the phrase (Whisper's own check), or "".
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from vocal.wake.soundalike import after_phrase

if TYPE_CHECKING:
    from collections.abc import Iterator

    import numpy as np

    from vocal.audio.devices import Block
    from vocal.audio.vad import Confidence, Endpointer, EndpointOptions
    from vocal.hearing.stt_loading import SttLoader
    from vocal.stt import SttEngine
    from vocal.wake.detection import Detection
    from vocal.wake.recent import RecentAudio

SAMPLE_RATE = 16_000
#: End reason when nobody said anything after the phrase.
NOTHING_AFTER = "nothing_after"


@dataclass(frozen=True)
class RequestOptions:
    """How the request after the phrase is heard.

    Attributes:
        endpoint: the endpointer's options (`vocal.audio.vad.endpoint_options`: the
            `silence_ms` and `max_seconds` settings); None: its defaults.
        lookback_s: where the phrase began when the detector does not say: microWakeWord
            fires 0.05-0.09 s after the phrase ends, and hibari and piper say "hey jarvis" in
            0.7 s; the rest is room for a slower speaker (words before it are cut off with
            the phrase).
        first_pause_ms: the longest pause after the phrase before the request begins (no
            measurement yet: a reaction to the cue, ~0.5 s, and a breath).
        nothing_after_ms: speech that ends within this of what the detector heard is still
            the phrase (the model fires a little after its end; Silero places ends within a
            chunk or two).
    """

    endpoint: EndpointOptions | None = None
    lookback_s: float = 1.5
    first_pause_ms: int = 1200
    nothing_after_ms: int = 250


@dataclass(frozen=True)
class Request:
    """What was said after the phrase.

    Attributes:
        text: the words after the phrase ("" when none).
        heard: the transcript they were cut from (None: nothing was transcribed).
        end_reason: the endpointer's ("silence", "max_duration", "end_of_input", ...), or
            "nothing_after".
        speech_start_frame, speech_end_frame: the utterance, phrase included, in the stream.
        transcribed: whether Whisper ran after the phrase was heard.
        end_frame: the stream frame where listening stopped.
        transcribe_s: how long it took (both calls, with the fallback).
        stt_engine: the engine that transcribed.
        utterance: the audio transcribed.
    """

    text: str
    heard: str | None
    end_reason: str
    speech_start_frame: int | None
    speech_end_frame: int | None
    end_frame: int
    transcribed: bool = False
    transcribe_s: float | None = None
    stt_engine: str | None = None
    #: What Whisper transcribed, the phrase included (None: nothing was transcribed).
    utterance: np.ndarray | None = field(default=None, repr=False, compare=False)


def hear_request(
    blocks: Iterator[Block],
    detection: Detection,
    *,
    phrase: str,
    recent: RecentAudio,
    stt: SttLoader | SttEngine,
    confidence: Confidence,
    options: RequestOptions,
) -> Request:
    """Endpoint the utterance that holds the phrase (from `recent`, then `blocks`) and
    return what was said after the phrase (see the module docstring)."""
    from vocal.audio.vad import EndReason, VadState

    start, endpointer = _endpoint_from(detection, recent, confidence, options)
    covered = detection.end_frame + round(options.nothing_after_ms * SAMPLE_RATE / 1000)
    # Whisper may have heard the request begin already, in the stretch that held the phrase.
    begun = bool(detection.heard and after_phrase(detection.heard, phrase))

    def said_more() -> bool:
        end = endpointer.speech_end_frame
        return end is not None and start + end > covered

    def hold() -> None:
        if endpointer.state is VadState.STOPPING and not (begun or said_more()):
            endpointer.hold_pause(max(endpointer.min_silence_ms, options.first_pause_ms))

    hold()
    if not endpointer.done:
        for block in blocks:
            endpointer.feed(block.samples)
            hold()
            if endpointer.done:
                break
        else:
            endpointer.finish(EndReason.END_OF_INPUT)
    reason = endpointer.end_reason.value if endpointer.end_reason else "end_of_input"
    first = endpointer.speech_start_frame
    last = endpointer.speech_end_frame
    span = (
        None if first is None else start + first,
        None if last is None else start + last,
        start + endpointer.fed_frames,
    )
    if not said_more():
        text = after_phrase(detection.heard, phrase) if detection.heard else None
        return Request(text or "", detection.heard, reason if text else NOTHING_AFTER, *span)
    from vocal.hearing.stt_loading import SttLoader

    engine = stt.engine() if isinstance(stt, SttLoader) else stt
    started = time.perf_counter()
    utterance = endpointer.utterance()
    heard = _transcribe(engine, utterance)
    text = after_phrase(heard, phrase)
    if text is None:  # the phrase is not in the words: what came after the detector fired
        pre_roll = round(endpointer.options.pre_roll_ms * SAMPLE_RATE / 1000)
        utterance_start = start + max(0, (first or 0) - pre_roll)
        skip = max(0, detection.end_frame - utterance_start)
        text = _transcribe(engine, utterance[skip:])
    return Request(
        text,
        heard,
        reason,
        *span,
        transcribed=True,
        transcribe_s=time.perf_counter() - started,
        stt_engine=getattr(engine, "name", None),
        utterance=utterance,
    )


def _endpoint_from(
    detection: Detection, recent: RecentAudio, confidence: Confidence, options: RequestOptions
) -> tuple[int, Endpointer]:
    """(the stream frame the endpointer starts at, the endpointer fed from there to now).

    Speech that ended in the look-back before the phrase began starts it again after that
    speech, so the utterance found is the phrase's."""
    from vocal.audio.vad import Endpointer, EndpointOptions

    if detection.start_frame is not None:
        start = detection.start_frame
    else:
        start = detection.end_frame - round(options.lookback_s * SAMPLE_RATE)
    start = max(start, recent.start_frame)
    while True:
        reset = getattr(confidence, "reset", None)
        if reset is not None:
            reset()  # a SileroVad follows one stream
        # Nobody speaking in the look-back (a phrase too quiet for Silero): give up once the
        # first pause allowed after it has passed too.
        heard_s = (recent.end_frame - start) / SAMPLE_RATE
        endpoint = dataclasses.replace(
            options.endpoint or EndpointOptions(),
            no_speech_timeout_s=heard_s + options.first_pause_ms / 1000,
        )
        endpointer = Endpointer(confidence, endpoint)
        endpointer.feed(recent.span(start))
        end = endpointer.end_frame
        if not (endpointer.done and end is not None and start + end < detection.end_frame):
            return start, endpointer
        start += end


def _transcribe(engine: SttEngine, samples: np.ndarray) -> str:
    from vocal.audio.wav import Audio

    if samples.shape[0] == 0:
        return ""
    return engine.transcribe(Audio(samples, SAMPLE_RATE)).text


__all__ = ["NOTHING_AFTER", "Request", "RequestOptions", "hear_request"]
