"""The room's own level at a device pair's microphone, kept from one turn for the next.

The barge-in detector learns the room's level (vocal.duplex.bargein.ambient) while nothing plays:
before the reply's first sound and in its pauses. Before the first sound there is often less than
one 32 ms chunk (the reply starts 0-80 ms after the microphone opens), so in a room full of other
talkers the first pause came before the level was known, and the babble in it cut the reply
(benchmarks/converse --room chatter). A turn that heard the room long enough keeps its level
here, per (output, input) pair as the echo profile is (vocal.duplex.canceller.profile), and the next
turn starts from it while it is fresh (`FRESH_S`): rooms change, a café empties.
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from vocal.duplex.bargein.ambient import AmbientFloor
from vocal.duplex.canceller.profile import PROFILE_DIR_NAME, profile_path
from vocal.errors import VocalError
from vocal.floor.statedir import ensure_private_dir
from vocal.floor.statefiles import read_record, record_from, write_json

if TYPE_CHECKING:
    from vocal.audio.devices import Block, Microphone

#: A level older than this (s) says too little of the room now to start a turn from.
FRESH_S = 15 * 60
#: A turn keeps its level only when it heard the room for this many chunks (~0.5 s), or,
#: where it started from none, for as many as its own floor needed (`ambient.MIN_CHUNKS`): else
#: every turn after a short reply would hear the room again before its first sound (40-60 ms).
MIN_CHUNKS = 16
#: A turn that knows no level hears the room alone for up to this long before its first sound
#: (the floor needs `vocal.duplex.bargein.ambient.MIN_CHUNKS`: ~0.1 s). Without it, the first turn
#: in a room of talkers learnt nothing before the reply's first pause, where the babble cut it.
FIRST_LISTEN_S = 0.25


@dataclass(frozen=True)
class RoomLevel:
    """The median raw level (dB of mean square) a turn heard while nothing played."""

    output: str
    input: str
    level_db: float
    measured_at: float

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def room_level_path(home: Path, output: str, input: str) -> Path:
    """Beside the pair's echo profile."""
    return profile_path(home, output, input).with_suffix(".room.json")


def parse_room_level(data: object) -> RoomLevel:
    """A `RoomLevel` from its JSON (BadRecord for anything vocal does not write)."""
    return record_from(RoomLevel, data, {"level_db": (-200.0, 20.0), "measured_at": (0.0, 1e11)})


def fresh_room_level(home: Path, output: str, input: str, *, now_s: float) -> float | None:
    """The pair's room level if it was heard within `FRESH_S`, else None."""
    if not (Path(home) / PROFILE_DIR_NAME).is_dir():
        return None
    path = room_level_path(home, output, input)
    level = read_record(path, parse_room_level, log_dir=Path(home) / "logs")
    if level is None or (level.output, level.input) != (output, input):
        return None
    return level.level_db if 0 <= now_s - level.measured_at <= FRESH_S else None


def hear_room_first(
    mic: Microphone,
    feed: Callable[[Block], object],
    floor: AmbientFloor,
    limit_s: float = FIRST_LISTEN_S,
) -> float:
    """Before a turn's first sound, where the room's level is not known (`floor`, the barge-in
    detector's; a kept level counts as known): give the microphone's blocks to the detector
    (`feed`) until it is, or `limit_s` has passed. Returns the seconds spent (0.0 where the
    level was known: every turn after the first, for `FRESH_S`)."""
    started_s = time.monotonic()
    while floor.floor_db is None and floor.margin_db is not None:
        left_s = limit_s - (time.monotonic() - started_s)
        block = mic.read(left_s) if left_s > 0 else None
        if block is None:
            break
        feed(block)
    return round(time.monotonic() - started_s, 3)


def keep_heard_level(
    home: Path, output_device: str | None, input_device: str | None, ambient: AmbientFloor
) -> threading.Thread | None:
    """Keep the level a turn's detector heard (`ambient`), if it heard the room long enough
    (see `MIN_CHUNKS`), in a thread (started; join it before the process exits; the device pair
    is resolved there). A state directory that cannot take it never fails the turn."""
    level_db = ambient.learned_db
    enough = MIN_CHUNKS if ambient.had_prior else ambient.min_chunks
    if level_db is None or ambient.learned_chunks < enough:
        return None

    def keep() -> None:
        from vocal.audio.endpoints import device_pair

        with contextlib.suppress(VocalError, OSError):  # the next turn learns the room again
            output, input = device_pair(output_device, input_device)
            path = room_level_path(home, output, input)
            ensure_private_dir(path.parent)
            write_json(path, RoomLevel(output, input, level_db, time.time()).to_dict())

    thread = threading.Thread(target=keep, name="vocal-room-level", daemon=True)
    thread.start()
    return thread


__all__ = [
    "FIRST_LISTEN_S",
    "FRESH_S",
    "MIN_CHUNKS",
    "RoomLevel",
    "fresh_room_level",
    "hear_room_first",
    "keep_heard_level",
    "room_level_path",
]
