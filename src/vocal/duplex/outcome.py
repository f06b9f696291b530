"""The end of a converse turn: what it opened and measured (`TurnParts`), its reply written to
the history, what the person heard of it, and the `ConverseResult`.

`vocal.duplex.converse` fills a `TurnParts` as the turn goes; the functions here read only it.
"""

from __future__ import annotations

import contextlib
import threading
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from vocal.duplex.options import Backchannel, ConverseResult, HandoverReport
from vocal.duplex.wiring import EchoGuard

if TYPE_CHECKING:
    from vocal.audio.devices import Microphone
    from vocal.audio.player import Player
    from vocal.audio.room_gate import RoomGate
    from vocal.duplex.echo_free.onset import EchoFreeOnset
    from vocal.floor.turn import Turn
    from vocal.hearing.listening import ListenResult
    from vocal.hearing.stt_loading import SttLoader
    from vocal.hearing.turn_models import EndOfTurnModels
    from vocal.speaking.results import SpeechResult
    from vocal.speaking.speech import Speech


@dataclass
class TurnParts:
    """What one converse turn opened and measured: its clean-up closes the parts, its result
    reads them. Every part is None until the turn opens it (a muted turn opens no output)."""

    text: str
    voice: str | None
    barge_in: bool
    use_aec: bool
    started_at_s: float
    #: Monotonic instants of the turn's steps ("started", "floor", "mic_opened", ...).
    clock: dict[str, float | None] = field(default_factory=dict)
    #: `vocal control skip-forward` during the reply.
    skip_requested: threading.Event = field(default_factory=threading.Event)
    loader: SttLoader | None = None
    #: The end of turn's models and the person's rhythm, started once the reply is over.
    turn_models: EndOfTurnModels | None = None
    speech: Speech | None = None
    player: Player | None = None
    #: None again once `listen` has closed it.
    mic: Microphone | None = None
    #: The echo canceller (None without AEC) and the barge-in detector (None in half-duplex).
    guard: EchoGuard = field(default_factory=EchoGuard)
    #: The output's underflows, kept when it closes (those before its first sound apart).
    underflows: int = 0
    underflows_before_audio: int = 0
    speech_result: SpeechResult | None = None
    #: Where the person started speaking (capture time), once a barge-in fired.
    onset_s: float | None = None
    #: After a barge-in: the raw capture minus the fitted echo, when the fit was good enough
    #: (vocal.duplex.echo_free.onset); the echo the best fit removed (dB) and how long fitting took.
    echo_free: EchoFreeOnset | None = None
    onset_removed_db: float | None = None
    onset_fit_s: float | None = None
    #: A glitch came after the barge-in's onset: the raw capture was not used (handover).
    onset_glitch: bool = False
    #: How much earlier than the pre-roll the kept audio starts: the echo-free capture showed
    #: the person began before it (vocal.duplex.handover.near_end_onset_s), s.
    onset_traced_back_s: float = 0.0
    #: The endpointer's gate by the room's own level (None: not known;
    #: vocal.duplex.bargein.ambient).
    room_gate: RoomGate | None = None
    #: How long the turn heard the room alone before its first sound, knowing no level of it
    #: (vocal.duplex.bargein.room_level.hear_room_first).
    room_first_s: float = 0.0
    #: When the reply ended by itself: whether its last second and its room tail were heard
    #: from the raw microphone minus the fitted echo ("raw") or blanked as before ("blanked").
    tail_audio: HandoverReport | None = None
    #: Backchannels heard over the reply, each of which paused it and let it go on
    #: (vocal.duplex.bargein.backchannel): {"text", "at_s", "speech_s", "paused_s"}.
    backchannels: list[Backchannel] = field(default_factory=list)
    #: Keeping the turn's echo delay for the next one (vocal.duplex.canceller.profile.learn_delay),
    #: and the delay kept once it has been written.
    learner: threading.Thread | None = None
    #: Keeps the room's level the detector heard for the next turn
    #: (vocal.duplex.bargein.room_level).
    room_keeper: threading.Thread | None = None
    learned_delay_ms: float | None = None


