"""Text hygiene, sentence splitting and `--quotes` extraction (vocal.speaking.text)."""

from __future__ import annotations

import time

import pytest

from vocal.errors import UsageError
from vocal.speaking.text import (
    MAX_SENTENCE_CHARS,
    MAX_TEXT_CHARS,
    check_text_length,
    clean_line,
    clean_text,
    extract_quotes,
    speakable_lines,
    split_sentences,
)

REPLY = """# Summary 🎉

I fixed the **parser** bug in `load_settings`; the `x = y + 1` case works now.
See https://github.com/example/vocal/pull/12 for details.

- First item with [a link](http://example.com/page)
- Second item: e.g. the Dr. Smith case at 3.5 seconds.

```python
> not a quote
print("hello")
```

| name | value |
|------|-------|
| speed | 1.5 |

这是中文。
> Spoken line one
> wraps onto a second line.
>
> A second quoted paragraph.

> ```
> code inside a quote
> ```
> After the quoted code.
"""


def test_markdown_markup_is_not_read() -> None:
    spoken = clean_text(REPLY)
    for literal in ("**", "#", "`", "|", "---", "[", "](", "🎉", "print(", "not a quote", "x = y"):
        assert literal not in spoken, literal
    assert "I fixed the parser bug in load settings" in spoken
    assert "First item with a link" in spoken


def test_urls_become_their_host() -> None:
    assert clean_line("See https://github.com/example/vocal/pull/12 for details.") == (
        "See github.com for details."
    )
    assert clean_line("Docs at www.python.org/3/library.") == "Docs at python.org."


def test_code_spans_read_only_when_they_are_names() -> None:
    assert clean_line("Call `load_settings()` first.") == "Call load settings first."
    assert clean_line("Run `rm -rf build && make` now.") == "Run now."


def test_emoji_and_symbols_are_dropped() -> None:
    assert clean_line("Done ✅ 🚀 all green 👍🏽") == "Done all green"
    assert speakable_lines("🎉🎉🎉\n👍") == []


def test_lines_without_latin_letters_are_skipped_for_english_only_engines() -> None:
    text = "Hello there.\n这是中文。\nПривет мир.\nBack to English."
    assert speakable_lines(text) == ["Hello there.", "Back to English."]
    assert "这是中文。" in speakable_lines(text, english_only=False)
    assert "Привет мир." in speakable_lines(text, english_only=False)


def test_fenced_and_indented_code_blocks_are_skipped() -> None:
    text = "Before.\n\n~~~\nsecret code\n~~~\n\n    indented code\n\nAfter."
    assert speakable_lines(text) == ["Before.", "After."]


def test_hard_wrapped_paragraphs_stay_one_sentence() -> None:
    assert speakable_lines("This sentence is\nwrapped in the middle.\n- item one\n- item two") == [
        "This sentence is wrapped in the middle.", "item one", "item two",
    ]  # fmt: skip


def test_sentences_split_at_end_punctuation_but_not_abbreviations() -> None:
    text = "Dr. Smith arrived at 3.5 p.m. today. It rained! Did it stop? Yes, e.g. at noon."
    assert split_sentences(text) == [
        "Dr. Smith arrived at 3.5 p.m. today.", "It rained!", "Did it stop?", "Yes, e.g. at noon.",
    ]  # fmt: skip


def test_line_breaks_end_sentences() -> None:
    assert split_sentences("Heading\nA line without a period\nLast one.") == [
        "Heading", "A line without a period", "Last one.",
    ]  # fmt: skip


def test_long_sentences_are_cut_at_clauses_then_words() -> None:
    clauses = ", ".join(f"clause number {i} goes here" for i in range(40)) + "."
    pieces = split_sentences(clauses)
    assert len(pieces) > 1 and all(len(p) <= MAX_SENTENCE_CHARS for p in pieces)
    assert all(p.endswith((",", ".")) for p in pieces)
    assert " ".join(pieces).split() == clauses.split()
    unbroken = "x" * 1000
    assert all(len(p) <= MAX_SENTENCE_CHARS for p in split_sentences(unbroken))


def test_a_50_kb_paragraph_splits_fast_into_bounded_sentences() -> None:
    paragraph = ("the quick brown fox jumps over the lazy dog and keeps running " * 800)[:50_000]
    started = time.monotonic()
    sentences = split_sentences(clean_text(paragraph))
    assert time.monotonic() - started < 2.0
    assert all(0 < len(s) <= MAX_SENTENCE_CHARS for s in sentences)
    assert sum(len(s.split()) for s in sentences) == len(paragraph.split())


def test_quotes_are_blockquote_paragraphs_outside_code() -> None:
    assert extract_quotes(REPLY) == [
        "Spoken line one wraps onto a second line.",
        "A second quoted paragraph.",
        "After the quoted code.",
    ]


def test_quotes_nested_and_indented() -> None:
    text = "  > indented quote\n>> nested quote\nplain\n> last"
    assert extract_quotes(text) == ["indented quote nested quote", "last"]


def test_no_quotes_means_nothing_to_say() -> None:
    assert extract_quotes("Just prose.\n```\n> inside code\n```\n") == []
    assert extract_quotes("") == []


def test_unclosed_fence_hides_the_rest() -> None:
    assert extract_quotes("```\n> never spoken\n") == []
    assert speakable_lines("Said.\n```\nnot said\n") == ["Said."]


# -- limits (issue 17) ---------------------------------------------------------------------------
def test_text_longer_than_the_limit_is_a_usage_error() -> None:
    assert check_text_length("x" * MAX_TEXT_CHARS) == "x" * MAX_TEXT_CHARS
    with pytest.raises(UsageError, match=f"too long: {MAX_TEXT_CHARS + 1} characters"):
        check_text_length("x" * (MAX_TEXT_CHARS + 1))


@pytest.mark.parametrize("pattern", ["*a ", "_a ", "~~a ", "**a ", "`a ", "[a](", "<a "])
def test_a_line_of_unclosed_markup_as_long_as_the_limit_cleans_fast(pattern: str) -> None:
    # Emphasis looked for its closing marker to the end of the line from every opener: a
    # 20,000-character line of "*a " took seconds of CPU before a word was spoken.
    line = (pattern * (MAX_TEXT_CHARS // len(pattern) + 1))[:MAX_TEXT_CHARS]
    started = time.monotonic()
    sentences = split_sentences(clean_text(line))
    extract_quotes(line)
    assert time.monotonic() - started < 1.0
    assert all(len(s) <= MAX_SENTENCE_CHARS for s in sentences)


def test_emphasis_is_still_removed() -> None:
    line = "a **bold** and _light_ and ~~gone~~ word"
    assert clean_line(line) == "a bold and light and gone word"
    long_bold = "**" + "very " * 40 + "long**"
    assert clean_line(long_bold) == ("very " * 40 + "long").strip()
