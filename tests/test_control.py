"""The control socket: protocol, hostile input, peer credentials, and latency on real playback.

Protocol and abuse are tested on a server in this process (real Unix sockets, real threads) and
again on a real `vocal play`; the other-UID tests run the client as `nobody` through setpriv.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.conch_audio import MonitorRecorder, timeline, tone_wav, wait_until
from harness.runner import run_vocal, start_vocal
from vocal.config import load_settings
from vocal.floor.control import (
    ControlError,
    ControlServer,
    endpoints,
    find_endpoint,
    peer_uid,
    remove_stale_socket,
    send_command,
)

NOBODY = 65534


def handler(cmd: str, request: dict) -> dict:
    if request.get("explode"):
        raise RuntimeError("handler bug")
    return {"echo": cmd}


@pytest.fixture
def server(tmp_path: Path) -> Iterator[ControlServer]:
    with ControlServer(tmp_path / "run", handler, info={"session": "s", "kind": "test"},
                       idle_timeout_s=0.5) as srv:  # fmt: skip
        yield srv


def raw(path: Path, payload: bytes, *, timeout_s: float = 5.0) -> list[dict]:
    """Send raw bytes, half-close, and return every reply line."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(timeout_s)
        conn.connect(str(path))
        conn.sendall(payload)
        conn.shutdown(socket.SHUT_WR)
        data = b""
        while chunk := conn.recv(65536):
            data += chunk
    return [json.loads(line) for line in data.decode().splitlines()]


# -- protocol ---------------------------------------------------------------------------------
def test_every_command_is_answered_with_one_line(server: ControlServer) -> None:
    commands = ["stop", "pause", "resume", "skip_forward", "skip-back", "status"]
    payload = b"".join(json.dumps({"cmd": c}).encode() + b"\n" for c in commands)
    replies = raw(server.socket_path, payload)
    assert [r["echo"] for r in replies] == ["stop", "pause", "resume", "skip_forward",
                                            "skip_back", "status"]  # fmt: skip
    assert all(r["ok"] for r in replies)
    assert raw(server.socket_path, b'"status"\n')[0]["echo"] == "status"


def test_socket_directory_and_description(server: ControlServer, tmp_path: Path) -> None:
    run = tmp_path / "run"
    assert (run.stat().st_mode & 0o777) == 0o700
    assert (server.socket_path.stat().st_mode & 0o777) == 0o600
    [endpoint] = endpoints(run)
    assert (endpoint.pid, endpoint.session, endpoint.kind) == (os.getpid(), "s", "test")
    assert find_endpoint(run, session="s") == endpoint
    assert find_endpoint(run, session="other") is None
    reply = send_command(endpoint, "status")
    assert reply["ok"] and reply["sent_at_s"] <= reply["received_at_s"] <= reply["replied_at_s"]


@pytest.mark.parametrize(
    ("payload", "error"),
    [
        (b"not json\n", "bad JSON"),
        (b"\xff\xfe\x00garbage\n", "bad JSON"),
        (b"[1, 2]\n", "JSON object"),
        (b"42\n", "JSON object"),
        (b'{"cmd": 5}\n', 'missing "cmd"'),
        (b'{"command": "stop"}\n', 'missing "cmd"'),
        (b'{"cmd": "rm -rf /"}\n', "unknown command"),
        (b"[" * 3000 + b"]" * 3000 + b"\n", "longer than"),
        (b"[" * 2000 + b"\n", "bad JSON"),
        (b'{"cmd": "status", "explode": true}\n', "handler bug"),
        (b"x" * 100_000, "longer than"),
        (b"\x00" * 10 + b"\n", "bad JSON"),
    ],
)
def test_malformed_input_gets_an_error_line(server: ControlServer, payload: bytes,
                                            error: str) -> None:  # fmt: skip
    replies = raw(server.socket_path, payload)
    assert replies and replies[0]["ok"] is False and error in replies[0]["error"]
    assert send_command(server.socket_path, "status")["ok"]  # still serving


