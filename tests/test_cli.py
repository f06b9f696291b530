"""The CLI shell: version, discovery, usage errors and the one-line error contract."""

from __future__ import annotations

from pathlib import Path

from harness.runner import run_vocal
from vocal import __version__
from vocal.cli import COMMANDS_DIR, command_module, discover_commands, summary_of


def test_version() -> None:
    result = run_vocal("--version")
    assert result.returncode == 0
    assert result.stdout.decode().strip() == f"vocal {__version__}"


def test_help_lists_every_command_with_its_summary() -> None:
    out = " ".join(run_vocal("--help").stdout.decode().split())
    for name, path in discover_commands().items():
        summary = summary_of(path)
        assert summary, f"{path.name}: no docstring"
        assert f"{name} {' '.join(summary.split())}" in out


def test_no_arguments_shows_help() -> None:
    result = run_vocal()
    assert "Usage: vocal" in (result.stdout + result.stderr).decode()


def test_unknown_command_is_a_usage_error() -> None:
    result = run_vocal("no-such-command")
    assert result.returncode == 2
    assert b"No such command" in result.stderr
    assert b"Traceback" not in result.stderr


def test_unknown_option_is_a_usage_error() -> None:
    result = run_vocal("devices", "--no-such-option")
    assert result.returncode == 2
    assert b"Traceback" not in result.stderr


def test_discovery_skips_private_and_helper_modules() -> None:
    names = set(discover_commands())
    assert "_app" not in names and "-app" not in names
    for path in [*COMMANDS_DIR.glob("*.py"), *COMMANDS_DIR.glob("*/*.py")]:
        if path.stem.startswith("_") or path.stem.endswith("_helpers") or path.stem == "types":
            assert path.stem.replace("_", "-") not in names


def test_topic_folders_hold_commands_and_are_none() -> None:
    commands = discover_commands()
    topics = {path.parent.name for path in commands.values() if path.parent != COMMANDS_DIR}
    assert {"machine", "sound"} <= topics and not topics & set(commands)
    assert commands["mute"] == COMMANDS_DIR / "sound" / "mute.py"
    assert command_module(commands["mute"]) == "vocal.commands.sound.mute"
    assert command_module(commands["speak"]) == "vocal.commands.speak"
    assert list(commands) == sorted(commands)  # `vocal --help` lists them by name


def test_library_error_is_one_line_with_its_exit_code(tmp_path: Path) -> None:
    result = run_vocal("play", str(tmp_path / "missing.wav"))
    assert result.returncode == 2
    lines = result.stderr.decode().strip().splitlines()
    assert lines == [f"vocal: error: {tmp_path / 'missing.wav'}: no such file"]


def test_debug_shows_the_traceback(tmp_path: Path) -> None:
    result = run_vocal("play", str(tmp_path / "missing.wav"), env={"VOCAL_DEBUG": "1"})
    assert result.returncode != 0
    assert b"Traceback" in result.stderr
