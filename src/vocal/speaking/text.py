"""Text hygiene before synthesis: what an agent writes is markdown, not a script to read aloud.

`speakable_lines` turns a reply into plain lines a speech engine can read: markdown markup,
code blocks and spans, URLs, HTML tags and emoji are removed or replaced by what a person would
say, and a line with no Latin letter is dropped for English-only engines (they read it as noise).
`split_sentences` cuts text into the units the pipeline synthesizes one at a time (the next is
synthesized while the current one plays), never longer than `MAX_SENTENCE_CHARS`.
`extract_quotes` is `--quotes`: only markdown blockquotes, one utterance per quoted paragraph,
with fenced code blocks ignored (the "spoken channel" of an agent's reply).
`check_text_length` holds a text to `MAX_TEXT_CHARS` before any of this runs (issue 17).

Standard library only: this module is imported before any engine loads.
"""

from __future__ import annotations

import re
import unicodedata

from vocal.errors import UsageError

#: A sentence longer than this is cut at a clause, then at a word: engines have input limits
#: (hibari splits at 400 phonemes, OpenAI takes 4096 characters) and a long first sentence
#: delays the first audio.
MAX_SENTENCE_CHARS = 300

#: The longest text `speak` and `converse` take, in characters. An agent's spoken reply is a few
#: hundred characters and a long README section a few thousand; 20,000 is ~23 minutes of speech.
#: Memory grows with the text: 250 KB made a 668 MB WAV at 5.3 GB peak (issue 17), while 20,000
#: characters to a file measured a 66 MB WAV at 0.56 GB peak (hibari; espeak-ng 0.44 GB).
MAX_TEXT_CHARS = 20_000
#: The most bytes read from stdin for a text: UTF-8 spends at most 4 bytes a character (+3 for a
#: byte-order mark). Reading stops there, so an endless stream (`< /dev/zero`) ends.
MAX_TEXT_BYTES = 4 * MAX_TEXT_CHARS + 3

_FENCE = re.compile(r"^\s{0,3}(`{3,}|~{3,})")
_QUOTE = re.compile(r"^\s{0,3}>")
_URL = re.compile(r"\b(?:https?|ftp)://[^\s<>()\[\]]+|\bwww\.[^\s<>()\[\]]+", re.IGNORECASE)
_IMAGE = re.compile(r"!\[([^\]]*)\]\([^)]*\)")
_LINK = re.compile(r"\[([^\]]+)\]\([^)]*\)")
_REF_LINK = re.compile(r"\[([^\]]+)\]\[[^\]]*\]")
_LINK_DEF = re.compile(r"^\s{0,3}\[[^\]]+\]:\s+\S+.*$")
_HTML_TAG = re.compile(r"</?[A-Za-z][^<>]*>")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_HEADING = re.compile(r"^\s{0,3}#{1,6}\s+(.*?)(?:\s+#+)?\s*$")
_SETEXT = re.compile(r"^\s{0,3}(=+|-+)\s*$")
_RULE = re.compile(r"^\s{0,3}([-*_])(\s*\1){2,}\s*$")
_BULLET = re.compile(r"^\s*(?:[-*+]|\d{1,3}[.)])\s+(?:\[[ xX]\]\s+)?")
_TABLE_SEP = re.compile(r"^\s*\|?\s*:?-{2,}:?\s*(\|\s*:?-{2,}:?\s*)*\|?\s*$")
# Emphasis spans at most MAX_SENTENCE_CHARS: real ones are a few words. Unbounded, the search
# for a closing marker ran to the end of the line from every opener, and a 20,000-character
# line of "*a " took ~10 s (issue 17). Markers left unmatched go as stray markup below.
_EMPHASIS = re.compile(rf"(\*{{1,3}}|_{{1,3}}|~~)(?=\S)(.{{1,{MAX_SENTENCE_CHARS}}}?)(?<=\S)\1")
_LATIN = re.compile(r"[A-Za-z\u00C0-\u024F]")
_SPACES = re.compile(r"[ \t\u00A0]+")
_SENTENCE_END = re.compile(r"[.!?…]+[\"'”’)\]]*(?=\s+|$)")
_CLAUSE_END = re.compile(r"[,;:—–](?=\s)")
# Words ending in a period that do not end a sentence.
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof sr jr st vs etc e.g i.e cf approx no fig eq vol ca inc ltd co dept est "
    "jan feb mar apr jun jul aug sep sept oct nov dec".split()
)


