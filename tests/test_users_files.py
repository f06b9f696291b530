"""Nothing a user owns is lost, and vocal's state is private (issue 37), through real `vocal`
processes on real files:

- `-o FILE` writes the whole file or leaves the old one byte for byte: every sentence failing
  the speech check, nothing speakable, Ctrl-C or SIGTERM mid-synthesis, a full disk;
- teardown deletes only what vocal can prove it made (the marker it writes when it makes the
  state directory), never a folder because its entries look like vocal's;
- `voices remove` deletes only what `voices add` wrote (its manifest), never a folder of
  recordings that looks like a voice;
- `hooks install/remove` leave a settings link to a missing file as it is;
- every directory any command makes in the state directory is 0700.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import numpy as np
import pytest

from harness.hostile import HostileResult, assert_one_line_error, run_hostile
from harness.runner import run_vocal
from harness.sounds import espeak, with_silence
from harness.speak_audio import espeak_wav
from vocal.audio.wav import Audio, wav_bytes, write_wav
from vocal.errors import EXIT_ERROR, EXIT_INTERRUPTED, EXIT_UNAVAILABLE, EXIT_USAGE
from vocal.floor.statedir import STATE_MARKER_NAME, ensure_state_dir, has_state_marker

#: Every failure below must end this soon (a loaded 2-core machine; each takes ~1-3 s).
DEADLINE_S = 60.0
#: The user's file: not even a WAV, so any rewrite of it shows.
USERS_BYTES = b"RIFF" + bytes(range(256)) * 16


def files(root: Path) -> dict[str, bytes]:
    """Every file under `root` (links not followed) and its bytes."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and not p.is_symlink()
    }


@pytest.fixture
def keep(tmp_path: Path) -> Path:
    """The user's file that `-o` names, alone in its folder."""
    folder = tmp_path / "out"
    folder.mkdir()
    path = folder / "keep.wav"
    path.write_bytes(USERS_BYTES)
    return path


def assert_kept(keep: Path) -> None:
    """The user's file is byte for byte as it was, and no temporary file is left beside it."""
    assert keep.read_bytes() == USERS_BYTES
    assert [p.name for p in keep.parent.iterdir()] == ["keep.wav"]


# -- a speech server on 127.0.0.1 (the OpenAI engine's /v1/audio/speech) ------------------------
@contextmanager
def speech_server(answer) -> Iterator[dict[str, str]]:  # noqa: ANN001 - a handler's callback
    """A local speech endpoint: `answer(request_number, text)` returns the WAV bytes to send.
    Yields the settings that point `--engine openai` at it."""

    class Handler(BaseHTTPRequestHandler):
        count = 0

        def log_message(self, *args: object) -> None:
            pass

        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            Handler.count += 1
            data = answer(Handler.count, body["input"])
            self.send_response(200)
            self.send_header("Content-Type", "audio/wav")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield {
            "VOCAL_OPENAI_BASE_URL": f"http://127.0.0.1:{server.server_address[1]}/v1",
            "OPENAI_API_KEY": "k",
        }
    finally:
        server.shutdown()
        server.server_close()


def hum(_number: int, _text: str) -> bytes:
    """A steady 220 Hz hum for every sentence: loud, with no pauses, so never speech."""
    tone = np.sin(np.arange(24_000) * 2 * np.pi * 220 / 24_000).astype(np.float32) * 0.5
    return wav_bytes(Audio(tone, 24_000))


# -- 1. `-o` writes whole files or nothing -------------------------------------------------------
def test_every_sentence_failing_the_check_leaves_the_users_file(keep: Path) -> None:
    with speech_server(hum) as env:
        result = run_hostile(
            "speak",
            "--engine",
            "openai",
            "-o",
            str(keep),
            "One sentence here. And a second one.",
            env=env,
        )
    lines = result.error_lines
    assert sum(line.startswith("vocal: sentence") for line in lines) == 2, result.stderr
    only_error = HostileResult(result.returncode, "", lines[-1], result.elapsed_s)
    assert_one_line_error(only_error, EXIT_UNAVAILABLE, "produced no speech", within_s=DEADLINE_S)
    assert_kept(keep)


