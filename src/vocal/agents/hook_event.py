"""The event a hook gets on stdin, read within bounds (issue 37).

Claude Code writes a hook's event, a small JSON object, at once and closes the pipe. Read
whole, `< /dev/zero` grew until MemoryError, a writer that never closed held the hook forever,
and a deeply nested document ended in RecursionError; here each is a usage error (exit 2).

Standard library only: `vocal hooks reply` runs at the end of every agent turn.
"""

from __future__ import annotations

from typing import BinaryIO

from vocal.errors import UsageError
from vocal.files.bounded import BoundedReadError, loads_json, read_stream

#: An event is a few kB (the reply itself, at most a long message); past this it is not one.
MAX_HOOK_INPUT_BYTES = 4 << 20
#: The event is in the pipe when the hook starts: waiting longer means no writer will end it.
HOOK_INPUT_TIMEOUT_S = 3.0


def read_hook_event(stream: BinaryIO) -> object:
    """The hook's event: the JSON on `stream` (a binary stdin), read to its end within
    HOOK_INPUT_TIMEOUT_S and MAX_HOOK_INPUT_BYTES, depth-limited ({} when empty).

    Raises:
        UsageError: too large, not ended in time, binary, not JSON, or nested too deep.
    """
    try:
        data = read_stream(
            stream,
            max_bytes=MAX_HOOK_INPUT_BYTES,
            timeout_s=HOOK_INPUT_TIMEOUT_S,
            what="the hook input",
        )
    except BoundedReadError as exc:
        raise UsageError(f"{exc}: not a hook event") from None
    if b"\x00" in data:
        raise UsageError("the hook input is not text (it holds NUL bytes)")
    try:
        raw = data.decode("utf-8-sig")
        return loads_json(raw) if raw.strip() else {}
    except ValueError as exc:  # UnicodeDecodeError, JSONDecodeError, BoundedReadError
        raise UsageError(f"the hook input is not JSON ({exc})") from None


__all__ = ["HOOK_INPUT_TIMEOUT_S", "MAX_HOOK_INPUT_BYTES", "read_hook_event"]
