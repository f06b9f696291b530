"""vocal.files.bounded, the readers every user-named file, stream and JSON document goes through
(issue 37): real files, devices and FIFOs; nothing mocked."""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from vocal.files.bounded import (
    MAX_JSON_DEPTH,
    MAX_TOML_KEY_PARTS,
    BoundedReadError,
    json_depth,
    loads_json,
    read_regular,
    read_stream,
    read_tail,
    toml_key_depth,
)

#: Every refusal here is immediate; this only keeps a regression from hanging the suite.
DEADLINE_S = 5.0


@pytest.fixture
def fifo(tmp_path: Path) -> Iterator[Path]:
    """A named pipe nobody writes to (opening it for reading would block a naive reader)."""
    path = tmp_path / "pipe"
    os.mkfifo(path)
    yield path


# -- json_depth and loads_json -------------------------------------------------------------------
@pytest.mark.parametrize(
    ("document", "depth"),
    [
        (b"1", 0),
        (b'"[[[{{{"', 0),  # brackets inside a string do not count
        (b"[]", 1),
        (b'{"a": [1, {"b": []}]}', 4),
        (b'["a\\"[[[", ["\\\\"], "]]]"]', 2),  # an escaped quote does not end the string
        (b'["\\\\", [[', 3),  # an escaped backslash does: what follows counts
        (b'{"k": "}}}]]]"}', 1),
        (b"[" * 100_000 + b"]" * 100_000, 100_000),
    ],
)
def test_json_depth_counts_only_brackets_outside_strings(document: bytes, depth: int) -> None:
    assert json_depth(document) == depth


def test_loads_json_refuses_deep_documents_before_parsing() -> None:
    assert loads_json('{"a": [1, 2]}') == {"a": [1, 2]}
    at_limit = "[" * MAX_JSON_DEPTH + "]" * MAX_JSON_DEPTH
    assert loads_json(at_limit) is not None
    with pytest.raises(BoundedReadError, match=f"deeper than {MAX_JSON_DEPTH}"):
        loads_json("[" * (MAX_JSON_DEPTH + 1) + "]" * (MAX_JSON_DEPTH + 1))
    with pytest.raises(BoundedReadError):
        loads_json(b"[" * 1_000_000)  # what json.loads meets with RecursionError
    assert loads_json('["[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[["]')
    with pytest.raises(ValueError):
        loads_json("{not json")


# -- read_regular ---------------------------------------------------------------------------------
def test_read_regular_reads_a_file_up_to_its_bound(tmp_path: Path) -> None:
    path = tmp_path / "notes.txt"
    path.write_bytes(b"x" * 100)
    assert read_regular(path, max_bytes=100) == b"x" * 100
    with pytest.raises(BoundedReadError, match="notes.txt is larger than 99 bytes"):
        read_regular(path, max_bytes=99, what="notes")
    with pytest.raises(FileNotFoundError):
        read_regular(tmp_path / "missing", max_bytes=10)


def test_read_regular_refuses_a_device_a_fifo_and_a_directory(fifo: Path, tmp_path: Path) -> None:
    link = tmp_path / "zero-link"
    link.symlink_to("/dev/zero")
    for path in (Path("/dev/zero"), link, fifo, tmp_path):
        started = time.monotonic()
        with pytest.raises(BoundedReadError, match="is not a regular file"):
            read_regular(path, max_bytes=1 << 20, what="hints file")
        assert time.monotonic() - started < DEADLINE_S, path


# -- read_tail ------------------------------------------------------------------------------------
def test_read_tail_keeps_the_whole_lines_of_a_large_files_end(tmp_path: Path) -> None:
    path = tmp_path / "transcript.jsonl"
    lines = [f"line {n:04d}".encode() for n in range(1000)]  # 9 bytes + newline each
    path.write_bytes(b"\n".join(lines) + b"\n")
    assert read_tail(path, max_bytes=1 << 20) == path.read_bytes()  # small: whole
    tail = read_tail(path, max_bytes=95)  # 9.5 lines' worth: the last 9 whole lines
    assert tail.splitlines() == lines[-9:]
    exact = read_tail(path, max_bytes=100)  # a line starts exactly at the window's edge
    assert exact.splitlines() == lines[-10:]


def test_read_tail_of_a_sparse_gigabyte_reads_only_the_end(tmp_path: Path) -> None:
    path = tmp_path / "huge.jsonl"
    with open(path, "wb") as out:
        out.truncate(1 << 30)  # a 1 GB hole: no disk, but a naive reader reads it all
        out.seek(1 << 30)
        out.write(b"\nlast line\n")
    started = time.monotonic()
    assert read_tail(path, max_bytes=4096).endswith(b"last line\n")
    assert time.monotonic() - started < DEADLINE_S


def test_read_tail_refuses_a_device_and_a_fifo(fifo: Path) -> None:
    for path in (Path("/dev/zero"), fifo):
        with pytest.raises(BoundedReadError, match="not a regular file"):
            read_tail(path, max_bytes=1 << 20, what="transcript_path")


# -- read_stream ----------------------------------------------------------------------------------
def test_read_stream_gives_up_on_a_pipe_nobody_writes() -> None:
    read_end, write_end = os.pipe()
    try:
        with os.fdopen(read_end, "rb") as stream:
            started = time.monotonic()
            with pytest.raises(BoundedReadError, match="did not end within 0.3 s"):
                read_stream(stream, max_bytes=1024, timeout_s=0.3, what="stdin")
            assert 0.25 < time.monotonic() - started < DEADLINE_S
    finally:
        os.close(write_end)


def test_read_stream_reads_a_pipe_to_its_end_and_refuses_too_much() -> None:
    read_end, write_end = os.pipe()

    def write_slowly() -> None:
        for piece in (b'{"tool_name":', b' "Bash"}'):
            os.write(write_end, piece)
            time.sleep(0.05)
        os.close(write_end)

    writer = threading.Thread(target=write_slowly)
    writer.start()
    with os.fdopen(read_end, "rb") as stream:
        assert read_stream(stream, max_bytes=1024, timeout_s=DEADLINE_S, what="stdin") == (
            b'{"tool_name": "Bash"}'
        )
    writer.join()
    with open("/dev/zero", "rb") as zero:
        with pytest.raises(BoundedReadError, match="stdin is larger than 1 kB"):
            read_stream(zero, max_bytes=1024, timeout_s=DEADLINE_S, what="stdin")


# -- toml_key_depth -------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("text", "parts"),
    [
        ("", 0),
        ('session = "a.b.c.d.e"\n', 1),  # dots in a string
        ("volume = 0.5 # a.b.c.d.e\n", 2),  # a float; dots in a comment
        ("a.b.c = 1\n", 3),
        ('"a.x".b . c = 1\n', 3),  # a quoted part, blanks around the dots
        ("[tables.are.keys]\n", 3),
        ('x = """\na.b.c.d.e\n"""\n', 1),  # a multi-line string
        ("x = 'a.b.c.d'\ny.z = 2\n", 2),
        ("k." * 10_000 + "k = 1\n", 10_001),
    ],
)
def test_toml_key_depth_counts_the_parts_of_dotted_keys(text: str, parts: int) -> None:
    assert toml_key_depth(text) == parts


def test_a_deep_dotted_key_is_measured_in_linear_time() -> None:
    """tomllib takes 7 s and 1.5 GB for 20,000 parts; the measure must not cost that."""
    started = time.monotonic()
    assert toml_key_depth("x." * 200_000 + "x = 1") > MAX_TOML_KEY_PARTS
    assert toml_key_depth("=." * 200_000) <= 2
    assert time.monotonic() - started < DEADLINE_S
