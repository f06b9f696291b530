"""Every read of a user-named path or stream is bounded, every outside JSON depth-limited, and
a corrupt state file is quarantined rather than failing every later command (issue 37).

Each case is a real `vocal` process under the 4 GB address-space cap (harness.hostile) with a
real device, FIFO (os.mkfifo, nobody writing), pipe held open, sparse file or corrupt record,
and must end within its deadline with its exit code and one `vocal: error:` line; where a file
is healed instead, the command goes on and the file is found set aside (`NAME.bad-<time>`).
"""

from __future__ import annotations

import json
import os
import shutil
import time
import wave
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.hostile import (
    HostileResult,
    assert_one_line_error,
    run_hostile,
)
from vocal.floor.focus import FocusSentinel, parse_sentinel
from vocal.floor.pieces import MessageBoard, run_piece
from vocal.floor.statefiles import BadRecord
from vocal.providers import ProviderLadder

#: A refusal costs a process start (~0.5 s here, several on a loaded machine), never a read.
DEADLINE_S = 20.0
#: A read that waits for its stream's end: its own timeout (vocal.agents.hooks: 3 s, the
#: cue: 1 s) plus the same start.
WAIT_DEADLINE_S = DEADLINE_S + 3.0
DEEP_JSON = b'{"tool_name": ' + b"[" * 200_000 + b"]" * 200_000 + b"}"


@pytest.fixture
def fifo(tmp_path: Path) -> Path:
    """A named pipe nobody writes to: opening it for reading blocks a naive reader forever."""
    path = tmp_path / "pipe"
    os.mkfifo(path)
    return path


@pytest.fixture
def hostile_path(request: pytest.FixtureRequest, fifo: Path) -> Path:
    """/dev/zero (endless) or a FIFO (never written), as the test's parameter says."""
    return Path("/dev/zero") if request.param == "zero" else fifo


@pytest.fixture
def clip(tmp_path: Path) -> Path:
    """One second of a quiet tone: a valid WAV, so the command gets as far as its other reads."""
    path = tmp_path / "clip.wav"
    with wave.open(str(path), "wb") as out:
        out.setnchannels(1)
        out.setsampwidth(2)
        out.setframerate(16_000)
        out.writeframes(b"\x10\x00\xf0\xff" * 8_000)
    return path


@pytest.fixture
def held_pipe() -> Iterator[tuple[int, int]]:
    """A pipe holding the start of a JSON object whose writer never closes it."""
    read_end, write_end = os.pipe()
    os.write(write_end, b'{"tool_name": "Ba')
    yield read_end, write_end
    os.close(read_end)
    os.close(write_end)


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A HOME of our own (never the real ~/.claude) and an empty project as cwd."""
    fake = tmp_path / "home"
    (fake / ".claude").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(fake))
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    return fake


def run_lean_cue(*args: str, input: bytes | None = None, stdin: int | None = None) -> HostileResult:
    """The hooks' lean cue (`python -c 'import vocal.cuehook' ARGS`) under the same cap."""
    return run_hostile(*args, input=input, stdin=stdin, entry=("-c", "import vocal.cuehook"))


def quarantined(directory: Path, name: str) -> list[Path]:
    return sorted(directory.glob(f"{name}.bad-*"))


# -- user-named paths: --hints @FILE, --persona, a hook's transcript_path -------------------------
@pytest.mark.parametrize("hostile_path", ["zero", "fifo"], indirect=True)
def test_a_hints_file_that_is_a_device_or_fifo_is_refused(hostile_path: Path, clip: Path) -> None:
    """`--hints @/dev/zero` was read until MemoryError, `@FIFO` blocked `listen` forever."""
    result = run_hostile("listen", "--input", str(clip), "--hints", f"@{hostile_path}")
    assert_one_line_error(result, 2, "hints file", "not a regular file", within_s=DEADLINE_S)


def test_converse_refuses_a_hints_fifo_before_its_turn(fifo: Path) -> None:
    result = run_hostile("converse", "--hints", f"@{fifo}", "Hello.")
    assert_one_line_error(result, 2, "hints file", "not a regular file", within_s=DEADLINE_S)


