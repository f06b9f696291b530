"""The records of vocal.floor.pieces' message board, checked as they are read (issue 37).

Each file is written whole by a vocal process (vocal.floor.statefiles.write_json), so one that
does not parse as its record was put there by something else: `read_record` quarantines it
(renamed aside, logged) and the board reads it as absent. A foreign `index.json` had made
every later `vocal speak --message` fail; now the next piece starts a fresh index.

Standard library only: a muted `vocal speak` must return before anything heavy loads.
"""

from __future__ import annotations

from typing import Any

from vocal.floor.statefiles import BadRecord, check_field

#: Sequence numbers and pieces: non-negative, and exact in a JSON number.
_COUNT = (0, 2**53)


def parse_index(data: Any) -> dict[str, Any]:
    """index.json as `register` writes it: {latest, seq, messages: {ID: {seq, at, done}}}."""
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
    return data


def parse_cursor(data: Any) -> dict[str, Any]:
    """cursor.json: {next, advanced_at, final, results: {N: status}, closed}."""
    if not isinstance(data, dict):
        raise BadRecord("cursor: not an object")
    check_field("next", data.get("next", 0), "int", _COUNT)
    check_field("advanced_at", data.get("advanced_at", 0.0), "float")
    check_field("final", data.get("final"), "int | None", _COUNT)
    check_field("closed", data.get("closed"), "str | None")
    results = data.setdefault("results", {})
    if not isinstance(results, dict) or not all(isinstance(v, str) for v in results.values()):
        raise BadRecord("cursor: results is not an object of statuses")
    return data


def parse_piece(data: Any) -> dict[str, Any]:
    """piece-N.json: {text, final, arrived_at}."""
    if not isinstance(data, dict):
        raise BadRecord("piece: not an object")
    check_field("text", data.get("text", ""), "str")
    check_field("final", data.get("final", False), "bool")
    check_field("arrived_at", data.get("arrived_at", 0.0), "float")
    return data


__all__ = ["parse_cursor", "parse_index", "parse_piece"]