@pytest.mark.parametrize("text", ["🎉🎉 🚀", "**", "... !!! ---", "```\nprint(1)\n```"])
def test_nothing_speakable_leaves_the_users_file(text: str, keep: Path) -> None:
    result = run_hostile("speak", "--engine", "espeak-ng", "-o", str(keep), text)
    assert_one_line_error(result, EXIT_USAGE, "nothing speakable", str(keep), within_s=DEADLINE_S)
    assert_kept(keep)


def test_nothing_speakable_makes_no_file(tmp_path: Path) -> None:
    out = tmp_path / "out" / "new.wav"
    out.parent.mkdir()
    result = run_hostile("speak", "--engine", "espeak-ng", "--quotes", "-o", str(out), "No quotes.")
    assert_one_line_error(result, EXIT_USAGE, "nothing speakable", "blockquotes")
    assert list(out.parent.iterdir()) == []


@pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM])
def test_an_interrupt_mid_synthesis_leaves_the_users_file(signum: int, keep: Path) -> None:
    second_asked, release = threading.Event(), threading.Event()

    def first_then_hold(number: int, text: str) -> bytes:
        if number >= 2:  # mid-synthesis: the first sentence is done, the second never comes
            second_asked.set()
            release.wait(30)
        return wav_bytes(espeak_wav(text))

    with speech_server(first_then_hold) as env:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "vocal",
                "speak",
                "--engine",
                "openai",
                "-o",
                str(keep),
                "The first sentence is spoken. The second one is never answered.",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            env={**os.environ, **env},
        )
        try:
            assert second_asked.wait(DEADLINE_S), "synthesis never reached the second sentence"
            proc.send_signal(signum)
            _out, err = proc.communicate(timeout=DEADLINE_S)
        finally:
            release.set()
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    assert proc.returncode == EXIT_INTERRUPTED, err.decode()
    assert b"Traceback" not in err
    assert_kept(keep)


def run_on_a_full_disk(*args: str, max_file_bytes: int = 4096) -> HostileResult:
    """`vocal ARGS` on a disk that takes no file over `max_file_bytes` (RLIMIT_FSIZE: a write
    past it fails with EFBIG, as a full disk's does with ENOSPC; Python ignores the SIGXFSZ
    that comes with it)."""

    def limit() -> None:
        resource.setrlimit(resource.RLIMIT_FSIZE, (max_file_bytes, max_file_bytes))

    started_s = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "vocal", *args],
        capture_output=True,
        timeout=DEADLINE_S,
        preexec_fn=limit,
    )
    return HostileResult(
        done.returncode, done.stdout.decode(), done.stderr.decode(), time.monotonic() - started_s
    )


@pytest.mark.usefixtures("shared_tts_cache")  # hibari's caches built: only the WAV is written
@pytest.mark.parametrize("command", ["speak", "play"])
def test_a_full_disk_leaves_the_users_file_and_says_so(command: str, keep: Path) -> None:
    source = keep.parent.parent / "in.wav"
    write_wav(source, espeak("Hello there, this is more than four kilobytes of audio."))
    args = [str(source)] if command == "play" else ["--engine", "hibari", "Hello there."]
    result = run_on_a_full_disk(command, *args, "-o", str(keep))
    assert_one_line_error(result, EXIT_ERROR, f"{keep} was not written", "as it was")
    assert_kept(keep)


# -- 2. teardown: only what vocal can prove it made ----------------------------------------------
@pytest.fixture
def look_alike(vocal_home: Path) -> Path:
    """VOCAL_HOME pointed at a folder of the user's whose entries all bear vocal's names."""
    for name, data in {
        "history/interview-1.wav": b"RIFF the user's recording",
        "cache/thesis-figures.bin": b"hours of rendering",
        "logs/lab-notebook.txt": b"day 1\n",
        "voices/grandma/default.wav": b"RIFF the only recording of her",
        "config.toml": b"# my own tool's settings\n",
    }.items():
        path = vocal_home / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    return vocal_home


