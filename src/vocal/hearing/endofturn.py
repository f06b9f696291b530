"""End of turn: has the person finished, or only paused to think? (issues 16 and 36)

A cut-off costs the person their thought; 300 ms more waiting costs them almost nothing. So a
pause never ends the turn at once: what is known of it sets how long the silence must last
(`wait_for`), short when every signal says "finished", longer when they are unsure, the cap
when the words say "unfinished". After `EndOfTurnOptions.check_ms` of silence three signals
are asked:

- **the voice**: Smart Turn v3 (`vocal.hearing.smart_turn`), P(complete) from the prosody of
  the last 8 s: a falling, final intonation against a held, continuing one.
- **the last word** of the early transcript that vocal makes in every pause anyway
  (`vocal.hearing.early`): a turn that ends in a word that cannot end an English sentence
  ("... forced the", "I think we should") or in a comma or an ellipsis is not done
  (`text_verdict`).
- **the words**: a small language model of the whole utterance (`vocal.hearing.words_model`),
  P(the message ends here), which knows "merge the pull request and then" from "merge the
  pull request", and in `converse` what the agent asked.

Each signal is optional (a model still loading, not installed, or off): the wait is graded on
what there is, and with none it is the plain silence window (`--silence-ms`). On top of it
the person's own rhythm (`vocal.hearing.rhythm`) sets a floor: a speaker seen to resume after
long pauses is given longer ones.
"""

from __future__ import annotations

import enum
import math
import re
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from vocal.config import Settings
from vocal.hearing.smart_turn import SMART_TURN_SAMPLE_RATE, SMART_TURN_WINDOW_S

if TYPE_CHECKING:
    import numpy as np

    from vocal.hearing.rhythm import Rhythm
    from vocal.hearing.smart_turn import SmartTurn
    from vocal.hearing.words_model import WordsModel


class Verdict(str, enum.Enum):
    """What a pause means."""

    COMPLETE = "complete"  # the person has finished: end after the short wait
    UNFINISHED = "unfinished"  # a pause inside a thought: wait up to max_pause_ms
    UNDECIDED = "undecided"  # no clear signal: a wait between the two


@dataclass(frozen=True)
class EndOfTurnOptions:
    """The end-of-turn stage's knobs. Durations are of silence after the last speech chunk.

    The durations that name the behaviour: `check_ms`, the silence before the signals are
    asked; `finished_ms`, the wait when every signal says the person has finished;
    `max_pause_ms`, the wait when the words say they have not (distinct from `--max-seconds`,
    which caps the whole recording). Between the two the wait is graded by the signals'
    confidence (`wait_for`). The endpointer's `--silence-ms` is the wait when no signal
    can be had (`--no-turn-model`, or no model loaded). `benchmarks/turns --parts curve`
    chose the thresholds on the corpus's tuning split, cut-offs first.
    """

    enabled: bool = Settings.turn_model
    check_ms: int = Settings.turn_check_ms
    finished_ms: int = 500
    max_pause_ms: int = Settings.max_pause_ms
    #: Smart Turn's P(complete) at or above which the voice says "finished" outright; the
    #: confidence it gives falls to 0 at `audio_unfinished`.
    audio_finished: float = 0.7
    audio_unfinished: float = 0.2
    #: The words' model's P(end) at or above which the words say "finished" outright; below
    #: `words_unfinished` they say "unfinished" (the cap).
    words_finished: float = 0.3
    words_unfinished: float = 0.05

    def __post_init__(self) -> None:
        for name in (
            "audio_finished",
            "audio_unfinished",
            "words_finished",
            "words_unfinished",
        ):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:  # NaN fails this too
                raise ValueError(f"{name} must be between 0 and 1, got {value}")
        if not self.audio_unfinished < self.audio_finished:
            raise ValueError("need audio_unfinished < audio_finished")
        if not 0 < self.words_unfinished < self.words_finished:
            raise ValueError("need 0 < words_unfinished < words_finished")
        # `not (ok)` so NaN fails; infinity is refused too: an endless pause is never a turn's end.
        if not 0 <= self.check_ms <= self.max_pause_ms < float("inf"):
            raise ValueError(
                f"need 0 <= turn check ms <= max pause ms, both finite, got {self.check_ms} "
                f"and {self.max_pause_ms}"
            )
        if not 0 < self.finished_ms <= self.max_pause_ms:
            raise ValueError(
                f"need 0 < finished ms <= max pause ms, got {self.finished_ms} and "
                f"{self.max_pause_ms}"
            )


