"""Show or set the speech volume in percent (0 silences: nothing is synthesized)."""

from __future__ import annotations

import typer

from vocal.commands._app import command_app

app = command_app()


@app.command()
def volume(
    percent: int | None = typer.Argument(
        None,
        min=0,
        max=200,
        help="New volume, 0 to 200 percent of the engine's level; omit to show it.",
    ),
    json_output: bool = typer.Option(False, "--json", help="Print the gates as JSON."),
) -> None:
    """Show the speech volume, or set it to PERCENT (persisted in the state directory).

    100 is the engine's own level. 0 means `vocal speak` synthesizes nothing and exits 0, like
    `vocal mute`. Prints the volume on stdout. Exit code 2 for a value outside 0 to 200.
    """
    import json

    from vocal.config import load_settings
    from vocal.floor.gates import read_gates, set_volume

    home = load_settings().home
    gates = read_gates(home) if percent is None else set_volume(home, percent)
    if json_output:
        typer.echo(json.dumps(gates.to_dict()))
    else:
        typer.echo(f"{gates.volume_percent}" + (" (muted)" if gates.muted else ""))
