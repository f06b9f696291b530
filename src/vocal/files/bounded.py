"""Bounded reads: every file, stream and JSON document a user or a peer hands vocal is read
within a size, a time and (for JSON) a nesting depth, and refused with a clear reason beyond it.

A path named on the command line (`--hints @notes.txt`, a hook's `transcript_path`, `voices
add --persona`) may be `/dev/zero`, a named pipe nobody writes or a 10 GB log: only a regular
file's first bytes are read, and a pipe or device is refused before it can block or flood the
reader. A stream (a cue's stdin) is read to a deadline. `loads_json` measures the nesting
before Python's parser recurses into it, so a deep document is an error, not a RecursionError.

Standard library only: hooks and cues are on the fast-start path.
"""

from __future__ import annotations

import errno
import json
import os
import re
import select
import stat
import time

# typing and pathlib only for annotations and messages: a cue hook (vocal.agents.cues) pays
# every import on its 100 ms path.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import BinaryIO

#: The deepest JSON any reader accepts: vocal's own documents nest 4 levels, a hook's input 6.
MAX_JSON_DEPTH = 64
_STRING = re.compile(rb'"[^"\\]*(?:\\.[^"\\]*)*"', re.DOTALL)
_BRACKET = re.compile(rb"[\[\]{}]")


class BoundedReadError(ValueError):
    """A read refused: not a regular file, larger than its bound, too slow, or nested too
    deep. Its message is one line saying which."""


def json_depth(data: bytes) -> int:
    """How deep `data`'s arrays and objects nest (brackets inside strings do not count)."""
    if data.count(b"[") + data.count(b"{") <= 1:
        return int(b"[" in data or b"{" in data)
    depth = deepest = 0
    for match in _BRACKET.finditer(_STRING.sub(b"", data)):
        if match.group() in (b"[", b"{"):
            depth += 1
            deepest = max(deepest, depth)
        else:
            depth -= 1
    return deepest


def loads_json(data: str | bytes, *, max_depth: int = MAX_JSON_DEPTH) -> object:
    """`json.loads(data)`, refusing a document nested deeper than `max_depth`.

    Raises:
        BoundedReadError: nested too deep.
        ValueError: not JSON (json.JSONDecodeError, UnicodeDecodeError).
    """
    raw = data.encode("utf-8", "surrogatepass") if isinstance(data, str) else data
    if json_depth(raw) > max_depth:
        raise BoundedReadError(f"JSON nested deeper than {max_depth} levels")
    try:
        return json.loads(data)
    except RecursionError:  # a depth under the limit on a small stack: still an error
        raise BoundedReadError("JSON nested too deep") from None


def read_regular(path: str | os.PathLike, *, max_bytes: int, what: str = "file") -> bytes:
    """The whole of the regular file at `path` (links followed), at most `max_bytes`.

    Raises:
        BoundedReadError: not a regular file (a pipe, a device, a directory), or larger.
        OSError: missing or unreadable, as `open` raises it.
    """
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno in (errno.EISDIR, errno.ENXIO):
            raise BoundedReadError(f"{what} {_shown(path)} is not a regular file") from None
        raise
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise BoundedReadError(f"{what} {_shown(path)} is not a regular file")
        data = read_up_to(fd, max_bytes + 1)
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise BoundedReadError(f"{what} {_shown(path)} is larger than {_size(max_bytes)}")
    return data


