"""The person's own rhythm: how long they pause inside a thought (issue 36).

A slow, deliberate speaker pauses 0.6-1 s between clauses and then goes on; a wait tuned on
brisk speech cuts them there. So the end-of-turn stage never ends a turn after less silence
than `Rhythm.floor_ms`: a share more than the longest pause this person has been seen to
resume from, in this turn (learnt as it goes) or in earlier ones (kept per user in the state
directory, `rhythm.json`, a slowly moving average). Only a pause the person came back from
counts: it is the proof that they pause that long without having finished.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from vocal.errors import VocalError
from vocal.floor.statefiles import private_dir, read_json, write_json

RHYTHM_FILE = "rhythm.json"
#: The floor is this many times the longest pause resumed from.
FLOOR_RATIO = 1.25
#: Pauses shorter than this are a breath, and longer ones a thought, not a rhythm: a single
#: 2 s thinking pause kept as the person's rhythm made every later turn wait 2.5 s
#: (benchmarks/turns --parts live, issue 36); the graded wait holds those on its own.
MIN_PAUSE_MS = 250.0
MAX_PAUSE_MS = 1000.0
#: What a turn's longest resumed pause moves the kept average by.
KEEP_WEIGHT = 0.3


@dataclass
class Rhythm:
    """The pauses one person resumes from: `kept_ms` from earlier turns (0: none kept),
    `longest_ms` in this turn so far. `floor_ms(cap_ms)` is the shortest wait that respects
    them, never above the cap."""

    kept_ms: float = 0.0
    kept_turns: int = 0
    resumed_ms: list[float] = field(default_factory=list)

    @property
    def longest_ms(self) -> float:
        return max(self.resumed_ms, default=0.0)

    def resumed(self, pause_ms: float) -> None:
        """The person spoke again after `pause_ms` of silence."""
        if MIN_PAUSE_MS <= pause_ms <= MAX_PAUSE_MS:  # NaN fails both
            self.resumed_ms.append(pause_ms)

    def floor_ms(self, cap_ms: float) -> float:
        return min(cap_ms, FLOOR_RATIO * max(self.kept_ms, self.longest_ms))

    def kept_after_turn(self) -> tuple[float, int]:
        """The average to keep once this turn is over: unchanged when it had no long pause."""
        if not self.resumed_ms:
            return self.kept_ms, self.kept_turns
        if self.kept_turns == 0:
            return self.longest_ms, 1
        moved = (1 - KEEP_WEIGHT) * self.kept_ms + KEEP_WEIGHT * self.longest_ms
        return moved, self.kept_turns + 1


def load_rhythm(state_dir: Path) -> Rhythm:
    """The rhythm kept in `state_dir` (a fresh one when there is none, or it is not ours)."""
    data = read_json(state_dir / RHYTHM_FILE)
    if not isinstance(data, dict):
        return Rhythm()
    kept, turns = data.get("inner_pause_ms"), data.get("turns")
    if not isinstance(kept, (int, float)) or not isinstance(turns, int):
        return Rhythm()
    if not (0 <= kept <= 60_000 and 0 <= turns < 2**31):  # `not (ok)`: NaN fails too
        return Rhythm()
    return Rhythm(kept_ms=float(kept), kept_turns=turns)


def keep_rhythm(state_dir: Path, rhythm: Rhythm) -> bool:
    """Keep what this turn taught (`Rhythm.kept_after_turn`) for the next; False when there
    was nothing new or the state directory could not take it (the turn is not failed for
    that: its words are already heard)."""
    kept_ms, turns = rhythm.kept_after_turn()
    if turns == rhythm.kept_turns:
        return False
    try:
        write_json(
            private_dir(state_dir) / RHYTHM_FILE,
            {"inner_pause_ms": round(kept_ms, 1), "turns": turns},
        )
    except (OSError, VocalError):
        return False
    return True


__all__ = ["Rhythm", "keep_rhythm", "load_rhythm"]