def test_blank_lines_are_ignored_and_errors_do_not_end_the_connection(
    server: ControlServer,
) -> None:
    replies = raw(server.socket_path, b'\n\nnope\n{"cmd": "pause"}\n\n')
    assert [r["ok"] for r in replies] == [False, True]


def test_silent_client_times_out(server: ControlServer) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(5)
        conn.connect(str(server.socket_path))
        started = time.monotonic()
        reply = json.loads(conn.recv(4096).decode())
        assert "timeout" in reply["error"]
        assert 0.4 < time.monotonic() - started < 2.0
        assert conn.recv(4096) == b""  # and it is hung up on


def test_trickling_client_is_cut_off(server: ControlServer) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.settimeout(5)
        conn.connect(str(server.socket_path))
        started = time.monotonic()
        with pytest.raises(OSError):  # noqa: PT012 - the server hangs up mid-trickle
            for byte in b'{"cmd": "status"}' * 10:
                conn.send(bytes([byte]))
                time.sleep(0.05)
        assert time.monotonic() - started < 2.0


def test_flood_of_connections_is_refused_not_fatal(server: ControlServer) -> None:
    idle = []
    for _ in range(60):  # more than MAX_CLIENTS, all silent
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(str(server.socket_path))
        idle.append(conn)
    errors = []
    for conn in idle:
        conn.settimeout(3)
        errors.append(json.loads(conn.recv(4096).decode().splitlines()[0])["error"])
        conn.close()
    # Each one is answered, by "busy" at once or by the idle timeout: none is left hanging.
    assert sum(e.startswith("busy") for e in errors) >= 20
    assert all(e.startswith(("busy", "timeout")) for e in errors)
    assert send_command(server.socket_path, "status")["ok"]


def test_client_that_hangs_up_at_once_does_no_harm(server: ControlServer) -> None:
    for _ in range(20):
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        conn.connect(str(server.socket_path))
        conn.sendall(b'{"cmd": "status"}\n')
        conn.close()
    assert send_command(server.socket_path, "status")["ok"]


ENDS_ON_SKIP = """
import os, sys, threading, time
from pathlib import Path
from vocal.floor.control import ControlServer
skipped = threading.Event()
def handler(cmd, request):
    skipped.set()  # the turn ends at once, while this reply is still on its way (a loaded CPU)
    time.sleep(0.3)
    return {}
server = ControlServer(Path(sys.argv[1]), handler).start()
print(server.socket_path, flush=True)
skipped.wait(10)
server.close()
os._exit(0)
"""


def test_a_command_that_ends_the_turn_is_answered_before_the_process_exits(
    tmp_path: Path,
) -> None:
    # Seen under load (issue 38): `vocal control skip-forward` got no reply, the skip applied.
    script = [sys.executable, "-c", ENDS_ON_SKIP, str(tmp_path / "run")]
    proc = subprocess.Popen(script, stdout=subprocess.PIPE, text=True)
    try:
        socket_path = Path(proc.stdout.readline().strip()) if proc.stdout else None
        assert socket_path is not None
        assert send_command(socket_path, "skip_forward")["cmd"] == "skip_forward"
    finally:
        proc.kill()
        proc.wait()


def test_peer_uid_is_ours_for_our_own_connection(server: ControlServer) -> None:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:
        conn.connect(str(server.socket_path))
        assert peer_uid(conn) == os.geteuid()


def test_stale_socket_is_removed_before_binding(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    stale = run / f"{os.getpid()}.sock"
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(stale))
    dead.close()  # the file stays, nothing listens: what a SIGKILLed turn leaves
    assert stale.exists()
    with ControlServer(run, handler) as srv:
        assert send_command(srv.socket_path, "status")["ok"]
    assert not stale.exists()


def test_live_socket_is_not_taken_over(server: ControlServer) -> None:
    with pytest.raises(ControlError, match="another process is listening"):
        remove_stale_socket(server.socket_path)
    assert send_command(server.socket_path, "status")["ok"]


