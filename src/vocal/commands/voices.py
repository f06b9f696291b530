"""Reference clips for cloned voices: add, list, show, use, remove, preview."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, cast

import typer

from vocal.commands._app import command_app

if TYPE_CHECKING:
    from vocal.config import Settings
    from vocal.tts.chatterbox import ChatterboxEngine
    from vocal.tts.voices import VoiceStore

app = command_app(no_args_is_help=True)


def _store() -> tuple[Settings, VoiceStore]:
    from vocal.config import load_settings
    from vocal.tts.voices import VoiceStore

    settings = load_settings()
    return settings, VoiceStore.from_settings(settings)


def _weights_status(settings: Settings) -> str:
    from vocal.tts.chatterbox_weights import missing_weights

    root, missing = missing_weights(settings)
    if not missing:
        return f"ready ({root})"
    return (
        f"weights missing from {root}: {', '.join(missing)} "
        "(run `vocal setup --engine chatterbox`, or set VOCAL_CHATTERBOX_DIR)"
    )


@app.command()
def add(
    name: str = typer.Argument(..., help="The voice's name: letters, digits, '_', '-', '.'."),
    file: Path = typer.Argument(..., help="A recording of 5–9 s of clean speech (WAV, FLAC, ...)."),
    description: str | None = typer.Option(
        None, "--description", "-d", help="One line about the voice."
    ),
    persona: Path | None = typer.Option(
        None, "--persona", help="A markdown file of notes for the agent speaking as this voice."
    ),
    force: bool = typer.Option(
        False, "--force", "-f", help="Replace an existing voice of this name."
    ),
) -> None:
    """Store FILE as the cloned voice NAME (for `--voice NAME`).

    The clip must hold 5–9 s of speech once leading and trailing silence is trimmed, and must
    be neither clipped nor silent. It is stored as mono 16-bit at 24 kHz (the cloning engine's
    rate) with its loudness normalised, as voices/NAME/default.wav. Exit code 2 for a bad
    name, a bad clip (the reason is printed) or an existing voice without --force.
    """
    settings, store = _store()
    voice, report = store.add(name, file, description=description, persona=persona, force=force)
    typer.echo(
        f"added voice {voice.name!r}: {report.speech_s:.1f} s of speech, stored "
        f"{report.stored_duration_s:.1f} s mono 16-bit {report.sample_rate} Hz "
        f"({report.gain_db:+.1f} dB) in {voice.path}",
        err=True,
    )
    from vocal.tts.chatterbox_weights import missing_weights

    if missing_weights(settings)[1]:
        typer.echo(f"note: cloning engine {_weights_status(settings)}", err=True)


@app.command("list")
def list_voices(
    json_output: bool = typer.Option(False, "--json", help="Print a JSON array for scripts."),
) -> None:
    """List stored voices: name, active sample, its length, description.

    A voice that cannot speak (several samples and no default.wav, no samples, a broken
    link) is listed with `!` and the reason.
    """
    from vocal.tts.voices import voices_json

    settings, store = _store()
    voices = store.voices()
    if json_output:
        typer.echo(voices_json(voices))
        return
    if not voices:
        typer.echo(
            f"no voices in {store.root} (add one with `vocal voices add NAME FILE`)", err=True
        )
        return
    from vocal.floor.shown import MAX_SHOWN_TEXT_CHARS, shown_name

    # Folder and file names and descriptions are the user's files: shown safely (issue 37).
    names = {v.name: shown_name(v.name) for v in voices}
    width = max(len(shown) for shown in names.values())
    for voice in voices:
        name = names[voice.name]
        if voice.problem:
            typer.echo(f"! {name:<{width}}  {shown_name(voice.problem, MAX_SHOWN_TEXT_CHARS)}")
            continue
        active = next((s for s in voice.samples if s.name == voice.default), None)
        length = f"{active.duration_s:4.1f} s" if active and active.duration_s else "   ? s"
        more = f" (+{len(voice.samples) - 1} more)" if len(voice.samples) > 1 else ""
        about = (
            f"  {shown_name(voice.description, MAX_SHOWN_TEXT_CHARS)}" if voice.description else ""
        )
        typer.echo(f"  {name:<{width}}  {length}  {shown_name(voice.default)}{more}{about}")


@app.command()
def show(
    name: str = typer.Argument(..., help="The voice to show."),
    json_output: bool = typer.Option(False, "--json", help="Print JSON for scripts."),
) -> None:
    """Show a voice: samples, description, persona and engine status.

    `*` marks the active sample; the engine line says whether the Chatterbox weights are
    installed and, if not, which files are missing.
    """
    import json

    settings, store = _store()
    voice = store.get(name)
    if json_output:
        data = voice.to_dict()
        data["persona"] = voice.persona
        data["engine"] = _weights_status(settings)
        typer.echo(json.dumps(data, indent=2))
        return
    from vocal.floor.shown import MAX_SHOWN_LINE_CHARS, MAX_SHOWN_TEXT_CHARS, shown_name

    typer.echo(f"voice:       {shown_name(voice.name)}")
    typer.echo(f"path:        {shown_name(voice.path, MAX_SHOWN_LINE_CHARS)}")
    if voice.description:
        typer.echo(f"description: {shown_name(voice.description, MAX_SHOWN_TEXT_CHARS)}")
    if voice.problem:
        typer.echo(f"problem:     {shown_name(voice.problem, MAX_SHOWN_TEXT_CHARS)}")
    typer.echo("samples:")
    for sample in voice.samples:
        mark = "*" if sample.name == voice.default else " "
        info = (
            f"{sample.duration_s:.1f} s, {sample.sample_rate} Hz"
            if sample.duration_s
            else "not a readable WAV"
        )
        typer.echo(f"  {mark} {shown_name(sample.name)}  ({info})")
    typer.echo(f"engine:      chatterbox, {_weights_status(settings)}")
    if voice.persona:
        typer.echo("persona:")
        for line in voice.persona.rstrip().splitlines():
            typer.echo(f"  {shown_name(line, MAX_SHOWN_LINE_CHARS)}")


@app.command()
def use(
    name: str = typer.Argument(..., help="The voice."),
    sample: str = typer.Argument(
        ..., help="A sample in the voice's directory (with or without .wav)."
    ),
) -> None:
    """Make SAMPLE the voice's active take (default.wav points at it).

    The sample is checked like a new clip (5–9 s of speech, not clipped, not silent) first.
    """
    _, store = _store()
    voice = store.use(name, sample)
    typer.echo(f"voice {voice.name!r} now speaks with sample {voice.default!r}", err=True)


@app.command()
def remove(name: str = typer.Argument(..., help="The voice to delete.")) -> None:
    """Delete a voice and its cached conditioning.

    Its samples, description and persona go with it. Only a voice `vocal voices add` made is
    removed (its .vocal-voice manifest names every file in it): a folder of recordings, a
    link, or a voice holding takes added by hand is refused with exit 2 and left as it is.
    """
    from vocal.tts.chatterbox_model import conditioning_cache_dir

    settings, store = _store()
    path = store.remove(name)
    for cached in conditioning_cache_dir(settings).glob(f"{name}-*.npz"):
        cached.unlink(missing_ok=True)
    typer.echo(f"removed voice {name!r} ({path})", err=True)


@app.command()
def preview(
    name: str = typer.Argument(..., help="The voice."),
    text: str = typer.Argument(
        "Hello. This is how I sound when I read your messages aloud.", help="What to say."
    ),
    output: Path | None = typer.Option(
        None, "--output", "-o", help="Write a WAV here instead of playing."
    ),
    json_output: bool = typer.Option(
        False, "--json", help="Print what ran (provider, tokens, conditioning) as JSON."
    ),
) -> None:
    """Say TEXT in the cloned voice NAME (Chatterbox engine).

    Exit code 5 when the Chatterbox weights are missing (the message names the files and how
    to get them) or no execution provider can run them; 2 for an unknown voice.
    """
    import json

    from vocal.audio.playback import play_audio
    from vocal.audio.wav import Audio
    from vocal.errors import UsageError
    from vocal.tts import load_tts
    from vocal.tts.resolve import resolve_stored_voice
    from vocal.tts.voices import CLONING_ENGINE

    settings, store = _store()
    store.get(name)  # an unknown voice is exit 2, not a built-in voice of another engine
    engine_name, voice = resolve_stored_voice(name, settings, engine=CLONING_ENGINE)
    if engine_name != CLONING_ENGINE:  # pragma: no cover - store.get raised already
        raise UsageError(f"{name!r} is not a stored voice")
    # CLONING_ENGINE names Chatterbox: the JSON below reads its provider and generation facts.
    engine = cast("ChatterboxEngine", load_tts(CLONING_ENGINE, voice=voice, settings=settings))
    samples = engine.synthesize(text)
    if json_output:
        typer.echo(
            json.dumps(
                {
                    "voice": name,
                    "provider": engine.provider,
                    "tried": engine.ladder.tried,
                    "failures": [list(f) for f in engine.ladder.failures],
                    "conditioning": engine.conditioning_source,
                    "tokens": engine.last_token_count,
                    "stopped": engine.last_stopped,
                    "duration_s": round(len(samples) / engine.sample_rate, 3),
                    "output": str(output) if output else None,
                },
                indent=2,
            )
        )
    play_audio(Audio(samples, engine.sample_rate), output=output)
