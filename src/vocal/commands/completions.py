"""Print the shell completion script for bash, zsh or fish."""

from __future__ import annotations

from enum import Enum

import typer

from vocal.commands._app import command_app

app = command_app()


class Shell(str, Enum):
    bash = "bash"
    zsh = "zsh"
    fish = "fish"


@app.command()
def completions(
    shell: Shell = typer.Argument(..., help="The shell to complete in."),
) -> None:
    """Print the completion script for SHELL on stdout.

    Load it for this session with `eval "$(vocal completions bash)"`, or save it where your
    shell looks (the generated scripts are also committed under completions/).
    """
    from vocal.completion import completion_script

    typer.echo(completion_script(shell.value), nl=False)
