"""The README's first command runs the main job: one spoken turn, heard back on a loopback."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from harness.person import ANSWER, SimulatedPerson
from harness.pulse import PulseSinks
from harness.words import word_error_rate

pytestmark = [pytest.mark.audio, pytest.mark.usefixtures("pulse")]

REPO = Path(__file__).resolve().parent.parent


def test_readme_commands_are_the_scripts() -> None:
    head = (REPO / "README.md").read_text().split("```")[1]
    assert "scripts/run" in head and "scripts/test" in head
    assert "scripts/test" in (REPO / ".ci" / "run").read_text()


def test_scripts_run_holds_a_whole_turn_with_a_simulated_person(
    vocal_home: Path, pulse: PulseSinks
) -> None:
    # This machine has a sound server, so force the loopback path a server or CI would take.
    env = {**os.environ, "VOCAL_DEMO_PERSON": "1", "VOCAL_HOME": str(vocal_home)}
    result = subprocess.run(
        [str(REPO / "scripts" / "run"), "Hello, what should we build?"],
        capture_output=True, text=True, env=env, timeout=300,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert word_error_rate("Let us write the tests first.", result.stdout) <= 0.35, result.stdout
    assert "simulated person" in result.stderr
    # Then, as the README goes on: `vocal doctor` on what scripts/run installed names the null
    # sink and its monitor, and finds nothing that fails.
    doctor = subprocess.run(
        [str(REPO / ".venv" / "bin" / "vocal"), "doctor", "--json"],
        capture_output=True, text=True, env=env, timeout=60,
    )  # fmt: skip
    checks = {check["name"]: check for check in json.loads(doctor.stdout)}
    assert doctor.returncode == 0, doctor.stdout + doctor.stderr
    assert f"sink {pulse.speaker}" in checks["devices"]["detail"], checks["devices"]
    assert f"source {pulse.speaker}.monitor" in checks["devices"]["detail"]
    # And `vocal setup` with the embedded defaults passes its proof on the same loopback.
    with SimulatedPerson(vocal_home / "run", ANSWER) as person:
        setup = subprocess.run(
            [str(REPO / ".venv" / "bin" / "vocal"), "setup", "--json"],
            capture_output=True, text=True, env=env, timeout=180,
        )  # fmt: skip
    assert person.answered.is_set() and setup.returncode == 0, setup.stderr[-3000:]
    assert word_error_rate(ANSWER, json.loads(setup.stdout)["heard"]) <= 0.35, setup.stdout
