"""The records of vocal.floor.pieces' message board, checked as they are read (issue 37).

Each file is written whole by a vocal process (vocal.floor.statefiles.write_json), so one that
does not parse as its record was put there by something else: `read_record` quarantines it
(renamed aside, logged) and the board reads it as absent. A foreign `index.json` had made
every later `vocal speak --message` fail; now the next piece starts a fresh index.

Standard library only: a muted `vocal speak` must return before anything heavy loads.
"""

from __future__ import annotations

from typing import TypedDict, TypeGuard

from vocal.floor.statefiles import BadRecord, check_field

#: Sequence numbers and pieces: non-negative, and exact in a JSON number.
_COUNT = (0, 2**53)


class _MessageEntry(TypedDict):
    seq: int


class MessageEntry(_MessageEntry, total=False):
    """One message in index.json: its arrival order, when, and whether it is done."""

    at: float
    done: bool


class _IndexRecord(TypedDict):
    messages: dict[str, MessageEntry]


class IndexRecord(_IndexRecord, total=False):
    """index.json: the scope's newest message, the last sequence number, the messages."""

    latest: str | None
    seq: int


class _CursorRecord(TypedDict):
    #: Piece number (as a string, JSON's keys) -> how it went.
    results: dict[str, str]


class CursorRecord(_CursorRecord, total=False):
    """cursor.json: the next piece to read, when the cursor last moved, the final piece's
    number once known, and the status every unread piece gets once the message is closed."""

    next: int
    advanced_at: float
    final: int | None
    closed: str | None


class PieceRecord(TypedDict, total=False):
    """piece-N.json: one piece's text, whether it is the message's last, when it arrived."""

    text: str
    final: bool
    arrived_at: float


# The checks below return True or raise BadRecord naming what is wrong; as type guards they
# let the parsers return the record as read (keys a newer vocal adds are kept when written back).
def _checked_index(data: object) -> TypeGuard[IndexRecord]:
    if not isinstance(data, dict) or not isinstance(data.get("messages"), dict):
        raise BadRecord("index: not an object with a messages object")
    check_field("latest", data.get("latest"), "str | None")
    check_field("seq", data.get("seq", 0), "int", _COUNT)
    for known in data["messages"].values():
        if not isinstance(known, dict):
            raise BadRecord("index: a message entry is not an object")
        check_field("seq", known.get("seq"), "int", _COUNT)
        check_field("at", known.get("at", 0.0), "float")
        check_field("done", known.get("done", False), "bool")
    return True


def _checked_cursor(data: object) -> TypeGuard[CursorRecord]:
    if not isinstance(data, dict):
        raise BadRecord("cursor: not an object")
    check_field("next", data.get("next", 0), "int", _COUNT)
    check_field("advanced_at", data.get("advanced_at", 0.0), "float")
    check_field("final", data.get("final"), "int | None", _COUNT)
    check_field("closed", data.get("closed"), "str | None")
    results = data.setdefault("results", {})
    if not isinstance(results, dict) or not all(isinstance(v, str) for v in results.values()):
        raise BadRecord("cursor: results is not an object of statuses")
    return True


def _checked_piece(data: object) -> TypeGuard[PieceRecord]:
    if not isinstance(data, dict):
        raise BadRecord("piece: not an object")
    check_field("text", data.get("text", ""), "str")
    check_field("final", data.get("final", False), "bool")
    check_field("arrived_at", data.get("arrived_at", 0.0), "float")
    return True


def parse_index(data: object) -> IndexRecord:
    """index.json as `register` writes it: {latest, seq, messages: {ID: {seq, at, done}}}."""
    if _checked_index(data):
        return data
    raise BadRecord("index: not a record")  # not reached: the check raises first


def parse_cursor(data: object) -> CursorRecord:
    """cursor.json: {next, advanced_at, final, results: {N: status}, closed} (a missing
    `results` is added, empty)."""
    if _checked_cursor(data):
        return data
    raise BadRecord("cursor: not a record")  # not reached: the check raises first


def parse_piece(data: object) -> PieceRecord:
    """piece-N.json: {text, final, arrived_at}."""
    if _checked_piece(data):
        return data
    raise BadRecord("piece: not a record")  # not reached: the check raises first


__all__ = [
    "CursorRecord",
    "IndexRecord",
    "MessageEntry",
    "PieceRecord",
    "parse_cursor",
    "parse_index",
    "parse_piece",
]
