"""The turn a speaking process wraps its audio in: conch, control socket, history, clean exit."""

from __future__ import annotations

import json
import os
import signal
import time
from pathlib import Path

import numpy as np
import pytest

from harness.conch_audio import MonitorRecorder, timeline, tone_wav, wait_until
from harness.runner import run_vocal, start_vocal
from vocal.config import load_settings
from vocal.errors import Interrupted
from vocal.floor.conch.queue import Conch
from vocal.floor.conch.records import ConchBusy, ConchLost
from vocal.floor.control import endpoints, find_endpoint, send_command
from vocal.floor.phases import TRANSITIONS, IllegalTransition, TurnPhase, allowed
from vocal.floor.turn import Turn


def floor() -> Conch:
    return Conch.from_settings(load_settings())


# -- in this process (no audio) ---------------------------------------------------------------
def test_turn_holds_the_floor_and_a_socket_and_cleans_up() -> None:
    settings = load_settings(session="me", agent="tester")
    with Turn(settings, kind="speak", voice="heart") as turn:
        holder = floor().status().holder
        assert (holder.session, holder.agent, holder.voice) == ("me", "tester", "heart")
        [endpoint] = endpoints(settings.run_dir)
        status = send_command(endpoint, "status")
        assert status["holds_floor"] is True and status["state"] == "ready"
        assert (status["session"], status["kind"]) == ("me", "speak")
        assert send_command(endpoint, "pause")["ok"] is False  # nothing plays
        assert turn.holds_floor
    assert floor().status().holder is None
    assert os.listdir(settings.run_dir) == []


def test_turn_phases_move_only_as_the_table_allows() -> None:
    settings = load_settings(session="me")
    with Turn(settings, use_conch=False) as turn:
        assert turn.phase is TurnPhase.READY
        [endpoint] = endpoints(settings.run_dir)
        turn.set_phase(TurnPhase.LISTENING)  # converse after a muted reply
        reply = send_command(endpoint, "status")
        # The phase is a str enum: the status line carries the bare value, as before.
        assert reply["state"] == "listening" and '"state": "listening"' in json.dumps(reply)
        with pytest.raises(IllegalTransition, match="listening -> playing"):
            turn.set_phase(TurnPhase.PLAYING)  # VOCAL_STRICT_PHASES=1 (conftest)
        assert turn.phase is TurnPhase.LISTENING
    assert turn.phase is TurnPhase.DONE
    assert str(TurnPhase.PAUSED) == "paused" and f"{TurnPhase.WAITING}" == "waiting"
    for old, targets in TRANSITIONS.items():
        assert allowed(old, old)  # staying put is not a move
        assert old is TurnPhase.DONE or TurnPhase.DONE in targets  # any phase may end


