"""The room's level kept per device pair (vocal.duplex.room_level): written off the turn's
path, read back while fresh, a bad record set aside."""

from __future__ import annotations

import json
import time
from pathlib import Path

from vocal.duplex.ambient import AmbientFloor
from vocal.duplex.room_level import (
    FRESH_S,
    MIN_CHUNKS,
    fresh_room_level,
    keep_heard_level,
    room_level_path,
)


def heard(levels: list[float]) -> AmbientFloor:
    floor = AmbientFloor(10.0, prior_db=-70.0)  # the prior is not this turn's to keep
    for level in levels:
        floor.teach(level)
    return floor


def test_a_turn_keeps_what_it_heard_and_the_next_reads_it(tmp_path: Path) -> None:
    assert fresh_room_level(tmp_path, "sink", "source", now_s=time.time()) is None
    thread = keep_heard_level(tmp_path, "sink", "source", heard([-41.0, -40.0, -39.0] * 8))
    assert thread is not None
    thread.join(5)
    assert fresh_room_level(tmp_path, "sink", "source", now_s=time.time()) == -40.0
    assert fresh_room_level(tmp_path, "sink", "other", now_s=time.time()) is None
    # Stale: a room heard long ago says little of the room now.
    assert fresh_room_level(tmp_path, "sink", "source", now_s=time.time() + FRESH_S + 1) is None


def test_too_little_heard_keeps_nothing(tmp_path: Path) -> None:
    assert keep_heard_level(tmp_path, "sink", "source", heard([-40.0] * (MIN_CHUNKS - 1))) is None
    assert not room_level_path(tmp_path, "sink", "source").exists()


def test_a_bad_record_is_set_aside(tmp_path: Path) -> None:
    path = room_level_path(tmp_path, "sink", "source")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"output": "sink", "input": "source", "level_db": "loud",
                                "measured_at": time.time()}))  # fmt: skip
    assert fresh_room_level(tmp_path, "sink", "source", now_s=time.time()) is None
    assert not path.exists() and list(path.parent.glob("*.bad-*"))
