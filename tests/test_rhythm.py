"""The person's rhythm (vocal.hearing.rhythm): what a turn learns of their pauses, and what is
kept of it between turns in the state directory."""

from __future__ import annotations

import os

import pytest

from vocal.hearing.rhythm import (
    FLOOR_RATIO,
    KEEP_WEIGHT,
    MAX_PAUSE_MS,
    MIN_PAUSE_MS,
    RHYTHM_FILE,
    Rhythm,
    keep_rhythm,
    load_rhythm,
)


def test_only_pauses_resumed_from_and_long_enough_count() -> None:
    rhythm = Rhythm()
    for pause_ms in (MIN_PAUSE_MS - 1, float("nan"), float("inf"), MAX_PAUSE_MS + 1, 600.0, 900.0):
        rhythm.resumed(pause_ms)
    assert rhythm.resumed_ms == [600.0, 900.0]
    assert rhythm.floor_ms(2500) == pytest.approx(FLOOR_RATIO * 900)
    assert rhythm.floor_ms(1000) == 1000  # never above the cap


def test_the_kept_average_moves_slowly_and_survives_a_new_process(tmp_path) -> None:  # noqa: ANN001
    first = load_rhythm(tmp_path)
    assert first.kept_ms == 0 and first.floor_ms(2500) == 0
    first.resumed(1000.0)
    assert keep_rhythm(tmp_path, first)
    assert oct(os.stat(tmp_path / RHYTHM_FILE).st_mode & 0o777) == "0o600"
    second = load_rhythm(tmp_path)
    assert second.kept_ms == 1000.0 and second.kept_turns == 1
    assert second.floor_ms(2500) == pytest.approx(FLOOR_RATIO * 1000)  # before any pause
    second.resumed(400.0)
    keep_rhythm(tmp_path, second)
    third = load_rhythm(tmp_path)
    assert third.kept_ms == pytest.approx((1 - KEEP_WEIGHT) * 1000 + KEEP_WEIGHT * 400)
    assert not keep_rhythm(tmp_path, third)  # a turn with no long pause keeps nothing new


@pytest.mark.parametrize(
    "content",
    [
        "not json",
        "[1, 2]",
        '{"inner_pause_ms": "long", "turns": 1}',
        '{"inner_pause_ms": -5, "turns": 1}',
        '{"inner_pause_ms": 1e400, "turns": 1}',
        '{"inner_pause_ms": 500, "turns": 1.5}',
        "[" * 100_000,
    ],
)
def test_a_bad_file_is_a_fresh_rhythm(tmp_path, content: str) -> None:  # noqa: ANN001
    (tmp_path / RHYTHM_FILE).write_text(content)
    assert load_rhythm(tmp_path) == Rhythm()


def test_an_unwritable_state_directory_does_not_fail_the_turn(tmp_path) -> None:  # noqa: ANN001
    blocker = tmp_path / "file"
    blocker.write_text("")
    rhythm = Rhythm()
    rhythm.resumed(800.0)
    assert not keep_rhythm(blocker / "home", rhythm)
    assert not (blocker / "home").exists()