def test_an_illegal_phase_move_outside_tests_warns_and_is_made(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("VOCAL_STRICT_PHASES")
    with Turn(load_settings(), use_conch=False, control=False) as turn:
        turn.set_phase(TurnPhase.LISTENING)
        turn.set_phase(TurnPhase.PLAYING)
        assert turn.phase is TurnPhase.PLAYING
    assert "turn phase listening -> playing is not an allowed transition" in capsys.readouterr().err


def test_turn_cleans_up_when_the_body_raises() -> None:
    settings = load_settings()
    with pytest.raises(RuntimeError), Turn(settings):
        raise RuntimeError("boom")
    assert floor().status().holder is None and os.listdir(settings.run_dir) == []


def test_no_conch_turn_speaks_over_a_holder() -> None:
    floor().acquire(session="someone", detached=True)
    with Turn(load_settings(), use_conch=False) as turn:
        assert turn.held is None and floor().status().holder.session == "someone"


def test_callback_mode_turn_raises_exit_3_and_cleans_up() -> None:
    floor().acquire(session="someone", detached=True)
    settings = load_settings(session="polite", conch_mode="callback")
    started = time.monotonic()
    with pytest.raises(ConchBusy) as err:
        Turn(settings).__enter__()
    assert time.monotonic() - started < 1.0
    assert err.value.exit_code == 3 and err.value.position == 1
    assert os.listdir(settings.run_dir) == []  # the socket bound for the wait is gone


def test_bumped_turn_is_told_and_silences_its_output() -> None:
    with Turn(load_settings(session="talker")) as turn:
        turn.on("status", lambda request: {"extra": 1})
        block = np.ones(256, np.float32)
        turn.guard_block(block)
        assert block.min() == 1.0  # holding: untouched
        floor().bump()
        wait_until(lambda: turn.lost.is_set(), timeout_s=2, what="the bump to be noticed")
        turn.guard_block(block)
        assert block.max() == 0.0  # lost: the output goes silent in the audio callback
        with pytest.raises(ConchLost, match="floor was taken") as err:
            turn.check()
        assert err.value.exit_code == 3
        assert turn.status()["extra"] == 1 and turn.status()["holds_floor"] is False


def test_sigterm_handler_is_installed_and_restored() -> None:
    before = signal.getsignal(signal.SIGTERM)
    with pytest.raises(Interrupted), Turn(load_settings()):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises before this ends
    assert signal.getsignal(signal.SIGTERM) == before
    assert floor().status().holder is None


def test_reentrant_turn_of_a_session_that_holds_the_floor() -> None:
    assert run_vocal("conch", "wait", "--session", "agent").returncode == 0
    with Turn(load_settings(session="agent")) as turn:
        assert turn.held.reentrant and turn.holds_floor
    # The turn did not take the floor, so it does not give it back: the session keeps it.
    assert floor().status().holder.session == "agent"
    with pytest.raises(ConchBusy):
        Turn(load_settings(session="other", conch_mode="callback")).__enter__()


# -- real processes ---------------------------------------------------------------------------
@pytest.mark.audio
@pytest.mark.usefixtures("pulse")
def test_sigterm_stops_playback_releases_the_floor_and_removes_the_socket(tmp_path: Path) -> None:
    long = tone_wav(tmp_path / "long.wav", 600, 6.0)
    short = tone_wav(tmp_path / "short.wav", 900, 0.4)
    with MonitorRecorder() as recorder:
        talker = start_vocal("play", str(long), "--session", "talker")
        wait_until(lambda: getattr(floor().status().holder, "session", None) == "talker")
        waiter = start_vocal("play", str(short), "--session", "waiter", "--json")
        wait_until(lambda: [w.session for w in floor().status().waiters] == ["waiter"])
        time.sleep(0.3)
        talker.send_signal(signal.SIGTERM)
        terminated_at = time.monotonic()
        _, err = talker.communicate(timeout=10)
        out, waiter_err = waiter.communicate(timeout=10)
    assert talker.returncode == 130 and b"terminated by SIGTERM" in err
    assert waiter.returncode == 0, waiter_err.decode()
    assert timeline(out)["started_at_s"] - terminated_at < 1.0
    silent_at = recorder.silent_after(terminated_at, 600)
    assert silent_at is not None and silent_at - terminated_at < 0.3
    assert recorder.overlap_blocks([600, 900]) == 0
    assert floor().status().holder is None
    assert os.listdir(load_settings().run_dir) == []


@pytest.mark.audio
@pytest.mark.usefixtures("pulse")
def test_play_in_callback_mode_and_with_a_timeout(tmp_path: Path) -> None:
    short = tone_wav(tmp_path / "short.wav", 900, 0.3)
    assert run_vocal("conch", "wait", "--session", "owner").returncode == 0
    started = time.monotonic()
    busy = run_vocal("play", str(short), "--session", "agent-b",
                     env={"VOCAL_CONCH_MODE": "callback"})  # fmt: skip
    assert busy.returncode == 3
    assert b"floor is taken by owner (position 1 in the queue)" in busy.stderr
    assert time.monotonic() - started < 5
    late = run_vocal("play", str(short), env={"VOCAL_CONCH_TIMEOUT": "0.5"})
    assert late.returncode == 3 and b"not granted within 0.5 s" in late.stderr
    # The owner's own commands speak without queueing; --no-conch speaks regardless.
    assert run_vocal("play", str(short), "--session", "owner").returncode == 0
    assert run_vocal("play", str(short), "--no-conch").returncode == 0
    # agent-b kept its place: once the owner releases, calling back takes the floor.
    assert run_vocal("conch", "release", "--session", "owner").returncode == 0
    played = run_vocal("play", str(short), "--session", "agent-b", "--json",
                       env={"VOCAL_CONCH_MODE": "callback"})  # fmt: skip
    assert played.returncode == 0 and timeline(played.stdout)["position_on_arrival"] == 1


@pytest.mark.audio
@pytest.mark.usefixtures("pulse")
def test_play_records_history_and_answers_status(tmp_path: Path) -> None:
    path = tone_wav(tmp_path / "t.wav", 500, 1.5)
    proc = start_vocal("play", str(path), "--text", "the words", "--agent", "A", "--json")
    run_dir = load_settings().run_dir
    wait_until(lambda: find_endpoint(run_dir, pid=proc.pid) is not None)
    endpoint = find_endpoint(run_dir, pid=proc.pid)
    wait_until(lambda: send_command(endpoint, "status")["state"] == "playing")
    status = json.loads(run_vocal("control", "status", "--pid", str(proc.pid), "--json").stdout)
    assert status["utterance"]["text"] == "the words" and status["agent"] == "A"
    assert 0 < status["played_s"] < 1.5
    out, _ = proc.communicate(timeout=10)
    assert proc.returncode == 0 and timeline(out)["outcome"] == "finished"
    listing = json.loads(run_vocal("replay", "--list", "--json").stdout)
    assert listing[0]["text"] == "the words" and listing[0]["agent"] == "A"
    assert abs(listing[0]["duration_s"] - 1.5) < 0.01
    assert run_vocal("play", str(path), "--no-history").returncode == 0
    assert len(json.loads(run_vocal("replay", "--list", "--json").stdout)) == 1


def test_sigterm_while_waiting_leaves_the_queue(tmp_path: Path) -> None:
    assert run_vocal("conch", "wait", "--session", "owner").returncode == 0
    path = tone_wav(tmp_path / "t.wav", 500, 0.3)
    proc = start_vocal("play", str(path), "--session", "patient")
    wait_until(lambda: [w.session for w in floor().status().waiters] == ["patient"])
    proc.send_signal(signal.SIGTERM)
    _, err = proc.communicate(timeout=10)
    assert proc.returncode == 130 and b"terminated by SIGTERM" in err
    assert floor().status().waiters == [] and floor().status().holder.session == "owner"
    assert os.listdir(load_settings().run_dir) == []
