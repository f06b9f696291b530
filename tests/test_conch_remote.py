"""Remote waiters: agents with no local process take turns through `vocal conch wait/heartbeat`.

Every agent here is a real `vocal` process (one per call, as a remote agent's tool calls are),
with small TTL, cap and expiry values so the waits stay short.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

from harness.conch_audio import wait_until
from harness.runner import run_vocal, start_vocal

#: A remote agent's side-car that keeps its place (or its hold): a heartbeat every argv[2] s,
#: until killed. Through the library, so a loaded machine's interpreter start-up (which can
#: exceed the small TTLs used here) does not space the beats out; the `vocal conch heartbeat`
#: command itself is checked with single calls below.
HEARTBEATS = """
import sys, time
from vocal.floor.conch.queue import Conch
from vocal.config import load_settings
conch = Conch.from_settings(load_settings())
while True:
    conch.heartbeat(sys.argv[1])
    time.sleep(float(sys.argv[2]))
"""


def status() -> dict:
    result = run_vocal("conch", "status", "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)


def queue() -> list[str]:
    return [w["session"] for w in status()["queue"]]


def holder() -> str | None:
    record = status()["holder"]
    return record["session"] if record else None


def wait_json(session: str, *args: str, **env: str) -> tuple[int, dict]:
    result = run_vocal("conch", "wait", "--session", session, "--json", *args, env=env)
    assert result.returncode in (0, 3), result.stderr
    return result.returncode, json.loads(result.stdout)


def test_wait_cap_returns_in_time_with_the_position_and_keeps_the_place() -> None:
    assert wait_json("a", "--agent", "alpha")[0] == 0
    assert wait_json("b", "--callback")[0] == 3
    started = time.monotonic()
    result = run_vocal("conch", "wait", "--session", "c", "--json",
                       env={"VOCAL_CONCH_WAIT_CAP": "1.0"})  # fmt: skip
    elapsed = time.monotonic() - started
    assert result.returncode == 3
    assert 1.0 <= elapsed < 8.0  # the cap, plus one interpreter start on a loaded machine
    outcome = json.loads(result.stdout)
    assert (outcome["granted"], outcome["position"], outcome["queue_length"]) == (False, 2, 2)
    assert outcome["holder"]["session"] == "a" and outcome["holder"]["agent"] == "alpha"
    assert b"not granted within 1 s" in result.stderr and b"position 2" in result.stderr
    # The text form says the same on stdout; the cap also bounds a longer --timeout.
    started = time.monotonic()
    text = run_vocal("conch", "wait", "--session", "c", "--timeout", "100",
                     env={"VOCAL_CONCH_WAIT_CAP": "0.5"})  # fmt: skip
    assert text.returncode == 3 and time.monotonic() - started < 8.0
    assert text.stdout.decode().strip() == (
        "waiting: position 2 of 2; speaking: alpha (session a, no process)"
    )
    # Both calls kept one place, with no process behind it.
    places = status()["queue"]
    assert [(w["session"], w["pid"]) for w in places] == [("b", None), ("c", None)]


def test_heartbeats_keep_the_place_past_the_ttl_and_the_holder_alive(monkeypatch) -> None:
    monkeypatch.setenv("VOCAL_CONCH_REMOTE_TTL", "1.5")
    monkeypatch.setenv("VOCAL_CONCH_LOCK_EXPIRY", "2.0")
    # The side-cars start first (a beat for a session with no place yet does nothing), so no
    # interpreter start-up comes between a join and its first beat.
    beats = subprocess.Popen([sys.executable, "-c", HEARTBEATS, "kept", "0.2"])
    holder_beats = subprocess.Popen([sys.executable, "-c", HEARTBEATS, "holder", "0.2"])
    try:
        assert wait_json("holder")[0] == 0
        assert wait_json("kept", "--callback")[0] == 3
        assert wait_json("silent", "--callback")[0] == 3
        joined = time.monotonic()
        wait_until(lambda: queue() == ["kept"], timeout_s=15, what="the silent place to go")
        assert time.monotonic() - joined >= 1.0  # not before its TTL (1.5 s from its call)
        time.sleep(3.0)  # twice the TTL more: the beaten place stays, and so does the hold
        assert queue() == ["kept"]
        assert holder() == "holder"  # past its 2 s expiry: the heartbeats renewed it
        beat = run_vocal("conch", "heartbeat", "--session", "kept", "--json")
        assert beat.returncode == 0
        assert json.loads(beat.stdout)["position"] == 1
        # The holder stops beating: its hold runs out at the expiry, and the floor is granted
        # to the kept place, which takes it with its next call.
        holder_beats.kill()
        wait_until(lambda: status()["grant"] is not None, timeout_s=15, what="the hold to end")
        assert status()["grant"]["session"] == "kept"
        granted = run_vocal("conch", "heartbeat", "--session", "kept")
        assert granted.stdout.decode().startswith("granted: the floor waits for session kept")
    finally:
        for proc in (beats, holder_beats):
            proc.kill()
            proc.wait(10)
    code, outcome = wait_json("kept")
    assert code == 0 and outcome["granted"] and outcome["position"] == 0
    assert status()["holder"]["session"] == "kept" and status()["holder"]["pid"] is None
    assert run_vocal("conch", "release", "--session", "kept").returncode == 0
    assert status()["holder"] is None
    # A session with no place is told to join again (exit 3).
    gone = run_vocal("conch", "heartbeat", "--session", "silent")
    assert gone.returncode == 3 and b"holds no place" in gone.stderr


def test_silent_remote_waiter_is_pruned_and_the_next_gets_the_floor(monkeypatch) -> None:
    ttl_s, beat_s = 1.0, 0.2
    monkeypatch.setenv("VOCAL_CONCH_REMOTE_TTL", str(ttl_s))
    # The silent place is beaten until the next one has queued behind it: on a loaded machine
    # the next `vocal conch wait` (and each `status`) can take longer than the TTL to start.
    beats = subprocess.Popen([sys.executable, "-c", HEARTBEATS, "silent", str(beat_s)])
    waiter = None
    try:
        assert wait_json("holder")[0] == 0
        assert wait_json("silent", "--callback")[0] == 3
        # The next one blocks in `vocal conch wait` (its place is refreshed while it blocks).
        waiter = start_vocal("conch", "wait", "--session", "next", "--json")
        wait_until(lambda: queue() == ["silent", "next"], timeout_s=15, what="next to queue")
        beats.kill()
        beats.wait(10)
        last_call = time.monotonic()  # its last beat came at most `beat_s` before
        wait_until(lambda: queue() == ["next"], timeout_s=15, what="the silent place to go")
        pruned_after = time.monotonic() - last_call
        assert ttl_s - beat_s <= pruned_after < ttl_s + 6.0
        time.sleep(2 * ttl_s)
        assert queue() == ["next"] and waiter.poll() is None  # blocked past the TTL, kept
        assert run_vocal("conch", "release", "--session", "holder").returncode == 0
        out, err = waiter.communicate(timeout=15)
        assert waiter.returncode == 0, err
        outcome = json.loads(out)
        assert outcome["granted"] and outcome["session"] == "next"
        assert outcome["expires_in_s"] > 60  # VOCAL_CONCH_LOCK_EXPIRY (120 s) from the grant
        assert holder() == "next" and status()["queue"] == []
    finally:
        beats.kill()
        beats.wait(10)
        if waiter is not None and waiter.poll() is None:
            waiter.kill()
            waiter.wait(10)
