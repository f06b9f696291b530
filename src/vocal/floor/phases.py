"""The phases of a turn (`Turn.phase`, what `vocal control status` reports as "state") and the
moves between them. Only `Turn.set_phase` changes a turn's phase (issue 18; before it the
phases were bare strings set from three modules).

    starting -> waiting (for the floor) -> ready (holding it, or no conch) -> done
    ready <-> playing <-> paused       (Turn.play, speak's turn, the control handler)
    ready | playing | paused -> listening -> done      (converse)

Every phase may end in `done` (the turn's clean-up runs on any exit), and staying in a phase
is not a move (a second `resume`).
"""

from __future__ import annotations

import enum


class TurnPhase(str, enum.Enum):
    """A turn's phase. Its value is what status replies and `<pid>.json` readers see."""

    STARTING = "starting"
    WAITING = "waiting"
    READY = "ready"
    PLAYING = "playing"
    PAUSED = "paused"
    LISTENING = "listening"
    DONE = "done"

    def __str__(self) -> str:  # "playing", not "TurnPhase.PLAYING", in messages
        return self.value


_P = TurnPhase
#: The phases each phase may move to (besides itself).
TRANSITIONS: dict[TurnPhase, frozenset[TurnPhase]] = {
    _P.STARTING: frozenset({_P.WAITING, _P.READY, _P.DONE}),
    _P.WAITING: frozenset({_P.READY, _P.DONE}),
    # ready -> paused: a `pause` that lands between attaching an output and moving to playing.
    _P.READY: frozenset({_P.PLAYING, _P.PAUSED, _P.LISTENING, _P.DONE}),
    _P.PLAYING: frozenset({_P.PAUSED, _P.READY, _P.LISTENING, _P.DONE}),
    _P.PAUSED: frozenset({_P.PLAYING, _P.READY, _P.LISTENING, _P.DONE}),
    _P.LISTENING: frozenset({_P.DONE}),
    _P.DONE: frozenset(),
}


class IllegalTransition(RuntimeError):
    """A move the table does not allow (raised only where transitions are strict: tests)."""


def allowed(old: TurnPhase, new: TurnPhase) -> bool:
    """Whether a turn may move from `old` to `new` (staying put always may)."""
    return new is old or new in TRANSITIONS[old]


__all__ = ["TRANSITIONS", "IllegalTransition", "TurnPhase", "allowed"]
