"""`vocal hooks install/remove/status/reply` and `vocal warmup` (issue 9), on settings files in a
temporary HOME and project, through real `vocal` processes."""

from __future__ import annotations

import json
import os
import subprocess
import time
from pathlib import Path

import pytest

from harness.conch_audio import MonitorRecorder, wait_until
from harness.heard import MIN_SCORE, heard_intervals, rendered
from harness.runner import run_vocal
from vocal.agents.hooks import _without_ours
from vocal.config import load_settings

#: Someone's settings, laid out as Claude Code and most editors write JSON (2 spaces), with
#: hooks of their own on the events vocal uses and on others, and unicode.
OTHERS = {
    "model": "opus",
    "permissions": {"allow": ["Bash(npm test)"], "deny": []},
    "hooks": {
        "PreToolUse": [{"matcher": "Bash", "hooks": [
            {"type": "command", "command": "~/bin/guard.sh", "timeout": 5}]}],
        "Stop": [{"hooks": [{"type": "command", "command": "notify-send 'done ✓'"}]}],
    },
    "statusLine": {"type": "command", "command": "echo hi"},
}  # fmt: skip


@pytest.fixture
def home(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A HOME of our own (vocal must never touch the real ~/.claude) and a project as cwd."""
    fake = tmp_path / "home"
    fake.mkdir()
    monkeypatch.setenv("HOME", str(fake))
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    return fake


def hooks_json(*args: str, **kwargs: object) -> dict | list:
    result = run_vocal("hooks", *args, "--json", **kwargs)
    assert result.returncode == 0, result.stderr.decode()
    return json.loads(result.stdout)


@pytest.mark.parametrize("indent", [2, 4, "\t"])
def test_install_keeps_other_hooks_byte_for_byte_is_idempotent_and_remove_restores(
    home: Path, indent: int | str
) -> None:
    path = home / ".claude" / "settings.json"
    path.parent.mkdir()
    original = (json.dumps(OTHERS, indent=indent, ensure_ascii=False) + "\n").encode()
    path.write_bytes(original)
    first = hooks_json("install")
    assert first["action"] == "installed" and first["events"] == ["SessionStart", "Stop"]
    installed = path.read_bytes()
    data = json.loads(installed)
    # Ours are beside theirs: their Stop hook is still first, every other key untouched.
    assert data["hooks"]["Stop"][0] == OTHERS["hooks"]["Stop"][0]
    assert len(data["hooks"]["Stop"]) == 2
    assert {k: v for k, v in data.items() if k != "hooks"} == \
        {k: v for k, v in OTHERS.items() if k != "hooks"}  # fmt: skip
    # Byte for byte: the file less our entries is the original file.
    assert _without_ours(installed, path)[0] == original
    assert Path(first["backup"]).read_bytes() == original
    # Twice changes nothing.
    again = hooks_json("install")
    assert again["action"] == "unchanged" and path.read_bytes() == installed
    status = hooks_json("status")
    assert [s["action"] for s in status] == ["installed", "absent"]  # user, project
    # Remove restores the original exactly, and leaves no backup behind.
    removed = hooks_json("remove")
    assert removed["action"] == "restored" and path.read_bytes() == original
    assert not Path(first["backup"]).exists()
    assert hooks_json("remove")["action"] == "absent" and path.read_bytes() == original


def test_remove_after_the_user_edited_takes_out_only_ours(home: Path) -> None:
    project_settings = Path.cwd() / ".claude" / "settings.json"
    assert hooks_json("install", "--scope", "project")["action"] == "installed"
    # No file before: install made one holding only ours.
    data = json.loads(project_settings.read_text())
    assert set(data) == {"hooks"} and set(data["hooks"]) == {"SessionStart", "Stop"}
    # The user adds a hook of their own beside ours.
    data["hooks"]["Stop"][0]["hooks"].append({"type": "command", "command": "say done"})
    data["hooks"]["Notification"] = [{"hooks": [{"type": "command", "command": "beep"}]}]
    project_settings.write_text(json.dumps(data, indent=2) + "\n")
    assert hooks_json("remove", "--scope", "project")["action"] == "removed"
    left = json.loads(project_settings.read_text())
    assert left == {"hooks": {
        "Stop": [{"hooks": [{"type": "command", "command": "say done"}]}],
        "Notification": [{"hooks": [{"type": "command", "command": "beep"}]}]}}  # fmt: skip
    # With nothing of the user's: remove deletes the file (and the .claude it made).
    os.unlink(project_settings)
    project_settings.parent.rmdir()
    hooks_json("install", "--scope", "project")
    assert hooks_json("remove", "--scope", "project")["action"] == "restored"
    assert not project_settings.parent.exists()


def test_bad_settings_and_agents_are_usage_errors(home: Path) -> None:
    path = home / ".claude" / "settings.json"
    path.parent.mkdir()
    path.write_text("{not json")
    result = run_vocal("hooks", "install")
    assert result.returncode == 2 and b"not valid JSON" in result.stderr
    assert path.read_text() == "{not json"
    result = run_vocal("hooks", "install", "--agent", "cursor")
    assert result.returncode == 2 and b"unknown agent" in result.stderr


def stop_event(tmp_path: Path, **fields: object) -> bytes:
    event = {"session_id": "abc-123", "transcript_path": str(tmp_path / "none.jsonl"),
             "hook_event_name": "Stop", "stop_hook_active": False, **fields}  # fmt: skip
    return json.dumps(event).encode()


def test_reply_takes_the_text_from_the_event_or_the_transcript(tmp_path: Path) -> None:
    reply = "I fixed the bug.\n\n> The tests pass now.\n\n```\n> not a quote\n```"
    result = run_vocal("hooks", "reply", "--print",
                       input=stop_event(tmp_path, last_assistant_message=reply))  # fmt: skip
    found = json.loads(result.stdout)
    assert found["text"] == reply and found["session"] == "claude-abc-123"
    # Older versions send no text: the transcript's last assistant turn (after the last user
    # message; tool results are not a new turn).
    transcript = tmp_path / "t.jsonl"
    entries = [
        {"type": "user", "message": {"role": "user", "content": "first question"}},
        {"type": "assistant", "message": {"role": "assistant", "content": [
            {"type": "text", "text": "> Old answer."}]}},
        {"type": "user", "message": {"role": "user", "content": "second question"}},
        {"type": "assistant", "message": {"role": "assistant", "content": [
            {"type": "text", "text": "> Looking."}, {"type": "tool_use", "name": "Bash"}]}},
        {"type": "user", "message": {"role": "user", "content": [
            {"type": "tool_result", "content": "ok"}]}},
        {"type": "assistant", "message": {"role": "assistant", "content": [
            {"type": "text", "text": "> All done."}]}},
    ]  # fmt: skip
    transcript.write_text("\n".join(json.dumps(e) for e in entries) + "\n{torn")
    result = run_vocal("hooks", "reply", "--print",
                       input=stop_event(tmp_path, transcript_path=str(transcript)))  # fmt: skip
    found = json.loads(result.stdout)
    assert found["text"] == "> Looking.\n\n> All done."
    # Two different replies are two messages; nothing to say is exit 0 and silent.
    other = json.loads(run_vocal("hooks", "reply", "--print", input=stop_event(
        tmp_path, last_assistant_message="> Something else.")).stdout)  # fmt: skip
    assert other["message"] != found["message"]
    empty = run_vocal("hooks", "reply", input=stop_event(tmp_path))
    assert empty.returncode == 0 and empty.stdout == b""
    # A bad event is an error, never 2: Claude Code reads a Stop hook's 2 as "keep going".
    bad = run_vocal("hooks", "reply", input=b"not json")
    assert bad.returncode == 1 and bad.stderr.decode().startswith("vocal: error: ")


@pytest.mark.audio
@pytest.mark.usefixtures("pulse")
def test_the_stop_hook_speaks_the_replys_quotes(tmp_path: Path) -> None:
    reply = "Done with the refactor.\n\n> The build is green again.\n\nDetails follow."
    reference = rendered("The build is green again.", tmp_path)
    with MonitorRecorder() as recorder:
        result = run_vocal("hooks", "reply", "--wait",
                           input=stop_event(tmp_path, last_assistant_message=reply),
                           env={"VOCAL_TTS_ENGINE": "espeak-ng"})  # fmt: skip
    assert result.returncode == 0, result.stderr.decode()
    payload = json.loads(result.stdout)
    assert payload["status"] == "read" and payload["piece"] == 0 and payload["final"] is True
    assert [s["spoken"] for s in payload["speech"]] == [1]  # only the quote
    ((start, _end, score),) = heard_intervals(recorder, [reference])
    assert score > MIN_SCORE


def test_installed_hooks_run_return_at_once_and_do_their_work_detached(
    home: Path, tmp_path: Path
) -> None:
    install = hooks_json("install")
    data = json.loads(Path(install["path"]).read_text())
    stop = data["hooks"]["Stop"][0]["hooks"][0]["command"]
    start = data["hooks"]["SessionStart"][0]["hooks"][0]["command"]
    env = {**os.environ, "VOCAL_TTS_ENGINE": "espeak-ng"}
    assert run_vocal("mute").returncode == 0
    log_dir = load_settings().log_dir
    for command, log, done in [(stop, "hooks.log", b"muted"), (start, "warmup.log", None)]:
        began = time.monotonic()
        proc = subprocess.run(["sh", "-c", command], input=stop_event(
            tmp_path, last_assistant_message="> Hello."), env=env, capture_output=True,
            timeout=30)  # fmt: skip
        assert proc.returncode == 0, proc.stderr.decode()
        assert time.monotonic() - began < 5  # the agent is not held up
        if done is not None:
            wait_until(lambda log=log, done=done: done in _read(log_dir / log), timeout_s=30,
                       what=f"{done!r} in {log}")  # fmt: skip
    # The detached warm-up leaves its caches; wait for it to end (no stray process).
    wait_until(lambda: not _warmup_running(), timeout_s=60, what="the warm-up to end")


def _read(path: Path) -> bytes:
    try:
        return path.read_bytes()
    except FileNotFoundError:
        return b""


def _warmup_running() -> bool:
    home = os.environ["VOCAL_HOME"]
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            continue
        if b"warmup" in cmdline and f"VOCAL_HOME={home}".encode() in environ:
            return True
    return False


def test_warmup_primes_the_engine_caches() -> None:
    result = run_vocal("warmup", "--json", timeout=120)
    assert result.returncode == 0, result.stderr.decode()
    steps = {s["name"]: s for s in json.loads(result.stdout)["steps"]}
    assert set(steps) == {"tts-prime", "tts-synthesis", "stt-model", "audio"}
    assert all(s["error"] is None for s in steps.values()), steps
    cache = load_settings().cache_dir / "tts" / "hibari"
    assert cache.is_dir() and any(cache.iterdir())  # hibari's optimized model and G2P tables
    # A second warm-up finds everything primed.
    again = {s["name"]: s for s in json.loads(run_vocal("warmup", "--json").stdout)["steps"]}
    print("warm-up ms, cold then primed:",
          {n: (steps[n]["ms"], again[n]["ms"]) for n in steps})  # fmt: skip
    assert again["tts-prime"]["ms"] < steps["tts-prime"]["ms"]


def test_install_and_remove_write_through_a_symlinked_settings_file(home: Path) -> None:
    """A dotfile manager links settings.json into a repository: the link stays a link, the
    target gets the hooks, and remove restores the target's bytes (issue 17)."""
    dotfiles = home / "dotfiles"
    dotfiles.mkdir()
    target = dotfiles / "claude-settings.json"
    original = (json.dumps(OTHERS, indent=2) + "\n").encode()
    target.write_bytes(original)
    link = home / ".claude" / "settings.json"
    link.parent.mkdir()
    link.symlink_to(target)
    assert hooks_json("install")["action"] == "installed"
    assert link.is_symlink() and link.resolve() == target
    assert "Stop" in json.loads(target.read_bytes())["hooks"]
    assert hooks_json("remove")["action"] == "restored"
    assert link.is_symlink() and target.read_bytes() == original
