"""Play a WAV file through vocal's own output (or copy it to another WAV)."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from vocal.commands._app import command_app, finite

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
    volume: float = typer.Option(
        1.0, "--volume", min=0.0, max=2.0, help="Gain, 0 to 2.", callback=finite
    ),
    no_conch: bool = typer.Option(
        False, "--no-conch", help="Play without taking the floor (may talk over other agents)."
    ),
    session: str | None = typer.Option(
        None, "--session", help="Whose turn this is (default VOCAL_SESSION, else this process)."
    ),
    agent: str | None = typer.Option(
        None, "--agent", help="A name for `vocal conch status` (default VOCAL_AGENT)."
    ),
    text: str | None = typer.Option(
        None, "--text", help="What the audio says, kept in the history (default: the file name)."
    ),
    no_history: bool = typer.Option(False, "--no-history", help="Do not keep it for replay."),
    as_json: bool = typer.Option(
        False, "--json", help="Print the turn's timeline (conch, start, end) as JSON."
    ),
) -> None:
    """Play FILE to the default output device and return when it has been heard.

    Like `vocal speak`, it takes the conch first (waits its turn; VOCAL_CONCH_MODE=callback
    returns at once with exit 3 instead), listens for `vocal control` commands while it waits
    and plays, and keeps the audio in the history for `vocal replay`.

    Exit codes: 2 for a file that is missing or not a readable WAV, 3 when the floor is not
    granted in time or is taken while playing (`vocal conch bump`), 5 when no audio output
    device can be opened, 130 on Ctrl-C or SIGTERM (playback stops at once).
    """
    from vocal.audio.playback import play_audio
    from vocal.audio.wav import read_wav
    from vocal.config import load_settings
    from vocal.floor.turn import Turn

    audio = read_wav(file)
    if output is not None:  # a file is not the speaker: no floor to take
        play_audio(audio, output=output, device=device, volume=volume)
        return
    settings = load_settings(session=session, agent=agent)
    with Turn(settings, kind="play", use_conch=not no_conch) as turn:
        result = turn.play(
            audio, text=text or file.name, record=not no_history, device=device, volume=volume
        )
        if as_json:
            held = turn.held
            timeline = {
                "session": turn.session,
                "seq": held.seq if held else None,
                "waited_s": round(held.waited_s, 4) if held else None,
                "position_on_arrival": held.position_on_arrival if held else None,
                **result.to_dict(),
            }
            print(json.dumps(timeline))
