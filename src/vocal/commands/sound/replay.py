"""Replay recent utterances from the on-disk history."""

from __future__ import annotations

import json
from pathlib import Path

import typer

from vocal.commands._app import command_app, finite
from vocal.config import SETTING_RANGES

app = command_app()


@app.command()
def replay(
    n: int = typer.Argument(
        1,
        min=1,
        max=SETTING_RANGES["history_size"][1],
        help="Which utterance: 1 the most recent, 2 the one before.",
    ),
    list_: bool = typer.Option(False, "--list", "-l", help="List the history instead."),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Write it to a 16-bit WAV instead of playing."
    ),
    device: str | None = typer.Option(
        None, "--device", envvar="VOCAL_OUTPUT_DEVICE", help="Output device index or name part."
    ),
    volume: float = typer.Option(
        1.0, "--volume", min=0.0, max=2.0, help="Gain, 0 to 2.", callback=finite
    ),
    no_conch: bool = typer.Option(False, "--no-conch", help="Play without taking the floor."),
    session: str | None = typer.Option(None, "--session", help="Whose turn this is."),
    agent: str | None = typer.Option(None, "--agent", help="A name for `vocal conch status`."),
    as_json: bool = typer.Option(False, "--json", help="Print what was replayed as JSON."),
) -> None:
    """Play the N-th most recent utterance again, from a new process.

    The history keeps the last VOCAL_HISTORY_SIZE utterances (PCM, text, voice, time) on disk;
    a replay plays the stored PCM and never runs speech recognition or synthesis. Like any turn
    it takes the conch and answers `vocal control`; `vocal control skip-back` then steps on back
    from here.
    """
    from vocal.config import load_settings
    from vocal.floor.history import History
    from vocal.floor.shown import MAX_SHOWN_TEXT_CHARS, shown_name

    settings = load_settings(session=session, agent=agent)
    history = History.from_settings(settings)
    if list_:
        entries = [u.to_dict() for u in history.entries()]
        if as_json:
            print(json.dumps(entries))
        for back, entry in enumerate(entries if not as_json else [], 1):
            voice = f" [{shown_name(entry['voice'])}]" if entry["voice"] else ""
            text = shown_name(entry["text"], MAX_SHOWN_TEXT_CHARS)
            print(f"{back:>3}. #{entry['id']} {entry['duration_s']:.1f} s{voice} {text}")
        return
    utterance = history.get(n)
    if output is not None:
        from vocal.audio.wav import write_wav

        write_wav(output, utterance.audio())
        return
    from vocal.floor.turn import replay as replay_utterance

    result = replay_utterance(
        settings, utterance, use_conch=not no_conch, device=device, volume=volume
    )
    if as_json:
        print(json.dumps({"replayed": utterance.to_dict(), **result.to_dict()}))
