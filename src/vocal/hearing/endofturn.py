"""End of turn: has the person finished, or only paused to think?

A fixed silence window is wrong both ways on real speech (issue 16): people pause 1.0-1.3 s
mid-sentence, and a plainly finished "Go forward ten meters." still waits the whole window.
So after a short silence (`EndOfTurnOptions.check_ms`) the listening turn asks two signals:

- **the audio**: Smart Turn v3 (pipecat's BSD-2 model: a Whisper-tiny encoder with a
  classification head, ONNX, ~8.7 MB), which hears prosody: a falling, final intonation
  against a held, continuing one. It takes Whisper-style log-mel features of the last 8 s at
  16 kHz (left-padded with zeros) and returns P(complete). `SmartTurn` computes those features
  itself (numpy, no transformers) and runs the model on one onnxruntime thread.
- **the text** of the early transcript that vocal makes in every pause anyway
  (`vocal.hearing.early.EarlyTranscriber`): a turn that ends in a word that cannot end an English
  sentence ("... forced the", "I think we should") or in a comma or an ellipsis is not done.
  `text_verdict` is that rule; it knows nothing but the last word and the punctuation.

`decide` combines them (thresholds from `benchmarks/turns --tune` on the real-speech corpus):
the audio decides first, since it is ready ~60 ms after it is asked while the early
transcript takes 0.13-0.37 s here; the text confirms or vetoes when it arrives. The verdict
is `COMPLETE` (end now), `UNFINISHED` (keep listening, up to `max_pause_ms` of silence) or
`UNDECIDED` (end after the ordinary silence window, `--silence-ms`).

The audio model, its features and its loading live in `vocal.hearing.smart_turn`; until it
is ready (or when it cannot load) pauses are judged by the text alone.
"""

from __future__ import annotations

import enum
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from vocal.hearing.smart_turn import SMART_TURN_SAMPLE_RATE, SMART_TURN_WINDOW_S

if TYPE_CHECKING:
    import numpy as np

    from vocal.hearing.smart_turn import SmartTurn


class Verdict(str, enum.Enum):
    """What a pause means."""

    COMPLETE = "complete"  # the person has finished: end the turn now
    UNFINISHED = "unfinished"  # a pause inside a thought: wait, up to max_pause_ms
    UNDECIDED = "undecided"  # no clear signal: the ordinary silence window ends it