def record_history(turn: Turn, parts: TurnParts) -> None:
    """Write the sentences of the reply that played to the history, as one utterance."""
    import numpy as np

    speech, player = parts.speech, parts.player
    if speech is None or player is None:
        return
    played = [s for s in speech.result.sentences if s.played and s.index in speech.audio]
    if not played:
        return
    with (
        contextlib.suppress(OSError),
        turn.begin_utterance(
            text=parts.text, voice=parts.voice, sample_rate=player.sample_rate
        ) as recording,
    ):
        recording.append(np.concatenate([speech.audio[s.index] for s in played]))


# -- the result ------------------------------------------------------------------------------
def heard_reply(speech: Speech | None, cut_frame: int | None) -> tuple[str, list[dict]]:
    """The reply up to reference frame `cut_frame` (None: all that played), by sentence;
    a cut sentence is kept up to the share of its words that had played."""
    if speech is None:
        return "", []
    rate = speech.result.sample_rate
    parts, detail = [], []
    for record in speech.result.sentences:
        item = record.to_dict(rate)
        detail.append(item)
        if record.start_frame is None:
            continue
        if cut_frame is None or cut_frame >= record.start_frame + record.frames:
            parts.append(record.text)
            item["heard"] = 1.0
            continue
        if cut_frame <= record.start_frame:
            item["heard"] = 0.0
            continue
        share = (cut_frame - record.start_frame) / max(1, record.frames)
        words = record.text.split()
        parts.append(" ".join(words[: int(len(words) * share)]))
        item["heard"] = round(share, 3)
    return " ".join(p for p in parts if p).strip(), detail