def read_tail(path: str | os.PathLike, *, max_bytes: int, what: str = "file") -> bytes:
    """The end of the regular file at `path` (links followed): all of it when it holds at most
    `max_bytes`, else its whole lines within its last `max_bytes`. For files that grow large
    by right and are read from their end (an agent's JSONL transcript).

    Raises:
        BoundedReadError: not a regular file (a pipe, a device, a directory).
        OSError: missing or unreadable, as `open` raises it.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno in (errno.EISDIR, errno.ENXIO):
            raise BoundedReadError(f"{what} {_shown(path)} is not a regular file") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise BoundedReadError(f"{what} {_shown(path)} is not a regular file")
        # One byte before the window: a line starting exactly at its edge is kept whole.
        start = max(0, info.st_size - max_bytes - 1)
        os.lseek(fd, start, os.SEEK_SET)
        data = read_up_to(fd, max_bytes + 1 if start else max_bytes)
    finally:
        os.close(fd)
    if start:
        data = data[data.find(b"\n") + 1 :] if b"\n" in data else b""
    return data[-max_bytes:] if len(data) > max_bytes else data


def read_stream(stream: BinaryIO, *, max_bytes: int, timeout_s: float, what: str) -> bytes:
    """What `stream` holds up to its end, at most `max_bytes`, within `timeout_s`.

    Raises:
        BoundedReadError: more than `max_bytes`, or not ended within `timeout_s`.
    """
    try:
        fd = stream.fileno()
    except (AttributeError, OSError, ValueError):  # not a real descriptor (a test's BytesIO)
        data = stream.read(max_bytes + 1)
    else:
        try:
            data = read_up_to(fd, max_bytes + 1, deadline=time.monotonic() + timeout_s)
        except TimeoutError:
            raise BoundedReadError(f"{what} did not end within {timeout_s:g} s") from None
    if len(data) > max_bytes:
        raise BoundedReadError(f"{what} is larger than {_size(max_bytes)}")
    return data


def read_up_to(fd: int, limit: int, *, deadline: float | None = None) -> bytes:
    """At most `limit` bytes from `fd`, to its end; with a `deadline` (monotonic), waiting for
    each chunk only until then (TimeoutError past it)."""
    chunks: list[bytes] = []
    size = 0
    while size < limit:
        if deadline is not None:
            left_s = deadline - time.monotonic()
            if left_s <= 0 or not select.select([fd], [], [], left_s)[0]:
                raise TimeoutError
        chunk = os.read(fd, min(65536, limit - size))
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


#: A dotted TOML key of more parts than this is refused (`toml_key_depth`): tomllib's memory
#: and time grow with the square of a key's parts (20,000 parts, a 40 kB line: 1.5 GB, 7 s).
MAX_TOML_KEY_PARTS = 64
_TOML_PLAIN = re.compile(r"[A-Za-z0-9_\- \t]+")
_TOML_BASIC = re.compile(r'(?:[^"\\\n]|\\.)*"')


def toml_key_depth(text: str) -> int:
    """The most parts of any dotted key (`a.b.c = 1`, `[a.b.c]`) in the TOML `text`, counted
    before tomllib parses it (see MAX_TOML_KEY_PARTS). Dots in strings and comments do not
    count; a float (`1.5`) counts as two parts, which is far below any limit."""
    deepest = parts = 0
    at, end = 0, len(text)
    while at < end:
        plain = _TOML_PLAIN.match(text, at)
        if plain:  # key characters and blanks keep a dotted key going
            at = plain.end()
            continue
        char = text[at]
        if char == ".":
            parts += 1
            deepest = max(deepest, parts + 1)
            at += 1
            continue
        if text.startswith(('"""', "'''"), at):
            close = text.find(text[at : at + 3], at + 3)
            at = end if close < 0 else close + 3
        elif char == '"':
            basic = _TOML_BASIC.match(text, at + 1)
            at = basic.end() if basic else _line_end(text, at)
            continue  # a quoted key part: the dotted key goes on
        elif char == "'":
            close = text.find("'", at + 1, _line_end(text, at))
            at = _line_end(text, at) if close < 0 else close + 1
            continue
        elif char == "#":
            at = _line_end(text, at)
        else:
            at += 1
        parts = 0
    return max(deepest, 1 if text.strip() else 0)


def _line_end(text: str, at: int) -> int:
    newline = text.find("\n", at)
    return len(text) if newline < 0 else newline


def _shown(path: str | os.PathLike) -> str:
    from pathlib import Path

    return str(Path(path))


def _size(count: int) -> str:
    if count >= 1 << 20:
        return f"{count / (1 << 20):g} MB"
    if count >= 1 << 10:
        return f"{count / (1 << 10):g} kB"
    return f"{count} bytes"


__all__ = [
    "MAX_JSON_DEPTH",
    "MAX_TOML_KEY_PARTS",
    "BoundedReadError",
    "json_depth",
    "loads_json",
    "read_regular",
    "read_stream",
    "read_tail",
    "read_up_to",
    "toml_key_depth",
]
