"""The room's level kept per device pair (vocal.duplex.bargein.room_level): written off the turn's
path, read back while fresh, a bad record set aside."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from vocal.duplex.bargein.ambient import AmbientFloor
from vocal.duplex.bargein.room_level import (
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


def test_a_turn_that_knew_no_level_keeps_what_its_floor_needed(tmp_path: Path) -> None:
    """The first turn heard the room only before its first sound and in one pause: what its
    own floor was made of is kept, so the next turn need not hear the room before speaking."""
    from vocal.duplex.bargein.ambient import MIN_CHUNKS as FLOOR_CHUNKS

    first = AmbientFloor(10.0)  # no prior
    for level in [-41.0, -40.0, -39.0][: FLOOR_CHUNKS - 1]:
        first.teach(level)
    assert keep_heard_level(tmp_path, "sink", "source", first) is None
    first.teach(-40.0)
    thread = keep_heard_level(tmp_path, "sink", "source", first)
    assert thread is not None
    thread.join(5)
    assert fresh_room_level(tmp_path, "sink", "source", now_s=time.time()) == -40.0


def test_a_bad_record_is_set_aside(tmp_path: Path) -> None:
    path = room_level_path(tmp_path, "sink", "source")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"output": "sink", "input": "source", "level_db": "loud",
                                "measured_at": time.time()}))  # fmt: skip
    assert fresh_room_level(tmp_path, "sink", "source", now_s=time.time()) is None
    assert not path.exists() and list(path.parent.glob("*.bad-*"))


def test_the_endpointer_hears_only_what_stands_above_the_room() -> None:
    """`room_gate`: Silero calls other people's talk speech; a chunk within the margin of the
    room's floor is silence to the endpointer, the person's louder speech is not, and Silero
    hears every chunk either way (it is recurrent)."""
    import numpy as np

    from vocal.audio.room_gate import ROOM_MARGIN_DB
    from vocal.duplex.bargein.ambient import room_gate

    heard_chunks: list[int] = []

    def silero(chunk: np.ndarray) -> float:
        heard_chunks.append(chunk.shape[0])
        return 0.9  # everything sounds like speech: a room of talkers

    floor = heard([-40.0] * 8)  # babble at -40 dB (mean square)
    detector = type("Detector", (), {"ambient": floor})()
    gate = room_gate(detector, kept_db=None)
    assert gate is not None and gate.gate_db == -30.0
    gated = gate.wrap(silero)
    rng = np.random.default_rng(3)
    noise = rng.standard_normal(512).astype(np.float32)
    babble = noise * np.float32(10 ** (-40 / 20))  # mean square -40 dB
    person = noise * np.float32(10 ** (-22 / 20))
    assert gated(babble) == 0.0 and gated(babble * np.float32(2.5)) == 0.0  # up to +8 dB
    assert gated(person) == pytest.approx(0.9)
    assert gate.gated == 2 and len(heard_chunks) == 3
    # No detector (half-duplex): the level the last turn kept, with the default margin.
    kept = room_gate(None, kept_db=-50.0)
    assert kept is not None and kept.gate_db == -50.0 + ROOM_MARGIN_DB
    # Nothing known, or the floor off: no gate.
    assert room_gate(None, kept_db=None) is None
    off = type("Detector", (), {"ambient": AmbientFloor(None)})()
    assert room_gate(off, kept_db=-50.0) is None