def test_long_state_directory_paths_still_bind(tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 60) / ("e" * 60) / "run"
    assert len(str(deep / "1.sock")) > 108
    with ControlServer(deep, handler) as srv:
        [endpoint] = endpoints(deep)
        assert send_command(endpoint, "pause")["echo"] == "pause"
    assert not srv.socket_path.exists()


def test_dead_processes_descriptions_are_pruned(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir(mode=0o700)
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    (run / f"{child.pid}.json").write_text(json.dumps({"pid": child.pid, "session": "gone"}))
    (run / f"{child.pid}.sock").write_text("")
    assert endpoints(run) == []
    assert list(run.iterdir()) == []


# -- the command-line client ------------------------------------------------------------------
def test_cli_without_a_running_turn() -> None:
    result = run_vocal("control", "stop")
    assert result.returncode == 1
    assert result.stderr.decode().startswith("vocal: error: no running vocal turn")
    assert run_vocal("control", "status").stdout.decode().strip() == "no vocal turn is running"
    assert run_vocal("control", "pause", "--pid", "1").returncode == 1
    assert run_vocal("control", "skip-back").returncode == 2  # empty history: nothing to replay
    assert run_vocal("control", "bogus").returncode == 2


# -- real playback ---------------------------------------------------------------------------
audio = [pytest.mark.audio, pytest.mark.usefixtures("pulse")]


def start_long_tone(tmp_path: Path, seconds: float = 6.0, frequency: float = 600,
                    *extra: str) -> subprocess.Popen:  # fmt: skip
    path = tone_wav(tmp_path / f"tone{frequency}.wav", frequency, seconds)
    proc = start_vocal("play", str(path), "--session", "talker", "--json", *extra)
    run_dir = load_settings().run_dir
    wait_until(lambda: any(e.pid == proc.pid for e in endpoints(run_dir)), what="the socket")
    endpoint = find_endpoint(run_dir, pid=proc.pid)
    wait_until(lambda: send_command(endpoint, "status")["state"] == "playing", what="playing")
    return proc


@pytest.mark.audio
@pytest.mark.usefixtures("pulse")
def test_commands_land_within_100_ms_during_real_playback(tmp_path: Path) -> None:
    frequency = 600
    with MonitorRecorder() as recorder:
        proc = start_long_tone(tmp_path, 8.0, frequency)
        playing_since = time.monotonic()
        endpoint = find_endpoint(load_settings().run_dir, pid=proc.pid)
        time.sleep(0.4)
        landed, round_trips, silences = [], [], []
        for _ in range(4):
            reply = send_command(endpoint, "pause")
            assert reply["ok"] and reply["state"] == "paused" and reply["paused"] is True
            landed.append(reply["applied_at_s"] - reply["sent_at_s"])
            round_trips.append(reply["replied_at_s"] - reply["sent_at_s"])
            paused_at = reply["sent_at_s"]
            time.sleep(0.4)
            reply = send_command(endpoint, "resume")
            assert reply["ok"] and reply["paused"] is False
            landed.append(reply["applied_at_s"] - reply["sent_at_s"])
            resumed_at = reply["sent_at_s"]
            silences.append((paused_at, resumed_at))
            time.sleep(0.4)
        played = send_command(endpoint, "status")["played_s"]
        playing_for = time.monotonic() - playing_since
        reply = send_command(endpoint, "stop")
        landed.append(reply["applied_at_s"] - reply["sent_at_s"])
        stopped_at = reply["sent_at_s"]
        out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err.decode()
    assert timeline(out)["outcome"] == "stopped"
    assert played > 1.0
    # played_s counts the tone sent, not the 4 x 0.4 s paused (issue 17).
    assert played < playing_for - 1.0, (played, playing_for)
    print(
        f"control: send->applied median {statistics.median(landed) * 1000:.2f} ms, "
        f"max {max(landed) * 1000:.2f} ms; round trip median "
        f"{statistics.median(round_trips) * 1000:.2f} ms"
    )
    # The bound, measured ~1 ms; on a loaded machine one command of the nine has waited
    # for a core (156 and 210 ms, two CPU-burning loops beside the test: issue 38).
    assert sorted(landed)[-2] < 0.100 and max(landed) < 0.5, landed
    # What is heard: silence within a few blocks of each pause, the tone back after resume,
    # and nothing after stop.
    amplitude = recorder.amplitudes([frequency])[:, 0]
    times = recorder.times
    for paused_at, resumed_at in silences:
        quiet = [
            a for t, a in zip(times, amplitude, strict=False) if paused_at + 0.15 < t < resumed_at
        ]
        assert quiet and max(quiet) < 0.02
        silent_at = next(
            t for t, a in zip(times, amplitude, strict=False) if t > paused_at and a < 0.02
        )
        assert silent_at - paused_at < 0.15
        back = next(t for t, a in zip(times, amplitude, strict=False) if t > resumed_at and a > 0.1)
        assert back - resumed_at < 0.25
    silent_at = recorder.silent_after(stopped_at, frequency)
    assert silent_at is not None and silent_at - stopped_at < 0.15


def attack(path: Path, payload: bytes) -> None:
    with contextlib.suppress(OSError):  # being hung up on is a fine answer to garbage
        raw(path, payload)


@pytest.mark.audio
@pytest.mark.usefixtures("pulse")
def test_hostile_input_does_not_disturb_real_playback(tmp_path: Path) -> None:
    frequency = 800
    with MonitorRecorder() as recorder:
        proc = start_long_tone(tmp_path, 3.0, frequency)
        path = find_endpoint(load_settings().run_dir, pid=proc.pid).socket_path
        hostile = [b"garbage\n", b"\xff" * 5000, b"[" * 4000 + b"\n", b'{"cmd": "format c:"}\n',
                   b'{"cmd": null}\n', os.urandom(3000) + b"\n"]  # fmt: skip
        threads = [threading.Thread(target=attack, args=(path, p)) for p in hostile]
        silent = [socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) for _ in range(12)]
        for conn in silent:
            conn.connect(str(path))
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(10)
        assert send_command(path, "status")["state"] == "playing"
        out, err = proc.communicate(timeout=15)
        for conn in silent:
            conn.close()
    assert proc.returncode == 0, err.decode()
    assert timeline(out)["outcome"] == "finished"
    # Played whole. (Not asserted gap-free: on 2 shared cores a loaded machine alone can
    # make an underflow of a block or two, with or without this test's garbage.)
    segments = recorder.tone_segments([frequency])[frequency]
    audible_s = sum(end - start for start, end in segments)
    assert 2.8 < audible_s and segments[-1][1] - segments[0][0] < 3.6, segments


