"""Print or install the shell completion script for bash, zsh or fish."""

from __future__ import annotations

from enum import Enum

import typer

from vocal.commands._app import command_app

app = command_app()


class Shell(str, Enum):
    bash = "bash"
    zsh = "zsh"
    fish = "fish"


def _print(shell: str) -> None:
    from vocal.completion import completion_script

    typer.echo(completion_script(shell), nl=False)


@app.command()
def bash() -> None:
    """Print the bash completion script.

    `eval "$(vocal completions bash)"` loads it in this shell; `install` keeps it.
    """
    _print("bash")


@app.command()
def zsh() -> None:
    """Print the zsh completion script.

    `eval "$(vocal completions zsh)"` loads it in this shell; `install` keeps it.
    """
    _print("zsh")


@app.command()
def fish() -> None:
    """Print the fish completion script.

    `vocal completions fish | source` loads it in this shell; `install` keeps it.
    """
    _print("fish")


@app.command()
def install(
    shell: Shell | None = typer.Option(None, "--shell", help="The shell [default: from $SHELL]."),
    json_output: bool = typer.Option(False, "--json", help="Print JSON: shell, path, changed."),
) -> None:
    """Install the completion script where your shell finds it (idempotent).

    bash: $XDG_DATA_HOME/bash-completion/completions/vocal (bash-completion loads it); fish:
    $XDG_CONFIG_HOME/fish/completions/vocal.fish; zsh: ~/.zfunc/_vocal, plus two lines for
    ~/.zshrc that this prints (it never edits your rc files). A new shell completes `vocal`.
    """
    from vocal.completion import ZSH_RC_LINES, default_shell, install_completion
    from vocal.errors import UsageError

    name = shell.value if shell else default_shell()
    if name is None:
        raise UsageError("cannot tell your shell from $SHELL", hint="pass --shell bash|zsh|fish")
    done = install_completion(name)
    if json_output:
        import json

        typer.echo(json.dumps(done.to_dict()))
    else:
        verb = "installed" if done.changed else "already up to date:"
        typer.echo(f"vocal: {name} completion {verb} {done.path}", err=True)
    if name == "zsh":
        typer.echo(f"vocal: add to ~/.zshrc (once):\n{ZSH_RC_LINES}", err=True)
