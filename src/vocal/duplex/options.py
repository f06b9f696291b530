"""What a converse turn is asked (`ConverseOptions`) and what it returns (`ConverseResult`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from vocal.hearing.listening import ListenResult
    from vocal.speaking.results import SpeechResult


@dataclass(frozen=True)
class ConverseOptions:
    """What `vocal converse` was asked to do beyond its settings (None: the engine's own). A
    flag that overrides a setting (the devices, `--barge-in`, `--aec`, `--session`, the
    listening flags) reaches the turn as that setting, the one route `vocal listen` and
    `vocal speak` take too (vocal.config.load_settings)."""

    engine: str | None = None  # the voice (TTS) engine; the recognizer is the stt_engine setting
    voice: str | None = None
    speed: float | None = None
    use_conch: bool = True
    #: Push-to-talk: the answer ends when the person presses Enter or Space on the terminal,
    #: not on a pause; Esc cancels (vocal.hearing.push_to_talk).
    push_to_talk: bool = False


class InterruptionAudio(TypedDict):
    """What a barge-in's interruption was heard from (`ConverseResult.interruption_audio`)."""

    #: "raw" (the raw microphone minus the reply's fitted echo) or "canceller".
    source: str
    echo_removed_db: float | None
    fit_s: float | None
    glitch_after_onset: bool
    traced_back_s: float


class HandoverReport(TypedDict, total=False):
    """How the reply's last second and the room's tail reached the listener (`tail_audio`)."""

    #: "raw" (the microphone minus the fitted echo) or "blanked".
    source: str
    #: Speech the detector saw begin before the reply's end: how long before (s).
    speech_before_end_s: float | None
    echo_removed_db: float | None
    delay_ms: float | None
    #: Which stretch was fitted: "to_end", "to_onset" or "across_moves".
    fit: str
    #: The echo's moves fitted across, and the steps it was followed through: each
    #: [s before the end, ms later than the fit's delay].
    moves: list[list[float]]
    steps: list[list[float]]
    #: After a glitch: "followed" or "blanked".
    glitch: str
    near_end_before_end_s: float | None
    fit_s: float


class Backchannel(TypedDict):
    """A backchannel said over the reply (`ConverseResult.backchannels`)."""

    text: str
    at_s: float | None
    speech_s: float
    paused_s: float


class WokeReport(TypedDict):
    """The wake phrase that a hands-free turn heard before the answer (`ConverseResult.woke`,
    `vocal converse --wake`: vocal.duplex.hands_free)."""

    #: "micro" (the bundled phrase's model) or "whisper" (any phrase).
    detector: str
    phrase: str
    #: How sure the detector was, 0 to 1.
    score: float | None
    #: Seconds from the turn's start (as `timings`) to the phrase heard.
    woke_at_s: float
    #: Seconds the turn waited for it, from the microphone opening for the phrase.
    waited_s: float


@dataclass
class ConverseResult:
    """One turn: what the person said and what happened to the reply."""

    text: str
    speech_heard: bool
    interrupted: bool
    stopped: bool
    skipped: bool
    mode: str  # "barge-in" or "half-duplex"
    aec: bool
    aec_detection: str | None
    #: Seconds from the first sample of the reply to the person starting to talk over it.
    interrupted_at_s: float | None
    #: The reply as far as it was played before the interruption (whole reply if none).
    heard_reply: str
    reply: str
    timings: dict[str, float | None]
    clock: dict[str, float | None]
    counters: dict[str, int]
    listen: ListenResult | None = None
    speech: SpeechResult | None = None
    sentences: list[dict] = field(default_factory=list)
    #: The barge-in detector's (capture end time, probability, inhibited, attenuation in dB,
    #: raw level above the predicted echo in dB: 99 while nothing plays) per chunk, with the
    #: `barge_in_trace` setting (diagnostics); None otherwise.
    trace: list[tuple[float, float, bool, float | None, float | None]] | None = None
    #: The canceller's per-block levels (`EchoCanceller(log_levels=True)`), with the trace.
    levels: dict[str, object] | None = None
    #: After a barge-in, what the interruption was heard from: {"source": "raw" (the raw
    #: microphone minus the reply's fitted echo, vocal.duplex.echo_free.onset) or "canceller",
    #: "echo_removed_db": what the best fit removed (None: nothing to fit), "fit_s"}.
    interruption_audio: InterruptionAudio | None = None
    #: Backchannels ("yeah", "mm-hmm") the person said over the reply: each paused it and it
    #: went on (vocal.duplex.bargein.backchannel): {"text", "at_s" (from the reply's first sample),
    #: "speech_s", "paused_s"}. They are not in `text` and do not make `interrupted`.
    backchannels: list[Backchannel] = field(default_factory=list)
    #: When the reply ended by itself with the canceller on: how its last second and the room's
    #: tail reached the listener: {"source": "raw" (the microphone minus the reply's fitted
    #: echo, so an answer begun as the reply ended keeps its first words) or "blanked",
    #: "echo_removed_db", "fit_s"}; None otherwise.
    tail_audio: HandoverReport | None = None
    #: The device pair's echo profile the turn used (`vocal doctor --echo`: its delay went to
    #: the canceller; a "half-duplex" verdict made `mode` half-duplex); None: none kept.
    echo_profile: dict[str, object] | None = None
    #: The echo delay this turn measured and kept for the next (ms; None: no fit held).
    learned_echo_delay_ms: float | None = None
    #: The room's own level at the microphone while the reply was silent (dB of mean square;
    #: the barge-in detector's floor, vocal.duplex.bargein.ambient); None: not known.
    room_level_db: float | None = None
    #: With `--wake`: the wake phrase heard before the answer (None: none was, or the answer
    #: came without it); `text` and `speech_heard` are then the answer's.
    woke: WokeReport | None = None
    #: With `--wake`: how long the turn listened for the phrase, s (None: it did not wait,
    #: for someone answered the reply, or the turn was stopped).
    wake_wait_s: float | None = None

    def to_dict(self) -> dict[str, object]:
        """What `vocal converse --json` prints."""
        extra: dict[str, object] = {} if self.trace is None else {"barge_in_trace": self.trace}
        if self.levels is not None:
            extra["barge_in_levels"] = self.levels
        return {
            "text": self.text,
            "speech_heard": self.speech_heard,
            "interrupted": self.interrupted,
            "interrupted_at_s": _round(self.interrupted_at_s),
            "heard_reply": self.heard_reply,
            "reply": self.reply,
            "stopped": self.stopped,
            "skipped": self.skipped,
            "mode": self.mode,
            "aec": self.aec,
            "aec_detection": self.aec_detection,
            "echo_profile": self.echo_profile,
            "learned_echo_delay_ms": self.learned_echo_delay_ms,
            "room_level_db": self.room_level_db,
            "end_reason": self.listen.end_reason if self.listen else None,
            # The end-of-turn stage's verdict on each pause of the answer (vocal.hearing.endofturn).
            "turn": self.listen.turn if self.listen else None,
            # Which recognizer made `text` (a remote engine's local fallback names itself, and
            # why the remote one failed: vocal.stt.fallback).
            "stt_engine": self.listen.stt_engine if self.listen else None,
            "stt_fallback_reason": self.listen.stt_fallback_reason if self.listen else None,
            # The vocabulary hints the recognizer was given (vocal.stt.hints).
            "stt_hints": self.listen.hints if self.listen else None,
            "timings": {k: _round(v) for k, v in self.timings.items()},
            "clock": self.clock,
            "counters": self.counters,
            "sentences": self.sentences,
            "interruption_audio": self.interruption_audio,
            "backchannels": self.backchannels,
            "tail_audio": self.tail_audio,
            "woke": self.woke,
            **extra,
        }


def _round(value: float | None) -> float | None:
    return round(value, 4) if isinstance(value, float) else value


__all__ = [
    "Backchannel",
    "ConverseOptions",
    "ConverseResult",
    "HandoverReport",
    "InterruptionAudio",
    "WokeReport",
]
