"""Prime every on-disk cache so the next turn pays no lazy set-up (a session-start hook)."""

from __future__ import annotations

import typer

from vocal.commands._app import command_app

app = command_app()


@app.command()
def warmup(
    engine: str | None = typer.Option(None, "--engine", help="The speech engine to prime."),
    detach: bool = typer.Option(
        False, "--detach", help="Warm up in the background and return at once (for hooks)."
    ),
    json_output: bool = typer.Option(False, "--json", help="Print each step's time as JSON."),
) -> None:
    """Load and exercise what a turn uses, once, so its caches are on disk and warm.

    The speech engine's prime() (optimized models, G2P tables) and one short synthesis sent
    nowhere, the speech-to-text model, and the audio library. Steps that fail are reported and
    skipped (exit 0): warming up is never what breaks a session.
    """
    import json
    import sys

    from vocal.config import load_settings
    from vocal.ops.warmup import start_detached, warm_up

    settings = load_settings(tts_engine=engine)
    if detach:
        start_detached(settings, engine)
        return
    steps = warm_up(settings)
    if json_output:
        typer.echo(json.dumps({"steps": [s.to_dict() for s in steps]}))
        return
    for step in steps:
        state = "ok" if step.error is None else f"skipped ({step.error})"
        print(f"vocal: warm-up {step.name}: {step.ms:.0f} ms {state}", file=sys.stderr)
