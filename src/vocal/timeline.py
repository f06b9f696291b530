"""Marks on a turn's start-up path: when each stage was first reached (time.monotonic()).

A turn is a process and its first audio is what a person waits for, so `vocal speak --json`
reports these (`timeline`, seconds from process start) and benchmarks/speak breaks the wait
down with them. Marking costs a dictionary write; nothing is imported.
"""

from __future__ import annotations

import time

_marks: dict[str, float] = {}


def mark(stage: str, at_s: float | None = None) -> None:
    """Record that `stage` was reached now, or at `at_s` (the first time only)."""
    _marks.setdefault(stage, time.monotonic() if at_s is None else at_s)


def since(start_s: float | None) -> dict[str, float]:
    """Every mark as seconds after `start_s` (a process's start), in time order."""
    if start_s is None:
        return {}
    ordered = sorted(_marks.items(), key=lambda item: item[1])
    return {stage: round(at_s - start_s, 4) for stage, at_s in ordered}


__all__ = ["mark", "since"]
