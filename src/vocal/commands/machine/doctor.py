"""Check audio, microphone level, engines, models and state; say how to fix each problem."""

from __future__ import annotations

import typer

from vocal.commands._app import command_app, finite
from vocal.ops.doctor import DEFAULT_LISTEN_S  # no heavy import: ~10 ms on `doctor --help`

app = command_app()

_MARKS = {"ok": "ok", "warn": "WARN", "fail": "FAIL", "skip": "skip"}


@app.command()
def doctor(
    json_output: bool = typer.Option(
        False, "--json", help="Print a JSON array of checks: name, status, detail, fix."
    ),
    listen_s: float = typer.Option(
        DEFAULT_LISTEN_S,
        "--listen-s",
        min=0.1,
        max=10.0,
        help="How long to record the microphone, in s.",
        callback=finite,
    ),
    echo: bool = typer.Option(
        False,
        "--echo",
        help="Measure the echo instead: play a 3 s noise probe through the speaker, record "
        "it, report the echo delay, its level, what the canceller removes from it and would "
        "remove from a spoken reply, and keep them for `converse --aec auto`.",
    ),
) -> None:
    """Check that this machine can hold a spoken turn, and say how to fix what cannot.

    Checks, in order: config, audio backend (PortAudio, the sound server), devices (the input
    and output vocal uses), microphone level (`--listen-s`: all-zero buffers mean a muted
    microphone or one the OS refuses, which is not the same as a quiet room), headphones or
    speakers (decides echo cancellation), echo profile (what `--echo` kept for this speaker
    and microphone; a warning where echo is cancelled and nothing was measured), state
    directory writable, conch (who holds the floor), engines importable (faster-whisper or
    mlx-whisper, hibari, espeak-ng), models on disk (the embedded tiny.en and the configured
    one; nothing is downloaded).

    Each check is ok, warn, fail or skip (not checked because an earlier one failed); every
    warn and fail comes with its fix. Takes about a second.

    With --echo, only the echo is checked (about 10 s: 2 s of the room's own sound, then the
    probe, audible, at the sample rate the configured voice plays at, as the output's latency
    depends on it): the probe's echo delay (ms, output latency + room + input latency), its
    level at the microphone, the canceller's reduction of it after its first second (dB) and
    a verdict: full-duplex (25 dB or more), use-headphones (15-25 dB), half-duplex (under
    15 dB). Beside it, what the canceller would take out of spoken replies (five, spoken by
    hibari and run offline through the echo path and noise the probe measured) and how the
    echo's delay moved (an output clock's drift, an underrun's step). It is kept per speaker
    and microphone in the state directory: `converse --aec auto` gives the delay and the
    drift to the canceller and runs half-duplex where the verdict says so. --json adds the
    figures under "data".

    Exit codes: 0 when no check fails (warnings allowed), 1 when any check fails.
    """
    from vocal.errors import VocalError
    from vocal.ops.doctor import DoctorOptions, failed, run_checks

    if echo:
        from vocal.config import load_settings
        from vocal.ops.echo_check import check_echo

        checks = [check_echo(load_settings())]
    else:
        checks = run_checks(DoctorOptions(listen_s=listen_s))
    if json_output:
        import json

        typer.echo(json.dumps([check.to_dict() for check in checks], indent=2))
    else:
        width = max(len(check.name) for check in checks)
        for check in checks:
            typer.echo(f"{_MARKS[check.status]:<4}  {check.name:<{width}}  {check.detail}")
            if check.fix and check.status in ("warn", "fail"):
                typer.echo(f"{'':<4}  {'':<{width}}  fix: {check.fix}")
    bad = failed(checks)
    if bad:
        names = ", ".join(check.name for check in bad)
        raise VocalError(f"{len(bad)} check(s) failed: {names}", hint="see the fix under each")
