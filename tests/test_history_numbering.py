"""History numbering never wedges (issue 37).

An utterance is `NNNNNN.json` + `NNNNNN.pcm`, numbered one past the highest number on disk or in
`seq`. Three names once stopped every later `speak` from being kept, or from running at all: a
file whose name is digits to `str.isdigit` but not to `int` ("².json": ValueError in every
later turn), a 250-digit name (the next name too long to create: OSError), and an entry at the
last id (every next one out of range, quarantined as soon as it was written). Now only ASCII
names of at most 12 digits are entries, nothing else is read or removed, and past the last id
the entries kept are numbered again from 1.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from harness.hostile import run_hostile
from vocal.audio.wav import Audio
from vocal.config import load_settings
from vocal.floor.history import MAX_ID, History, entry_id


def blip() -> Audio:
    return Audio(np.zeros(1600, np.float32), 16_000)


def history(size: int = 3) -> History:
    return History(load_settings().history_dir, size)


@pytest.mark.parametrize("name", ["².json", "١٢.pcm", "9" * 250 + ".pcm", "1" * 13 + ".json"])
def test_names_that_are_not_entries_neither_wedge_nor_vanish(name: str) -> None:
    kept = history()
    kept.record(blip(), text="first")
    planted = kept.directory / name
    planted.write_bytes(b"{}")
    for i in range(3):
        kept.record(blip(), text=f"u{i}")
    assert [u.text for u in history().entries()] == ["u2", "u1", "u0"]
    assert [u.id for u in history().entries()] == [4, 3, 2]
    assert planted.exists()  # not vocal's: left alone


def test_past_the_last_id_the_entries_are_numbered_again() -> None:
    kept = history()
    kept.record(blip(), text="first")
    (kept.directory / "seq").write_text(str(MAX_ID - 2))
    for i in range(4):
        kept.record(blip(), text=f"u{i}")
    entries = history().entries()
    assert [u.text for u in entries] == ["u3", "u2", "u1"]  # none lost, newest first
    assert all(u.id < 10 for u in entries)
    assert kept.step_back() is not None and kept.step_back().text == "u2"
    files = sorted(
        p.name for p in kept.directory.iterdir() if p.stem.isascii() and p.stem.isdigit()
    )
    assert files == [f"{u.id:06d}.{ext}" for u in reversed(entries) for ext in ("json", "pcm")]


@pytest.mark.parametrize("seq", [str(MAX_ID), str(MAX_ID + 1), "1" + "0" * 40])
def test_a_garbled_counter_loses_no_utterance(seq: str) -> None:
    kept = history()
    kept.record(blip(), text="first")
    (kept.directory / "seq").write_text(seq)
    kept.record(blip(), text="second")
    assert [u.text for u in history().entries()] == ["second", "first"]


def test_entry_ids_are_ascii_digits_only() -> None:
    assert entry_id("000042") == 42 and entry_id(str(MAX_ID)) == MAX_ID
    for stem in ("²", "١٢", "", "1" * 13, "4a", " 42", "-1"):
        assert entry_id(stem) is None


def test_replay_list_beside_a_planted_name(vocal_home: Path) -> None:
    history().record(blip(), text="hello there")
    (history().directory / "².json").write_text("{}")
    result = run_hostile("replay", "--list", timeout_s=60)
    assert result.returncode == 0, result.stderr
    assert "hello there" in result.stdout and "unexpected" not in result.stderr
