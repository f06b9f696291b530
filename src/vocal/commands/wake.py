"""Wait for a spoken phrase ("hey jarvis"), then print what was said after it."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

import typer

from vocal.commands._app import FiniteFloatRange, command_app, finite, shown_default

if TYPE_CHECKING:
    pass

app = command_app()

#: The longest --timeout: a day, the longest any vocal wait is meant to last.
MAX_TIMEOUT_S = 86_400.0


@app.command()
def wake(
    phrase: str | None = typer.Argument(
        None,
        help=f"The words that wake [the wake_phrase setting: {shown_default('wake_phrase')}].",
        show_default=False,
    ),
    timeout: float | None = typer.Option(
        None,
        "--timeout",
        click_type=FiniteFloatRange(0.1, MAX_TIMEOUT_S),
        help="Give up (exit 4) when the phrase has not been heard in this many seconds "
        "[wait for ever].",
        callback=finite,
    ),
    detector: str = typer.Option(
        "auto",
        "--detector",
        help="Who listens: auto (a bundled phrase's model, else Whisper), micro (the bundled "
        "phrases only) or whisper (any phrase).",
    ),
    cue: bool = typer.Option(
        True,
        "--cue/--no-cue",
        help="Play the Wake cue when the phrase is heard (never for --input).",
    ),
    input_file: Path | None = typer.Option(
        None, "--input", "-i", help="Read this WAV instead of the microphone (any rate)."
    ),
    json_output: bool = typer.Option(
        False,
        "--json",
        help="Print JSON: text, phrase, detector, score, woke_at_s, what Whisper heard, timings.",
    ),
    device: str | None = typer.Option(
        None, "--device", envvar="VOCAL_INPUT_DEVICE", help="Input device index or name part."
    ),
) -> None:
    """Listen until PHRASE is said, then print what was said after it in the same breath.

    "hey jarvis, run the tests" prints `run the tests`; the phrase alone prints an empty line
    (exit 0), so `vocal wake && vocal converse "Yes?"` and `text=$(vocal wake)` both work.
    PHRASE defaults to the wake_phrase setting ("hey jarvis"). The bundled phrases (alexa, hey
    jarvis, hey mycroft, okay nabu) are heard by small microWakeWord models (vocal[wake]); any
    other phrase by Whisper on each stretch of speech, matched by sound ("they computer" is
    heard as "hey computer"). After the phrase the speaker is heard until they stop, as `vocal
    listen` hears them, with a longer pause allowed right after the phrase (waiting for the cue).

    Never woken by vocal itself: a phrase heard while any vocal process holds the floor or
    plays a reply is ignored, and so is every phrase while vocal is muted (`vocal mute`). The
    cue is the sound font's Wake cue (the font's default sound unless the font has a Wake/
    place). --input FILE is heard on the file's own clock, as the same sound from a
    microphone would be, and --timeout counts that clock.

    Exit codes: 0 the phrase was heard, 2 a bad option or unreadable input WAV, 4 not heard
    before --timeout (or in the whole --input file), 5 no microphone or a model unavailable,
    130 Ctrl-C.
    """
    import sys

    from vocal.agents.cues import play_wake_cue
    from vocal.config import load_settings
    from vocal.errors import NoSpeechError
    from vocal.wake.turn import wake_turn

    settings = load_settings(wake_phrase=phrase, input_device=device)
    live = input_file is None

    def note(message: str) -> None:
        typer.echo(f"vocal: {message}", err=True)

    def ignored(event: dict[str, object]) -> None:
        note(f"phrase heard at {event['at_s']:.1f} s ignored: {event['reason']}")

    if live and sys.stderr.isatty():
        note(f"listening for {settings.wake_phrase!r} (Ctrl-C to stop)")
    result = wake_turn(
        settings,
        detector=detector,
        timeout_s=timeout,
        input_file=input_file,
        on_wake=play_wake_cue if cue and live else None,
        on_ignored=ignored,
        on_note=note,
    )
    if json_output:
        import json

        typer.echo(json.dumps(result.to_dict()))
    if not result.woke:
        if result.end_reason == "timeout" and timeout is not None:
            where = f"in {timeout:g} s"
        else:
            where = "in the file" if input_file is not None else "before the input ended"
        raise NoSpeechError(f"{result.phrase!r} was not heard {where}")
    if not json_output:
        typer.echo(result.text)