@dataclass(frozen=True)
class EndOfTurnOptions:
    """The end-of-turn stage's knobs. Durations are of silence after the last speech chunk.

    Three durations name the behaviour (issue 16): `check_ms`, the silence before the turn
    model is asked; `max_pause_ms`, the longest pause waited through when the turn sounds
    unfinished (distinct from `--max-seconds`, which caps the whole recording); and the
    endpointer's `min_silence_ms` (`--silence-ms`, 700), which ends a turn when the model is
    off or undecided. Thresholds are on Smart Turn's P(complete); `benchmarks/turns --tune`
    chose them on the corpus's tuning split.
    """

    enabled: bool = True
    check_ms: int = 160
    max_pause_ms: int = 2500
    #: P(complete) at or above which the audio alone ends the turn when there is no early
    #: transcript (the engine still loading); with one coming, the verdict waits for it.
    audio_complete: float = 0.5
    #: Below this the audio says "unfinished", whatever the text says.
    audio_unfinished: float = 0.2
    #: With the text ending a sentence, the P(complete) that confirms it.
    text_complete_audio: float = 0.3

    def __post_init__(self) -> None:
        for name in ("audio_complete", "audio_unfinished", "text_complete_audio"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:  # NaN fails this too
                raise ValueError(f"{name} must be between 0 and 1, got {value}")
        # `not (ok)` so NaN fails; infinity is refused too: an endless pause is never a turn's end.
        if not 0 <= self.check_ms <= self.max_pause_ms < float("inf"):
            raise ValueError(
                f"need 0 <= turn check ms <= max pause ms, both finite, got {self.check_ms} "
                f"and {self.max_pause_ms}"
            )


# -- the text ----------------------------------------------------------------------------------
#: Words an English sentence does not end with, as Whisper writes speech down: articles and
#: possessive determiners, prepositions, conjunctions, the infinitive "to", modals, subject
#: pronouns and fillers ("I think we should | refactor the parser"). Words that end real
#: sentences often enough are left to the audio: auxiliaries ("than he was."), object
#: pronouns, "more" ("no more."), particles ("give up."). A wrong "unfinished" costs the person
#: a wait of max_pause_ms ("Yes, I will." waits); a wrong "complete" cuts them off. Checked on
#: the corpus's tuning split (benchmarks/turns --parts tune): "was" and "be" ended finished
#: sentences there, and were taken out.
UNFINISHED_WORDS = frozenset(
    """
    a an the my your our their every each either neither several
    of to for with from by at into onto upon about against between among through during
    without within toward towards across via per than
    and or nor but because although though whereas if unless whether
    should would could must might shall can will may cannot very rather quite
    i we he she they i'm we're they're you're that's it's there's what's here's
    um uh er erm
    """.split()
)
_TRAILING_CONTINUATION = re.compile(r"(,|;|:|-|–|—|\.\.\.|…)\s*$")
_SENTENCE_END = re.compile(r"[.!?][\"')\]]*\s*$")
_WORD = re.compile(r"[a-z0-9']+")


def text_verdict(text: str) -> Verdict:
    """What the early transcript's ending says: UNFINISHED for a trailing comma, dash or
    ellipsis, or a last word that cannot end a sentence; COMPLETE for sentence-final
    punctuation after any other word; UNDECIDED otherwise (no words, no punctuation)."""
    text = text.strip()
    words = _WORD.findall(text.lower().replace("’", "'"))
    if not words:
        return Verdict.UNDECIDED
    if _TRAILING_CONTINUATION.search(text) or words[-1] in UNFINISHED_WORDS:
        return Verdict.UNFINISHED
    if _SENTENCE_END.search(text):
        return Verdict.COMPLETE
    return Verdict.UNDECIDED


def decide(audio_p: float | None, text: Verdict | None, options: EndOfTurnOptions) -> Verdict:
    """The pause's verdict from Smart Turn's P(complete) (None: no model) and the early
    transcript's verdict (None: no transcript was made, the engine still loading).

    - The text says unfinished: UNFINISHED, whatever the audio says (the audio misses many
      cut-off sentences that end in "the" or "of": issue 16).
    - The text ends a sentence: COMPLETE when the audio does not contradict it
      (>= text_complete_audio). The text must confirm an end: a pause after "Four" or
      "Eight of spades" in a list sounds final to the audio, but has no full stop.
    - No text at all: the audio alone, COMPLETE at >= audio_complete.
    - The audio says unfinished (< audio_unfinished): UNFINISHED, even after a full stop
      (Whisper writes one after "thyself thy foe" mid-sentence; on the tuning split holding
      there kept 2 more spliced pauses, and made 2 of 16 finished turns wait the cap).
    - Otherwise UNDECIDED: the ordinary silence window ends the turn. With no model the text
      can hold a turn open, never end one early.
    """
    if text is Verdict.UNFINISHED:
        return Verdict.UNFINISHED
    if audio_p is None:
        return Verdict.UNDECIDED
    if text is Verdict.COMPLETE and audio_p >= options.text_complete_audio:
        return Verdict.COMPLETE
    if text is None and audio_p >= options.audio_complete:
        return Verdict.COMPLETE
    if audio_p < options.audio_unfinished:
        return Verdict.UNFINISHED
    return Verdict.UNDECIDED


# -- one listening turn's pauses -------------------------------------------------------------
#: An utterance in the endpointer: (speech start frame, speech end frame).
UtteranceKey = tuple[int | None, int | None]


class TextSource(Protocol):
    """Where the judge gets a pause's early transcript: `text(key, wait)` is (requested,
    text): requested False when no transcription of pause `key` was asked for (the engine was
    still loading), text None while it runs (or, with `wait`, after waiting for it)."""

    def text(self, key: UtteranceKey, wait: bool) -> tuple[bool, str | None]: ...


class PauseLike(Protocol):
    """What the judge reads of `vocal.audio.vad.Endpointer`."""

    @property
    def sample_rate(self) -> int: ...
    @property
    def done(self) -> bool: ...
    @property
    def speech_start_frame(self) -> int | None: ...
    @property
    def speech_end_frame(self) -> int | None: ...
    @property
    def silence_frames(self) -> int: ...
    @property
    def fed_frames(self) -> int: ...

    def tail(self, frames: int) -> np.ndarray: ...

    def hold_pause(self, limit_ms: int) -> None: ...

    def release_pause(self) -> None: ...

    def end_turn(self) -> None: ...


@dataclass
class PauseDecision:
    """What the end-of-turn stage made of one pause (`vocal listen --json`: `turn.pauses`)."""

    #: Where the pause began in the recording, seconds (the last speech chunk's end).
    at_s: float
    audio_p: float | None = None
    text: str | None = None
    text_verdict: str | None = None
    verdict: str | None = None
    #: Silence when the audio was asked, and when the verdict was final, ms.
    asked_ms: float | None = None
    audio_ms: float | None = None
    #: When the audio alone was sure (P >= audio_complete) while the text was on its way.
    provisional_ms: float | None = None
    decided_ms: float | None = None
    #: Wall time the model took (one call), ms.
    model_ms: float | None = None
    #: The person spoke again before the pause was judged (or despite the verdict).
    resumed: bool = False

    def to_dict(self) -> dict[str, object]:
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in self.__dict__.items()}


