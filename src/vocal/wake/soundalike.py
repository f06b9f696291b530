"""Sound-alike matching: is a wake phrase in what Whisper wrote, and what came after it.

Whisper writes what it hears as words it knows: "hey Jarvis" may come back "Hey, Jarvis!",
"hi jarvis" or "they jarvis"; a phrase the person chose ("okay vocal") as "OK, focal". So the
phrase is matched by sound, not by spelling:

- `words`: lower case, apostrophes dropped, anything else that is not a letter or a digit
  separates words ("Hey, Jarvis!" -> hey jarvis);
- `sound_key`: one key per word that keeps its consonants by how they sound and drops the
  vowels after the first letter, which Whisper and accents change most: b/p, f/v/ph, d/t, s/z
  and soft c, hard c/k/q and hard g, j and soft g, sh/ch; a word that starts with a vowel starts
  with "A" ("jarvis" and "jarvas" are JRFS, "travis" TRFS, "okay" and "ok" AK);
- `find_phrase`: the phrase's keys joined are compared with the keys of every run of one word
  fewer to one word more than the phrase has, by edit distance; a run within
  `allowed_edits(key)` (one edit per five key letters) matches, and the closest run wins (the
  first of equals). The edits fall in the phrase's first word: the run's key must end with
  the keys of the words after it (the name after "hey") as they are. Whisper, given the
  phrase as its prompt, spells the name as given and slips on the short call word before it
  ("they computer", "a Jarvis"), while an edit in the name lets "he serves" or "hey service"
  pass for "hey jarvis" (benchmarks/RESULTS.md, "wake"). A phrase of one word may take its
  edits anywhere.

Hand-written rather than a phonetic library (Metaphone, jellyfish): a few dozen lines of
standard library that `vocal wake --help` may import, tuned to Whisper's slips.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: A word in a transcript: letters, digits and apostrophes (dropped in the word itself).
WORD = re.compile(r"[A-Za-z0-9']+")
#: Letters per allowed edit of the phrase's key: "hey jarvis" (HJRFS, 5) allows one slip
#: ("a jarvis"), "okay nabu" (AKNP, 4) none, "hey mycroft" (HMKRFT, 6) one.
KEY_LETTERS_PER_EDIT = 5

#: Spellings of one sound, tried before single letters (longest first where they overlap).
_GROUPS = (
    ("tch", "X"),
    ("sch", "SK"),
    ("ph", "F"),
    ("th", "0"),
    ("sh", "X"),
    ("ch", "X"),
    ("ck", "K"),
    ("gh", ""),
    ("dg", "J"),
    ("qu", "KW"),
)
#: Silent first letters ("knock", "write", "gnome", "psalm").
_SILENT_FIRST = ("kn", "wr", "gn", "ps")
#: Each consonant's class; vowels and h, w, y after the first letter are dropped.
_CLASSES = {
    "b": "P",
    "p": "P",
    "f": "F",
    "v": "F",
    "d": "T",
    "t": "T",
    "k": "K",
    "q": "K",
    "j": "J",
    "s": "S",
    "z": "S",
    "x": "KS",
    "l": "L",
    "r": "R",
    "m": "M",
    "n": "N",
}
_VOWELS = frozenset("aeiou")
_SOFTENING = frozenset("eiy")


def words(text: str) -> list[str]:
    """The words of `text`, lower case, apostrophes dropped."""
    return [w for m in WORD.finditer(text) if (w := m.group().lower().replace("'", ""))]


def _spans(text: str) -> list[tuple[str, int]]:
    """(word, the index in `text` just after it) for every word of `text`."""
    found = []
    for m in WORD.finditer(text):
        word = m.group().lower().replace("'", "")
        if word:
            found.append((word, m.end()))
    return found


def sound_key(word: str) -> str:
    """The key of one word by its sound (see the module docstring); digits stay as they are."""
    w = word.lower()
    if w[:2] in _SILENT_FIRST:
        w = w[1:]
    if not w:
        return ""
    key: list[str] = []
    first = w[0]
    if first in _VOWELS:
        key.append("A")
    elif first in "hwy":
        key.append(first.upper())
    i = 1 if first in _VOWELS or first in "hwy" else 0
    while i < len(w):
        for spelling, sound in _GROUPS:
            if w.startswith(spelling, i):
                key.append(sound)
                i += len(spelling)
                break
        else:
            letter, following = w[i], w[i + 1 : i + 2]
            if letter == "c":
                key.append("S" if following in _SOFTENING else "K")
            elif letter == "g":
                key.append("J" if following in _SOFTENING else "K")
            elif letter.isdigit():
                key.append(letter)
            else:
                key.append(_CLASSES.get(letter, ""))
            i += 1
    collapsed: list[str] = []
    for sound in "".join(key):
        if not collapsed or collapsed[-1] != sound:
            collapsed.append(sound)
    return "".join(collapsed)


def phrase_key(text: str) -> str:
    """The keys of all the words of `text`, joined."""
    return "".join(sound_key(w) for w in words(text))


def edit_distance(a: str, b: str) -> int:
    """Levenshtein distance: insertions, deletions and substitutions."""
    if len(a) < len(b):
        a, b = b, a
    previous = list(range(len(b) + 1))
    for i, ca in enumerate(a, 1):
        current = [i]
        for j, cb in enumerate(b, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (ca != cb)))
        previous = current
    return previous[-1]


def allowed_edits(key: str) -> int:
    """How many edits a run of words may be from a phrase with this key and still match."""
    return len(key) // KEY_LETTERS_PER_EDIT


@dataclass(frozen=True)
class PhraseMatch:
    """Where a phrase was found in a transcript: words `start` to `end` (exclusive), how far
    their key was from the phrase's, a score from 0 to 1 (1: the same key), and the index in
    the transcript's text just after the match."""

    start: int
    end: int
    distance: int
    score: float
    end_char: int


