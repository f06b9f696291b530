"""Property-based tests of vocal's parsers (issue 17): thousands of generated inputs each.

In-process: the WAV parser (`read_wav`, `parse_wav`) on arbitrary bytes and on generated
headers, the text functions of `vocal.speaking.text`, `speak.text_argument` and the settings
converter `_convert`. Each either returns a well-formed value or raises the error it documents (a
`UsageError`, exit 2); nothing else ever escapes. A handful of the same go through the CLI: one
`vocal: error:` line, no traceback, exit 2.
"""

from __future__ import annotations

import dataclasses
import io
import math
import struct
import sys
from pathlib import Path
from unittest import mock

import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from harness.runner import run_vocal
from vocal.audio.wav import (
    MAX_SAMPLE_RATE,
    MAX_WAV_DURATION_S,
    MIN_SAMPLE_RATE,
    Audio,
    parse_wav,
    read_wav,
)
from vocal.config import SETTING_RANGES, Settings, _convert, env_name
from vocal.errors import EXIT_USAGE, AudioFormatError, UsageError
from vocal.speaking import speak
from vocal.speaking.text import (
    MAX_SENTENCE_CHARS,
    MAX_TEXT_CHARS,
    clean_line,
    clean_text,
    extract_quotes,
    has_latin,
    is_emoji,
    speakable_lines,
    split_sentences,
)

# No example database: the working tree is shared, and every run should explore afresh.
QUIET = {"deadline": None, "database": None, "suppress_health_check": list(HealthCheck)}
MANY = settings(max_examples=1000, **QUIET)
SOME = settings(max_examples=300, **QUIET)
THROUGH_THE_CLI = settings(max_examples=5, **QUIET)


# -- WAV -----------------------------------------------------------------------------------------
def check_audio(audio: Audio) -> None:
    """What every WAV vocal accepts looks like: rate and length in their limits, finite samples."""
    assert MIN_SAMPLE_RATE <= audio.sample_rate <= MAX_SAMPLE_RATE
    assert 1 <= audio.channels <= 64
    assert audio.duration_s <= MAX_WAV_DURATION_S
    assert audio.samples.dtype == np.float32
    assert np.all(np.isfinite(audio.samples))
    assert np.all(np.abs(audio.samples) <= 1.0)


def parse_or_refuse(data: bytes) -> Audio | None:
    """parse_wav's result, or None when it refused `data` with its documented error."""
    try:
        audio = parse_wav(data, name="gen.wav")
    except AudioFormatError as exc:
        assert str(exc).startswith("gen.wav: "), exc
        return None
    check_audio(audio)
    return audio


def chunk(chunk_id: bytes, body: bytes, declared: int | None = None) -> bytes:
    size = len(body) if declared is None else declared
    return chunk_id + struct.pack("<I", size) + body + (b"\0" if len(body) & 1 else b"")


FORMAT_TAGS = st.one_of(st.sampled_from([1, 3, 0xFFFE]), st.integers(0, 0xFFFF))
EDGE_RATES = [MIN_SAMPLE_RATE - 1, MIN_SAMPLE_RATE, MAX_SAMPLE_RATE, MAX_SAMPLE_RATE + 1]
SAMPLE_RATES = st.one_of(
    st.sampled_from([1, 8000, 16000, 22050, 44100, 48000, 0xFFFFFFFF, *EDGE_RATES]),
    st.integers(0, 0xFFFFFFFF),
)
DATA_SIZES = st.one_of(
    st.sampled_from([0, 0x7FFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF - 36]), st.integers(0, 0xFFFFFFFF)
)