# -- the text ----------------------------------------------------------------------------------
#: Words an English sentence does not end with, as Whisper writes speech down: articles and
#: possessive determiners, prepositions, conjunctions, the infinitive "to", modals, subject
#: pronouns and fillers ("I think we should | refactor the parser"). Words that end real
#: sentences often enough are left to the audio: auxiliaries ("than he was."), object
#: pronouns, "more" ("no more."), particles ("give up."). A wrong "unfinished" costs the person
#: a wait of max_pause_ms ("Yes, I will." waits); a wrong "complete" cuts them off (checked
#: on the corpus's tuning split: docs/design.md).
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


@dataclass(frozen=True)
class Signals:
    """What is known of one pause: Smart Turn's P(complete), the last word's verdict and the
    words' model's P(end); None where the signal could not be had."""

    audio_p: float | None = None
    text: Verdict | None = None
    words_p: float | None = None


def _between(value: float, low: float, high: float) -> float:
    """0 at or below `low`, 1 at or above `high`, linear between."""
    return min(1.0, max(0.0, (value - low) / (high - low)))


def confidence(signals: Signals, options: EndOfTurnOptions) -> float | None:
    """How sure the signals are that the person has finished, 0 to 1 (None: no signal).

    The voice's degree is P(complete) between `audio_unfinished` and `audio_finished`; the
    words' is log P(end) between `words_unfinished` and `words_finished`. Every signal at
    hand must agree, so the least sure one counts. A transcript with no sentence-final
    punctuation ("ten of clubs", "okay") halves it: Whisper writes a full stop after a finished
    sentence, and a list or a fragment that lacks one is as often going on.
    """
    degrees = []
    if signals.audio_p is not None:
        degrees.append(_between(signals.audio_p, options.audio_unfinished, options.audio_finished))
    if signals.words_p is not None:
        degrees.append(
            _between(
                math.log(max(signals.words_p, 1e-12)),
                math.log(options.words_unfinished),
                math.log(options.words_finished),
            )
        )
    if not degrees:
        return None
    sure = min(degrees)
    if signals.text is Verdict.UNDECIDED:
        sure /= 2
    return sure


def wait_for(
    signals: Signals, options: EndOfTurnOptions, *, silence_ms: int
) -> tuple[float, Verdict]:
    """How long the silence must last before the turn ends (ms), and the verdict it stands for.

    - The last word or the words' model says unfinished: the cap, `max_pause_ms`.
    - No signal at all: `silence_ms`, the plain window.
    - Otherwise graded by `confidence` c, on a log scale from `finished_ms` (c = 1) to the cap
      (c = 0): each step of sureness takes off the same share of the wait. COMPLETE when the
      signals are sure (c = 1), else UNDECIDED.
    """
    cap = float(options.max_pause_ms)
    if signals.text is Verdict.UNFINISHED or (
        signals.words_p is not None and signals.words_p < options.words_unfinished
    ):
        return cap, Verdict.UNFINISHED
    sure = confidence(signals, options)
    if sure is None:
        return float(silence_ms), Verdict.UNDECIDED
    wait_ms = options.finished_ms * (cap / options.finished_ms) ** (1.0 - sure)
    return wait_ms, Verdict.COMPLETE if sure >= 1.0 else Verdict.UNDECIDED


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
    @property
    def min_silence_ms(self) -> int: ...

    def tail(self, frames: int) -> np.ndarray: ...

    def hold_pause(self, limit_ms: float, *, finished: bool = False) -> None: ...


