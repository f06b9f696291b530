"""One agent turn: say TEXT, then listen for the answer and print it (barge-in with AEC)."""

from __future__ import annotations

import typer

from vocal.commands._app import (
    choice,
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
        None,
        help="What to say. '-' reads stdin (so does no TEXT when stdin is a pipe). With --wake "
        "it may be empty or left out: the turn starts by waiting for the wake phrase.",
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
        click_type=choice("aec"),
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
    no_speech_timeout: float | None = no_speech_timeout_option(
        " after the reply (with --wake: listen for the wake phrase instead)"
    ),
    max_seconds: float | None = max_seconds_option("the answer"),
    session: str | None = typer.Option(None, "--session", help="Conch session name."),
    agent: str | None = typer.Option(None, "--agent", help="Agent name shown to others."),
    no_conch: bool = typer.Option(False, "--no-conch", help="Speak without taking the floor."),
    wake: bool = typer.Option(
        False,
        "--wake/--no-wake",
        help="Hands-free: when nobody answers before --no-speech-timeout, listen for the wake "
        "phrase (setting wake_phrase) and take what is said after it as the answer [off].",
        show_default=False,
    ),
    wake_timeout: float | None = typer.Option(
        None,
        "--wake-timeout",
        click_type=float_range("wake_timeout_s"),
        help=f"With --wake: give up (exit 4) when the wake phrase has not been heard in this "
        f"many seconds [{shown_default('wake_timeout_s')}].",
        callback=finite,
    ),
    json_output: bool = typer.Option(
        False,
        "--json",
        help="Print JSON: text, interrupted, heard_reply, timings, counters, and woke (the "
        "wake phrase heard with --wake, or null).",
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

    Hands-free (--wake): when nobody has spoken by --no-speech-timeout, the turn does not end.
    It gives the floor back (other agents may speak meanwhile) and listens for the wake phrase
    (the wake_phrase setting, "hey jarvis"; heard as `vocal wake` hears it) for up to
    --wake-timeout seconds, ignoring it while any vocal process holds the floor or speaks and
    while vocal is muted. When it hears the phrase it plays the Wake cue, and the words said
    after the phrase in the same breath are the answer ("hey jarvis, run the tests" prints
    `run the tests`); the phrase said alone is followed by the answer heard as usual, with
    --no-speech-timeout counted again from the cue. With --wake, no TEXT (or an empty one)
    says nothing and starts by listening for the phrase. `vocal control` does not reach a turn
    waiting for the phrase; Ctrl-C ends it.

    Exit codes: 0 ok (the transcript on stdout), 2 empty text (without --wake) or bad options
    (--ptt with no terminal, --ptt with --wake), 3 the floor was not granted or was taken
    mid-turn, 4 nobody spoke (with --wake: nor said the wake phrase within --wake-timeout), 5 a
    device or engine is unavailable or failed mid-turn, 130 interrupted (Ctrl-C, SIGTERM, Esc
    with --ptt).
    """
    import sys
    import time

    started_at_s = time.monotonic()
    from vocal.config import load_settings
    from vocal.duplex.converse import STOPPED_MARKER
    from vocal.duplex.converse import converse as converse_turn
    from vocal.duplex.options import ConverseOptions
    from vocal.errors import NoSpeechError, UsageError
    from vocal.speaking.speak import text_argument

    # Click's float options take "nan" and "inf", and NaN passes their `min=` (issue 17).
    if wake_timeout is not None and not wake:
        raise UsageError("--wake-timeout goes with --wake")
    if wake and text is None and sys.stdin.isatty():
        text, from_stdin = "", False  # a hands-free start: nothing to say
    else:
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
        wake_timeout_s=wake_timeout,
    )
    options = ConverseOptions(
        engine=engine,
        voice=voice,
        speed=speed,
        use_conch=not no_conch,
        push_to_talk=ptt,
    )
    timeout_s = settings.wake_timeout_s
    if wake:
        from vocal.agents.cues import play_wake_cue
        from vocal.duplex.hands_free import converse_hands_free

        result = converse_hands_free(
            text,
            options,
            settings,
            timeout_s=timeout_s,
            started_at_s=started_at_s,
            on_wake=play_wake_cue,
        )
    else:
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
        if result.woke is not None:
            raise NoSpeechError("nobody spoke after the wake phrase")
        if result.wake_wait_s is not None:
            raise NoSpeechError(
                f"nobody spoke, and the wake phrase was not heard in {timeout_s:g} s",
                hint="check `vocal devices`",
            )
        raise NoSpeechError("nobody spoke after the reply", hint="check `vocal devices`")
    if not result.text:
        raise NoSpeechError("heard sound but made out no words")
