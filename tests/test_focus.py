"""Pane focus against a real tmux server: agents in different panes take the floor in turn.

The test starts its own tmux server on a private socket, with two windows of two panes each.
Each agent is a `vocal` process whose $TMUX/$TMUX_PANE say it runs in one of the panes, as
they would inside tmux; the person's pane changes are `tmux select-pane` calls.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness import tmux as harness_tmux
from harness.conch_audio import wait_until
from harness.runner import run_vocal, start_vocal
from harness.tmux import tmux_server

pytestmark = pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed "
                                "(scripts/setup --test installs it)")  # fmt: skip


class Tmux(harness_tmux.Tmux):
    """The focus tests' server: two windows of two panes each (%0 %1 in window 0, %2 %3 in
    window 1)."""

    def active(self) -> str:
        """The pane the person sees: the active pane of the session's current window."""
        return self.run("display-message", "-p", "-t", "agents", "#{pane_id}").strip()

    def person_selects(self, pane: str) -> None:
        self.run("select-window", "-t", pane, ";", "select-pane", "-t", pane)

    def env(self, pane: str, focus: bool = True, **extra: str) -> dict[str, str]:
        """The environment of an agent running in `pane`."""
        env = {"TMUX": f"{self.socket},{self.server_pid},0", "TMUX_PANE": pane, **extra}
        if focus:
            env["VOCAL_AUTO_FOCUS_PANE"] = "true"
        return env


@pytest.fixture
def tmux() -> Iterator[Tmux]:
    with tmux_server() as server:
        session = Tmux(**vars(server))
        session.run("split-window", "-t", "agents", "sleep 600")
        session.run("new-window", "-t", "agents", "sleep 600")
        session.run("split-window", "-t", "agents", "sleep 600")
        listing = session.run("list-panes", "-s", "-t", "agents", "-F", "#{pane_id}")
        session.panes = listing.split()
        assert len(session.panes) == 4
        yield session


def take_floor(tmux: Tmux, session: str, pane: str, **env: str) -> None:
    """Agent `session` in `pane` takes the floor (`vocal conch wait`) and keeps it."""
    result = run_vocal("conch", "wait", "--session", session, env=tmux.env(pane, **env))
    assert result.returncode == 0, result.stderr


def release(session: str) -> None:
    assert run_vocal("conch", "release", "--session", session).returncode == 0


def queued(session: str) -> bool:
    state = json.loads(run_vocal("conch", "status", "--json").stdout)
    return session in [w["session"] for w in state["queue"]]


def sentinel(home: Path) -> dict:
    [record] = json.loads((home / "run" / "focus.json").read_text()).values()
    return record


def test_two_agents_taking_turns_get_their_panes_focused(tmux: Tmux) -> None:
    a_pane, b_pane = tmux.panes[1], tmux.panes[2]  # in different windows
    tmux.person_selects(tmux.panes[0])
    take_floor(tmux, "a", a_pane)
    assert tmux.active() == a_pane
    # b waits in its own process while a holds the floor; when a releases, b is focused.
    b = start_vocal("conch", "wait", "--session", "b", env=tmux.env(b_pane))
    try:
        wait_until(lambda: queued("b"), timeout_s=30, what="b to queue")
        assert tmux.active() == a_pane
        release("a")
        assert b.wait(30) == 0
        assert tmux.active() == b_pane  # the window changed too
        release("b")
        take_floor(tmux, "a", a_pane)
        assert tmux.active() == a_pane
    finally:
        if b.poll() is None:
            b.kill()
            b.wait(10)


