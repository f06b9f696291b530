"""The `vocal` executable: start what the command will need, then run the CLI.

A turn is a process, and its first ~0.1 s goes to importing Typer and vocal's CLI on one core
while the other idles. Work that can run beside them (C without the GIL, or another process)
and that the command is sure to need is
started here, before those imports, from a glance at the command line: PortAudio's
initialization (`vocal.audio.portaudio`) for the commands that open a sound device, and a process
that loads the speech engine (`vocal.speaking.worker`) for the commands that speak. The glance only
decides what to start early; Typer still parses and validates everything, and a command that
turns out not to need them has cost work on the idle core.
"""

from __future__ import annotations

import os
import sys

#: Commands that open a sound device straight away.
DEVICE_COMMANDS = frozenset({"listen", "speak", "converse", "play", "replay", "cue", "devices"})
#: Commands that synthesize speech: their engine loads in a forked worker (vocal.speaking.worker).
SPEECH_COMMANDS = frozenset({"speak", "converse"})
#: Options with which those commands read or write a file instead of a device.
FILE_OPTIONS = frozenset({"--input", "-i", "--output", "-o"})
#: Set to 0 to start nothing early (the comparison benchmarks/listen makes, or to debug).
ENV_SWITCH = "VOCAL_EARLY_START"
#: The variable Click sets for a TAB press (vocal.completion.COMPLETE_VAR).
_COMPLETE_VAR = "_VOCAL_COMPLETE"


def _runs(argv: list[str], commands: frozenset[str], unless: frozenset[str]) -> bool:
    """Whether `argv` runs one of `commands` for real: not for a TAB completion, not for its
    help, and with none of the options `unless` (`--name` or `--name=VALUE`)."""
    if not argv or argv[0] not in commands or _COMPLETE_VAR in os.environ:
        return False
    options = {arg.partition("=")[0] for arg in argv[1:] if arg.startswith("-")}
    return not options & (unless | {"--help", "-h"})


def needs_device(argv: list[str]) -> bool:
    """Whether the command line `argv` (without the program name) will open a sound device."""
    return _runs(argv, DEVICE_COMMANDS, FILE_OPTIONS)


def will_speak(argv: list[str]) -> bool:
    """Whether the command line `argv` (without the program name) will synthesize speech."""
    return _runs(argv, SPEECH_COMMANDS, frozenset())


def option_value(argv: list[str], name: str) -> str | None:
    """The value given to option `name` (`--name VALUE` or `--name=VALUE`; the last wins)."""
    value = None
    for index, arg in enumerate(argv):
        if arg == name and index + 1 < len(argv):
            value = argv[index + 1]
        elif arg.startswith(name + "="):
            value = arg.partition("=")[2]
    return value


def main() -> None:
    """Console entry point (`vocal`, `python -m vocal`)."""
    from vocal.timeline import mark

    mark("launch")
    # Before anything that may reach the sound server (PortAudio, pactl, the speech worker):
    # cron and `env -i` do not say where it is (vocal.audio.sound_server).
    from vocal.audio.sound_server import discover

    discover()
    argv = sys.argv[1:] if os.environ.get(ENV_SWITCH, "1") != "0" else []
    if will_speak(argv):  # first: it forks, and a fork must come before any thread
        from vocal.speaking import worker as speech_worker

        speech_worker.start(
            engine=option_value(argv, "--engine"), voice=option_value(argv, "--voice")
        )
        mark("worker_forked")
    if needs_device(argv):
        from vocal.audio import portaudio

        portaudio.start()
    from vocal.cli import main as run_cli

    mark("cli_imported")
    run_cli()


__all__ = [
    "DEVICE_COMMANDS",
    "SPEECH_COMMANDS",
    "main",
    "needs_device",
    "option_value",
    "will_speak",
]
