"""Phrases said twice that the person did not say twice: Whisper's looping decode (issue 36).

Whisper, tiny.en most of all, sometimes decodes a short utterance and then decodes it again:
"Run the tests. Run the tests." for "run the tests" and a pause, "7 of clubs 7 of clubs". Such
a transcript passes the compression-ratio check that catches long loops (two copies of a short
clause do not compress past 2.4). `find_repeat` finds it, the engine decodes again, and `mend`
chooses between that retry and `remove_repeats` (one copy of each repeated phrase).

What counts: the same run of two or more words (compared lowercased, punctuation stripped),
said two or more times back to back. What does not:
- one word said again ("no no", "yes yes", "very very", "bye bye", "go go go"), and a run
  that is nothing but one word ("no no no no" is not "no no" twice): people say these;
- a two-word interjection said two or three times ("thank you, thank you", "hold on, hold
  on", `SAID_TWICE`): people say those too, and a decode that loops repeats a clause, not an
  interjection (every loop found on the corpus and the spoken commands ran three words or
  more; benchmarks/decode lists them);
- any other two-word phrase that the retry says twice again ("a pointer to pointer to char"):
  found, and retried, but not cut (`mend`).

A loop that runs on is bounded by `token_cap`: no engine decodes more tokens than the audio's
length allows. Pure logic: no model here.
"""

from __future__ import annotations

from dataclasses import dataclass

#: Two-word phrases that people repeat back to back themselves.
SAID_TWICE = frozenset(
    {
        ("thank", "you"),
        ("come", "on"),
        ("hold", "on"),
        ("hang", "on"),
        ("go", "on"),
        ("lets", "go"),
        ("oh", "no"),
        ("oh", "my"),
        ("oh", "god"),
        ("my", "god"),
        ("bye", "now"),
        ("well", "done"),
        ("hurry", "up"),
        ("no", "wait"),
        ("all", "right"),
        ("oh", "dear"),
        ("not", "yet"),
        ("one", "two"),  # a microphone check
        ("1", "2"),
        ("left", "right"),
    }
)
#: ... and how many times in a row they are left as they are.
SAID_TWICE_MAX = 3
#: The shortest repeated phrase cut out when a retry says it twice again (`mend`).
REMOVED_MIN_WORDS = 3
#: Whisper decodes one window of this many seconds at a time.
WINDOW_S = 30.0


def token_cap(duration_s: float) -> int:
    """The most tokens a decode of `duration_s` of audio may take: speech runs at 2-4 tokens
    a second, so a decode that reaches 16 + 8 a second is a loop. A 30 s window's worth (256)
    at most, since a decode sees one window; an engine lowers it to fit its prompt."""
    return 16 + round(8 * min(duration_s, WINDOW_S))


def normalize_word(token: str) -> str:
    """A token as compared: lowercase, letters and digits only ("Request." -> "request")."""
    return "".join(c for c in token.lower() if c.isalnum())


@dataclass(frozen=True)
class Repeat:
    """A run of `length` words said `count` times back to back, from word `start` (indices
    into the transcript's words, punctuation-only tokens left out)."""

    start: int
    length: int
    count: int
    phrase: str  # the first copy, as written

    @property
    def end(self) -> int:
        """The index after the last copy's last word."""
        return self.start + self.length * self.count


def _words(text: str) -> tuple[list[str], list[str]]:
    """(tokens as written, their normalised words), tokens with no letter or digit joined to
    the token before them (a lone "-" or "...")."""
    tokens: list[str] = []
    for token in text.split():
        if normalize_word(token) or not tokens:
            tokens.append(token)
        else:
            tokens[-1] += " " + token
    return tokens, [normalize_word(t) for t in tokens]


def _said(unit: list[str], count: int) -> bool:
    """Whether `unit` said `count` times is something people say (module docstring)."""
    if len(set(unit)) == 1:
        return True
    return tuple(unit) in SAID_TWICE and count <= SAID_TWICE_MAX


def find_repeats(text: str, min_words: int = 2) -> list[Repeat]:
    """Every run of >= `min_words` words said again right after itself, left to right, not
    overlapping; at each place the shortest unit that repeats (so "a b a b a b" is "a b"
    three times)."""
    tokens, words = _words(text)
    found: list[Repeat] = []
    i = 0
    while i < len(words):
        step = 1
        for length in range(min_words, (len(words) - i) // 2 + 1):
            unit = words[i : i + length]
            count = 1
            while words[i + count * length : i + (count + 1) * length] == unit:
                count += 1
            if count > 1:
                repeat = Repeat(i, length, count, " ".join(tokens[i : i + length]))
                if not _said(unit, count):
                    found.append(repeat)
                # Past the whole run, said or not: "come on come on" holds no "on come" twice.
                step = repeat.end - i
                break
        i += step
    return found


def find_repeat(text: str) -> Repeat | None:
    """The first phrase said twice in `text` that a person likely did not say twice, or None."""
    repeats = find_repeats(text)
    return repeats[0] if repeats else None


def remove_repeats(text: str, min_words: int = 2) -> str:
    """`text` with each repeated phrase of `min_words` or more (`find_repeats`) said once: the
    first copy's words, ending with the last copy's punctuation ("Stop the server. Stop the
    server." -> "Stop the server.")."""
    repeats = find_repeats(text, min_words)
    if not repeats:
        return text
    tokens, _ = _words(text)
    kept: list[str] = []
    i = 0
    for repeat in repeats:
        kept += tokens[i : repeat.start + repeat.length]
        last = tokens[repeat.end - 1]
        tail = last[len(last.rstrip(".,;:!?")) :]  # the last copy's closing punctuation
        kept[-1] = kept[-1].rstrip(".,;:!?") + tail
        i = repeat.end
    kept += tokens[i:]
    return " ".join(kept)


def mend(heard: str, retry: str | None = None) -> tuple[str, str | None]:
    """What to keep of a decode `heard` that repeated a phrase, given its `retry` (None: none
    was made, or it failed a check): (retry, "retried") when the retry says it once; else the
    retry (or `heard`) with each repeated phrase of `REMOVED_MIN_WORDS` or more cut to one
    copy, (text, "removed"); else, when only two-word phrases repeat there, (heard, None).

    A two-word phrase that a decode with the repetition penalty still says twice was most
    likely said twice ("a pointer to pointer to char", "two seconds, two seconds": both came
    back whole from the retry on espeak-ng's speech); every loop found ran three words or
    more."""
    if retry is not None and find_repeat(retry) is None:
        return retry, "retried"
    base = retry if retry is not None else heard
    if not find_repeats(base, min_words=REMOVED_MIN_WORDS):
        return heard, None
    return remove_repeats(base, min_words=REMOVED_MIN_WORDS), "removed"