@pytest.mark.audio
@pytest.mark.usefixtures("pulse")
def test_stop_while_waiting_gives_up_the_place(tmp_path: Path) -> None:
    assert run_vocal("conch", "wait", "--session", "gate").returncode == 0
    path = tone_wav(tmp_path / "t.wav", 500, 1.0)
    proc = start_vocal("play", str(path), "--session", "patient", "--json")
    run_dir = load_settings().run_dir
    wait_until(lambda: find_endpoint(run_dir, session="patient") is not None)
    status = run_vocal("control", "status", "--session", "patient", "--json")
    assert json.loads(status.stdout)["state"] == "waiting"
    assert run_vocal("control", "stop", "--session", "patient").returncode == 0
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err.decode()
    assert timeline(out)["outcome"] == "stopped" and timeline(out)["started_at_s"] is None
    queue = json.loads(run_vocal("conch", "status", "--json").stdout)["queue"]
    assert queue == []


@pytest.mark.audio
@pytest.mark.usefixtures("pulse")
def test_cli_targets_the_holder_and_skip_forward_ends_playback(tmp_path: Path) -> None:
    proc = start_long_tone(tmp_path, 6.0, 600)
    listing = run_vocal("control", "status")
    assert f"pid {proc.pid} play (talker): playing" in listing.stdout.decode()
    result = run_vocal("control", "skip-forward", "--json")
    assert result.returncode == 0 and json.loads(result.stdout)["cmd"] == "skip_forward"
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0 and timeline(out)["outcome"] == "skipped"
    assert run_vocal("control", "pause").returncode == 1  # nothing runs any more