@pytest.mark.parametrize("hostile_path", ["zero", "fifo"], indirect=True)
def test_a_persona_that_is_a_device_or_fifo_is_refused(hostile_path: Path, clip: Path) -> None:
    result = run_hostile("voices", "add", "alice", str(clip), "--persona", str(hostile_path))
    assert_one_line_error(result, 2, "persona file", "not a regular file", within_s=DEADLINE_S)


@pytest.mark.parametrize("hostile_path", ["zero", "fifo"], indirect=True)
def test_a_transcript_path_that_is_a_device_or_fifo_is_refused(hostile_path: Path) -> None:
    event = json.dumps({"session_id": "s1", "transcript_path": str(hostile_path)}).encode()
    result = run_hostile("hooks", "reply", "--print", input=event)
    assert_one_line_error(result, 1, "transcript_path", "not a regular file", within_s=DEADLINE_S)


def test_a_huge_transcript_is_read_from_its_end(tmp_path: Path) -> None:
    """Agent transcripts grow to many MB by right: the reply is found in the last few MB of
    a 3 GB one (sparse: no disk), where reading it whole ended in MemoryError."""
    transcript = tmp_path / "transcript.jsonl"
    last = {
        "type": "assistant",
        "message": {"role": "assistant", "content": [{"type": "text", "text": "> All done."}]},
    }
    with open(transcript, "wb") as out:
        out.truncate(3 << 30)
        out.seek(3 << 30)
        out.write(
            b"\n"
            + json.dumps({"type": "user", "message": {"role": "user", "content": "go"}}).encode()
            + b"\n"
            + json.dumps(last).encode()
            + b"\n"
        )
    event = json.dumps({"session_id": "s1", "transcript_path": str(transcript)}).encode()
    result = run_hostile("hooks", "reply", "--print", input=event)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["text"] == "> All done."
    assert result.elapsed_s < DEADLINE_S


# -- streams: a hook's event on stdin, a cue's stdin ----------------------------------------------
# A hook (`hooks reply`, the lean cue) exits 1 where a command exits 2: Claude Code reads a
# hook's 2 as "block" (vocal.agents.cues.hook_exit_code).
def test_a_deep_hook_event_is_refused() -> None:
    result = run_hostile("hooks", "reply", "--print", input=DEEP_JSON)
    assert_one_line_error(result, 1, "hook input", "nested deeper", within_s=DEADLINE_S)


def test_a_hook_event_whose_writer_never_closes_is_given_up(held_pipe: tuple[int, int]) -> None:
    result = run_hostile("hooks", "reply", "--print", stdin=held_pipe[0])
    assert_one_line_error(result, 1, "did not end within 3 s", within_s=WAIT_DEADLINE_S)


def test_a_cues_endless_stdin_is_read_no_further_than_its_bound() -> None:
    with open("/dev/zero", "rb") as zero:
        result = run_hostile("cue", "Stop", stdin=zero.fileno())
    assert_one_line_error(result, 2, "stdin is larger than 16 MB", within_s=DEADLINE_S)


def test_the_lean_cue_refuses_deep_json_with_one_line() -> None:
    """It printed a raw RecursionError traceback."""
    result = run_lean_cue("PreToolUse", input=DEEP_JSON)
    assert_one_line_error(result, 1, "hook's JSON on stdin", "nested deeper", within_s=DEADLINE_S)


def test_the_lean_cue_gives_up_on_a_writer_that_never_closes(held_pipe: tuple[int, int]) -> None:
    result = run_lean_cue("PreToolUse", stdin=held_pipe[0])
    assert_one_line_error(result, 1, "did not end within 1 s", within_s=WAIT_DEADLINE_S)


# -- settings files: Claude Code's settings.json, vocal's config.toml ----------------------------
@pytest.mark.parametrize("kind", ["deep", "fifo", "zero"])
def test_a_settings_json_deep_or_not_a_file_is_refused(home: Path, fifo: Path, kind: str) -> None:
    settings = home / ".claude" / "settings.json"
    if kind == "deep":
        settings.write_bytes(b'{"hooks": ' + b"[" * 100_000 + b"]" * 100_000 + b"}")
    else:
        settings.symlink_to(fifo if kind == "fifo" else "/dev/zero")
    expected = "nested deeper" if kind == "deep" else "not a regular file"
    for verb in ("status", "install"):
        result = run_hostile("hooks", verb)
        assert_one_line_error(result, 2, "settings", expected, within_s=DEADLINE_S)