def test_teardown_leaves_a_folder_whose_entries_only_look_like_vocals(look_alike: Path) -> None:
    # A vocal command run there first used to adopt (mark) the folder; teardown then took it.
    assert run_vocal("conch", "status").returncode == 0
    assert not has_state_marker(look_alike)
    before = files(look_alike)
    for args in (("--yes",), ("--yes", "--all"), ("--dry-run", "--json")):
        result = run_hostile("teardown", *args)
        assert_one_line_error(result, EXIT_USAGE, "did not make", "history", within_s=DEADLINE_S)
        assert result.stdout == ""
    assert files(look_alike) == before
    assert not (look_alike / STATE_MARKER_NAME).exists()


def test_a_folder_vocal_did_not_make_is_never_marked_and_is_left(vocal_home: Path) -> None:
    vocal_home.mkdir(mode=0o700)  # the user made it, empty, and pointed VOCAL_HOME at it
    assert run_vocal("conch", "status").returncode == 0
    assert not has_state_marker(vocal_home)
    (vocal_home / "history").mkdir()  # then put a folder of their own in it
    (vocal_home / "history" / "1987.txt").write_text("mine\n")
    result = run_hostile("teardown", "--yes", "--all")
    assert_one_line_error(result, EXIT_USAGE, "no .vocal-state marker", within_s=DEADLINE_S)
    assert (vocal_home / "history" / "1987.txt").read_text() == "mine\n"


# -- 3. voices remove: only what `voices add` wrote ----------------------------------------------
@pytest.fixture
def take(tmp_path: Path) -> Path:
    """About 6.5 s of espeak speech: a clip `voices add` takes."""
    text = (
        "The quick brown fox jumps over the lazy dog, and then it runs far away into the "
        "deep green forest to rest."
    )
    return write_wav(tmp_path / "take.wav", with_silence(espeak(text), 1.0, 1.0))


def test_voices_remove_refuses_a_folder_of_recordings_that_looks_like_a_voice(
    vocal_home: Path, take: Path, tmp_path: Path
) -> None:
    voices = vocal_home / "voices"
    ensure_state_dir(vocal_home)
    recordings = voices / "interviews"  # the user's own: WAVs and a default.wav, no manifest
    recordings.mkdir(parents=True)
    for name in ("default.wav", "mum-1987.wav"):
        (recordings / name).write_bytes(take.read_bytes())
    (recordings / "description.txt").write_text("mum, 1987\n")
    elsewhere = tmp_path / "Recordings"  # and a link to a folder of them
    elsewhere.mkdir()
    (elsewhere / "default.wav").write_bytes(take.read_bytes())
    (voices / "linked").symlink_to(elsewhere)
    before, before_elsewhere = files(voices), files(elsewhere)
    for name in ("interviews", "linked"):
        result = run_hostile("voices", "remove", name)
        assert_one_line_error(result, EXIT_USAGE, "refusing to remove", within_s=DEADLINE_S)
        forced = run_hostile("voices", "add", name, str(take), "--force")
        assert_one_line_error(forced, EXIT_USAGE, "refusing to replace", within_s=DEADLINE_S)
    assert "no .vocal-voice manifest" in run_vocal("voices", "remove", "interviews").stderr.decode()
    assert files(voices) == before and files(elsewhere) == before_elsewhere
    assert (voices / "linked").is_symlink()


def test_voices_remove_takes_what_add_wrote_and_not_a_take_added_by_hand(
    vocal_home: Path, take: Path
) -> None:
    for name in ("alice", "bob"):
        added = run_vocal("voices", "add", name, str(take), "-d", "a voice")
        assert added.returncode == 0, added.stderr.decode()
    bob = vocal_home / "voices" / "bob"
    (bob / "my-own-take.wav").write_bytes(take.read_bytes())  # the user's, added by hand
    refused = run_hostile("voices", "remove", "bob")
    assert (bob / "my-own-take.wav").read_bytes() == take.read_bytes()
    assert (bob / "take.wav").is_file()
    assert_one_line_error(refused, EXIT_USAGE, "did not write", "my-own-take.wav")
    manifest = json.loads((bob / ".vocal-voice").read_text())
    assert sorted(manifest["files"]) == ["default.wav", "description.txt", "take.wav"]
    removed = run_vocal("voices", "remove", "alice")
    assert removed.returncode == 0, removed.stderr.decode()
    assert not (vocal_home / "voices" / "alice").exists()