class PauseJudge:
    """Runs the end-of-turn stage on a listening turn's pauses: call `update(endpointer)`
    after every block fed.

    Once a pause has lasted `options.check_ms`, Smart Turn is asked on the last 8 s (on a
    thread of its own; inline with `wait`), the pause's early transcript is read from `texts`
    when it is there, and `decide` acts on the endpointer: `end_turn()` for COMPLETE,
    `hold_pause(max_pause_ms)` for UNFINISHED, nothing for UNDECIDED (its silence window
    ends it). A COMPLETE heard before the text is only provisional: the microphone stays open
    until the text confirms it, and a veto turns it into a hold.

    `wait=True` is for `--input FILE`: the file is fed faster than real time, so the judge
    waits for the model and the transcript at the points where a live turn would be waiting
    for them, and the file's clock (samples fed) decides as the microphone's would.
    """

    def __init__(
        self,
        options: EndOfTurnOptions,
        *,
        model: Callable[[], SmartTurn | None],
        texts: TextSource,
        wait: bool = False,
    ) -> None:
        self.options = options
        self._model = model
        self._texts = texts
        self._wait = wait
        self.pauses: list[PauseDecision] = []
        self._key: UtteranceKey | None = None
        self._done = False  # this pause has its final verdict
        self._audio: threading.Thread | None = None
        self._audio_p: float | None = None
        self._audio_ready = False

    @property
    def current(self) -> PauseDecision | None:
        return self.pauses[-1] if self.pauses else None

    def update(self, endpointer: PauseLike) -> None:
        """Look at the pause the endpointer is in (if any) and act on it."""
        if endpointer.done:
            return
        silence_frames = endpointer.silence_frames
        if silence_frames == 0 or endpointer.speech_start_frame is None:
            if self._key is not None and self.current is not None:
                self.current.resumed = True
            self._key = None
            return
        key = (endpointer.speech_start_frame, endpointer.speech_end_frame or 0)
        rate = endpointer.sample_rate
        silence_ms = silence_frames * 1000 / rate
        if key != self._key:
            if silence_ms < self.options.check_ms:
                return
            self._start(key, endpointer, silence_ms)
        if self._done:
            return
        decision = self.pauses[-1]
        if self._audio is not None and (self._wait or not self._audio.is_alive()):
            self._audio.join()
            self._audio = None
            self._audio_ready = True
            decision.audio_p = self._audio_p
            decision.audio_ms = silence_ms
        if not self._audio_ready:
            return
        audio_p = self._audio_p
        requested, text = self._texts.text(key, wait=self._wait)
        text_verdict_ = None
        if text is not None:
            text_verdict_ = text_verdict(text)
            decision.text, decision.text_verdict = text, text_verdict_.value
        elif requested and audio_p is not None and audio_p < self.options.audio_unfinished:
            text_verdict_ = Verdict.UNDECIDED  # the voice holds it; no text can overturn that
        elif requested and not self._wait:
            self._await_text(endpointer, decision, audio_p, silence_ms)
            return
        verdict = decide(audio_p, text_verdict_, self.options)
        self._done = True
        decision.verdict = verdict.value
        decision.decided_ms = silence_ms
        if verdict is Verdict.COMPLETE:
            endpointer.end_turn()
        elif verdict is Verdict.UNFINISHED:
            endpointer.hold_pause(self.options.max_pause_ms)
        else:  # the silence window decides (at once, if the wait for the text outlasted it)
            endpointer.release_pause()

    def _await_text(
        self, endpointer: PauseLike, decision: PauseDecision, audio_p: float | None,
        silence_ms: float,
    ) -> None:  # fmt: skip
        """The transcript is on its way, and it confirms or vetoes. A sure audio verdict is
        noted as provisional. Where the text could end the turn or hold it, the pause is held
        open (up to the cap) until it arrives: on a loaded machine Whisper can take longer
        than the silence window, which must not end the turn before the text is read."""
        if audio_p is not None and audio_p >= self.options.audio_complete:
            if decision.provisional_ms is None:
                decision.provisional_ms = silence_ms
        endpointer.hold_pause(self.options.max_pause_ms)

    def _start(self, key: tuple[int, int], endpointer: PauseLike, silence_ms: float) -> None:
        self._key, self._done = key, False
        self._audio_p, self._audio_ready = None, False
        self.pauses.append(
            PauseDecision(at_s=(key[1]) / endpointer.sample_rate, asked_ms=silence_ms)
        )
        model = self._model()
        if model is None:  # loading, failed or off: the text alone
            self._audio, self._audio_ready = None, True
            return
        samples = endpointer.tail(SMART_TURN_WINDOW_S * SMART_TURN_SAMPLE_RATE)
        decision = self.pauses[-1]

        def run() -> None:
            started = time.perf_counter()
            try:
                self._audio_p = model.probability(samples)
            except Exception:  # a failed call is "no audio signal", never a failed turn
                self._audio_p = None
            decision.model_ms = (time.perf_counter() - started) * 1000

        if self._wait:
            run()
            self._audio = None
            self._audio_ready = True
            decision.audio_p, decision.audio_ms = self._audio_p, silence_ms
        else:
            self._audio = threading.Thread(target=run, name="vocal-turn-model", daemon=True)
            self._audio.start()

    def close(self) -> None:
        """Wait for a model call still running (never leave a thread in native code)."""
        if self._audio is not None:
            self._audio.join()

    def summary(self) -> dict[str, object]:
        """What `--json` reports: every pause judged, in order."""
        return {"pauses": [p.to_dict() for p in self.pauses]}


__all__ = [
    "EndOfTurnOptions",
    "PauseDecision",
    "PauseJudge",
    "Verdict",
    "decide",
    "text_verdict",
]
