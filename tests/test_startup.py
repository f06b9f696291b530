"""A turn is a process: --help and completion must not import the heavy libraries.

Runs each invocation in a fresh interpreter with `-X importtime` and reads which modules loaded.
Every discovered command is checked, so a new command module cannot regress start-up unnoticed.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from harness.imports import HEAVY, loaded_modules
from vocal.cli import discover_commands


def imported_modules(args: list[str], env: dict[str, str] | None = None) -> set[str]:
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "vocal", *args],
        capture_output=True,
        text=True,
        env={**os.environ, **(env or {})},
        timeout=60,
    )
    assert result.returncode == 0, result.stderr[-2000:]
    names = set()
    for line in result.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            names.add(line.rsplit("|", 1)[1].strip().split(".")[0])
    assert "typer" in names, "importtime output was not parsed"
    return names


def test_root_help_imports_nothing_heavy() -> None:
    assert not imported_modules(["--help"]) & HEAVY


@pytest.mark.parametrize("command", list(discover_commands()))
def test_command_help_imports_nothing_heavy(command: str) -> None:
    assert not imported_modules([*command.split(), "--help"]) & HEAVY


def test_completion_imports_nothing_heavy() -> None:
    env = {"_VOCAL_COMPLETE": "complete_bash", "COMP_WORDS": "vocal ", "COMP_CWORD": "1"}
    assert not imported_modules([], env) & HEAVY


def test_root_help_imports_no_command_module() -> None:
    loaded = loaded_modules(["--help"])
    assert "vocal.cli" in loaded
    assert [name for name in loaded if name.startswith("vocal.commands.")] == []
