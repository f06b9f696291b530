"""Finding the sound server from cron or `env -i` (vocal.audio.sound_server).

The end-to-end test runs `vocal doctor --json` as a non-root user, in an empty environment,
whose PulseAudio listens only at /run/user/UID/pulse/native (no PULSE_SERVER, no
XDG_RUNTIME_DIR, no ~/.config/pulse runtime link): as root, libpulse would find the server
through root's own ~/.config/pulse anyway, and the test could not fail. It needs root to make
the user (CI runs as root; elsewhere it is skipped with the reason).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from vocal.audio.sound_server import discover

#: The user the end-to-end test runs vocal as (made if missing).
CRON_USER = "vocalcron"


def unix_socket(path: Path) -> socket.socket:
    path.parent.mkdir(parents=True, exist_ok=True)
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    return server


def test_the_environment_is_used_when_it_names_the_server(tmp_path: Path) -> None:
    environ = {"PULSE_SERVER": "tcp:box:4713"}
    found = discover(environ, uid=os.getuid(), run_user_dir=str(tmp_path))
    assert (found.how, found.address) == ("environment", "tcp:box:4713")
    runtime = tmp_path / "xdg"
    with unix_socket(runtime / "pulse" / "native"):
        found = discover({"XDG_RUNTIME_DIR": str(runtime)}, run_user_dir=str(tmp_path))
    assert found.how == "environment" and found.address == f"unix:{runtime}/pulse/native"


def test_the_users_runtime_directory_is_found_when_the_environment_is_empty(tmp_path: Path) -> None:
    uid = os.getuid()
    environ: dict[str, str] = {}
    with unix_socket(tmp_path / str(uid) / "pulse" / "native"):
        found = discover(environ, uid=uid, run_user_dir=str(tmp_path))
    assert found.how == "discovered"
    assert environ == {"PULSE_SERVER": f"unix:{tmp_path}/{uid}/pulse/native",
                       "XDG_RUNTIME_DIR": f"{tmp_path}/{uid}"}  # fmt: skip


def test_nothing_is_set_without_an_own_socket(tmp_path: Path) -> None:
    uid = os.getuid()
    environ: dict[str, str] = {}
    assert discover(environ, uid=uid, run_user_dir=str(tmp_path)).how == "default"
    (tmp_path / str(uid) / "pulse").mkdir(parents=True)
    (tmp_path / str(uid) / "pulse" / "native").write_text("not a socket")
    assert discover(environ, uid=uid, run_user_dir=str(tmp_path)).how == "default"
    assert environ == {}
    # Someone else's socket is not ours to use.
    other = tmp_path / "other"
    with unix_socket(other / "pulse" / "native"):
        found = discover(environ, uid=uid + 1, run_user_dir=str(tmp_path))
    assert found.how == "default" and environ == {}


# -- cron, for real ------------------------------------------------------------------------------
needs_root = pytest.mark.skipif(
    os.geteuid() != 0 or not all(shutil.which(p) for p in ("useradd", "runuser", "pulseaudio")),
    reason="needs root (to make a user and run as it), useradd, runuser and pulseaudio",
)


def as_user(user: str, *argv: str, env: dict[str, str], **kwargs) -> subprocess.CompletedProcess:
    """`argv` run as `user` with exactly `env` (nothing of this process's environment)."""
    pairs = [f"{k}={v}" for k, v in env.items()]
    return subprocess.run(["runuser", "-u", user, "--", "env", "-i", *pairs, *argv],
                          capture_output=True, text=True, **kwargs)  # fmt: skip


def user_python() -> tuple[str, str]:
    """(a Python of this version that any user may run, the PYTHONPATH that gives it this
    vocal and this environment's packages)."""
    import sysconfig

    import vocal

    python = f"/usr/bin/python{sys.version_info.major}.{sys.version_info.minor}"
    if not os.access(python, os.X_OK):
        pytest.fail(f"no {python} for the test user to run (scripts/setup --test installs it)")
    source = Path(vocal.__file__).resolve().parents[1]
    return python, os.pathsep.join([str(source), sysconfig.get_paths()["purelib"]])


@pytest.fixture
def cron_user_server() -> Iterator[tuple[str, int, Path]]:
    """(user, uid, a VOCAL_HOME it owns) with a PulseAudio of its own at
    /run/user/UID/pulse/native and nowhere else."""
    if subprocess.run(["id", CRON_USER], capture_output=True).returncode != 0:
        subprocess.run(["useradd", "--create-home", "--shell", "/bin/sh", CRON_USER], check=True)
    entry = pwd.getpwnam(CRON_USER)
    uid, home = entry.pw_uid, Path(entry.pw_dir)
    runtime = Path("/run/user") / str(uid)
    runtime.mkdir(parents=True, exist_ok=True)
    os.chown(runtime, uid, entry.pw_gid)
    runtime.chmod(0o700)
    vocal_home: Path | None = None
    server_env = {"HOME": str(home), "XDG_RUNTIME_DIR": str(runtime), "PATH": "/usr/bin:/bin"}
    pulse = subprocess.Popen(
        ["runuser", "-u", CRON_USER, "--", "env", "-i",
         *(f"{k}={v}" for k, v in server_env.items()),
         "pulseaudio", "-n", "--daemonize=no", "--exit-idle-time=-1", "--disable-shm=yes",
         "--log-target=stderr", "-L", "module-native-protocol-unix",
         "-L", "module-null-sink sink_name=cron_speaker", "-L", "module-always-sink"],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while not (runtime / "pulse" / "native").exists():
            assert pulse.poll() is None, pulse.stderr.read().decode() if pulse.stderr else ""
            assert time.monotonic() < deadline, "the user's PulseAudio did not start"
            time.sleep(0.05)
        # Only the runtime directory leads to it: no ~/.config/pulse/*-runtime link.
        for link in (home / ".config" / "pulse").glob("*-runtime"):
            link.unlink()
        # Where the user can reach it: pytest's own directories are root's alone (0700).
        vocal_home = Path(tempfile.mkdtemp(prefix="vocal-cron-home-"))
        os.chown(vocal_home, uid, entry.pw_gid)
        yield CRON_USER, uid, vocal_home
    finally:
        if vocal_home is not None:
            shutil.rmtree(vocal_home, ignore_errors=True)
        pulse.terminate()
        try:
            pulse.wait(10)
        except subprocess.TimeoutExpired:
            pulse.kill()


@needs_root
def test_doctor_from_an_empty_environment_finds_the_users_server(cron_user_server) -> None:
    user, uid, vocal_home = cron_user_server
    bare = {"PATH": "/usr/bin:/bin"}
    socket_path = f"/run/user/{uid}/pulse/native"
    # The test can fail: nothing in this environment leads libpulse to the server.
    assert as_user(user, "pactl", "info", env=bare, timeout=30).returncode != 0
    checks = cron_doctor(user, vocal_home)
    backend = checks["audio backend"]
    assert backend["status"] == "ok", backend
    assert backend["data"] == {"address": f"unix:{socket_path}", "found": "discovered"}, backend
    assert socket_path in backend["detail"] and "the environment named none" in backend["detail"]
    # ... and the server it found is the user's: PortAudio's default output is its null sink.
    assert "sink cron_speaker" in checks["devices"]["detail"], checks["devices"]
    # Its own state directory, as a cron job's would be.
    assert checks["state directory"]["status"] == "ok", checks["state directory"]


@needs_root
def test_doctor_reports_a_state_directory_the_user_cannot_reach(cron_user_server, tmp_path) -> None:
    # VOCAL_HOME under a directory only root may enter: every check that reads state says so
    # in its line and the doctor finishes its report, exit code 1.
    user, _, _ = cron_user_server
    root_only = tmp_path / "root-only"
    root_only.mkdir(mode=0o700)
    checks = cron_doctor(user, root_only / "vocal", returncode=1)
    state = checks["state directory"]
    assert state["status"] == "fail" and "Permission denied" in state["detail"], state
    echo = checks["echo profile"]
    assert echo["status"] == "warn" and "what was kept cannot be read" in echo["detail"], echo


def cron_doctor(user: str, vocal_home: Path, returncode: int = 0) -> dict[str, dict]:
    """`vocal doctor --json` run as `user` would from cron (no session variables, its own
    VOCAL_HOME only): its checks by name. This interpreter may live where the user cannot reach
    (pyenv under /root): the system's Python of the same version runs the same vocal and
    packages."""
    python, path = user_python()
    env = {"PATH": "/usr/bin:/bin", "VOCAL_HOME": str(vocal_home), "PYTHONDONTWRITEBYTECODE": "1",
           "PYTHONPATH": path}  # fmt: skip
    result = as_user(user, python, "-m", "vocal", "doctor", "--json", env=env, timeout=120)
    assert result.stdout and result.returncode == returncode, result.stderr
    return {check["name"]: check for check in json.loads(result.stdout)}
