"""Mute vocal: nothing is synthesized or played until `vocal unmute`."""

from __future__ import annotations

import typer

from vocal.commands._app import command_app

app = command_app()


@app.command()
def mute(
    json_output: bool = typer.Option(False, "--json", help="Print the gates as JSON."),
) -> None:
    """Mute speech for every vocal process of this user (persisted in the state directory).

    While muted, `vocal speak` loads no engine and synthesizes nothing, and exits 0.
    Writing a file with `vocal speak --output` is not affected.
    """
    import json

    from vocal.config import load_settings
    from vocal.floor.gates import set_muted

    gates = set_muted(load_settings().home, True)
    if json_output:
        typer.echo(json.dumps(gates.to_dict()))
    else:
        typer.echo("muted", err=True)
