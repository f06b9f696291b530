"""List audio input and output devices, with the defaults marked."""

from __future__ import annotations

import typer

from vocal.commands._app import command_app

app = command_app()


@app.command()
def devices(
    json_output: bool = typer.Option(False, "--json", help="Print a JSON array for scripts."),
) -> None:
    """List audio input and output devices; `*` marks the defaults.

    Exit code 5 when PortAudio is missing or sees no device.
    """
    import json

    from vocal.audio.devices import NO_DEVICE_HINT, list_devices
    from vocal.errors import DeviceError

    found = list_devices()
    if not found:
        raise DeviceError("PortAudio sees no audio devices", hint=NO_DEVICE_HINT)
    if json_output:
        typer.echo(json.dumps([d.to_dict() for d in found], indent=2))
        return
    from vocal.floor.shown import MAX_SHOWN_TEXT_CHARS, shown_name

    for d in found:
        marks = ("*in " if d.default_input else "    ") + ("*out" if d.default_output else "    ")
        # Device names come from the sound server, which any program may add devices to.
        name, hostapi = shown_name(d.name, MAX_SHOWN_TEXT_CHARS), shown_name(d.hostapi)
        typer.echo(
            f"{d.index:>3} {marks} {name} ({hostapi}; "
            f"{d.input_channels} in, {d.output_channels} out, {d.default_sample_rate:g} Hz)"
        )