@st.composite
def fmt_bodies(draw: st.DrawFn) -> bytes:
    """An fmt chunk's body: plausible fields, sometimes extensible, sometimes cut or padded."""
    format_tag = draw(FORMAT_TAGS)
    channels = draw(st.one_of(st.integers(0, 3), st.integers(0, 0xFFFF)))
    sample_rate = draw(SAMPLE_RATES)
    bits = draw(st.one_of(st.sampled_from([8, 16, 24, 32, 64]), st.integers(0, 0xFFFF)))
    block = draw(st.integers(0, 0xFFFF))
    body = struct.pack("<HHIIHH", format_tag, channels, sample_rate, sample_rate * block % 2**32,
                       block, bits)  # fmt: skip
    if format_tag == 0xFFFE or draw(st.booleans()):
        sub_format = draw(st.one_of(st.sampled_from([1, 3]), st.integers(0, 0xFFFF)))
        body += struct.pack("<HHI", 22, bits, 0) + struct.pack("<H", sub_format) + bytes(14)
    cut = draw(st.integers(0, len(body)))
    return body[: cut if draw(st.booleans()) and cut < len(body) else len(body)]


@st.composite
def wav_files(draw: st.DrawFn) -> bytes:
    """RIFF/WAVE files built from generated chunks: fmt, data, others, in any order, with true
    or lying sizes."""
    chunks = []
    for _ in range(draw(st.integers(0, 4))):
        kind = draw(st.sampled_from(["fmt", "data", "other"]))
        if kind == "fmt":
            body = draw(fmt_bodies())
            declared = draw(st.one_of(st.none(), st.integers(0, 0xFFFFFFFF)))
            chunks.append(chunk(b"fmt ", body, declared))
        elif kind == "data":
            body = draw(st.binary(max_size=600))
            chunks.append(chunk(b"data", body, draw(st.one_of(st.none(), DATA_SIZES))))
        else:
            chunk_id = draw(st.sampled_from([b"LIST", b"fact", b"junk", b"\0\0\0\0"]))
            body = draw(st.binary(max_size=40))
            chunks.append(chunk(chunk_id, body, draw(st.one_of(st.none(), DATA_SIZES))))
    magic = draw(st.sampled_from([b"RIFF", b"RIFF", b"RIFF", b"RIFX", b"RIFS"]))
    riff_size = draw(st.integers(0, 0xFFFFFFFF))
    data = magic + struct.pack("<I", riff_size) + b"WAVE" + b"".join(chunks)
    return data[: draw(st.integers(0, len(data)))] if draw(st.booleans()) else data


@MANY
@given(st.binary(max_size=4096))
def test_parse_wav_on_arbitrary_bytes(data: bytes) -> None:
    parse_or_refuse(data)


@MANY
@given(st.binary(max_size=512))
def test_parse_wav_on_bytes_behind_a_riff_header(tail: bytes) -> None:
    parse_or_refuse(b"RIFF" + struct.pack("<I", len(tail) + 4) + b"WAVE" + tail)


@MANY
@given(wav_files())
def test_parse_wav_on_generated_headers(data: bytes) -> None:
    parse_or_refuse(data)


@SOME
@given(fmt_bodies(), st.binary(min_size=1, max_size=400))
def test_a_well_formed_header_decodes_or_is_refused_for_a_stated_reason(
    fmt: bytes, payload: bytes
) -> None:
    data = b"RIFF" + struct.pack("<I", 0) + b"WAVE" + chunk(b"fmt ", fmt) + chunk(b"data", payload)
    audio = parse_or_refuse(data)
    if audio is not None:  # what was accepted is what the header says
        (channels, sample_rate) = struct.unpack_from("<HI", fmt, 2)
        assert (audio.channels, audio.sample_rate) == (channels, sample_rate)


@SOME
@given(wav_files(), st.booleans())
def test_read_wav_on_streams_and_files(data: bytes, allow_empty: bool) -> None:
    try:
        audio = read_wav(io.BytesIO(data), allow_empty=allow_empty)
    except AudioFormatError:
        return
    check_audio(audio)
    assert allow_empty or audio.frames > 0


def test_read_wav_on_generated_files(tmp_path: Path) -> None:
    # Files on disk take the path reader (stat, bounded read); run it on a sample of the same.
    path = tmp_path / "gen.wav"

    @SOME
    @given(wav_files())
    def check(data: bytes) -> None:
        path.write_bytes(data)
        try:
            check_audio(read_wav(path))
        except UsageError:
            pass

    check()