def check_text_length(text: str, *, name: str = "the text") -> str:
    """`text` itself, or a `UsageError` (exit 2) when it is longer than `MAX_TEXT_CHARS`."""
    if len(text) > MAX_TEXT_CHARS:
        raise UsageError(
            f"{name} is too long: {len(text)} characters, the limit is {MAX_TEXT_CHARS}",
            hint="say it in parts",
        )
    return text


def is_emoji(char: str) -> bool:
    """Emoji, pictographs and their joiners and modifiers: never read out."""
    code = ord(char)
    if code in (0x200D, 0xFE0F, 0xFE0E, 0x20E3):  # joiner, variation selectors, keycap
        return True
    if 0x1F000 <= code <= 0x1FAFF or 0x2600 <= code <= 0x27BF or 0x1F1E6 <= code <= 0x1F1FF:
        return True
    if 0x2B00 <= code <= 0x2BFF or 0xE0020 <= code <= 0xE007F:  # arrows/stars, tag characters
        return True
    return unicodedata.category(char) == "So"


def has_latin(text: str) -> bool:
    """True if `text` holds a Latin letter (what an English-only engine can read)."""
    return _LATIN.search(text) is not None


def _url_words(match: re.Match[str]) -> str:
    """A URL becomes its host name ("docs.python.org"): what a person would say."""
    url = match.group(0).rstrip(".,;:!?")
    tail = match.group(0)[len(url) :]
    host = re.sub(r"^(?:https?|ftp)://", "", url, flags=re.IGNORECASE).split("/")[0]
    host = host.split("@")[-1].split(":")[0]
    if host.lower().startswith("www."):
        host = host[4:]
    return (host or "a link") + tail


def _code_words(match: re.Match[str]) -> str:
    """A code span is read only when it is a short name (`load_settings` -> "load settings");
    anything with operators or punctuation is dropped, since read literally it is noise."""
    code = match.group(2).strip()
    if re.fullmatch(r"[A-Za-z][A-Za-z0-9]*(?:[_.\-/][A-Za-z0-9]+){0,3}(?:\(\))?", code):
        return re.sub(r"[_.\-/]|\(\)", " ", code).strip()
    return ""


def clean_line(line: str) -> str:
    """One line of markdown as plain speakable text (may be empty)."""
    if _RULE.match(line) or _LINK_DEF.match(line) or _TABLE_SEP.match(line):
        return ""
    heading = _HEADING.match(line)
    if heading:
        line = heading.group(1)
    line = _QUOTE.sub("", line)
    while _QUOTE.match(line):  # nested quotes "> > text"
        line = _QUOTE.sub("", line)
    line = _BULLET.sub("", line)
    line = _CODE_SPAN.sub(_code_words, line)
    line = _IMAGE.sub(lambda m: m.group(1), line)
    line = _LINK.sub(lambda m: m.group(1), line)
    line = _REF_LINK.sub(lambda m: m.group(1), line)
    line = _URL.sub(_url_words, line)
    line = _HTML_TAG.sub(" ", line)
    for _ in range(3):  # nested emphasis: ***bold italic***, **_both_**
        line = _EMPHASIS.sub(lambda m: m.group(2), line)
    line = "".join(" " if is_emoji(c) else c for c in line)
    line = "".join(c for c in line if c in "\t " or unicodedata.category(c)[0] != "C")
    if line.count("|") >= 2:  # a table row: cells become a list
        line = ", ".join(
            cell.strip() for cell in line.strip().strip("|").split("|") if cell.strip()
        )
    line = line.replace("\\", " ")
    line = re.sub(r"(?<!\w)[*_#>`~]+|[*_#`~]+(?!\w)", " ", line)  # stray markup characters
    return _SPACES.sub(" ", line).strip()


