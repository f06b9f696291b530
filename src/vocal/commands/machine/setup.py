"""Fetch the models and engines you choose, then prove a spoken turn works before saving them."""

from __future__ import annotations

import typer

from vocal.commands._app import command_app, shown_default

app = command_app()


@app.command()
def setup(
    model: str | None = typer.Option(
        None,
        "--model",
        "-m",
        help="A Whisper model to fetch now instead of on first use: tiny.en (embedded), "
        "base.en, small.en, large-v3-turbo, a hub id, a local directory.",
    ),
    engine: list[str] = typer.Option(
        [], "--engine", help="A speech engine whose weights to fetch: chatterbox (cloned voices)."
    ),
    tts_engine: str | None = typer.Option(
        None,
        "--tts-engine",
        help=f"The engine to speak with: hibari, espeak-ng, ... [{shown_default('tts_engine')}].",
    ),
    voice: str | None = typer.Option(None, "--voice", help="The voice to speak with."),
    proof: bool = typer.Option(
        True, "--proof/--no-proof", help="Hold one spoken turn before saving anything [on]."
    ),
    json_output: bool = typer.Option(
        False, "--json", help="Print JSON: fetched, heard, written, config_path, proof timings."
    ),
) -> None:
    """Fetch what the chosen engines need, hold one spoken turn as the proof, then save.

    Downloads show a progress bar on a terminal; huggingface_hub keeps partial files and an
    interrupted download resumes where it stopped. The embedded defaults (Whisper tiny.en, the
    hibari voice) need no download.

    The proof: vocal says one sentence and listens for your answer, with the chosen model,
    engine and voice. Only when it heard words are --model, --tts-engine and --voice written
    to config.toml (other keys and comments are kept; the write is atomic). --no-proof only
    fetches, and writes nothing.

    Exit codes: 0 ok, 2 bad options, 4 the proof heard nobody (nothing written), 5 offline or
    an engine or device is unavailable (nothing written).
    """
    from vocal.ops.onboarding import SetupChoices, run_setup

    choices = SetupChoices(
        stt_model=model, tts_engine=tts_engine, voice=voice, fetch_engines=tuple(engine)
    )
    result = run_setup(choices, proof=proof)
    if json_output:
        import json

        typer.echo(json.dumps(result.to_dict()))
    elif result.heard is not None:
        typer.echo(result.heard)
