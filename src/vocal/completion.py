"""Shell completion scripts, generated from the CLI itself.

Completion re-runs `vocal` with `_VOCAL_COMPLETE` set on every TAB, so its latency is vocal's
start-up time; the root completes command names from file names (vocal.cli.LazyGroup).
"""

from __future__ import annotations

COMPLETE_VAR = "_VOCAL_COMPLETE"
SHELLS = ("bash", "zsh", "fish")


def enable_completion() -> None:
    """Register Typer's shell completion classes (bash, zsh, fish) with its vendored Click."""
    from typer._completion_classes import completion_init

    completion_init()


def completion_script(shell: str, prog_name: str = "vocal") -> str:
    """The completion script for `shell`, ending in a newline."""
    from typer._completion_shared import get_completion_script

    if shell not in SHELLS:
        raise ValueError(f"unsupported shell {shell!r}")
    enable_completion()
    script = get_completion_script(prog_name=prog_name, complete_var=COMPLETE_VAR, shell=shell)
    return script + "\n"