def converse_result(
    parts: TurnParts, listened: ListenResult | None, *, stopped: bool, trace: bool
) -> ConverseResult:
    """The `ConverseResult` of a turn; `trace` adds the detector's trace and the canceller's
    levels (VOCAL_BARGE_IN_TRACE)."""
    detector, player, canceller = parts.guard.detector, parts.player, parts.guard.canceller
    loader = parts.loader
    fired = detector.fired if detector is not None else None
    speech_result = parts.speech_result
    first_audio = speech_result.first_audio_at_s if speech_result else None
    cut_frame = None
    interrupted_at = None
    if fired is not None and player is not None:
        # Where the person started, as a frame of what the speaker had played by then.
        onset_s = parts.onset_s if parts.onset_s is not None else fired.speech_start_s
        late_s = max(0.0, fired.at_s - onset_s)
        cut_frame = max(0, round(player.played_frames - late_s * player.sample_rate))
        if first_audio is not None:
            interrupted_at = onset_s - first_audio
    elif stopped or parts.skip_requested.is_set():
        cut_frame = player.played_frames if player is not None else 0
    heard, sentences = heard_reply(parts.speech, cut_frame)
    lt = listened.timings if listened else {}
    clock = dict(parts.clock)
    if listened is not None:
        clock.update({f"listen_{k}": v for k, v in listened.clock.items()})
    clock["first_audio"] = first_audio
    if fired is not None and detector is not None:
        # The barge-in's steps as capture times (benchmarks/converse decomposes its latency):
        # the first and the deciding chunk of the run that fired, their ends.
        chunk_s = detector.options.chunk_s
        clock["barge_in_first_speech"] = fired.speech_start_s + chunk_s
        clock["barge_in_decided"] = fired.speech_start_s + len(fired.probabilities) * chunk_s
        clock["barge_in_onset"] = parts.onset_s
    reply_ended = clock.get("reply_ended")
    end = time.monotonic()
    started_at_s = parts.started_at_s

    def span(a: float | None, b: float | None) -> float | None:
        return None if a is None or b is None else b - a

    timings: dict[str, float | None] = {
        "floor_s": span(started_at_s, clock.get("floor")),
        "first_audio_s": span(started_at_s, first_audio),
        "room_first_s": parts.room_first_s,
        "reply_s": span(first_audio, reply_ended),
        # The person's onset (as the VAD saw it) -> Player.stop called.
        "barge_in_latency_s": span(parts.onset_s, fired.at_s) if fired else None,
        # The deciding run alone (consecutive_chunks of speech).
        "barge_in_run_s": span(fired.speech_start_s, fired.at_s) if fired else None,
        "stt_load_s": loader.load_s if loader is not None else None,
        # Positive: the engine was loaded that long before the reply ended (hidden).
        "stt_ready_before_reply_end_s": span(loader.ready_at_s if loader else None, reply_ended),
        "listen_s": lt.get("listen_s"),
        "endpoint_s": lt.get("endpoint_s"),
        "stt_wait_s": lt.get("stt_wait_s"),
        "transcribe_s": lt.get("transcribe_s"),
        "end_to_text_s": lt.get("end_to_text_s"),
        "total_s": end - started_at_s,
    }
    counters = {
        "input_overflows": (
            parts.mic.overflows
            if parts.mic is not None
            else (listened.overflows if listened is not None else 0)
        ),
        "output_underflows": parts.underflows,
        "output_underflows_before_audio": parts.underflows_before_audio,
        "aec_errors": canceller.errors if canceller is not None else 0,
        "aec_glitches": canceller.glitches if canceller is not None else 0,
        "inhibited_chunks": detector.inhibited_chunks if detector is not None else 0,
        "chunks": detector.chunks if detector is not None else 0,
        "glitch_inhibits": len(detector.glitch_at_s) if detector is not None else 0,
        # Speech runs judged with the echo well cancelled (BargeInOptions.fast_chunks).
        "fast_runs": detector.fast_runs if detector is not None else 0,
        # Runs decided by one chunk far above the predicted echo (BargeInOptions.strong_chunk_db).
        "strong_chunks": detector.strong_chunks if detector is not None else 0,
        # Speech runs the double-talk test held back (BargeInOptions.double_talk_db).
        "double_talk_vetoes": detector.double_talk_vetoes if detector is not None else 0,
        # Speech runs held back for never rising above the room's own level (other people
        # talking: BargeInOptions.ambient_margin_db).
        "room_vetoes": detector.room_vetoes if detector is not None else 0,
        "backchannels": len(parts.backchannels),
        # Speech chunks counted inside a tail or a glitch window (BargeInOptions.tail_override_db).
        "tail_overrides": detector.tail_overrides if detector is not None else 0,
        "glitch_overrides": detector.glitch_overrides if detector is not None else 0,
        # Chunks Silero called speech while listening that were not above the room's level.
        "room_gated_chunks": parts.room_gate.gated if parts.room_gate is not None else 0,
    }
    text = listened.text if listened is not None else ""
    room_db = detector.ambient.floor_db if detector is not None else None
    result = ConverseResult(
        text=text,
        speech_heard=bool(listened and listened.speech_heard),
        interrupted=fired is not None,
        stopped=stopped,
        skipped=parts.skip_requested.is_set(),
        mode="barge-in" if parts.barge_in else "half-duplex",
        aec=parts.use_aec,
        aec_detection=None,
        interrupted_at_s=interrupted_at,
        heard_reply=heard,
        reply=parts.text,
        timings=timings,
        clock=clock,
        counters=counters,
        listen=listened,
        speech=speech_result,
        sentences=sentences,
        backchannels=list(parts.backchannels),
        tail_audio=parts.tail_audio,
        room_level_db=None if room_db is None else round(room_db, 1),
        interruption_audio=None
        if fired is None
        else {
            "source": "raw" if parts.echo_free is not None else "canceller",
            "echo_removed_db": parts.onset_removed_db,
            "fit_s": None if parts.onset_fit_s is None else round(parts.onset_fit_s, 3),
            "glitch_after_onset": parts.onset_glitch,
            "traced_back_s": round(parts.onset_traced_back_s, 3),
        },
    )
    if trace and detector is not None:
        result.trace = [
            (
                round(t, 4),
                round(p, 3),
                i,
                None if a is None else round(a, 1),
                None if x is None else round(min(x, 99.0), 1),
            )
            for t, p, i, a, x in detector.trace
        ]
        if canceller is not None and canceller.capture_log is not None:
            result.levels = {
                "capture": canceller.capture_log,
                "render": canceller.render_log,
                "render_rate": canceller.render_sample_rate,
            }
    return result


__all__ = ["TurnParts", "converse_result", "heard_reply", "record_history"]
