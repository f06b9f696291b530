"""vocal deletes only what it created, signals only what it started, and keeps its state
directory to itself (issue 17): each case as a hostile or careless user met it."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.runner import run_vocal
from vocal.errors import EXIT_USAGE, UsageError
from vocal.floor.statedir import (
    STATE_MARKER_NAME,
    ensure_private_dir,
    ensure_state_dir,
    has_state_marker,
)
from vocal.floor.statefiles import HOST, process_start


def files(root: Path) -> dict[str, bytes]:
    """Every file under `root` and its bytes."""
    return {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}


def error_line(result: subprocess.CompletedProcess) -> str:
    err = result.stderr.decode()
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.startswith("vocal: error:")]
    assert len(lines) == 1, err
    return lines[0]


@pytest.fixture
def user_folder(vocal_home: Path) -> Path:
    """VOCAL_HOME pointed at a folder of the user's: a thesis, a project, and some of vocal's."""
    (vocal_home / "project").mkdir(parents=True)
    (vocal_home / "project" / "main.py").write_text("print('mine')\n")
    (vocal_home / "thesis.txt").write_text("four years of work\n")
    (vocal_home / "cache").mkdir()
    (vocal_home / "cache" / "weights.bin").write_bytes(b"w")
    return vocal_home


# -- teardown: whose directory -------------------------------------------------------------------
def test_teardown_refuses_a_home_holding_the_users_files(user_folder: Path) -> None:
    before = files(user_folder)
    for args in (("--yes",), ("--yes", "--all"), ("--dry-run",), ("--dry-run", "--json")):
        result = run_vocal("teardown", *args)
        assert result.returncode == EXIT_USAGE, (args, result.stderr.decode())
        line = error_line(result)
        assert "project" in line and "thesis.txt" in line and "did not make" in line
        assert result.stdout == b""
    assert files(user_folder) == before
    assert not (user_folder / STATE_MARKER_NAME).exists()


@pytest.mark.parametrize("where", ["root", "home"])
def test_teardown_refuses_root_and_the_home_directory(
    where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    fake_home = tmp_path / "home"
    fake_home.mkdir()
    monkeypatch.setenv("HOME", str(fake_home))
    home = "/" if where == "root" else str(fake_home)
    for args in (("--dry-run",), ("--dry-run", "--json"), ("--yes",)):
        result = run_vocal("teardown", *args, env={"VOCAL_HOME": home})
        assert result.returncode == EXIT_USAGE, result.stderr.decode()
        assert "not vocal's state directory" in error_line(result)
        assert b"/bin" not in result.stdout + result.stderr
    assert fake_home.is_dir() and Path("/bin").exists()


def test_an_unmarked_home_in_vocals_layout_is_not_adopted_nor_torn_down(vocal_home: Path) -> None:
    """Entries named as vocal's prove nothing (issue 37: such a folder used to be adopted, then
    torn down): without the marker vocal writes when it makes the directory, nothing goes."""
    for name, data in {
        "config.toml": b'tts_engine = "espeak-ng"\n',
        "history/00000001.json": b"{}",
        "logs/hooks.log": b"x\n",
        "run/messages/s/1.txt": b"piece",
    }.items():
        path = vocal_home / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    before = files(vocal_home)
    for args in (("--dry-run",), ("--yes", "--json")):
        result = run_vocal("teardown", *args)
        assert result.returncode == EXIT_USAGE, result.stderr.decode()
        assert "did not make" in error_line(result)
    assert files(vocal_home) == before
    assert not (vocal_home / STATE_MARKER_NAME).exists()


def test_in_a_marked_home_only_vocals_entries_go(vocal_home: Path) -> None:
    ensure_state_dir(vocal_home)
    (vocal_home / "history").mkdir()
    (vocal_home / "history" / "1.pcm").write_bytes(b"\0\0")
    (vocal_home / "config.toml").write_text("speed = 1.0\n")
    (vocal_home / "notes.txt").write_text("the user's\n")
    (vocal_home / "stuff").mkdir()
    (vocal_home / "stuff" / "a.py").write_text("x = 1\n")
    result = run_vocal("teardown", "--yes", "--json")
    assert result.returncode == 0, result.stderr.decode()
    report = json.loads(result.stdout)
    assert {Path(p).name for p in report["left"]} == {"notes.txt", "stuff"}
    assert {Path(p).name for p in report["removed"]} == {"history", "logs"}
    everything = run_vocal("teardown", "--yes", "--all")
    assert everything.returncode == 0, everything.stderr.decode()
    assert "left" in everything.stdout.decode()
    assert files(vocal_home) == {"notes.txt": b"the user's\n", "stuff/a.py": b"x = 1\n"}


def test_a_shared_tts_cache_dir_loses_only_vocals_files(vocal_home: Path, tmp_path: Path) -> None:
    shared = tmp_path / "shared-cache"
    ours = {
        "hibari/g2p-us-0123456789ab.sqlite": b"g2p",
        "hibari/kokoro-1a2b3c-ort1.20.1.ort": b"ort",
        "piper/en_US-joe-medium-99-ort1.20.1.ort": b"ort",
    }
    theirs = {
        "other-app/index.db": b"theirs",
        "hibari/their-notes.txt": b"theirs too",
        # Named as vocal's files are, but not written by vocal (issue 37): it stays.
        "hibari/g2p-gb-fedcba987654.sqlite": b"another program's",
        "readme.md": b"shared folder",
    }
    for name, data in {**ours, **theirs}.items():
        (shared / name).parent.mkdir(parents=True, exist_ok=True)
        (shared / name).write_bytes(data)
    from vocal.floor.statedir import record_made

    for name in ours:  # as the engines note each file they write (issue 37)
        record_made(shared / name)
    env = {"VOCAL_TTS_CACHE_DIR": str(shared)}
    result = run_vocal("teardown", "--yes", "--json", env=env)
    assert result.returncode == 0, result.stderr.decode()
    assert files(shared) == theirs
    removed = {str(Path(p).relative_to(shared)) for p in json.loads(result.stdout)["removed"]
               if p.startswith(str(shared))}  # fmt: skip
    manifests = {"hibari/.vocal-made", "piper/.vocal-made"}
    assert removed == set(ours) | manifests | {"piper"}  # piper/ was left empty: it goes too


# -- teardown: whose process ---------------------------------------------------------------------
@pytest.fixture
def strangers() -> Iterator[list[subprocess.Popen]]:
    """Unrelated processes whose pids end up in vocal's records."""
    procs = [subprocess.Popen(["sleep", "60"]) for _ in range(4)]
    yield procs
    for proc in procs:
        if proc.poll() is None:
            proc.kill()
        proc.wait()