@pytest.mark.parametrize("kind", ["dotted", "arrays", "fifo", "zero"])
def test_a_config_toml_deep_or_not_a_file_is_refused(
    vocal_home: Path, fifo: Path, kind: str
) -> None:
    """A 200 kB dotted key cost tomllib minutes and gigabytes (MemoryError under the cap)."""
    vocal_home.mkdir(parents=True, exist_ok=True)
    config = vocal_home / "config.toml"
    if kind == "dotted":
        config.write_text("x." * 100_000 + "x = 1\n")
    elif kind == "arrays":
        config.write_text("a = " + "[" * 50_000 + "]" * 50_000 + "\n")
    else:
        config.symlink_to(fifo if kind == "fifo" else "/dev/zero")
    expected = {"dotted": "dotted key", "arrays": "nested too deeply"}.get(kind, "not a regular")
    result = run_hostile("conch", "status")
    assert_one_line_error(result, 2, "config", expected, within_s=DEADLINE_S)


# -- state files that heal: message pieces, the focus sentinel, the provider memory ----------------
def test_a_corrupt_message_index_is_quarantined_and_pieces_go_on(vocal_home: Path) -> None:
    """A foreign index.json made every later `speak --message` fail ("unexpected ValueError")."""
    scope = vocal_home / "run" / "messages" / "default"
    scope.mkdir(parents=True)
    (scope / "index.json").write_text('{"latest": "m0", "seq": "x", "messages": {}}')
    for message in ("m1", "m2"):  # text with no quote to read: settled "empty", no audio
        result = run_hostile(
            "speak",
            "--quotes",
            "--json",
            "--message",
            message,
            "--piece",
            "0",
            "--final",
            "Nothing quoted here.",
        )
        assert result.returncode == 0, result.stderr
        assert json.loads(result.stdout)["status"] == "empty"
        assert "Traceback" not in result.stderr and result.elapsed_s < DEADLINE_S
    assert len(quarantined(scope, "index.json")) == 1
    assert "index.json" in (vocal_home / "logs" / "statefiles.log").read_text()