# -- another user -------------------------------------------------------------------------------
@pytest.fixture
def shared_home(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """A VOCAL_HOME that another user can traverse (the run directory inside stays 0700)."""
    if os.geteuid() != 0:
        pytest.skip("running a client as another user needs root (setpriv)")
    if shutil.which("setpriv") is None:
        pytest.skip("setpriv (util-linux) is not installed")
    home = Path(tempfile.mkdtemp(prefix="vocal-uid-"))
    home.chmod(0o755)
    monkeypatch.setenv("VOCAL_HOME", str(home))
    yield home
    shutil.rmtree(home, ignore_errors=True)


def as_nobody(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["setpriv", f"--reuid={NOBODY}", f"--regid={NOBODY}", "--clear-groups", *args],
        capture_output=True, timeout=30, env={**os.environ, "HOME": "/nonexistent"},
    )  # fmt: skip


RAW_CLIENT = """
import json, socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
s.settimeout(5)
try:
    s.connect(sys.argv[1])
except OSError as exc:
    print(json.dumps({"connect_error": exc.__class__.__name__}))
    sys.exit(0)
s.sendall(b'{"cmd": "stop"}\\n')
print(s.recv(4096).decode().strip())
"""


@pytest.mark.audio
@pytest.mark.usefixtures("pulse")
def test_client_of_another_uid_is_refused(tmp_path: Path, shared_home: Path) -> None:
    proc = start_long_tone(tmp_path, 5.0, 700)
    try:
        run_dir = load_settings().run_dir
        sock = find_endpoint(run_dir, pid=proc.pid).socket_path
        # 1. The 0700 directory: nobody cannot even reach the socket.
        cli = as_nobody(sys.executable, "-m", "vocal", "control", "stop", "--pid", str(proc.pid))
        assert cli.returncode == 1 and b"no running vocal turn" in cli.stderr
        reached = as_nobody(sys.executable, "-c", RAW_CLIENT, str(sock))
        assert json.loads(reached.stdout) == {"connect_error": "PermissionError"}
        # 2. The peer check: with the directory opened up, the server still refuses the peer.
        run_dir.chmod(0o755)
        sock.chmod(0o777)
        refused = as_nobody(sys.executable, "-c", RAW_CLIENT, str(sock))
        reply = json.loads(refused.stdout)
        assert reply["ok"] is False
        assert reply["error"] == f"refused: peer uid {NOBODY} is not ours"
        # The turn was not stopped and still answers its own user.
        status = send_command(sock, "status")
        assert status["state"] == "playing"
    finally:
        out, err = proc.communicate(timeout=15)
    assert proc.returncode == 0, err.decode()
    assert timeline(out)["outcome"] == "finished"


# -- corrupt state heals itself (issue 17) ------------------------------------------------------
@pytest.mark.parametrize("content", [
    "[" * 100_000 + "]" * 100_000,
    '{"pid_start": "x", "started_at": "soon"}',
    '{"started_at": 1e999}',
    '{"session": {"a": 1}}',
    '{"pid": 1}',
])  # fmt: skip
def test_a_malformed_run_record_is_quarantined(content: str) -> None:
    run_dir = load_settings().run_dir
    run_dir.mkdir(parents=True, exist_ok=True)
    name = f"{os.getpid()}.json"
    (run_dir / name).write_text(content)
    assert endpoints(run_dir) == []
    assert [n for n in os.listdir(run_dir) if n.startswith(f"{name}.bad-")]
    result = run_vocal("control", "status", "--json", timeout=30)
    assert result.returncode == 0 and result.stdout.strip() == b"[]", result.stderr
    assert b"Traceback" not in result.stderr
