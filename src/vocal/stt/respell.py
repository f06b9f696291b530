"""Hinted names spelled as written: "open parse config" becomes "open parse_config".

Whisper writes an identifier the way it is said ("parse config", "Ambient Floor", "echo levels
dB"); an agent given that text has to guess the name. Once the words are right, the spelling
is a matter of text: every hinted name (vocal.stt.hints) whose spoken words follow one another
in the transcript, up to case, separators and a short part said letter by letter ("d b"), is
written as spelled.

This changes nothing else in the transcript, where a prompt changes how Whisper decodes
everything (benchmarks/hints: the prompt raised the corpus WER of unrelated speech). A name
whose first or last word is a function word ("is_ready", "to_dict") is left alone: "the build
is ready" is ordinary speech far more often than a name.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from vocal.audio.wav import Audio
    from vocal.stt import SttEngine, Transcript

#: Words too common at a name's edge to rewrite there (see the module docstring).
FUNCTION_WORDS = frozenset(
    "a an the is are was were be been am do does did has have had can will would should may "
    "to of in on at by for from with as into onto and or but not no if so it its this that "
    "these those i you he she we they me my your our their all any some".split()
)
#: A part this short and all letters may be said letter by letter ("db" as "d b", "D.B.").
SPELLED_MAX_LETTERS = 3
#: The parts of a name: separators split it, and so does a capital after a lower-case letter
#: or a digit run (camelCase, HTTPServer, utf8).
_PARTS = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")


def spoken_parts(name: str) -> list[str]:
    """The words `name` is said as, lower case: "MAX_HINT_CHARS" -> ["max", "hint", "chars"],
    "AmbientFloor" -> ["ambient", "floor"]."""
    return [p.lower() for p in _PARTS.findall(name)]


def _part_pattern(part: str) -> str:
    if part.isalpha() and len(part) <= SPELLED_MAX_LETTERS and len(part) > 1:
        spelled = r"[\s.]*".join(re.escape(c) for c in part)
        return f"(?:{re.escape(part)}|{spelled})"
    return re.escape(part)


def name_pattern(name: str) -> re.Pattern[str] | None:
    """What `name` looks like in a transcript, said aloud (None: a name not rewritten: one
    word, or a function word at an edge)."""
    parts = spoken_parts(name)
    if len(parts) < 2 or parts[0] in FUNCTION_WORDS or parts[-1] in FUNCTION_WORDS:
        return None
    body = r"[\s_.\-]*".join(_part_pattern(p) for p in parts)
    return re.compile(rf"(?<![\w]){body}(?![\w])", re.IGNORECASE)


def respell(text: str, names: Iterable[str]) -> str:
    """`text` with every hinted name in `names` that it says aloud written as spelled; longer
    names first, so "room_level_db" wins over "room_level"."""
    for name in sorted(set(names), key=lambda n: (-len(spoken_parts(n)), n)):
        pattern = name_pattern(name)
        if pattern is not None:
            text = pattern.sub(name, text)
    return text


class RespellingStt:
    """An engine whose transcripts spell `names` as written (`respell`); everything else is
    the wrapped engine's."""

    def __init__(self, engine: SttEngine, names: Iterable[str]) -> None:
        self.engine = engine
        self.names = tuple(names)

    def transcribe(self, audio: Audio) -> Transcript:
        transcript = self.engine.transcribe(audio)
        return dataclasses.replace(transcript, text=respell(transcript.text, self.names))

    def __getattr__(self, attribute: str) -> Any:
        return getattr(self.engine, attribute)


__all__ = ["FUNCTION_WORDS", "RespellingStt", "name_pattern", "respell", "spoken_parts"]