CORRUPT_PIECES = {
    "index seq": ("index.json", {"latest": "a", "seq": "x", "messages": {}}),
    "index entry": ("index.json", {"latest": "a", "seq": 1, "messages": {"a": 5}}),
    "index deep": ("index.json", {"messages": [[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]}),
    "cursor next": ("a/cursor.json", {"next": "x", "results": {}}),
    "cursor results": ("a/cursor.json", {"next": 0, "results": []}),
    "piece time": ("a/piece-2.json", {"text": "two", "arrived_at": "soon"}),
    "piece text": ("a/piece-2.json", {"text": ["two"], "arrived_at": 0}),
}


@pytest.mark.parametrize("case", CORRUPT_PIECES)
def test_each_corrupt_piece_file_is_quarantined_and_reading_goes_on(
    tmp_path: Path, case: str
) -> None:
    board = MessageBoard(tmp_path / "run", None, log_dir=tmp_path / "logs")
    (board.root / "a").mkdir(parents=True)
    index = {"latest": "a", "seq": 1, "messages": {"a": {"seq": 1, "at": 0.0, "done": False}}}
    (board.root / "index.json").write_text(json.dumps(index))
    cursor = {"next": 0, "advanced_at": time.time(), "final": None, "results": {}, "closed": None}
    (board.root / "a" / "cursor.json").write_text(json.dumps(cursor))
    name, record = CORRUPT_PIECES[case]
    if case == "index deep":
        (board.root / name).write_text('{"messages": ' + "[" * 100 + "]" * 100 + "}")
    else:
        (board.root / name).write_text(json.dumps(record))
    read: list[tuple[int, str]] = []

    def reader(piece: int, text: str) -> tuple[str, None]:
        read.append((piece, text))
        return "read", None

    for message in ("a", "b"):
        outcome = run_piece(
            board, message, 0, "zero", final=False, read=reader, timeout_s=0.2, linger_s=0.0
        )
        assert outcome.status in ("read", "late"), (message, outcome)
    assert read and read[-1] == (0, "zero")  # the newer message is read whatever the old file
    # Set aside and logged (a corrupt cursor ends its message, whose directory then goes).
    assert f"{board.root / name} as " in (tmp_path / "logs" / "statefiles.log").read_text()


def test_a_corrupt_focus_record_is_quarantined_by_its_reader(tmp_path: Path) -> None:
    sentinel = FocusSentinel(tmp_path / "run", tmp_path / "logs")
    sentinel.run_dir.mkdir()
    for bad in (
        {"k": {"pane": "%1", "hold_until": "soon"}},
        {"k": {"pane": 3}},
        ["k"],
        {"k": {"pane": "%1", "hold_until": 1.0, "reason": None}},
    ):
        with pytest.raises(BadRecord):
            parse_sentinel(bad)
        sentinel.path.write_text(json.dumps(bad))
        assert sentinel.read("k", heal=False) is None and sentinel.path.exists()
        with sentinel.lock():
            assert sentinel.read("k") is None  # the lock holder sets it aside
            sentinel.write("k", "%2", 0.0, "vocal", time.time())
        record = sentinel.read("k")
        assert record is not None and (record["pane"], record["reason"]) == ("%2", "vocal")
        sentinel.path.unlink()
    assert len(quarantined(sentinel.run_dir, "focus.json")) == 4


@pytest.mark.skipif(shutil.which("tmux") is None, reason="tmux is not installed")
def test_a_corrupt_focus_file_heals_instead_of_failing_every_turn(vocal_home: Path) -> None:
    """Under tmux a focus.json with a bad hold made every floor-taking turn fail."""
    from harness.tmux import tmux_server

    with tmux_server() as tmux:
        pane = tmux.panes[0]
        session = tmux.run("display-message", "-p", "-t", pane, "#{session_id}").strip()
        env = {"TMUX": f"{tmux.socket},{tmux.server_pid},0", "TMUX_PANE": pane}
        run_dir = vocal_home / "run"
        run_dir.mkdir(parents=True)
        record = {"pane": pane, "hold_until": "soon"}
        (run_dir / "focus.json").write_text(json.dumps({f"{tmux.socket} {session}": record}))
        status = run_hostile("focus", "status", env=env)
        assert status.returncode == 0 and "Traceback" not in status.stderr, status.stderr
        taken = run_hostile(
            "conch", "wait", "--session", "a", env={**env, "VOCAL_AUTO_FOCUS_PANE": "true"}
        )
        assert taken.returncode == 0, taken.stderr
        assert "unexpected" not in taken.stderr and taken.elapsed_s < DEADLINE_S
        assert len(quarantined(run_dir, "focus.json")) == 1
        assert run_hostile("conch", "release", "--session", "a").returncode == 0


@pytest.mark.parametrize("kind", ["deep", "fifo"])
def test_the_provider_memory_deep_or_a_fifo_is_forgotten(tmp_path: Path, kind: str) -> None:
    ladder = ProviderLadder(
        "decoder",
        ("CUDAExecutionProvider", "CPUExecutionProvider"),
        tmp_path,
        available=("CPUExecutionProvider",),
    )
    if kind == "deep":
        ladder.state_path.write_text('{"ladder": ' + "[" * 100_000 + "]" * 100_000 + "}")
    else:
        os.mkfifo(ladder.state_path)
    started = time.monotonic()
    assert ladder.remembered() is None
    assert time.monotonic() - started < DEADLINE_S


def test_a_wav_fifo_nobody_writes_is_given_up(fifo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`listen --input FIFO` and `voices add NAME FIFO` blocked for ever on a named pipe with
    no writer (opening it blocked); now each piece is waited for with a deadline. The stall
    bound is shortened here; the reader is the real one."""
    from vocal.audio import wav
    from vocal.errors import UsageError

    monkeypatch.setattr(wav, "STREAM_STALL_S", 0.5)
    with pytest.raises(UsageError, match="nothing came for 0.5 s"):
        wav.read_wav(fifo)


def test_a_wav_fifo_whose_writer_comes_later_is_read(fifo: Path, tmp_path: Path) -> None:
    """A writer that opens the pipe after the reader (process substitution, ffmpeg) is read
    whole."""
    import threading

    from harness.sounds import tone
    from vocal.audio.wav import Audio, read_wav, wav_bytes

    data = wav_bytes(Audio(tone(440, 0.5), 16_000))

    def write_late() -> None:
        time.sleep(0.3)
        with open(fifo, "wb") as out:
            out.write(data)

    writer = threading.Thread(target=write_late)
    writer.start()
    audio = read_wav(fifo)
    writer.join()
    assert audio.frames == 8_000
