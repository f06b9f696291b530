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
    json_output: bool = typer.Option(False, "--json", help="Print timings and sentences as JSON."),
) -> None:
    """Say TEXT through the speaker: the next sentence is synthesized while one plays.

    Markdown, code, URLs and emoji are cleaned up first; lines with no Latin letter are skipped
    by English-only engines. `vocal mute` or `vocal volume 0` make this a no-op (exit 0) that
    loads no engine; --output writes a file regardless.

    Exit codes: 2 for empty text, binary stdin, an unknown voice or engine; 5 when the engine or
    the audio output is unavailable (an HTTP engine that cannot be reached in time included);
    130 on Ctrl-C (sound stops at once).
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
    settings = load_settings()
    options = SpeakOptions(
        engine=engine, voice=voice, speed=speed, volume=volume, output=output, device=device,
        quotes=quotes,
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