@dataclass
class PauseDecision:
    """What the end-of-turn stage made of one pause (`vocal listen --json`: `turn.pauses`)."""

    #: Where the pause began in the recording, seconds (the last speech chunk's end).
    at_s: float
    audio_p: float | None = None
    text: str | None = None
    text_verdict: str | None = None
    words_p: float | None = None
    verdict: str | None = None
    #: The silence this pause was given before the turn ends, ms (`wait_for`, the rhythm's
    #: floor included), and that floor.
    wait_ms: float | None = None
    rhythm_floor_ms: float | None = None
    #: Silence when the signals were asked, and when the wait was set, ms.
    asked_ms: float | None = None
    decided_ms: float | None = None
    #: Wall time each model took (one call), ms.
    model_ms: float | None = None
    words_ms: float | None = None
    #: The silence the pause lasted (so far), ms; resumed: the person spoke again after it.
    silence_ms: float | None = None
    resumed: bool = False

    def to_dict(self) -> dict[str, object]:
        return {k: round(v, 4) if isinstance(v, float) else v for k, v in self.__dict__.items()}


class _Call:
    """One model call on a thread of its own (inline with `wait`): `value` once `done`."""

    def __init__(self, run: Callable[[], float | None], *, wait: bool, name: str) -> None:
        self.value: float | None = None
        self.elapsed_ms = 0.0
        self._run = run
        self._thread = threading.Thread(target=self._call, name=name, daemon=True)
        if wait:
            self._call()
        else:
            self._thread.start()

    def _call(self) -> None:
        started = time.perf_counter()
        try:
            self.value = self._run()
        except Exception:  # a failed call is "no signal", never a failed turn
            self.value = None
        self.elapsed_ms = (time.perf_counter() - started) * 1000

    @property
    def done(self) -> bool:
        return not self._thread.is_alive()

    def join(self) -> None:
        if self._thread.ident is not None:
            self._thread.join()


