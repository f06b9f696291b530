"""Play a WAV file through vocal's own output (or copy it to another WAV)."""

from __future__ import annotations

from pathlib import Path

import typer

from vocal.commands._app import command_app

app = command_app()


@app.command()
def play(
    file: Path = typer.Argument(..., help="The WAV file to play (PCM or float, any rate)."),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Write a 16-bit WAV here instead of playing."
    ),
    device: str | None = typer.Option(
        None, "--device", envvar="VOCAL_OUTPUT_DEVICE", help="Output device index or name part."
    ),
    volume: float = typer.Option(1.0, "--volume", min=0.0, max=2.0, help="Gain, 0 to 2."),
) -> None:
    """Play FILE to the default output device and return when it has been heard.

    Exit codes: 2 for a file that is missing or not a readable WAV, 5 when no audio output
    device can be opened, 130 on Ctrl-C (playback stops at once).
    """
    from vocal.audio import read_wav
    from vocal.playback import play_audio

    play_audio(read_wav(file), output=output, device=device, volume=volume)