def speakable_lines(text: str, *, english_only: bool = True) -> list[str]:
    """The lines of `text` worth speaking, cleaned; fenced code blocks and setext underlines go.

    `english_only` drops lines with no Latin letter, which an English engine reads as noise
    ("Chinese letter, Chinese letter, ...") or as nothing.
    """
    lines: list[str] = []
    fence: str | None = None
    for raw in text.splitlines():
        marker = _FENCE.match(_QUOTE.sub("", raw) if _QUOTE.match(raw) else raw)
        if marker:
            token = marker.group(1)
            if fence is None:
                fence = token[0] * 3
            elif token.startswith(fence):
                fence = None
            continue
        if fence is not None or _SETEXT.match(raw) and lines:
            continue
        if (
            raw.startswith(("    ", "\t"))
            and not _BULLET.match(raw)
            and (not lines or not lines[-1])
        ):
            continue  # an indented code block (after a blank line)
        line = clean_line(raw)
        if line and english_only and not has_latin(line):
            continue
        if line and not re.search(r"\w", line):
            continue  # punctuation only
        previous = lines[-1] if lines else ""
        continues = (
            previous
            and line[:1].islower()
            and previous[-1] not in ".!?:;"
            and not _BULLET.match(raw)
            and not _HEADING.match(raw)
            and "|" not in raw
        )
        if continues:  # a hard-wrapped paragraph: one sentence, not two
            lines[-1] = f"{previous} {line}"
        else:
            lines.append(line)
    return [line for line in lines if line]


def clean_text(text: str, *, english_only: bool = True) -> str:
    """`speakable_lines` joined by newlines: each line stays a sentence boundary."""
    return "\n".join(speakable_lines(text, english_only=english_only))


def _ends_sentence(text: str, end: int) -> bool:
    """False for the period of an abbreviation, an initial, or a number ("3.5" never gets here)."""
    stop = end
    while stop > 0 and text[stop - 1] in "\"'”’)]":
        stop -= 1
    if text[stop - 1] != ".":
        return True
    start = stop - 1
    while start > 0 and not text[start - 1].isspace():
        start -= 1
    word = text[start : stop - 1].lstrip("(\"'“‘").lower()
    if word in _ABBREVIATIONS or (len(word) == 1 and word.isalpha()):
        return False
    rest = text[end:].lstrip()
    return not rest or not rest[0].islower()


def _cut_long(sentence: str, limit: int) -> list[str]:
    """Cut a sentence longer than `limit` at clause punctuation, else at the last space."""
    pieces: list[str] = []
    while len(sentence) > limit:
        window = sentence[: limit + 1]
        cuts = [m.end() for m in _CLAUSE_END.finditer(window)]
        cut = cuts[-1] if cuts and cuts[-1] > limit // 3 else window.rfind(" ")
        if cut <= 0:
            cut = limit  # one enormous "word": cut it anywhere
        pieces.append(sentence[:cut].strip())
        sentence = sentence[cut:].strip()
    if sentence:
        pieces.append(sentence)
    return [p for p in pieces if p]


def split_sentences(text: str, *, max_chars: int = MAX_SENTENCE_CHARS) -> list[str]:
    """Sentences of `text`: a line break always ends one; so does end punctuation followed by
    space (not after "e.g.", "Dr.", an initial, or before a lowercase word). None is longer
    than `max_chars`."""
    sentences: list[str] = []
    for line in text.splitlines():
        line = _SPACES.sub(" ", line).strip()
        if not line:
            continue
        cut = 0
        for match in _SENTENCE_END.finditer(line):
            if match.end() < len(line) and _ends_sentence(line, match.end()):
                sentences.extend(_cut_long(line[cut : match.end()].strip(), max_chars))
                cut = match.end()
        sentences.extend(_cut_long(line[cut:].strip(), max_chars))
    return [s for s in sentences if s]