def _write(path: Path, data: dict) -> None:
    ensure_private_dir(path.parent)
    path.write_text(json.dumps(data))


def test_teardown_signals_no_process_it_cannot_verify(
    vocal_home: Path, strangers: list[subprocess.Popen]
) -> None:
    no_start, wrong_start, run_no_start, run_wrong = strangers
    holder = {"token": "t", "seq": 1, "session": "s", "host": HOST,
              "acquired_at": time.time(), "expires_at": time.time() + 60}  # fmt: skip
    _write(vocal_home / "conch" / "holder.json", {**holder, "pid": no_start.pid})
    _write(vocal_home / "run" / f"{run_no_start.pid}.json",
           {"pid": run_no_start.pid, "kind": "speak", "started_at": 1.0})  # fmt: skip
    _write(vocal_home / "run" / f"{run_wrong.pid}.json",
           {"pid": run_wrong.pid, "kind": "speak", "started_at": 1.0,
            "pid_start": process_start(run_wrong.pid) + 1})  # fmt: skip
    result = run_vocal("teardown", "--yes", "--json")
    assert result.returncode == 0, result.stderr.decode()
    # The holder with a wrong start time, and the remaining run record: still nothing signalled.
    _write(
        vocal_home / "conch" / "holder.json",
        {**holder, "pid": wrong_start.pid, "pid_start": process_start(wrong_start.pid) + 1},
    )
    _write(vocal_home / "run" / f"{run_no_start.pid}.json",
           {"pid": run_no_start.pid, "kind": "speak", "started_at": 1.0})  # fmt: skip
    again = run_vocal("teardown", "--yes", "--json")
    assert again.returncode == 0, again.stderr.decode()
    time.sleep(0.2)
    assert [p.poll() for p in strangers] == [None] * 4, "teardown signalled a stranger"
    report = json.loads(result.stdout)
    assert report["stopped"] == []
    assert [p["pid"] for p in report["not_stopped"]] == [run_no_start.pid]


