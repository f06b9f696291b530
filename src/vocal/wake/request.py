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

Among other talkers Silero calls their babble speech, and the request would run to
`max_seconds`: where Silero called the stream before the phrase speech and the phrase stood
above its level, the endpointer hears only chunks that stand above that level too
(vocal.audio.room_gate).
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from vocal.audio.room_gate import ROOM_MARGIN_DB
from vocal.wake.soundalike import after_phrase

if TYPE_CHECKING:
    from collections.abc import Iterator

    import numpy as np

    from vocal.audio.devices import Block
    from vocal.audio.room_gate import RoomGate
    from vocal.audio.vad import Confidence, Endpointer, EndpointOptions
    from vocal.hearing.stt_loading import SttLoader
    from vocal.stt import SttEngine
    from vocal.wake.detection import Detection
    from vocal.wake.recent import RecentAudio

SAMPLE_RATE = 16_000
#: End reason when nobody said anything after the phrase.
NOTHING_AFTER = "nothing_after"
#: The phrase's length where its detector does not say where it began (microWakeWord): hibari
#: and piper say "hey jarvis" in 0.7 s. The room's level is read before it.
PHRASE_S = 1.0
#: The stream before the phrase the room's level is read from, and the least of it.
ROOM_S = 3.0
MIN_ROOM_S = 0.5
#: The room is one of talkers when Silero calls this share of its chunks speech.
TALK_SHARE = 0.5
#: Audio kept after the last chunk the gate let through, beyond the post-roll: a word's soft
#: end stands only a few dB above the babble (the "ts" of "tests": 0.2-0.3 s under the gate
#: in vocal's voices), and Whisper should hear it.
GATED_TAIL_MS = 300


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
        room_margin_db: how far above the room's level a chunk must stand to be speech to
            the endpointer (vocal.audio.room_gate), once the phrase stood that far above it;
            None: no gate.
    """

    endpoint: EndpointOptions | None = None
    lookback_s: float = 1.5
    first_pause_ms: int = 1200
    nothing_after_ms: int = 250
    room_margin_db: float | None = ROOM_MARGIN_DB


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
        room_floor_db: the room's level the endpointer was gated by (None: not gated).
        room_gated_chunks: chunks Silero called speech that the gate made silence.
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
    room_floor_db: float | None = None
    room_gated_chunks: int = 0


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

    gate = room_gate_before(detection, recent, options.room_margin_db, confidence)
    start, endpointer = _endpoint_from(detection, recent, confidence, options, gate)
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
    room_db = None if gate is None else round(gate.floor_db, 1)
    gated = 0 if gate is None else gate.gated
    if not said_more():
        text = after_phrase(detection.heard, phrase) if detection.heard else None
        end_reason = reason if text else NOTHING_AFTER
        return Request(
            text or "",
            detection.heard,
            end_reason,
            *span,
            room_floor_db=room_db,
            room_gated_chunks=gated,
        )
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
        room_floor_db=room_db,
        room_gated_chunks=gated,
    )


def room_gate_before(
    detection: Detection,
    recent: RecentAudio,
    margin_db: float | None,
    confidence: Confidence | None = None,
) -> RoomGate | None:
    """The request's gate (vocal.audio.room_gate) where the phrase was said among other
    talkers: its floor the level of the last `ROOM_S` of the stream before the phrase began.

    None (no gate, the endpointer as in `vocal listen`) when less than `MIN_ROOM_S` of it is
    kept; when `confidence` (Silero) called under `TALK_SHARE` of its chunks speech (a quiet
    room or a fan: nothing to hold back, and a request said near a fan's level must not be
    gated away); or when the phrase's louder half did not stand `margin_db` above it (a person
    as far from the microphone as the room's talkers, or one who talked through it all)."""
    import statistics

    from vocal.audio.room_gate import RoomGate, chunk_levels_db, floor_db
    from vocal.audio.vad import CHUNK_FRAMES

    if margin_db is None:
        return None
    began = detection.start_frame
    if began is None:
        began = detection.end_frame - round(PHRASE_S * SAMPLE_RATE)
    kept_from = max(recent.start_frame, began - round(ROOM_S * SAMPLE_RATE))
    before = recent.span(kept_from, began)
    room = chunk_levels_db(before, CHUNK_FRAMES)
    phrase = sorted(
        chunk_levels_db(recent.span(max(began, kept_from), detection.end_frame), CHUNK_FRAMES)
    )
    louder = phrase[len(phrase) // 2 :]
    if len(room) * CHUNK_FRAMES < MIN_ROOM_S * SAMPLE_RATE or not louder:
        return None
    floor = floor_db(room)
    if statistics.median(louder) < floor + margin_db:
        return None
    # Silero last: the level checks above cost nothing beside it.
    if confidence is not None and _talk_share(before, confidence) < TALK_SHARE:
        return None
    return RoomGate(floor, margin_db)


def _talk_share(samples: np.ndarray, confidence: Confidence) -> float:
    """The share of `samples`' whole chunks that `confidence` calls speech (it is reset
    first and after: a `SileroVad` follows one stream)."""
    from vocal.audio.room_gate import RoomGate
    from vocal.audio.vad import CHUNK_FRAMES

    reset = getattr(confidence, "reset", None)
    if reset is not None:
        reset()
    whole = samples.shape[0] // CHUNK_FRAMES
    chunks = (samples[i * CHUNK_FRAMES : (i + 1) * CHUNK_FRAMES] for i in range(whole))
    talk = sum(float(confidence(chunk)) >= RoomGate.SPEECH_PROBABILITY for chunk in chunks)
    if reset is not None:
        reset()
    return talk / max(1, whole)


def _endpoint_from(
    detection: Detection,
    recent: RecentAudio,
    confidence: Confidence,
    options: RequestOptions,
    gate: RoomGate | None,
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
        if gate is not None:
            endpoint = dataclasses.replace(
                endpoint, post_roll_ms=endpoint.post_roll_ms + GATED_TAIL_MS
            )
            endpointer = Endpointer(gate.wrap(confidence), endpoint)
        else:
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


__all__ = ["NOTHING_AFTER", "Request", "RequestOptions", "hear_request", "room_gate_before"]
