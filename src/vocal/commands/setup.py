"""Fetch the models and engines you choose, with progress, resumable."""

from __future__ import annotations

import typer

from vocal.commands._app import command_app

app = command_app()


@app.command()
def setup(
    model: str | None = typer.Option(
        None,
        "--model",
        "-m",
        help="A Whisper model to fetch now instead of on first use: tiny.en (embedded), "
        "base.en, small.en, large-v3-turbo, a hub id.",
    ),
    engine: list[str] = typer.Option(
        [], "--engine", help="A speech engine whose weights to fetch: chatterbox (cloned voices)."
    ),
) -> None:
    """Download what the chosen engines need, so the first turn pays no download.

    The embedded defaults (Whisper tiny.en, the hibari voice) ship inside their packages and
    need nothing. Downloads show a progress bar on a terminal and resume where they stopped;
    offline, each names what it could not fetch (exit 5). Nothing is written to config.toml.
    """
    from vocal.config import load_settings
    from vocal.errors import UsageError

    settings = load_settings()
    unknown = [name for name in engine if name != "chatterbox"]
    if unknown:
        raise UsageError(f"nothing to fetch for engine {unknown[0]!r}", hint="known: chatterbox")
    if model is None and not engine:
        typer.echo("vocal: the embedded defaults need no download; see --help", err=True)
        return
    if model is not None:
        from vocal.stt import load_stt

        load_stt(settings.stt_engine, model)  # fetches into the hub cache with a progress bar
        typer.echo(f"vocal: speech recognition model {model} is ready", err=True)
    if "chatterbox" in engine:
        from vocal.providers import forget_rung
        from vocal.tts.chatterbox import download_weights

        weights = download_weights(settings)
        forget_rung(settings, "chatterbox")  # new weights: a GPU rung that failed may work now
        typer.echo(f"vocal: Chatterbox weights are ready in {weights.root}", err=True)
