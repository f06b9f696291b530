"""vocal.files.atomic, and the outputs that go through it: a symlink is written through (dotfile
managers), permissions are kept, and a failed write leaves the old file untouched (issue 17)."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from vocal.audio.wav import Audio, read_wav, write_wav
from vocal.config import read_config_file
from vocal.errors import UsageError
from vocal.files.atomic import write_atomic
from vocal.ops.onboarding import write_config


def linked(tmp_path: Path, name: str, text: bytes) -> tuple[Path, Path]:
    """A file kept in a "dotfiles" folder and the symlink to it in "home"."""
    (tmp_path / "dotfiles").mkdir()
    (tmp_path / "home").mkdir()
    target = tmp_path / "dotfiles" / name
    target.write_bytes(text)
    link = tmp_path / "home" / name
    link.symlink_to(target)
    return link, target


def test_a_symlink_is_written_through_to_its_target(tmp_path: Path) -> None:
    link, target = linked(tmp_path, "settings.json", b"{}")
    os.chmod(target, 0o640)
    assert write_atomic(link, b'{"a": 1}') == target.resolve()
    assert link.is_symlink() and link.resolve() == target.resolve()
    assert target.read_bytes() == b'{"a": 1}'
    assert target.stat().st_mode & 0o777 == 0o640, "the target keeps its permissions"
    assert not [p for p in target.parent.iterdir() if p.name.startswith(".")], "no temp left"


def test_a_new_file_gets_the_given_mode(tmp_path: Path) -> None:
    path = write_atomic(tmp_path / "new", b"x", mode=0o600)
    assert path.stat().st_mode & 0o777 == 0o600


def test_a_failed_write_leaves_the_old_file(tmp_path: Path) -> None:
    path = tmp_path / "keep"
    path.write_bytes(b"precious")

    with pytest.raises(TypeError):
        write_atomic(path, "not bytes")  # type: ignore[arg-type]
    assert path.read_bytes() == b"precious"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["keep"]


def test_write_wav_through_a_symlink_and_into_a_directory(tmp_path: Path) -> None:
    link, target = linked(tmp_path, "out.wav", b"old")
    audio = Audio(np.zeros(1600, np.float32), 16_000)
    write_wav(link, audio)
    assert link.is_symlink() and read_wav(target).duration_s == pytest.approx(0.1)
    with pytest.raises(UsageError, match="directory"):
        write_wav(tmp_path, audio)


def test_setup_keeps_a_symlinked_config_and_its_comments(tmp_path: Path) -> None:
    text = b'# my settings\nsilence_ms = 700  # slow talker\nvoice = "hibari"\n'
    link, target = linked(tmp_path, "config.toml", text)
    write_config(link, {"silence_ms": 900, "stt_model": "base.en"})
    assert link.is_symlink(), "a dotfile manager's link survives"
    written = target.read_text()
    assert "silence_ms = 900  # slow talker" in written
    assert written.startswith("# my settings\n") and 'voice = "hibari"' in written
    assert read_config_file(link) == {"silence_ms": 900, "voice": "hibari",
                                      "stt_model": "base.en"}  # fmt: skip
