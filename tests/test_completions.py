"""The committed completion scripts are current, and completion works in a real bash."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from harness.runner import run_vocal
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
            f"COMP_CWORD={len(words)}; _vocal_completion vocal; "
            "printf '%s\\n' \"${COMPREPLY[@]}\""
        )
        env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}"}
        out = subprocess.run(["bash", "-c", program], capture_output=True, text=True, env=env)
        return out.stdout.split()

    assert {"devices", "play", "completions"} <= set(complete("vocal"))
    assert complete("vocal", incomplete="dev") == ["devices"]
    assert "--json" in complete("vocal", "devices", incomplete="--")


def _install(home: Path, *args: str) -> subprocess.CompletedProcess:
    env = {"HOME": str(home), "XDG_DATA_HOME": "", "XDG_CONFIG_HOME": "", "SHELL": "/bin/bash"}
    return run_vocal("completions", "install", *args, env=env)


@pytest.mark.parametrize(
    ("shell", "where"),
    [
        ("bash", ".local/share/bash-completion/completions/vocal"),
        ("zsh", ".zfunc/_vocal"),
        ("fish", ".config/fish/completions/vocal.fish"),
    ],
)
def test_install_writes_the_script_where_the_shell_looks_and_is_idempotent(
    tmp_path: Path, shell: str, where: str
) -> None:
    first = _install(tmp_path, "--shell", shell, "--json")
    assert first.returncode == 0, first.stderr
    assert json.loads(first.stdout) == {
        "shell": shell, "path": str(tmp_path / where), "changed": True
    }  # fmt: skip
    assert (tmp_path / where).read_text() == (REPO / "completions" / f"vocal.{shell}").read_text()
    again = _install(tmp_path, "--shell", shell)
    assert again.returncode == 0 and b"already up to date" in again.stderr
    assert (b"fpath+=~/.zfunc" in again.stderr) == (shell == "zsh")
    assert sorted(p.name for p in (tmp_path / where).parent.iterdir()) == [Path(where).name]


def test_install_picks_the_shell_from_the_environment_or_asks(tmp_path: Path) -> None:
    assert _install(tmp_path).returncode == 0
    assert (tmp_path / ".local/share/bash-completion/completions/vocal").is_file()
    env = {"HOME": str(tmp_path), "SHELL": "/bin/tcsh"}
    result = run_vocal("completions", "install", env=env)
    assert result.returncode == 2 and b"--shell" in result.stderr


@pytest.mark.skipif(shutil.which("bash") is None, reason="bash is not installed")
def test_a_real_bash_completes_from_the_installed_script(tmp_path: Path) -> None:
    assert _install(tmp_path, "--shell", "bash").returncode == 0
    shim = tmp_path / "bin" / "vocal"
    shim.parent.mkdir()
    shim.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m vocal "$@"\n')
    shim.chmod(0o755)
    script = tmp_path / ".local/share/bash-completion/completions/vocal"
    program = (
        f"source {script}; COMP_WORDS=(vocal 'doc'); COMP_CWORD=1; _vocal_completion vocal; "
        "printf '%s\\n' \"${COMPREPLY[@]}\""
    )
    env = {**os.environ, "PATH": f"{shim.parent}:{os.environ['PATH']}", "HOME": str(tmp_path)}
    out = subprocess.run(["bash", "-c", program], capture_output=True, text=True, env=env)
    assert out.stdout.split() == ["doctor"]
