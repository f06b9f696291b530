"""Speak text aloud (or write it to a WAV), sentence by sentence, through vocal's own output."""

from __future__ import annotations

from pathlib import Path

import typer

from vocal.commands._app import command_app

app = command_app()


@app.command()
def speak(
    text: str | None = typer.Argument(
        None, help="What to say. '-' reads stdin (so does no TEXT when stdin is a pipe)."
    ),
    voice: str | None = typer.Option(
        None, "--voice", help="A voice of the engine, or ENGINE:VOICE (e.g. espeak-ng:en-gb)."
    ),
    engine: str | None = typer.Option(
        None, "--engine", help="hibari (default), espeak-ng, piper, say, openai, elevenlabs."
    ),
    speed: float | None = typer.Option(
        None, "--speed", min=0.25, max=4.0, help="Pace, 1.0 is the engine's normal."
    ),
    volume: float | None = typer.Option(
        None, "--volume", min=0.0, max=2.0, help="Gain 0 to 2 (default: `vocal volume`)."
    ),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Write a 16-bit WAV here instead of playing."
    ),
    quotes: bool = typer.Option(
        False, "--quotes", help="Speak only markdown blockquotes, one utterance per paragraph."
    ),
    device: str | None = typer.Option(
        None, "--device", envvar="VOCAL_OUTPUT_DEVICE", help="Output device index or name part."
    ),
    no_conch: bool = typer.Option(
        False, "--no-conch", help="Speak without taking the floor (may talk over other agents)."
    ),
    session: str | None = typer.Option(
        None, "--session", help="Whose turn this is (default VOCAL_SESSION, else this process)."
    ),
    agent: str | None = typer.Option(
        None, "--agent", help="A name for `vocal conch status` (default VOCAL_AGENT)."
    ),
    no_history: bool = typer.Option(False, "--no-history", help="Do not keep it for replay."),
    json_output: bool = typer.Option(False, "--json", help="Print timings and sentences as JSON."),
) -> None:
    """Say TEXT through the speaker: the next sentence is synthesized while one plays.

    Markdown, code, URLs and emoji are cleaned up first; lines with no Latin letter are skipped
    by English-only engines. `vocal mute` or `vocal volume 0` make this a no-op (exit 0) that
    loads no engine and takes no floor; --output writes a file regardless (no floor either).

    It takes the conch first (waits its turn; VOCAL_CONCH_MODE=callback returns at once with
    exit 3 instead), answers `vocal control` stop/pause/resume/skip-forward (the rest of the
    text is skipped)/skip-back (replays from the history) while it waits and speaks, and keeps
    what it said in the history for `vocal replay`. A --voice stored with `vocal voices add`
    speaks through the chatterbox cloning engine.

    Exit codes: 2 for empty text, binary stdin, an unknown voice or engine; 3 when the floor is
    not granted in time or is taken while speaking (`vocal conch bump`); 5 when the engine or
    the audio output is unavailable (an HTTP engine that cannot be reached in time, or a cloned
    voice without its weights, included); 130 on Ctrl-C or SIGTERM (sound stops at once).
    """
    import time

    started_at_s = time.monotonic()
    import json
    import sys

    from vocal.config import load_settings
    from vocal.errors import UsageError
    from vocal.speech import SpeakOptions, decode_input, process_started_at_s
    from vocal.speech import speak as speak_text

    if text is None and sys.stdin.isatty():
        raise UsageError("give TEXT to say, or '-' to read it from stdin")
    if text is None or text == "-":
        text = decode_input(sys.stdin.buffer.read())
        started_at_s = time.monotonic()
    settings = load_settings(session=session, agent=agent)
    options = SpeakOptions(
        engine=engine, voice=voice, speed=speed, volume=volume, output=output, device=device,
        quotes=quotes, use_conch=not no_conch, record=not no_history,
    )  # fmt: skip
    result = speak_text(text, options, settings, started_at_s=started_at_s)
    if result is not None and not result.sentences and not result.stopped:
        typer.echo("vocal: nothing speakable in the text", err=True)
    if json_output:
        payload = {"muted": True} if result is None else result.to_dict()
        process_start = process_started_at_s()
        first = None if result is None else result.first_audio_at_s
        payload["process_to_first_audio_ms"] = (
            round((first - process_start) * 1000, 1) if first and process_start else None
        )
        payload["output"] = str(output) if output is not None else None
        typer.echo(json.dumps(payload))
