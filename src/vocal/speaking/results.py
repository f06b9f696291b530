"""What speaking produced: one `SentenceRecord` per sentence and the `SpeechResult` of a reply."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    pass


@dataclass
class TurnOutcome:
    """How a spoken turn went: the floor and what ended the speech.

    `outcome` is "finished", "stopped" (`vocal control stop`), "skipped" (skip_forward: the
    rest of the text is not spoken), "lost" (the floor was taken; `speak` then exits 3) or
    "replayed" (skip_back: an utterance from the history was played instead of the rest).
    """

    outcome: str = "finished"
    session: str | None = None
    seq: int | None = None
    waited_s: float | None = None
    position_on_arrival: int | None = None
    #: History ids of the utterances spoken (and of what a skip_back replayed), in order.
    utterance_ids: list[int] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {
            "outcome": self.outcome,
            "session": self.session,
            "seq": self.seq,
            "waited_s": round(self.waited_s, 4) if self.waited_s is not None else None,
            "position_on_arrival": self.position_on_arrival,
            "utterance_ids": self.utterance_ids,
        }


# -- results -------------------------------------------------------------------------------------
@dataclass
class SentenceRecord:
    """One sentence: its text, synthesis times and where it went in the output."""

    index: int
    utterance: int
    text: str
    synth_started_at_s: float | None = None
    synth_done_at_s: float | None = None
    frames: int = 0  # at the output's rate
    start_frame: int | None = None  # in the output's reference buffer; None: not played
    started_at_s: float | None = None  # time.monotonic() of the callback that played it first
    failed_check: str | None = None
    played: bool = False

    @property
    def synth_s(self) -> float:
        if self.synth_started_at_s is None or self.synth_done_at_s is None:
            return 0.0
        return self.synth_done_at_s - self.synth_started_at_s

    def to_dict(self, sample_rate: int) -> dict[str, Any]:
        return {
            "index": self.index,
            "utterance": self.utterance,
            "text": self.text,
            "synth_ms": round(self.synth_s * 1000, 1),
            "audio_s": round(self.frames / sample_rate, 3),
            "start_frame": self.start_frame,
            "played": self.played,
            "failed_check": self.failed_check,
        }


@dataclass
class SpeechResult:
    """What was spoken, how fast, and whether it was stopped."""

    engine: str
    voice: str | None
    sample_rate: int
    sentences: list[SentenceRecord] = field(default_factory=list)
    started_at_s: float = 0.0  # time.monotonic() when the text was known
    engine_ready_at_s: float | None = None
    #: Sentences synthesized in the speech worker process (vocal.speaking.worker), not this one.
    worker_sentences: int = 0
    first_audio_at_s: float | None = None
    finished_at_s: float | None = None
    stopped: bool = False
    #: The turn it was spoken in (`vocal speak` to the speaker), else None.
    turn: TurnOutcome | None = None

    @property
    def played(self) -> list[SentenceRecord]:
        return [s for s in self.sentences if s.played]

    def playing(self, played_frames: int) -> SentenceRecord | None:
        """The sentence the output is playing once `played_frames` of it have played (None:
        a pause between sentences, or nothing queued yet)."""
        for record in self.sentences:
            start = record.start_frame
            if start is not None and start <= played_frames < start + record.frames:
                return record
        return None

    @property
    def failed(self) -> list[SentenceRecord]:
        return [s for s in self.sentences if s.failed_check]

    @property
    def audio_s(self) -> float:
        return sum(s.frames for s in self.sentences if s.synth_done_at_s) / self.sample_rate

    @property
    def synth_s(self) -> float:
        return sum(s.synth_s for s in self.sentences)

    @property
    def real_time_factor(self) -> float | None:
        """Synthesis time over audio time (lower is faster; under 1 keeps up with playback)."""
        return self.synth_s / self.audio_s if self.audio_s else None

    @property
    def first_audio_ms(self) -> float | None:
        """From the text being known to the first sample going to the output."""
        if self.first_audio_at_s is None:
            return None
        return (self.first_audio_at_s - self.started_at_s) * 1000

    def gaps_ms(self) -> list[float]:
        """Silence inserted between consecutive played sentences (from the reference)."""
        spans = [(s.start_frame, s.frames) for s in self.played if s.start_frame is not None]
        return [
            (b_start - (a_start + a_frames)) * 1000 / self.sample_rate
            for (a_start, a_frames), (b_start, _) in zip(spans, spans[1:], strict=False)
        ]

    def to_dict(self) -> dict[str, Any]:
        rtf = self.real_time_factor
        return {
            "engine": self.engine,
            "voice": self.voice,
            "sample_rate": self.sample_rate,
            "sentences": len(self.sentences),
            "worker_sentences": self.worker_sentences,
            "spoken": len(self.played),
            "failed": len(self.failed),
            "stopped": self.stopped,
            "audio_s": round(self.audio_s, 3),
            "synth_s": round(self.synth_s, 3),
            "real_time_factor": round(rtf, 4) if rtf is not None else None,
            "first_audio_ms": round(self.first_audio_ms, 1) if self.first_audio_ms else None,
            "engine_ready_ms": round((self.engine_ready_at_s - self.started_at_s) * 1000, 1)
            if self.engine_ready_at_s
            else None,
            "max_gap_ms": round(max(self.gaps_ms()), 1) if self.gaps_ms() else None,
            "timestamps": {
                "text_known": self.started_at_s,
                "first_audio": self.first_audio_at_s,
                "finished": self.finished_at_s,
            },
            "detail": [s.to_dict(self.sample_rate) for s in self.sentences],
            "turn": self.turn.to_dict() if self.turn is not None else None,
        }


__all__ = ["SentenceRecord", "SpeechResult", "TurnOutcome"]
