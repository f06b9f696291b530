"""Speak text aloud (or write it to a WAV), sentence by sentence, through vocal's own output."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from vocal.commands._app import command_app, finite, float_range, shown_default

if TYPE_CHECKING:
    from vocal.config import Settings
    from vocal.speaking.speak import SpeakOptions

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
        None,
        "--engine",
        help=f"hibari, espeak-ng, piper, say, openai, elevenlabs [{shown_default('tts_engine')}].",
    ),
    speed: float | None = typer.Option(
        None,
        "--speed",
        click_type=float_range("speed"),
        help="Pace, 1.0 is the engine's normal.",
        callback=finite,
    ),
    volume: float | None = typer.Option(
        None,
        "--volume",
        min=0.0,
        max=2.0,
        help="Gain 0 to 2 (default: `vocal volume`).",
        callback=finite,
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
    message: str | None = typer.Option(
        None, "--message", help="Message id: TEXT is one piece of it (agent hooks; see below)."
    ),
    piece: int | None = typer.Option(
        None,
        "--piece",
        min=0,
        max=99_999,  # vocal.floor.pieces.validate_piece's range
        help="Which piece of --message TEXT is, numbered from 0.",
    ),
    final: bool = typer.Option(False, "--final", help="This is the message's last piece."),
    json_output: bool = typer.Option(False, "--json", help="Print timings and sentences as JSON."),
) -> None:
    """Say TEXT through the speaker: the next sentence is synthesized while one plays.

    Markdown, code, URLs and emoji are cleaned up first; lines with no Latin letter are skipped
    by English-only engines. `vocal mute` or `vocal volume 0` make this a no-op (exit 0) that
    loads no engine and takes no floor; --output writes a file regardless (no floor either),
    whole, and only once speech was made: on any failure the file that was there is kept.

    It takes the conch first (waits its turn; VOCAL_CONCH_MODE=callback returns at once with
    exit 3 instead), answers `vocal control` stop/pause/resume/skip-forward (the rest of the
    text is skipped)/skip-back (replays from the history) while it waits and speaks, and keeps
    what it said in the history for `vocal replay`. A --voice stored with `vocal voices add`
    speaks through the chatterbox cloning engine.

    Pieces (agent hooks: a reply arrives cut at line breaks, one process per piece, in any
    order): `--message ID --piece N [--final]`, pieces numbered from 0. Every piece is sent,
    even one with nothing to say, so a missing piece can be told from an empty one. A piece is
    read only after every piece before it; one that has not arrived is waited for at most
    VOCAL_PIECE_TIMEOUT seconds, then reading goes on from the earliest piece that
    arrived. Whichever process holds the message reads it in order, one engine and one floor for
    all. A newer message in the same session (VOCAL_SESSION / --session) supersedes an older
    one: the older one stops at the line it has reached and its waiting and late pieces exit 3
    with status "superseded" in --json (a piece arriving after its turn passed: "late", exit 3).
    Statuses: read, empty, skipped, stopped, muted (exit 0); superseded, late (exit 3).

    Exit codes: 2 for empty text, binary stdin, an unknown voice or engine, nothing speakable
    with --output; 1 when --output cannot be written (a full disk); 3 when the floor is
    not granted in time or is taken while speaking (`vocal conch bump`); 5 when the engine or
    the audio output is unavailable (an HTTP engine that cannot be reached in time, or a cloned
    voice without its weights, included); 130 on Ctrl-C or SIGTERM (sound stops at once).
    """
    import time

    started_at_s = time.monotonic()
    import json

    from vocal.config import load_settings
    from vocal.speaking.speak import SpeakOptions, process_started_at_s, text_argument
    from vocal.speaking.speak import speak as speak_text
    from vocal.timeline import mark, since

    text, from_stdin = text_argument(text)
    if from_stdin:
        started_at_s = time.monotonic()
    mark("text_known", started_at_s)
    settings = load_settings(session=session, agent=agent)
    options = SpeakOptions(
        engine=engine,
        voice=voice,
        speed=speed,
        volume=volume,
        output=output,
        device=device,
        quotes=quotes,
        use_conch=not no_conch,
        record=not no_history,
    )
    if message is not None or piece is not None or final:
        _speak_piece(text, options, settings, message, piece, final, json_output)
        return
    result = speak_text(text, options, settings, started_at_s=started_at_s)
    if result is not None and not result.sentences and not result.stopped:
        typer.echo("vocal: nothing speakable in the text", err=True)
    if json_output:
        payload: dict[str, object] = {"muted": True} if result is None else result.to_dict()
        process_start = process_started_at_s()
        first = None if result is None else result.first_audio_at_s
        payload["process_to_first_audio_ms"] = (
            round((first - process_start) * 1000, 1) if first and process_start else None
        )
        payload["output"] = str(output) if output is not None else None
        if first:
            mark("first_audio", first)
        payload["timeline"] = since(process_start)
        typer.echo(json.dumps(payload))


def _speak_piece(
    text: str,
    options: SpeakOptions,
    settings: Settings,
    message: str | None,
    piece: int | None,
    final: bool,
    json_output: bool,
) -> None:
    import json

    from vocal.errors import UsageError
    from vocal.speaking.piece_speaker import speak_piece

    if message is None or piece is None:
        raise UsageError("pieces need both --message ID and --piece N")
    outcome = speak_piece(text, options, settings, message=message, piece=piece, final=final)
    if outcome.exit_code:
        superseded = outcome.status == "superseded"
        why = "a newer message superseded it" if superseded else "its turn had passed"
        typer.echo(f"vocal: piece {piece} of message {message} not read: {why}", err=True)
    if json_output:
        payload = outcome.to_dict()
        payload["speech"] = [d for d in outcome.details if d is not None]
        typer.echo(json.dumps(payload))
    if outcome.exit_code:
        raise typer.Exit(outcome.exit_code)