def test_teardown_stops_the_verified_conch_holder(
    vocal_home: Path, strangers: list[subprocess.Popen]
) -> None:
    proc = strangers[0]
    _write(vocal_home / "conch" / "holder.json",
           {"token": "t", "seq": 1, "session": "s", "pid": proc.pid, "host": HOST,
            "pid_start": process_start(proc.pid), "acquired_at": time.time(),
            "expires_at": time.time() + 60})  # fmt: skip
    result = run_vocal("teardown", "--yes", "--json")
    assert result.returncode == 0, result.stderr.decode()
    assert proc.wait(5) == -signal.SIGTERM
    assert json.loads(result.stdout)["stopped"] == [
        {"pid": proc.pid, "how": "conch", "kind": "holder", "exited": True}
    ]


# -- the state directory: created private, checked ----------------------------------------------
def test_the_state_directory_is_created_0700_and_marked(vocal_home: Path) -> None:
    result = run_vocal("conch", "status")
    assert result.returncode == 0, result.stderr.decode()
    assert vocal_home.stat().st_mode & 0o777 == 0o700
    assert (vocal_home / "logs").stat().st_mode & 0o777 == 0o700
    marker = vocal_home / STATE_MARKER_NAME
    assert marker.stat().st_mode & 0o777 == 0o600
    assert json.loads(marker.read_text())["version"] == 1


@pytest.mark.parametrize("mode", [0o777, 0o770, 0o722])
def test_a_home_others_can_write_is_refused_and_doctor_says_how_to_fix(
    vocal_home: Path, mode: int
) -> None:
    vocal_home.mkdir()
    os.chmod(vocal_home, mode)
    result = run_vocal("conch", "status")
    assert result.returncode == EXIT_USAGE
    line = error_line(result)
    assert "writable by other users" in line and f"chmod 700 {vocal_home}" in line
    assert list(vocal_home.iterdir()) == []
    assert not _doctor_state_ok(vocal_home)


@pytest.mark.skipif(os.geteuid() != 0, reason="giving a directory away needs root")
def test_a_home_owned_by_another_user_is_refused(vocal_home: Path) -> None:
    vocal_home.mkdir(mode=0o700)
    os.chown(vocal_home, 65534, 65534)
    result = run_vocal("conch", "status")
    assert result.returncode == EXIT_USAGE
    assert "belongs to another user" in error_line(result)
    assert not _doctor_state_ok(vocal_home)


def _doctor_state_ok(home: Path) -> bool:
    """Whether `vocal doctor`'s state directory check passes, called in-process."""
    from vocal.ops.doctor import check_state_dir

    check = check_state_dir(home)
    assert check.status == "ok" or ("chmod 700" in check.fix or "VOCAL_HOME" in check.fix)
    return check.status == "ok"


def test_links_inside_the_state_directory_are_not_followed(
    vocal_home: Path, tmp_path: Path
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir(mode=0o755)
    os.chmod(elsewhere, 0o755)
    ensure_state_dir(vocal_home)
    (vocal_home / "conch").symlink_to(elsewhere)
    result = run_vocal("conch", "status")
    assert result.returncode == EXIT_USAGE
    assert "symbolic link" in error_line(result)
    with pytest.raises(UsageError, match="symbolic link"):
        ensure_private_dir(vocal_home / "conch" / "queue")
    assert elsewhere.stat().st_mode & 0o777 == 0o755 and list(elsewhere.iterdir()) == []


def test_a_marked_home_has_its_history_and_logs_made_private(vocal_home: Path) -> None:
    ensure_state_dir(vocal_home)
    for name in ("history", "logs"):
        (vocal_home / name).mkdir(exist_ok=True)
        os.chmod(vocal_home / name, 0o755)
    os.chmod(vocal_home, 0o755)
    assert not _doctor_state_ok(vocal_home)  # a warning: others can read logs/ and history/
    assert run_vocal("conch", "status").returncode == 0
    for name in ("history", "logs"):
        assert (vocal_home / name).stat().st_mode & 0o777 == 0o700
    assert _doctor_state_ok(vocal_home)


def test_an_unmarked_home_is_not_adopted_nor_chmodded(vocal_home: Path) -> None:
    (vocal_home / "history").mkdir(parents=True)
    os.chmod(vocal_home / "history", 0o755)
    assert run_vocal("conch", "status").returncode == 0
    assert not has_state_marker(vocal_home)
    assert (vocal_home / "history").stat().st_mode & 0o777 == 0o755


def test_a_folder_of_the_users_is_neither_marked_nor_chmodded(vocal_home: Path) -> None:
    vocal_home.mkdir()
    os.chmod(vocal_home, 0o755)
    (vocal_home / "thesis.txt").write_text("mine\n")
    assert run_vocal("conch", "status").returncode == 0
    assert not has_state_marker(vocal_home)
    assert vocal_home.stat().st_mode & 0o777 == 0o755