def find_phrase(text: str, phrase: str) -> PhraseMatch | None:
    """The run of words in `text` that sounds most like `phrase` (the first of equals), or
    None when none is within `allowed_edits` with the words after the phrase's first kept."""
    target = phrase_key(phrase)
    said = words(phrase)
    count = len(said)
    if not target or not count:
        return None
    name = "".join(sound_key(word) for word in said[1:])
    spans = _spans(text)
    keys = [sound_key(word) for word, _ in spans]
    limit = allowed_edits(target)
    best: PhraseMatch | None = None
    for start in range(len(spans)):
        for length in range(max(1, count - 1), count + 2):
            end = start + length
            if end > len(spans):
                break
            key = "".join(keys[start:end])
            if not key.endswith(name):
                continue
            distance = edit_distance(key, target)
            if distance > limit or (best is not None and distance >= best.distance):
                continue
            score = 1.0 - distance / len(target)
            best = PhraseMatch(start, end, distance, score, spans[end - 1][1])
    return best


def after_phrase(text: str, phrase: str) -> str | None:
    """What `text` says after `phrase` ("Hey Jarvis, run the tests." -> "run the tests."),
    "" when nothing is said after it, None when the phrase is not in it."""
    match = find_phrase(text, phrase)
    if match is None:
        return None
    return rest_of(text, match.end_char)


def rest_of(text: str, index: int) -> str:
    """`text` from `index`, without the punctuation and blanks that lead it; "" when no word
    is left."""
    rest = text[index:].lstrip(" \t\n,.;:!?-\u2014\u2026\"'")
    return rest.strip() if any(c.isalnum() for c in rest) else ""


__all__ = [
    "PhraseMatch",
    "after_phrase",
    "allowed_edits",
    "edit_distance",
    "find_phrase",
    "phrase_key",
    "rest_of",
    "sound_key",
    "words",
]
