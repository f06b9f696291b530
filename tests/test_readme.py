"""The README's first command runs the main job: one spoken turn, heard back on a loopback."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
from speech import word_error_rate

pytestmark = [pytest.mark.audio, pytest.mark.usefixtures("pulse")]

REPO = Path(__file__).resolve().parent.parent


def test_readme_commands_are_the_scripts() -> None:
    head = (REPO / "README.md").read_text().split("```")[1]
    assert "scripts/run" in head and "scripts/test" in head
    assert "scripts/test" in (REPO / ".ci" / "run").read_text()


def test_scripts_run_holds_a_whole_turn_with_a_simulated_person(vocal_home: Path) -> None:
    # This machine has a sound server, so force the loopback path a server or CI would take.
    env = {**os.environ, "VOCAL_DEMO_PERSON": "1", "VOCAL_HOME": str(vocal_home)}
    result = subprocess.run(
        [str(REPO / "scripts" / "run"), "Hello, what should we build?"],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert word_error_rate("Let us write the tests first.", result.stdout) <= 0.35, result.stdout
    assert "simulated person" in result.stderr