class PauseJudge:
    """Runs the end-of-turn stage on a listening turn's pauses: call `update(endpointer)`
    after every block fed.

    Once a pause has lasted `options.check_ms`, Smart Turn is asked on the last 8 s, the
    pause's early transcript is read from `texts` when it comes, and the words' model is asked
    of it; each on a thread of its own (inline with `wait`). Until every signal that was asked
    for has answered, the pause is held open up to the cap: on a loaded machine Whisper can
    take longer than a short wait, which must not end the turn before its words are read. Then
    `wait_for` (and the rhythm's floor) sets the silence that ends the turn, through
    `endpointer.hold_pause`.

    `wait=True` is for `--input FILE`: the file is fed faster than real time, so the judge
    waits for the models and the transcript at the points where a live turn would be waiting
    for them, and the file's clock (samples fed) decides as the microphone's would.
    `context` is the line the person answers (the agent's, in `converse`), for the words.
    """

    def __init__(
        self,
        options: EndOfTurnOptions,
        *,
        model: Callable[[], SmartTurn | None],
        texts: TextSource,
        words: Callable[[], WordsModel | None] = lambda: None,
        context: str | None = None,
        rhythm: Rhythm | None = None,
        wait: bool = False,
    ) -> None:
        self.options = options
        self.rhythm = rhythm
        self._model = model
        self._words = words
        self._context = context
        self._texts = texts
        self._wait = wait
        self.pauses: list[PauseDecision] = []
        self._key: UtteranceKey | None = None
        self._done = False  # this pause has its wait
        self._audio: _Call | None = None
        self._words_call: _Call | None = None
        self._text_read = False

    @property
    def current(self) -> PauseDecision | None:
        return self.pauses[-1] if self.pauses else None

    def update(self, endpointer: PauseLike) -> None:
        """Look at the pause the endpointer is in (if any) and act on it."""
        if endpointer.done:
            return
        silence_frames = endpointer.silence_frames
        if silence_frames == 0 or endpointer.speech_start_frame is None:
            self._resumed()
            return
        key = (endpointer.speech_start_frame, endpointer.speech_end_frame or 0)
        silence_ms = silence_frames * 1000 / endpointer.sample_rate
        if key != self._key:
            if silence_ms < self.options.check_ms:
                return
            self._start(key, endpointer, silence_ms)
        decision = self.pauses[-1]
        decision.silence_ms = silence_ms
        if not self._done:
            self._judge(key, endpointer, decision, silence_ms)

    def _resumed(self) -> None:
        if self._key is not None and self.current is not None:
            self.current.resumed = True
            if self.rhythm is not None and self.current.silence_ms is not None:
                self.rhythm.resumed(self.current.silence_ms)
        self._key = None

    def _judge(
        self, key: UtteranceKey, endpointer: PauseLike, decision: PauseDecision, silence_ms: float
    ) -> None:
        audio = self._audio
        if audio is not None and not (self._wait or audio.done):
            return self._hold(endpointer)
        if audio is not None:
            audio.join()
            decision.audio_p, decision.model_ms = audio.value, audio.elapsed_ms
        if not self._text_read:
            requested, text = self._texts.text(key, wait=self._wait)
            if text is None and requested and not self._wait:
                return self._hold(endpointer)  # the words are on their way
            self._text_read = True
            if text is not None:
                last_word = text_verdict(text)
                decision.text, decision.text_verdict = text, last_word.value
                words = self._words()
                if words is not None and last_word is not Verdict.UNFINISHED:
                    context = self._context
                    self._words_call = _Call(
                        lambda: words.p_end(text, context), wait=self._wait, name="vocal-words"
                    )
        call = self._words_call
        if call is not None:
            if not (self._wait or call.done):
                return self._hold(endpointer)
            call.join()
            decision.words_p, decision.words_ms = call.value, call.elapsed_ms
        signals = Signals(
            audio_p=decision.audio_p,
            text=Verdict(decision.text_verdict) if decision.text_verdict else None,
            words_p=decision.words_p,
        )
        wait_ms, verdict = wait_for(signals, self.options, silence_ms=endpointer.min_silence_ms)
        if self.rhythm is not None and verdict is not Verdict.UNFINISHED:
            decision.rhythm_floor_ms = self.rhythm.floor_ms(self.options.max_pause_ms)
            wait_ms = max(wait_ms, decision.rhythm_floor_ms)
        self._done = True
        decision.verdict, decision.wait_ms, decision.decided_ms = verdict.value, wait_ms, silence_ms
        endpointer.hold_pause(wait_ms, finished=verdict is not Verdict.UNFINISHED)

    def _hold(self, endpointer: PauseLike) -> None:
        endpointer.hold_pause(self.options.max_pause_ms)

    def _start(self, key: tuple[int, int], endpointer: PauseLike, silence_ms: float) -> None:
        self._key, self._done, self._text_read = key, False, False
        self._audio, self._words_call = None, None
        self.pauses.append(PauseDecision(at_s=key[1] / endpointer.sample_rate, asked_ms=silence_ms))
        model = self._model()
        if model is None:  # loading, failed or off: the words alone
            return
        samples = endpointer.tail(SMART_TURN_WINDOW_S * SMART_TURN_SAMPLE_RATE)
        self._audio = _Call(
            lambda: model.probability(samples), wait=self._wait, name="vocal-turn-model"
        )

    def close(self) -> None:
        """Wait for a model call still running (never leave a thread in native code)."""
        for call in (self._audio, self._words_call):
            if call is not None:
                call.join()

    def summary(self) -> dict[str, object]:
        """What `--json` reports: every pause judged, in order, and the rhythm's floor."""
        summary: dict[str, object] = {"pauses": [p.to_dict() for p in self.pauses]}
        if self.rhythm is not None:
            summary["rhythm"] = {
                "kept_ms": round(self.rhythm.kept_ms, 1),
                "resumed_ms": [round(v, 1) for v in self.rhythm.resumed_ms],
            }
        return summary


__all__ = [
    "EndOfTurnOptions",
    "PauseDecision",
    "PauseJudge",
    "Signals",
    "Verdict",
    "confidence",
    "text_verdict",
    "wait_for",
]