def test_manual_pane_change_holds_focus_until_the_hold_runs_out(tmux: Tmux, vocal_home) -> None:
    hold = {"VOCAL_FOCUS_HOLD_SECONDS": "4.0"}  # outlasts two `vocal` runs on a loaded machine
    a_pane, b_pane, person = tmux.panes[1], tmux.panes[2], tmux.panes[3]
    take_floor(tmux, "a", a_pane, **hold)
    assert tmux.active() == a_pane and sentinel(vocal_home)["reason"] == "vocal"
    release("a")
    tmux.person_selects(person)  # the person goes to work in another pane
    found_at = time.time()
    take_floor(tmux, "b", b_pane, **hold)
    assert tmux.active() == person  # focus did not jump
    record = sentinel(vocal_home)
    assert (record["pane"], record["reason"]) == (person, "manual")
    assert found_at + 3.5 < record["hold_until"] < time.time() + 4.0
    release("b")
    take_floor(tmux, "a", a_pane, **hold)  # within the hold: still where the person is
    assert tmux.active() == person
    release("a")
    time.sleep(max(0.0, record["hold_until"] - time.time()) + 0.1)
    take_floor(tmux, "b", b_pane, **hold)  # the hold ran out: focus follows the speaker again
    assert tmux.active() == b_pane and sentinel(vocal_home)["reason"] == "vocal"


def test_focus_hold_command_and_release(tmux: Tmux, vocal_home) -> None:
    a_pane, person = tmux.panes[2], tmux.panes[0]
    tmux.person_selects(person)
    held = run_vocal("focus", "hold", "--seconds", "60", env=tmux.env(person))
    assert held.returncode == 0, held.stderr
    assert (sentinel(vocal_home)["pane"], sentinel(vocal_home)["reason"]) == (person, "hold")
    take_floor(tmux, "a", a_pane)
    assert tmux.active() == person
    status = json.loads(run_vocal("focus", "status", "--json", env=tmux.env(person)).stdout)
    assert status["active"] == person and status["record"]["hold_until"] > time.time() + 30
    assert run_vocal("focus", "release", env=tmux.env(person)).returncode == 0
    release("a")
    take_floor(tmux, "a", a_pane)
    assert tmux.active() == a_pane


def test_nothing_happens_when_disabled_or_outside_tmux(tmux: Tmux, vocal_home) -> None:
    person, a_pane = tmux.panes[0], tmux.panes[3]
    tmux.person_selects(person)
    take_floor(tmux, "a", a_pane, focus=False)  # VOCAL_AUTO_FOCUS_PANE unset
    assert tmux.active() == person
    release("a")
    outside = {"VOCAL_AUTO_FOCUS_PANE": "true", "TMUX": "", "TMUX_PANE": ""}
    result = run_vocal("conch", "wait", "--session", "a", env=outside)
    assert result.returncode == 0 and tmux.active() == person
    release("a")
    assert not (vocal_home / "run" / "focus.json").exists()
    outside_hold = run_vocal("focus", "hold", env=outside)
    assert outside_hold.returncode == 2 and b"not inside tmux" in outside_hold.stderr
    # Disabled, taking the floor does not even import the focus module (no tmux process).
    traced = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "vocal", "conch", "wait", "--session", "z"],
        capture_output=True, text=True, env={**os.environ, **tmux.env(a_pane, focus=False)},
    )  # fmt: skip
    assert traced.returncode == 0 and "| vocal.floor.conch" in traced.stderr
    assert "vocal.floor.focus" not in traced.stderr


@pytest.mark.audio
@pytest.mark.usefixtures("pulse")
def test_speaking_turns_focus_their_panes(tmux: Tmux, tmp_path: Path) -> None:
    from harness.conch_audio import tone_wav

    a_pane, b_pane = tmux.panes[0], tmux.panes[3]
    tmux.person_selects(tmux.panes[1])
    a_wav = tone_wav(tmp_path / "a.wav", 500, 5.0)  # long enough for b to start and queue
    b_wav = tone_wav(tmp_path / "b.wav", 900, 0.5)
    a = start_vocal("play", str(a_wav), env=tmux.env(a_pane, VOCAL_SESSION="a"))
    try:
        wait_until(lambda: tmux.active() == a_pane, timeout_s=30, what="a's pane to be focused")
        b = start_vocal("play", str(b_wav), env=tmux.env(b_pane, VOCAL_SESSION="b"))
        try:
            wait_until(lambda: queued("b") or b.poll() is not None, timeout_s=30, what="b to queue")
            assert a.poll() is None and tmux.active() == a_pane  # a still speaks
            assert a.wait(30) == 0 and b.wait(30) == 0
        finally:
            if b.poll() is None:
                b.kill()
        assert tmux.active() == b_pane
    finally:
        if a.poll() is None:
            a.kill()
