"""Backchannels: a listener's "yeah" over the reply pauses it for a moment, then it goes on.

People say "mm-hmm", "yeah", "okay" while they listen; they mean "go on", not "stop" (issue 19).
Telling "yeah" from "no" takes the words, and the words come later than a barge-in must act, so
a converse turn pauses the reply when the barge-in detector fires (the person hears it stop as
soon as before) and a `BackchannelJudge` listens on:

- speech still going `max_speech_ms` after its onset is an interruption: the reply stops and
  the turn listens, with everything said so far kept;
- speech that ends sooner is transcribed, and `is_backchannel` reads the words: only
  acknowledgements ("yeah", "okay", "mm-hmm", "got it", a hum however Whisper spells it) or
  nothing at all resume the reply; a stop word ("stop", "wait", "no", ...) or any other word
  stops it, so a short answer ("ten of clubs") is never taken for a backchannel and lost;
- near the end of a reply that ends with a question (`answer_within_ms` of it left) a short
  "yeah" is the answer, not a backchannel: the reply stops and the turn listens.

The reply waits paused for a verdict at most `max_pause_ms`; then it is an interruption.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from vocal.audio.chunks import Chunker

if TYPE_CHECKING:
    import numpy as np

    from vocal.duplex.bargein.detector import SpeechProbability
    from vocal.speaking.results import SentenceRecord

#: Words a listener says to mean "I follow, go on" (Whisper's spellings, lower case).
ACKNOWLEDGEMENTS = frozenset(
    "yeah yea yes yep yup ya okay ok k right alright sure cool nice great good fine gotcha "
    "mm mhm mmhmm hmm hm uh huh um ah oh aha uhhuh indeed exactly true thanks".split()
)
#: Phrases of acknowledgement, as words (checked before the single words).
ACKNOWLEDGEMENT_PHRASES = (
    ("all", "right"),
    ("got", "it"),
    ("i", "see"),
    ("thank", "you"),
    ("go", "on"),
    ("makes", "sense"),
    ("sounds", "good"),
    ("of", "course"),
    ("that", "makes", "sense"),
)
#: Words that mean the person wants the floor, however short. "top": Whisper's usual hearing
#: of a "stop" whose "s" the echo canceller's suppressor took (vocal.duplex.echo_free.onset).
STOP_WORDS = frozenset(
    "stop top wait no nope hold hang pause quiet enough cancel but actually sorry excuse "
    "what why how hey shut".split()
)

_HUM = re.compile(r"^(m+|h+m+|m+h+m+|u+h+|uh+huh+|mm+hmm+|hmm+)$")


class Verdict(Enum):
    """What the judge heard: speech too long for a backchannel, or speech that ended."""

    LONG = "long"
    ENDED = "ended"


@dataclass(frozen=True)
class BackchannelOptions:
    """When speech over a paused reply is a backchannel (see the module docstring)."""

    #: Speech going on this long after its onset is an interruption. An acknowledgement lasts
    #: 0.3-0.6 s (espeak-ng: "yeah" 0.28 s, "mm hmm" 0.58 s); the detector's onset may be up to
    #: ~0.2 s early (it counts the rising chunks).
    max_speech_ms: int = 1000
    #: Speech has ended after this long below `quiet_probability` (Silero lags the sound's end
    #: by ~0.1 s).
    end_silence_ms: int = 300
    quiet_probability: float = 0.35
    #: The longest the reply waits paused for a verdict.
    max_pause_ms: int = 3000
    #: With less reply than this left to play, and the reply ending with a question, what is
    #: said is the answer.
    answer_within_ms: int = 1500
    #: After the reply resumes, barge-in waits this long while the canceller finds the echo
    #: path again (the control socket's resume waits 2.5 s after pauses of seconds).
    resume_hold_ms: int = 1000
    #: Words that are not acknowledgements a backchannel may hold (0: none). 2 let espeak's
    #: "mm hmm" through when Whisper heard "and anthem", but short real answers over a reply
    #: (corpus card names, "ten of clubs") then came back empty in 3 of 6 turns at 0 dB, 1 of
    #: 6 with none allowed: a clipped "of clubs" is two such words.
    max_words: int = 0
    sample_rate: int = 16_000
    chunk_frames: int = 512

    def __post_init__(self) -> None:
        durations = (
            self.max_speech_ms,
            self.end_silence_ms,
            self.max_pause_ms,
            self.answer_within_ms,
            self.resume_hold_ms,
        )
        if min(durations) < 0:
            raise ValueError("durations must not be negative")
        if not 0.0 < self.quiet_probability < 1.0:
            raise ValueError("quiet_probability must be between 0 and 1")


def words_of(text: str) -> list[str]:
    """The lower-case words of a transcript, punctuation and hyphens gone ("Mm-hmm." -> mm hmm);
    numbers are words ("5 5." for "five five" once resumed a reply as a backchannel)."""
    return re.sub(r"[^a-z0-9' ]+", " ", text.lower().replace("-", " ")).replace("'", "").split()


def is_backchannel(text: str, *, max_words: int = BackchannelOptions.max_words) -> bool:
    """Whether a short utterance's transcript leaves the floor to the reply: no stop word, and
    no more than `max_words` words that are not acknowledgements or hums (nothing heard
    counts as a hum)."""
    words = words_of(text)
    if any(word in STOP_WORDS for word in words):
        return False
    rest, i = [], 0
    while i < len(words):
        phrase = next(
            (p for p in ACKNOWLEDGEMENT_PHRASES if tuple(words[i : i + len(p)]) == p), None
        )
        if phrase is not None:
            i += len(phrase)
            continue
        if words[i] not in ACKNOWLEDGEMENTS and not _HUM.match(words[i]):
            rest.append(words[i])
        i += 1
    return len(rest) <= max_words


class BackchannelJudge:
    """Follows the speech that made a barge-in fire, on the cleaned capture, until it is too
    long for a backchannel (`Verdict.LONG`, `max_speech_ms` after `counted_from_s`) or has
    ended (`Verdict.ENDED`; `speech_end_s` is where). Times are capture times, as the
    detector's (`BargeInDetector.delay_frames` already taken off)."""

    def __init__(
        self,
        speech_probability: SpeechProbability,
        onset_s: float,
        options: BackchannelOptions | None = None,
        *,
        counted_from_s: float | None = None,
    ) -> None:
        self.speech_probability = speech_probability
        self.onset_s = onset_s
        #: Where the speech's length is counted from (default: the onset). The detector's onset
        #: is traced back through every likely chunk before the deciding run, and residual echo
        #: there made a 0.3 s "uh huh" count as more than a second (2 runs in 20).
        self.counted_from_s = onset_s if counted_from_s is None else counted_from_s
        self.options = options or BackchannelOptions()
        #: End of the last chunk heard as speech (the onset until one is).
        self.speech_end_s = onset_s
        self.verdict: Verdict | None = None
        self._chunker = Chunker(self.options.chunk_frames, self.options.sample_rate)

    def feed(self, samples: np.ndarray, end_s: float) -> Verdict | None:
        """Take cleaned samples whose last one was captured at `end_s`; the verdict once
        there is one."""
        if self.verdict is None:
            for chunk, chunk_end_s in self._chunker.feed(samples, end_s):
                self._step(chunk, chunk_end_s)
                if self.verdict is not None:
                    break  # the rest of `samples` is not looked at
        return self.verdict

    def _step(self, chunk: np.ndarray, chunk_end_s: float) -> None:
        o = self.options
        if float(self.speech_probability(chunk)) >= o.quiet_probability:
            self.speech_end_s = chunk_end_s
            if chunk_end_s - self.counted_from_s > o.max_speech_ms / 1000:
                self.verdict = Verdict.LONG
        elif chunk_end_s - self.speech_end_s >= o.end_silence_ms / 1000:
            self.verdict = Verdict.ENDED


def reply_left_s(
    records: list[SentenceRecord], played_frames: int, sample_rate: int, *, all_synthesized: bool
) -> float | None:
    """How much of the reply is still to play (s): the sentences queued or playing, past
    `played_frames` of the output; None while sentences are still being synthesized (more to
    come, how much unknown)."""
    if not all_synthesized:
        return None
    left = 0
    for record in records:
        if record.failed_check is not None or not record.frames:
            continue
        if record.start_frame is None:
            left += record.frames
        else:
            left += max(0, record.start_frame + record.frames - played_frames)
    return left / sample_rate


__all__ = [
    "ACKNOWLEDGEMENTS",
    "STOP_WORDS",
    "BackchannelJudge",
    "BackchannelOptions",
    "Verdict",
    "is_backchannel",
    "reply_left_s",
    "words_of",
]
