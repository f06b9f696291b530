"""A private tmux server for tests that need a real terminal: pane focus (tests/test_focus.py)
and keys typed at `vocal listen --ptt` (tests/test_push_to_talk.py)."""

from __future__ import annotations

import contextlib
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest


@dataclass
class Tmux:
    """A tmux server on its own socket, with one session, "agents"."""

    socket: str
    server_pid: int
    panes: list[str]  # as the caller made them (tmux_server's are one window's sleep pane)
    directory: Path  # the server's private directory (short: AF_UNIX paths are ~100 bytes)

    def run(self, *args: str) -> str:
        result = subprocess.run(["tmux", "-S", self.socket, *args], capture_output=True,
                                text=True, timeout=10)  # fmt: skip
        assert result.returncode == 0, result.stderr
        return result.stdout

    def send_keys(self, pane: str, *keys: str) -> None:
        """Type `keys` (tmux key names: "Enter", "Space", "Escape", or text) into `pane`."""
        self.run("send-keys", "-t", pane, *keys)

    def capture(self, pane: str) -> str:
        """What `pane` shows now (its visible lines)."""
        return self.run("capture-pane", "-p", "-t", pane)

    def start_vocal(self, *args: str, name: str = "vocal", stderr_to_pane: bool = False) -> PaneRun:
        """Run `python -m vocal ARGS` in a new window, on its terminal (stdin and the
        controlling terminal are the pane's), with this process's environment; its stdout,
        stderr (unless `stderr_to_pane`: then the pane shows it) and exit status go to files
        (`PaneRun`). The window stays open after the command ends."""
        run = PaneRun(self, "", self.directory / f"{name}.out", self.directory / f"{name}.err",
                      self.directory / f"{name}.rc")  # fmt: skip
        argv = ["env", "-i", *(f"{k}={v}" for k, v in os.environ.items()),
                sys.executable, "-m", "vocal", *args]  # fmt: skip
        # tmux runs a window's command through the shell: the one string here is quoted whole.
        errors = "" if stderr_to_pane else f" 2>{run.stderr_path}"
        # The window stays after the command (`sleep`), so its screen can still be read.
        shell = f"{shlex.join(argv)} >{run.stdout_path}{errors}; echo $? >{run.rc_path}; sleep 60"
        run.pane = self.run("new-window", "-d", "-t", "agents", "-P", "-F", "#{pane_id}",
                            shell).strip()  # fmt: skip
        return run


@dataclass
class PaneRun:
    """A command running in a tmux pane (`Tmux.start_vocal`)."""

    tmux: Tmux
    pane: str
    stdout_path: Path
    stderr_path: Path
    rc_path: Path

    def running(self) -> bool:
        return not self.rc_path.exists() or not self.rc_path.read_text().strip()

    def wait(self, timeout_s: float = 60.0) -> int:
        """The exit status, once the command has ended."""
        deadline = time.monotonic() + timeout_s
        while self.running():
            if time.monotonic() > deadline:
                raise TimeoutError(f"still running after {timeout_s} s: {self.stderr()}")
            time.sleep(0.05)
        return int(self.rc_path.read_text())

    def stdout(self) -> str:
        return self.stdout_path.read_text() if self.stdout_path.exists() else ""

    def stderr(self) -> str:
        return self.stderr_path.read_text() if self.stderr_path.exists() else ""


@contextlib.contextmanager
def tmux_server() -> Iterator[Tmux]:
    """Start a tmux server with a detached session "agents" (one pane running `sleep`), stop it
    afterwards."""
    directory = Path(tempfile.mkdtemp(prefix="vtmux-", dir="/tmp"))
    socket_path = str(directory / "sock")
    config = directory / "empty.conf"  # -f /dev/null in spirit: no user configuration
    config.write_text("")
    # `-D`: the server stays in the foreground as our child, so we know its pid and it needs no
    # daemon() (which fails where /dev/null is not a character device, as on one build host).
    with open(config, "rb") as stdin, open(directory / "server.log", "wb") as log:
        server = subprocess.Popen(["tmux", "-D", "-S", socket_path, "-f", str(config)],
                                  stdin=stdin, stdout=log, stderr=log)  # fmt: skip
    try:
        deadline = time.monotonic() + 10
        while not os.path.exists(socket_path):
            assert server.poll() is None and time.monotonic() < deadline, "tmux did not start"
            time.sleep(0.02)
        session = Tmux(socket_path, server.pid, [], directory)
        session.run("new-session", "-d", "-s", "agents", "-x", "160", "-y", "48", "sleep 600")
        session.panes = session.run("list-panes", "-t", "agents", "-F", "#{pane_id}").split()
        yield session
    finally:
        subprocess.run(["tmux", "-S", socket_path, "kill-server"], capture_output=True)
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait(10)
        shutil.rmtree(directory, ignore_errors=True)


#: For tests that need tmux (scripts/setup --test installs it).
needs_tmux = pytest.mark.skipif(
    shutil.which("tmux") is None, reason="tmux is not installed (scripts/setup --test installs it)"
)

__all__ = ["PaneRun", "Tmux", "needs_tmux", "tmux_server"]
