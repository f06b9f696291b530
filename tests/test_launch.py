"""The entry point's early start: which command lines begin PortAudio's initialization, and
that the early initialization is silent, safe to exit during, and shared with sounddevice."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from vocal.cli import discover_commands
from vocal.launch import DEVICE_COMMANDS, needs_device


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["listen"], True),
        (["listen", "--vad", "--json"], True),
        (["converse", "Hello there."], True),
        (["speak", "-"], True),
        (["listen", "--input", "a.wav"], False),
        (["listen", "--input=a.wav"], False),
        (["speak", "hi", "-o", "out.wav"], False),
        (["listen", "--help"], False),
        (["speak", "-h"], False),
        (["conch", "status"], False),
        (["--help"], False),
        ([], False),
        (["history"], False),
    ],
)
def test_which_command_lines_start_portaudio_early(argv: list[str], expected: bool) -> None:
    assert needs_device(argv) is expected


def test_completion_never_starts_portaudio(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("_VOCAL_COMPLETE", "complete_bash")
    assert not needs_device(["listen"])


def test_device_commands_are_real_commands() -> None:
    assert DEVICE_COMMANDS <= set(discover_commands())


def _python(code: str, *, timeout_s: float = 60.0) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=timeout_s, env=os.environ.copy())  # fmt: skip


@pytest.mark.audio
@pytest.mark.usefixtures("pulse")
def test_early_initialization_is_silent_and_shared_with_sounddevice() -> None:
    # JACK (no server here) and ALSA (no card 0) complain on every probe; without the handlers
    # those lines reach stderr, since this Pa_Initialize does not hide fd 2 as sounddevice does.
    code = (
        "from vocal.audio import portaudio\n"
        "portaudio.start(); portaudio.wait()\n"
        "assert portaudio._library is not None, 'Pa_Initialize failed'\n"
        "from vocal.audio.devices import list_devices\n"
        "print(len(list_devices()))\n"
    )
    result = _python(code)
    assert result.returncode == 0, result.stderr
    assert int(result.stdout) >= 1
    assert result.stderr == ""


@pytest.mark.audio
@pytest.mark.usefixtures("pulse")
def test_exiting_while_initialization_runs_is_clean() -> None:
    # The interpreter exits at once while the thread is inside Pa_Initialize: the exit handler
    # waits for it, then balances it with Pa_Terminate; no crash, no hang.
    for _ in range(3):
        result = _python("from vocal.audio import portaudio; portaudio.start()", timeout_s=30.0)
        assert result.returncode == 0, result.stderr
        assert result.stderr == ""


@pytest.mark.audio
@pytest.mark.usefixtures("pulse")
def test_cli_records_after_an_early_start() -> None:
    # The whole path: `python -m vocal listen` starts PortAudio from the entry point, and the
    # microphone opens on it.
    result = subprocess.run(
        [sys.executable, "-m", "vocal", "listen", "--no-vad", "--seconds", "0.2", "--json"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 4, result.stderr  # nobody spoke into the null sink
    assert "no speech heard" in result.stderr
    assert "ALSA" not in result.stderr and "jack" not in result.stderr.lower()
