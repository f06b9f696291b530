"""The spoken-commands set (tests/harness/commands.py, issue 36): the commands and their split,
and the pieces that find pauses and make room tone. The built set itself (about 8 minutes
of synthesis and Whisper the first time) is used by benchmarks/turns, not built in the suite."""

from __future__ import annotations

import numpy as np
import pytest

from harness import commands
from harness.commands import (
    COMMANDS,
    HELDOUT,
    boundary_of,
    command_text,
    load_command_turns,
    pink_noise,
    quiet_runs,
)


def test_every_command_has_two_clauses_or_more() -> None:
    assert 18 <= len(COMMANDS) <= 24
    texts = [command_text(c) for c in COMMANDS]
    assert len(set(texts)) == len(texts)
    for command, clauses in COMMANDS.items():
        assert len(clauses) >= 2, command
        assert all(len(clause.split()) >= 2 for clause in clauses), command
        assert command_text(command) == " ".join(clauses)


def test_a_quarter_of_the_commands_are_held_out() -> None:
    assert HELDOUT <= set(COMMANDS)
    assert 0.2 <= len(HELDOUT) / len(COMMANDS) <= 0.3
    assert commands.command_split("build-time") == "heldout"
    assert commands.command_split("merge-pr") == "tune"


def test_quiet_runs_lie_between_sounds_and_are_long_enough() -> None:
    sound = [False, True, True, False, False, False, True, False, True, False, False]
    # The quiet before the first sound and after the last is not a pause; one frame is too short.
    assert quiet_runs(np.array(sound), 2) == [(3, 6)]
    assert quiet_runs(np.array(sound), 1) == [(3, 6), (7, 8)]


def test_a_pause_belongs_to_the_word_boundary_it_overlaps() -> None:
    spans = [(0.5, 0.8), (0.85, 1.2), (1.6, 1.9), None, (2.4, 2.7)]
    assert boundary_of(1.25, 1.55, spans) == 2  # between words 2 and 3
    assert boundary_of(1.0, 1.1, spans) == 2  # Whisper's words 0.1 s off: the nearest boundary
    assert boundary_of(2.0, 2.3, spans) is None  # word 4 was not aligned
    assert boundary_of(5.0, 5.2, spans) is None


def test_room_tone_is_pink_noise_at_its_level() -> None:
    noise = pink_noise(4 * 16_000, np.random.default_rng(1))
    rms_db = 20 * np.log10(np.sqrt(np.mean(noise.astype(np.float64) ** 2)))
    assert abs(rms_db - commands.ROOM_DBFS) < 0.1
    spectrum = np.abs(np.fft.rfft(noise)) ** 2
    # 4 s: 4 bins a hertz. 100-200 Hz against 3.2-6.4 kHz: five octaves, -3 dB each.
    low, high = spectrum[400:800].mean(), spectrum[12_800:25_600].mean()
    assert abs(10 * np.log10(low / high) - 15) < 1.5
    assert spectrum[: 4 * 40].mean() < 1e-3 * low  # nothing below ROOM_LOW_HZ


def test_the_key_names_the_commands() -> None:
    key = commands.set_key()
    assert key == commands.set_key() and len(key) == 16
    changed = dict(COMMANDS, extra=("say this", "and then that"))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(commands, "COMMANDS", changed)
        assert commands.set_key() != key


def test_an_unknown_kind_or_split_is_refused_before_any_build() -> None:
    with pytest.raises(ValueError):
        load_command_turns("finished")
    with pytest.raises(ValueError):
        load_command_turns(split="test")


# The first build renders 80 commands and runs Whisper on them: ~8 min on 2 loaded cores.
