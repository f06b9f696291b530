"""The committed completion scripts are current, and completion works in a real bash."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from runner import run_vocal

from vocal.completion import SHELLS, completion_script

REPO = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("shell", SHELLS)
def test_committed_script_matches_a_fresh_one(shell: str) -> None:
    committed = (REPO / "completions" / f"vocal.{shell}").read_text()
    generated = run_vocal("completions", shell)
    assert generated.returncode == 0
    assert generated.stdout.decode() == committed == completion_script(shell), (
        "completions/ is stale: run scripts/gen-completions"
    )


def test_unknown_shell_is_a_usage_error() -> None:
    assert run_vocal("completions", "tcsh").returncode == 2


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_bash_completes_command_names_and_options(tmp_path: Path) -> None:
    # A `vocal` on PATH that runs this interpreter, as the installed console script would.
    shim = tmp_path / "vocal"
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m vocal "$@"\n')
    shim.chmod(0o755)
    script = REPO / "completions" / "vocal.bash"

    def complete(*words: str, incomplete: str = "") -> list[str]:
        program = (
            f"source {script}; COMP_WORDS=({' '.join(words)} '{incomplete}'); "
            f"COMP_CWORD={len(words)}; _vocal_completion vocal; printf '%s\\n' \"${{COMPREPLY[@]}}\""
        )
        env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
        out = subprocess.run(["bash", "-c", program], capture_output=True, text=True, env=env)
        return out.stdout.split()

    assert {"devices", "play", "completions"} <= set(complete("vocal"))
    assert complete("vocal", incomplete="dev") == ["devices"]
    assert "--json" in complete("vocal", "devices", incomplete="--")
