"""docs/reference.md is the CLI's current --help, and the README shows the new user's path."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


def test_reference_is_current() -> None:
    result = subprocess.run(
        [sys.executable, str(REPO / "docs" / "generate"), "--check"],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr or "docs/reference.md is stale: run docs/generate"


def test_reference_covers_every_command() -> None:
    from vocal.cli import discover_commands

    text = (REPO / "docs" / "reference.md").read_text()
    for name in discover_commands():
        assert f"\n## vocal {name}\n" in text, name


def test_readme_keeps_its_first_commands_and_shows_the_first_turn() -> None:
    readme = (REPO / "README.md").read_text()
    assert readme.split("```")[1].splitlines()[1].startswith("scripts/run")
    for section in ("## From install to the first spoken turn", "## Doctor", "## Setup",
                    "## Cues"):  # fmt: skip
        assert section in readme
    for command in ("vocal doctor", "vocal setup", "vocal cue", "vocal completions install"):
        assert command in readme
