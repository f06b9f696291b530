"""The room's own sound at the microphone, for the barge-in detector: what it hears while the
reply is silent, so that other people talking in the room (a café, an open-plan office) are not
taken for the person.

Silero calls babble speech, and without a reply to compare it with (before the reply's first
sound, in a long pause) the double-talk test has nothing to hold it back: on the room harness's
"chatter" condition (six voices at -40 dBFS) every echo-only turn was cut within 0.2 s of the
microphone opening (benchmarks/RESULTS.md). The person vocal talks with is nearer the
microphone than the room's other talkers: their active level measured -17 to -25 dBFS where the
babble was -40. So a speech chunk counts towards a barge-in only when its raw level stands
`margin_db` above the floor (`AmbientFloor.above`), and the floor's energy is added to the echo
the played level predicts (`AmbientFloor.plus`), so that the double-talk test does not take the
room for a person either.
"""

from __future__ import annotations

import collections
import math
import statistics
from typing import Protocol

from vocal.audio.room_gate import ROOM_MARGIN_DB, RoomGate

#: Where too few chunks have been heard for a floor, a level counts as above it while the
#: reply plays (the double-talk test decides alone, as without a floor), and not while nothing
#: plays (the room cannot be told from a person then: the chunk teaches the floor instead).
MIN_CHUNKS = 3
#: A level the last turn kept (vocal.duplex.bargein.room_level) counts as this many chunks heard: a
#: floor from the start, which this turn's own chunks soon outvote.
PRIOR_CHUNKS = 3
#: Chunks remembered (~10 s of 32 ms chunks where nothing plays).
HISTORY_CHUNKS = 300
#: What the room adds to the echo a played level predicts (`AmbientFloor.plus`): its floor
#: raised by this, since a chunk of babble can rise that far above its median (at most 8 dB on
#: the chatter room, 1 % of chunks by 6 dB; with the median alone one chunk came 2.2 dB over
#: the prediction and cut a reply, and with 6 dB one 3.5 dB over). A person near the
#: microphone stands well above even that.
PEAK_ABOVE_FLOOR_DB = 8.0
#: How far a level must be above the floor before the floor's share is taken out of it when the
#: echo path's gain is learnt (`AmbientFloor.minus`): nearer, and the difference is noise.
MIN_ABOVE_DB = 3.0


def _power(level_db: float) -> float:
    return 10 ** (level_db / 10)


class AmbientFloor:
    """The median raw level (dB of mean square) of the chunks heard while nothing played.

    The median, not a low percentile: a floor set by the quietest moments of babble would let
    its louder ones through; measured on the chatter room, 32 ms chunks of six voices rose at
    most 8 dB above its median, 1 % of them by 6 dB. The margin above it is `margin_db`
    (`BargeInOptions.ambient_margin_db`).
    """

    def __init__(
        self,
        margin_db: float | None,
        *,
        prior_db: float | None = None,
        history: int = HISTORY_CHUNKS,
        min_chunks: int = MIN_CHUNKS,
    ) -> None:
        self.margin_db = margin_db
        self.min_chunks = min_chunks
        self._levels: collections.deque[float] = collections.deque(maxlen=history)
        if prior_db is not None:
            self._levels.extend([prior_db] * PRIOR_CHUNKS)
        #: Whether the floor started from a level the last turn kept.
        self.had_prior = prior_db is not None
        #: Chunks this turn taught (the prior not counted).
        self.learned_chunks = 0

    def teach(self, level_db: float, *, speech: bool = False, above: bool = False) -> None:
        """Note the raw level of a chunk heard while nothing played (nor rang on). A `speech`
        chunk in a pause of the reply may be the person: it teaches only once a floor is
        known and it is not `above` it (more of the room's own talk). Before the reply's
        first sound every chunk teaches."""
        if speech and (self.floor_db is None or above):
            return
        self._levels.append(level_db)
        self.learned_chunks += 1

    @property
    def learned_db(self) -> float | None:
        """The floor from this turn's own chunks alone (None: none taught), to keep."""
        own = list(self._levels)[-min(self.learned_chunks, len(self._levels)) :]
        return statistics.median(own) if self.learned_chunks else None

    @property
    def floor_db(self) -> float | None:
        """The floor (None: too few chunks heard, or the floor is off)."""
        if self.margin_db is None or len(self._levels) < self.min_chunks:
            return None
        return statistics.median(self._levels)

    def above(self, level_db: float | None, *, playing: bool) -> bool:
        """Whether a chunk at `level_db` stands out of the room. True when the floor is off or
        the level unknown; while too few chunks are known (`MIN_CHUNKS`), whether the reply
        is `playing` (see there)."""
        if self.margin_db is None or level_db is None:
            return True
        floor = self.floor_db
        if floor is None:
            return playing
        return level_db >= floor + self.margin_db

    def plus(self, level_db: float) -> float:
        """`level_db` (a predicted echo) with the room's energy added, at its loud moments
        (`PEAK_ABOVE_FLOOR_DB` over the floor)."""
        floor = self.floor_db
        if floor is None:
            return level_db
        return 10 * math.log10(_power(level_db) + _power(floor + PEAK_ABOVE_FLOOR_DB))

    def minus(self, level_db: float) -> float | None:
        """`level_db` with the floor's energy taken out (the echo's share of a raw level); None
        when it is within `MIN_ABOVE_DB` of the floor (the room, more than the echo)."""
        floor = self.floor_db
        if floor is None:
            return level_db
        if level_db < floor + MIN_ABOVE_DB:
            return None
        return 10 * math.log10(_power(level_db) - _power(floor))


class HeardRoom(Protocol):
    """What `room_gate` reads of a barge-in detector (vocal.duplex.bargein.detector)."""

    ambient: AmbientFloor


def room_gate(detector: HeardRoom | None, kept_db: float | None) -> RoomGate | None:
    """The endpointer's gate (vocal.audio.room_gate) for the floor a barge-in `detector` heard
    over the reply, else the level the last turn kept (vocal.duplex.bargein.room_level) with
    `ROOM_MARGIN_DB`; None where neither is known or the floor is off. In a room of talkers a
    pause is where the person's level falls to the room's."""
    if detector is not None:
        floor_db, margin_db = detector.ambient.floor_db, detector.ambient.margin_db
    else:
        floor_db, margin_db = kept_db, ROOM_MARGIN_DB
    return None if floor_db is None or margin_db is None else RoomGate(floor_db, margin_db)


__all__ = ["AmbientFloor", "room_gate"]