# -- text ----------------------------------------------------------------------------------------
#: Pieces of markdown, URLs and emoji, so generated text reaches every pattern in
#: vocal.speaking.text.
MARKDOWN_TOKENS = [
    "*", "**", "_", "__", "~~", "`", "```", "~~~", "#", "## ", ">", "> ", "- ", "1. ", "|", "---",
    "===", "[", "]", "(", ")", "![", "](", "http://", "https://x.org/a", "www.", "<b>", "</b>",
    "\n", "\n\n", " ", "    ", "\t", ".", "!", "?", "…", ",", ";", ":", "—", "\"", "'", "”",
    "e.g.", "Dr.", "3.5", "A.", "word", "Word", "x", "é", "中文", "🎉", "👍🏽", "\u200d", "\ufe0f",
    "\x00", "\x1b", "\u2028", "\r", "\r\n",
]  # fmt: skip
MARKDOWN = st.lists(st.sampled_from(MARKDOWN_TOKENS), max_size=60).map("".join)
ANY_TEXT = st.one_of(st.text(max_size=300), MARKDOWN)


@MANY
@given(ANY_TEXT)
def test_clean_line_returns_plain_text(line: str) -> None:
    cleaned = clean_line(line)
    assert isinstance(cleaned, str) and cleaned == cleaned.strip()


@MANY
@given(ANY_TEXT, st.booleans())
def test_speakable_lines_are_clean_and_non_empty(text: str, english_only: bool) -> None:
    lines = speakable_lines(text, english_only=english_only)
    assert all(isinstance(line, str) and line.strip() for line in lines)
    if english_only:
        assert all(has_latin(line) for line in lines)
    assert clean_text(text, english_only=english_only) == "\n".join(lines)


@MANY
@given(ANY_TEXT, st.integers(1, 400))
def test_split_sentences_are_bounded_and_non_empty(text: str, max_chars: int) -> None:
    sentences = split_sentences(text, max_chars=max_chars)
    assert all(sentence and len(sentence) <= max_chars for sentence in sentences)


@MANY
@given(ANY_TEXT)
def test_split_sentences_of_spoken_text_never_exceed_the_default(text: str) -> None:
    assert all(len(s) <= MAX_SENTENCE_CHARS for s in split_sentences(clean_text(text)))


@MANY
@given(ANY_TEXT)
def test_extract_quotes_are_non_empty(text: str) -> None:
    assert all(isinstance(quote, str) and quote for quote in extract_quotes(text))


@MANY
@given(st.characters())
def test_character_classes_are_total(char: str) -> None:
    assert isinstance(is_emoji(char), bool) and isinstance(has_latin(char), bool)


class FakeStdin:
    """stdin as `text_argument` sees it: a pipe (not a terminal) holding `data`."""

    def __init__(self, data: bytes, *, tty: bool = False) -> None:
        self.buffer = io.BytesIO(data)
        self.tty = tty

    def isatty(self) -> bool:
        return self.tty


def near_the_limit(pair: tuple[int, str]) -> str:
    """`pattern` repeated to exactly `length` characters (Hypothesis draws no text that long)."""
    length, pattern = pair
    return (pattern * (length // len(pattern) + 1))[:length]


LONG_TEXT = st.tuples(
    st.integers(MAX_TEXT_CHARS - 2, MAX_TEXT_CHARS + 2), st.text(min_size=1, max_size=8)
).map(near_the_limit)


@MANY
@given(st.one_of(ANY_TEXT, LONG_TEXT))
def test_text_argument_takes_text_or_refuses_it(text: str) -> None:
    try:
        given_text, from_stdin = speak.text_argument(text if text != "-" else "--")
    except UsageError as exc:
        assert len(text) > MAX_TEXT_CHARS and "too long" in str(exc)
        return
    assert not from_stdin and len(given_text) <= MAX_TEXT_CHARS


@MANY
@given(
    st.one_of(st.binary(max_size=600), MARKDOWN.map(lambda t: t.encode("utf-8"))),
    st.sampled_from([None, "-"]),
)
def test_text_argument_reads_stdin_or_refuses_it(data: bytes, text: str | None) -> None:
    with mock.patch.object(sys, "stdin", FakeStdin(data)):
        try:
            read, from_stdin = speak.text_argument(text)
        except UsageError:
            return
    assert from_stdin and isinstance(read, str) and "\x00" not in read


def test_text_argument_on_a_terminal_without_text_is_a_usage_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(sys, "stdin", FakeStdin(b"", tty=True))
    with pytest.raises(UsageError, match="give TEXT"):
        speak.text_argument(None)


# -- settings ------------------------------------------------------------------------------------
ANNOTATIONS = sorted({str(f.type) for f in dataclasses.fields(Settings)})
SETTING_NAMES = [f.name for f in dataclasses.fields(Settings)] + [
    env_name(f) for f in dataclasses.fields(Settings)
]
TOML_VALUES = st.recursive(
    st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=30),
        st.sampled_from(["nan", "inf", "-inf", "1e999", " 12 ", "0x10", "1_000", "true", "",
                         "~", "~/x", "\x00"]),
        st.datetimes(), st.dates(), st.times(),
    ),  # fmt: skip
    lambda children: st.one_of(st.lists(children, max_size=3),
                               st.dictionaries(st.text(max_size=5), children, max_size=3)),
    max_leaves=8,
)  # fmt: skip


