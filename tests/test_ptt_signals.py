"""Push-to-talk gives the terminal back on every signal (issue 37).

`vocal listen --ptt` puts its terminal in cbreak mode (no echo, no line editing) while it waits
for Enter. Killed by SIGTERM or SIGHUP it once left the terminal that way: the person's shell
then showed nothing they typed. Here `vocal listen --ptt` runs with a real pseudo-terminal as
its controlling terminal (stdin, stdout and stderr), on this session's null sink; once it says
it is recording, it gets the signal, and the terminal's modes are read back from the pty.
With nothing of its own to unwind, `listen` then dies of the signal, as it did before (a shell
reports 128 + N); Ctrl-C still ends it with 130.

The recognizer is the remote one, at a port where nothing listens: it is only asked once the
recording ends, so nothing loads (faster-whisper's load, minutes under a loaded machine, would
be waited for before exiting).
"""

from __future__ import annotations

import fcntl
import os
import resource
import select
import signal
import subprocess
import sys
import termios
import time

import pytest

from vocal.hearing.push_to_talk import PROMPT

pytestmark = [pytest.mark.audio, pytest.mark.usefixtures("pulse")]

#: Start-up (Python, the recognizer's load, the microphone) on a loaded 2-core machine.
PROMPT_DEADLINE_S = 60.0
EXIT_DEADLINE_S = 20.0
#: No model is loaded: the recognizer is remote (and never reached), the turn models are off.
NOTHING_LOADS = {
    "VOCAL_STT_ENGINE": "openai",
    "VOCAL_OPENAI_STT_BASE_URL": "http://127.0.0.1:9/v1",
    "OPENAI_API_KEY": "test-key",
    "VOCAL_TURN_MODEL": "0",
    "VOCAL_WORDS_MODEL": "0",
}


def _controlling_terminal() -> None:
    """In the child: a new session whose controlling terminal is its stdin (the pty), and no
    core file when SIGQUIT ends it."""
    os.setsid()
    fcntl.ioctl(0, termios.TIOCSCTTY, 0)
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))


def _read_until(master: int, wanted: bytes, deadline_s: float) -> bytes:
    seen = b""
    end_s = time.monotonic() + deadline_s
    while wanted not in seen and time.monotonic() < end_s:
        ready, _, _ = select.select([master], [], [], 0.2)
        if ready:
            try:
                seen += os.read(master, 4096)
            except OSError:  # EIO: the child closed the terminal
                break
    return seen


def _modes(fd: int) -> tuple[bool, bool]:
    lflag = termios.tcgetattr(fd)[3]
    return bool(lflag & termios.ECHO), bool(lflag & termios.ICANON)


@pytest.mark.parametrize(
    ("signum", "code"),
    [
        (signal.SIGTERM, -signal.SIGTERM),
        (signal.SIGHUP, -signal.SIGHUP),
        (signal.SIGQUIT, -signal.SIGQUIT),
        (signal.SIGINT, 130),
    ],
)
def test_listen_ptt_restores_the_terminal_on_a_signal(signum: int, code: int) -> None:
    master, slave = os.openpty()
    try:
        assert _modes(slave) == (True, True)  # a fresh pty: echo and line editing on
        child = subprocess.Popen(
            [sys.executable, "-m", "vocal", "listen", "--ptt", "--max-seconds", "120"],
            stdin=slave,
            stdout=slave,
            stderr=slave,
            preexec_fn=_controlling_terminal,
            env={**os.environ, **NOTHING_LOADS},
        )
        try:
            seen = _read_until(master, PROMPT.encode(), PROMPT_DEADLINE_S)
            assert PROMPT.encode() in seen, seen.decode(errors="replace")
            assert _modes(slave) == (False, False)  # recording: cbreak, as push-to-talk sets it
            child.send_signal(signum)
            returncode = child.wait(EXIT_DEADLINE_S)
        finally:
            if child.poll() is None:
                child.kill()
                child.wait()
        assert _modes(slave) == (True, True), f"the terminal was left in cbreak mode ({signum})"
        assert returncode == code, _read_until(master, b"\0", 0.5).decode(errors="replace")
    finally:
        os.close(master)
        os.close(slave)
