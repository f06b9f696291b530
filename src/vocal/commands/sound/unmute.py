"""Unmute vocal after `vocal mute` (the volume is kept)."""

from __future__ import annotations

import typer

from vocal.commands._app import command_app

app = command_app()


@app.command()
def unmute(
    json_output: bool = typer.Option(False, "--json", help="Print the gates as JSON."),
) -> None:
    """Unmute speech; the volume set with `vocal volume` is kept."""
    import json

    from vocal.config import load_settings
    from vocal.floor.gates import set_muted

    gates = set_muted(load_settings().home, False)
    if json_output:
        typer.echo(json.dumps(gates.to_dict()))
    else:
        typer.echo(f"unmuted (volume {gates.volume_percent}%)", err=True)