@MANY
@given(st.sampled_from(SETTING_NAMES), TOML_VALUES, st.sampled_from(ANNOTATIONS))
def test_convert_gives_the_type_or_a_usage_error(name: str, raw: object, annotation: str) -> None:
    try:
        value = _convert(name, raw, annotation)
    except UsageError as exc:
        assert repr(name) in str(exc)
        return
    base = annotation.replace("| None", "").strip()
    if value is None:
        assert raw is None or ("None" in annotation and isinstance(raw, str) and not raw.strip())
        return
    expected = {"bool": bool, "int": int, "float": float, "Path": Path, "str": str}[base]
    assert isinstance(value, expected)
    if base == "float":
        assert math.isfinite(value)
    if isinstance(value, str):
        assert "\x00" not in value
    field = next(f.name for f in dataclasses.fields(Settings) if name in (f.name, env_name(f)))
    if field in SETTING_RANGES and base in ("int", "float"):
        low, high = SETTING_RANGES[field]
        assert low <= value <= high


@MANY
@given(st.one_of(st.floats(), st.text(max_size=12), st.sampled_from(["nan", "-nan", "inf"])))
def test_float_settings_are_finite_or_refused(raw: object) -> None:
    for name in ("VOCAL_MAX_SECONDS", "speed", "VOCAL_BARGE_IN_DOUBLE_TALK_DB"):
        try:
            value = _convert(name, raw, "float | None")
        except UsageError:
            continue
        assert value is None or math.isfinite(value)


# -- a handful through the CLI -------------------------------------------------------------------
def assert_usage_error_line(result) -> None:  # noqa: ANN001 (CompletedProcess)
    stderr = result.stderr.decode()
    assert result.returncode == EXIT_USAGE, stderr
    assert "Traceback" not in stderr and "unexpected" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vocal: error: "), stderr


@THROUGH_THE_CLI
@given(wav_files())
def test_bad_wavs_through_listen(data: bytes) -> None:
    assume(parse_or_refuse(data) is None)
    import tempfile

    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "BAD.wav"
        path.write_bytes(data)
        assert_usage_error_line(run_vocal("listen", "--input", str(path), timeout=60))


@THROUGH_THE_CLI
@given(
    st.sampled_from(["nan", "NaN", "inf", "-inf", "1e999", "-nan"]),
    st.sampled_from(["VOCAL_MAX_SECONDS", "VOCAL_NO_SPEECH_TIMEOUT", "VOCAL_SPEED"]),
)
def test_non_finite_settings_through_listen(value: str, variable: str) -> None:
    import tempfile

    from vocal.audio.wav import wav_bytes

    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "x.wav"
        path.write_bytes(wav_bytes(Audio(np.zeros(1600, np.float32), 16_000)))
        result = run_vocal("listen", "--input", str(path), env={variable: value}, timeout=60)
    assert_usage_error_line(result)
    assert variable in result.stderr.decode()