# -- 4. hooks and a settings link to a missing file ----------------------------------------------
@pytest.fixture
def linked_settings(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """~/.claude/settings.json linked into a dotfiles repository that is not there (moved, or
    not checked out yet): (the link, where it points)."""
    home = tmp_path / "home"
    (home / ".claude").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.chdir(tmp_path)
    target = tmp_path / "dotfiles" / "claude" / "settings.json"
    link = home / ".claude" / "settings.json"
    link.symlink_to(target)
    return link, target


def test_hooks_install_refuses_a_settings_link_to_a_missing_file(
    linked_settings: tuple[Path, Path],
) -> None:
    link, target = linked_settings
    target.parent.mkdir(parents=True)  # the repository is there, the file is not
    result = run_hostile("hooks", "install")
    assert_one_line_error(
        result, EXIT_USAGE, "symbolic link", str(target), "does not exist", within_s=DEADLINE_S
    )
    assert os.readlink(link) == str(target) and not target.exists()
    assert sorted(p.name for p in link.parent.iterdir()) == ["settings.json"]


def test_hooks_remove_leaves_a_settings_link_to_a_missing_file_and_the_backup(
    linked_settings: tuple[Path, Path],
) -> None:
    link, target = linked_settings
    target.parent.mkdir(parents=True)
    original = b'{"model": "opus"}\n'
    target.write_bytes(original)
    assert run_vocal("hooks", "install").returncode == 0
    backup = link.with_name("settings.json.vocal-backup")
    assert backup.read_bytes() == original
    target.unlink()  # the repository moved: the backup is the only copy of the settings now
    result = run_vocal("hooks", "remove", "--json")
    assert result.returncode == 0, result.stderr.decode()
    assert os.readlink(link) == str(target) and not target.exists()
    assert backup.read_bytes() == original
    report = json.loads(result.stdout)
    assert report["action"] == "absent" and "does not exist" in report["note"]
    again = run_vocal("hooks", "remove")
    assert again.returncode == 0 and b"left as it is" in again.stderr
    assert link.is_symlink() and backup.read_bytes() == original


def test_hooks_install_on_a_full_disk_leaves_the_settings_as_they_were(
    linked_settings: tuple[Path, Path],
) -> None:
    link, target = linked_settings
    target.parent.mkdir(parents=True)
    original = b'{"model": "opus"}\n'  # small: its backup fits, the settings with ours do not
    target.write_bytes(original)
    result = run_on_a_full_disk("hooks", "install", max_file_bytes=64)
    assert_one_line_error(result, EXIT_ERROR, f"{link} was not written", within_s=DEADLINE_S)
    assert target.read_bytes() == original and os.readlink(link) == str(target)
    assert sorted(p.name for p in target.parent.iterdir()) == ["settings.json"]


# -- 5. every directory vocal makes is 0700 ------------------------------------------------------
def test_every_state_directory_any_command_makes_is_private(tmp_path: Path, take: Path) -> None:
    """A fresh VOCAL_HOME (under a parent that does not exist either), the hibari cache in it,
    then each command that makes state: every directory vocal made is 0700, and the state
    directory is marked as vocal's."""
    root = tmp_path / "fresh"
    home = root / "nested" / "vocal-home"
    env = {"VOCAL_HOME": str(home)}
    runs = [
        ("speak", "--engine", "hibari", "-o", str(tmp_path / "out.wav"), "Hello there."),
        ("warmup",),
        ("conch", "status"),
        ("listen", "--input", str(take)),
        ("voices", "add", "alice", str(take)),
        ("volume", "40"),
    ]
    for args in runs:
        result = run_vocal(*args, env=env)
        assert result.returncode == 0, (args, result.stderr.decode())
    made = [root, *(p for p in root.rglob("*") if p.is_dir() and not p.is_symlink())]
    assert home / "cache" in made and home / "voices" / "alice" in made
    loose = {
        str(p.relative_to(tmp_path)): oct(p.stat().st_mode & 0o777)
        for p in made
        if p.stat().st_mode & 0o777 != 0o700
    }
    assert loose == {}
    assert has_state_marker(home)
    from vocal.floor.statedir import made_in

    # The engine noted what it wrote: teardown's proof in a cache folder shared with others.
    assert any(name.startswith("g2p-") for name in made_in(home / "cache" / "tts" / "hibari"))
