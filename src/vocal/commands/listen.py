"""Record until the speaker stops (or for a fixed window), transcribe, print the text."""

from __future__ import annotations

from pathlib import Path

import typer

from vocal.commands._app import (
    command_app,
    finite,
    float_range,
    hints_option,
    max_pause_ms_option,
    max_seconds_option,
    no_speech_timeout_option,
    report_fallback,
    silence_ms_option,
    stt_engine_help,
    turn_check_ms_option,
    turn_model_option,
)
from vocal.hearing import DEFAULT_FIXED_SECONDS

app = command_app()


@app.command()
def listen(
    vad: bool = typer.Option(
        True, "--vad/--no-vad", help="End when the speaker stops (VAD), or record --seconds."
    ),
    seconds: float = typer.Option(
        DEFAULT_FIXED_SECONDS,
        "--seconds",
        click_type=float_range("max_seconds"),
        help="The fixed window with --no-vad, in seconds.",
        callback=finite,
    ),
    max_seconds: float | None = max_seconds_option("the recording"),
    ptt: bool = typer.Option(
        False,
        "--ptt",
        help="Push-to-talk: record until you press Enter or Space on the "
        "terminal (not on a pause; --max-seconds still applies); Esc cancels.",
    ),
    silence_ms: int | None = silence_ms_option(),
    turn_model: bool | None = turn_model_option(),
    turn_check_ms: int | None = turn_check_ms_option(),
    max_pause_ms: int | None = max_pause_ms_option(),
    no_speech_timeout: float | None = no_speech_timeout_option(),
    input_file: Path | None = typer.Option(
        None, "--input", "-i", help="Read this WAV instead of the microphone (any rate)."
    ),
    save: Path | None = typer.Option(None, "--save", help="Also write the recording to this WAV."),
    json_output: bool = typer.Option(
        False, "--json", help="Print JSON: text, language, durations, timings of each stage."
    ),
    model: str | None = typer.Option(
        None,
        "--model",
        "-m",
        help="Whisper model of a local engine (and of the remote one's fallback): tiny.en "
        "(embedded), a name such as base.en or small (downloaded once), a hub id, or a model "
        "directory.",
    ),
    engine: str | None = typer.Option(None, "--engine", help=stt_engine_help()),
    hints: str | None = hints_option(),
    language: str | None = typer.Option(
        None, "--language", "-l", help="Language code, or auto to detect (multilingual models)."
    ),
    device: str | None = typer.Option(
        None, "--device", envvar="VOCAL_INPUT_DEVICE", help="Input device index or name part."
    ),
) -> None:
    """Listen for one utterance and print its transcript on stdout.

    With --vad (the default) the turn ends when the speaker has finished, not merely paused:
    after --turn-check-ms of silence the voice (Smart Turn v3), the last word and a
    small language model of the words so far (SmolLM2, with vocal[words]) set how long the
    silence must last. When all say finished it is short; the less sure they are, the
    longer; when the words say unfinished ("merge the branch and then ...") it is
    --max-pause-ms. A speaker seen to resume after long pauses is given longer ones
    (learnt per user). With --no-turn-model every pause ends the turn after --silence-ms.
    --no-vad records a fixed --seconds window. --ptt ends it when you press Enter or Space
    (keys are read from the terminal, /dev/tty, never stdin), and Esc cancels. --input FILE is
    judged on the file's own clock, as the same sound from a microphone would be. Ctrl-C ends
    the recording and still transcribes what was heard (press it twice to abort). On a
    terminal a level meter runs on stderr.

    Exit codes: 0 ok, 2 a bad option or unreadable input WAV (or --ptt with no terminal),
    4 nobody spoke (or no words were made out), 5 no microphone or the speech engine/model is
    unavailable (with --engine openai: the server unreachable, failing or too slow, unless the
    stt_fallback setting names a local engine to transcribe instead), 130 Ctrl-C before anyone
    spoke (or pressed twice), or Esc with --ptt.
    """
    from vocal.config import load_settings
    from vocal.errors import Interrupted, NoSpeechError
    from vocal.hearing.listen_turn import listen_turn

    # Click's float options take "nan" and "inf", and NaN passes their `min=` (issue 17).
    settings = load_settings(
        silence_ms=silence_ms,
        turn_model=turn_model,
        turn_check_ms=turn_check_ms,
        max_pause_ms=max_pause_ms,
        max_seconds=max_seconds,
        no_speech_timeout_s=no_speech_timeout,
        stt_engine=engine,
        stt_model=model,
        stt_hints=hints,
        language=language,
        input_device=device,
    )
    result = listen_turn(
        settings, vad=vad, seconds=seconds, input_file=input_file, push_to_talk=ptt
    )
    report_fallback(result)
    if save is not None:
        from vocal.audio.wav import write_wav

        write_wav(save, result.recording)
    if json_output:
        import json

        typer.echo(json.dumps(result.to_dict()))
    elif result.text:
        typer.echo(result.text)
    if not result.speech_heard:
        if result.end_reason == "requested":
            raise Interrupted("stopped before anyone spoke")
        where = "in the file" if input_file else f"in {result.durations['recording_s']:.1f} s"
        raise NoSpeechError(
            f"no speech heard {where}",
            hint="check the microphone with `vocal devices`" if input_file is None else None,
        )
    if not result.text:
        raise NoSpeechError("heard sound but made out no words")
