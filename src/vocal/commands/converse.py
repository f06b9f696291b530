"""One agent turn: say TEXT, then listen for the answer and print it (barge-in with AEC)."""

from __future__ import annotations

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
    shown_default,
    silence_ms_option,
    stt_engine_help,
    turn_check_ms_option,
    turn_model_option,
)

app = command_app()


@app.command()
def converse(
    text: str | None = typer.Argument(
        None, help="What to say. '-' reads stdin (so does no TEXT when stdin is a pipe)."
    ),
    voice: str | None = typer.Option(
        None, "--voice", help="A voice of the engine, or ENGINE:VOICE (e.g. espeak-ng:en-gb)."
    ),
    engine: str | None = typer.Option(
        None, "--engine", help=f"TTS engine [{shown_default('tts_engine')}]."
    ),
    stt_engine: str | None = typer.Option(None, "--stt-engine", help=stt_engine_help()),
    hints: str | None = hints_option(),
    speed: float | None = typer.Option(
        None,
        "--speed",
        click_type=float_range("speed"),
        help="Pace, 1.0 is the engine's normal.",
        callback=finite,
    ),
    barge_in: bool | None = typer.Option(
        None,
        "--barge-in/--no-barge-in",
        help="Listen while speaking and stop when the person talks over the reply "
        f"[{shown_default('barge_in')}]; --no-barge-in opens the microphone when the reply has "
        "ended (+200 ms).",
    ),
    aec: str | None = typer.Option(
        None,
        "--aec",
        help="Echo cancellation: auto (off for headphones; half-duplex where `vocal doctor "
        f"--echo` found the echo too strong to cancel), on, off [{shown_default('aec')}].",
    ),
    ptt: bool = typer.Option(
        False,
        "--ptt",
        help="Push-to-talk: the answer ends when you press Enter or Space on "
        "the terminal (not on a pause; --max-seconds still applies); Esc cancels.",
    ),
    silence_ms: int | None = silence_ms_option("the answer"),
    turn_model: bool | None = turn_model_option(),
    turn_check_ms: int | None = turn_check_ms_option(),
    max_pause_ms: int | None = max_pause_ms_option(),
    no_speech_timeout: float | None = no_speech_timeout_option(" after the reply"),
    max_seconds: float | None = max_seconds_option("the answer"),
    session: str | None = typer.Option(None, "--session", help="Conch session name."),
    agent: str | None = typer.Option(None, "--agent", help="Agent name shown to others."),
    no_conch: bool = typer.Option(False, "--no-conch", help="Speak without taking the floor."),
    json_output: bool = typer.Option(
        False, "--json", help="Print JSON: text, interrupted, heard_reply, timings, counters."
    ),
) -> None:
    """Say TEXT, then listen until the person has finished, and print what they said.

    One process per turn: it takes the conch, speaks sentence by sentence, and meanwhile loads
    the speech recognizer. With barge-in (the default) the microphone stays open behind echo
    cancellation: talk over the reply and it stops within a block, and your words, the first
    one included, are in the transcript. `vocal control stop` ends the turn (prints
    "[stopped]"), `vocal control skip-forward` cuts to listening, or ends the listening.

    --engine names the voice; --stt-engine the recognizer (openai: the answer is uploaded
    once, after the turn has ended, and recognized in this process).

    The answer ends as `vocal listen`'s does: after --turn-check-ms of silence the voice, the
    last word and the words' model (which reads the answer after TEXT) set how long the pause
    must last, short when all say finished, up to --max-pause-ms when the words say
    unfinished ("let me think ..."); --no-turn-model ends it after --silence-ms. With --ptt it
    ends when you press Enter or Space instead (keys from the terminal, /dev/tty, never stdin,
    which may carry TEXT), and Esc cancels.

    Exit codes: 0 ok (the transcript on stdout), 2 empty text or bad options (--ptt with no
    terminal), 3 the floor was not granted or was taken mid-turn, 4 nobody spoke, 5 a device or
    engine is unavailable or failed mid-turn, 130 interrupted (Ctrl-C, SIGTERM, Esc with --ptt).
    """
    import time

    started_at_s = time.monotonic()
    from vocal.config import load_settings
    from vocal.duplex.converse import STOPPED_MARKER
    from vocal.duplex.converse import converse as converse_turn
    from vocal.duplex.options import ConverseOptions
    from vocal.errors import NoSpeechError
    from vocal.speaking.speak import text_argument

    # Click's float options take "nan" and "inf", and NaN passes their `min=` (issue 17).
    text, from_stdin = text_argument(text)
    if from_stdin:
        started_at_s = time.monotonic()
    settings = load_settings(
        silence_ms=silence_ms,
        turn_model=turn_model,
        turn_check_ms=turn_check_ms,
        max_pause_ms=max_pause_ms,
        max_seconds=max_seconds,
        no_speech_timeout_s=no_speech_timeout,
        stt_engine=stt_engine,
        stt_hints=hints,
        barge_in=barge_in,
        aec=aec,
        session=session,
        agent=agent,
    )
    options = ConverseOptions(
        engine=engine,
        voice=voice,
        speed=speed,
        use_conch=not no_conch,
        push_to_talk=ptt,
    )
    result = converse_turn(text, options, settings, started_at_s=started_at_s)
    report_fallback(result.listen)
    if json_output:
        import json

        typer.echo(json.dumps(result.to_dict()))
    elif result.stopped:
        typer.echo(f"{result.text} {STOPPED_MARKER}".strip())
    elif result.text:
        typer.echo(result.text)
    if result.stopped:
        return
    if not result.speech_heard:
        raise NoSpeechError("nobody spoke after the reply", hint="check `vocal devices`")
    if not result.text:
        raise NoSpeechError("heard sound but made out no words")
