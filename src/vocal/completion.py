"""Shell completion scripts, generated from the CLI itself.

Completion re-runs `vocal` with `_VOCAL_COMPLETE` set on every TAB, so its latency is vocal's
start-up time; the root completes command names from file names (vocal.cli.LazyGroup).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

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


def default_shell() -> str | None:
    """The user's shell from $SHELL, if it is one vocal completes."""
    import os

    name = os.path.basename(os.environ.get("SHELL", ""))
    return name if name in SHELLS else None


def install_path(shell: str) -> Path:
    """Where `shell` finds completions for `vocal` without any rc change (bash-completion's
    and fish's per-user directories, XDG paths), or ~/.zfunc/_vocal for zsh (Typer's choice:
    zsh has no per-user default; `ZSH_RC_LINES` adds it to fpath)."""
    import os

    home = Path.home()
    data = Path(os.environ.get("XDG_DATA_HOME") or home / ".local" / "share")
    config = Path(os.environ.get("XDG_CONFIG_HOME") or home / ".config")
    if shell == "bash":
        return data / "bash-completion" / "completions" / "vocal"
    if shell == "fish":
        return config / "fish" / "completions" / "vocal.fish"
    if shell == "zsh":
        return home / ".zfunc" / "_vocal"
    raise ValueError(f"unsupported shell {shell!r}")


#: What ~/.zshrc needs (once) for ~/.zfunc/_vocal to load.
ZSH_RC_LINES = "fpath+=~/.zfunc\nautoload -Uz compinit && compinit"


@dataclass(frozen=True)
class Installed:
    """What `install_completion` did."""

    shell: str
    path: Path
    changed: bool  # False: the same script was already there

    def to_dict(self) -> dict[str, object]:
        return {"shell": self.shell, "path": str(self.path), "changed": self.changed}


def install_completion(shell: str) -> Installed:
    """Write `shell`'s completion script where it loads it; rewriting only a different one."""
    path = install_path(shell)
    script = completion_script(shell)
    try:
        if path.read_text(encoding="utf-8") == script:
            return Installed(shell, path, changed=False)
    except (FileNotFoundError, UnicodeDecodeError):
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.tmp")
    temporary.write_text(script, encoding="utf-8")
    temporary.replace(path)
    return Installed(shell, path, changed=True)