def extract_quotes(text: str) -> list[str]:
    """`--quotes`: the markdown blockquotes of `text`, one string per quoted paragraph.

    Consecutive `>` lines are one paragraph (a wrapped sentence stays whole); a bare `>` line or
    any other line ends it. Lines inside fenced code blocks are never quotes, even when they
    start with `>` (a shell prompt, a diff).
    """
    quotes: list[str] = []
    current: list[str] = []
    fence: str | None = None
    quoted_fence: str | None = None  # a code block inside a blockquote

    def close() -> None:
        if current:
            quotes.append(" ".join(current))
            current.clear()

    for raw in text.splitlines():
        marker = _FENCE.match(raw)
        if marker:
            token = marker.group(1)
            if fence is None:
                fence = token[0] * 3
            elif token.startswith(fence):
                fence = None
            close()
            continue
        if fence is not None or not _QUOTE.match(raw):
            close()
            quoted_fence = None
            continue
        body = _QUOTE.sub("", raw, count=1)
        while _QUOTE.match(body):
            body = _QUOTE.sub("", body, count=1)
        marker = _FENCE.match(body)
        if marker:
            token = marker.group(1)
            if quoted_fence is None:
                quoted_fence = token[0] * 3
            elif token.startswith(quoted_fence):
                quoted_fence = None
            close()
            continue
        if quoted_fence is not None or not body.strip():
            close()
            continue
        current.append(body.strip())
    close()
    return [q for q in quotes if q]


# -- text to utterances -------------------------------------------------------------------------
def utterances_of(text: str, *, quotes: bool = False) -> list[str]:
    """The utterances to speak: the whole text as one, or (`quotes`) each blockquote paragraph."""
    if quotes:
        return [q for q in extract_quotes(text) if q.strip()]
    return [text] if text.strip() else []


def sentences_of(utterance: str, *, english_only: bool) -> list[str]:
    """Clean `utterance` (markdown, code, URLs, emoji) and split it into sentences."""
    return split_sentences(clean_text(utterance, english_only=english_only))


#: A first sentence at least this long is spoken in two pieces when it has a clause break:
#: synthesis time grows with length (hibari: 21 ms for "Hello there," against 55 ms for
#: "Hello there, I have finished the refactoring."), and the first piece is what the listener
#: waits for. The comma's pause is in the speech anyway (vocal.speaking.trim then makes it half
#: a sentence pause). A one-word head counts ("Okay, I will run the tests now and tell you what
#: fails.": 11 ms for "Okay," against 31 ms for the sentence, warm; more in a fresh worker).
FIRST_PIECE_MIN_CHARS = 40


def split_first_clause(sentence: str) -> list[str]:
    """`sentence` as [head, rest] at its first clause break (within the first 60 %), or
    [sentence] when it is short or has no such break."""
    if len(sentence) < FIRST_PIECE_MIN_CHARS:
        return [sentence]
    for index, char in enumerate(sentence[: int(len(sentence) * 0.6)]):
        if char in ",;:" and index + 1 < len(sentence) and sentence[index + 1] == " ":
            head, rest = sentence[: index + 1].strip(), sentence[index + 1 :].strip()
            if head.split() and rest:
                return [head, rest]
    return [sentence]


def has_speakable_text(text: str, *, quotes: bool = False) -> bool:
    """True if any utterance of `text` has a line worth speaking (in any script)."""
    return any(speakable_lines(u, english_only=False) for u in utterances_of(text, quotes=quotes))


__all__ = [
    "MAX_SENTENCE_CHARS",
    "MAX_TEXT_BYTES",
    "MAX_TEXT_CHARS",
    "check_text_length",
    "clean_line",
    "clean_text",
    "FIRST_PIECE_MIN_CHARS",
    "extract_quotes",
    "has_latin",
    "has_speakable_text",
    "is_emoji",
    "sentences_of",
    "speakable_lines",
    "split_first_clause",
    "split_sentences",
    "utterances_of",
]
