"""`vocal teardown` (issue 9) on a populated state directory: what it promises to keep stays,
the rest goes, running vocal processes are stopped first, and our hook entries come out."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from harness.conch_audio import wait_until
from harness.runner import run_vocal, start_vocal
from vocal.config import load_settings
from vocal.floor.control import ControlError, endpoints, find_endpoint, send_command
from vocal.floor.statedir import ensure_state_dir

ESPEAK = ("--engine", "espeak-ng")
LONG_TEXT = (
    "This reply goes on for a good while, so that it is still being spoken when the teardown "
    "comes. It has a second sentence, and then a third one after it."
)


@pytest.fixture
def populated(vocal_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict:
    """A state directory as a user's looks after a while, a HOME with our hooks installed
    beside a hook of the user's, and a project directory as cwd."""
    real_home = os.environ.get("HOME", "/root")
    fake_home = tmp_path / "home"
    (fake_home / ".claude").mkdir(parents=True)
    monkeypatch.setenv("HOME", str(fake_home))
    project = tmp_path / "project"
    project.mkdir()
    monkeypatch.chdir(project)
    user_settings = fake_home / ".claude" / "settings.json"
    original = json.dumps({"hooks": {"Stop": [{"hooks": [
        {"type": "command", "command": "say done"}]}]}}, indent=2).encode() + b"\n"  # fmt: skip
    user_settings.write_bytes(original)
    files = {
        "cache/chatterbox/onnx-community--chatterbox-ONNX/onnx/speech_encoder.onnx": b"w" * 64,
        "cache/chatterbox/conditioning/alice-0123456789abcdef.npz": b"c" * 32,
        "cache/tts/hibari/g2p-us-abc.sqlite": b"g",
        "cache/mlx/tiny.en-float32/weights.npz": b"m",
        "providers/speech_encoder.json": b'{"provider": "CPUExecutionProvider"}',
        "history/00000001.json": b"{}",
        "logs/hooks.log": b"vocal: muted\n",
        "conch/lock": b"",
        "voices/alice/default.wav": b"RIFF....WAVE",
        "voices/alice/persona.md": b"A calm voice.",
        "config.toml": b'tts_engine = "espeak-ng"\n',
        "gates.json": b'{"muted": false, "volume_percent": 80}\n',
    }
    ensure_state_dir(vocal_home)  # vocal made it (and marked it): teardown may empty it
    for name, data in files.items():
        path = vocal_home / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
    assert run_vocal("hooks", "install").returncode == 0
    return {"home": vocal_home, "files": files, "user_settings": user_settings,
            "original": original, "real_home": real_home}  # fmt: skip


def tree(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if p.is_file()}


KEPT = {"voices/alice/default.wav", "voices/alice/persona.md", "config.toml", "gates.json"}
#: Written when vocal makes the directory (issues 17, 37): it stays vocal's after a teardown.
MARKER = ".vocal-state"


def test_without_a_terminal_it_needs_yes_and_dry_run_changes_nothing(populated: dict) -> None:
    home = populated["home"]
    before = {p: (home / p).read_bytes() for p in tree(home)}
    refused = run_vocal("teardown")  # stdin is not a terminal here
    assert refused.returncode == 2 and b"--yes" in refused.stderr
    dry = run_vocal("teardown", "--dry-run", "--json")
    assert dry.returncode == 0, dry.stderr.decode()
    report = json.loads(dry.stdout)
    assert report["dry_run"] is True
    assert {Path(p).name for p in report["removed"]} == {"cache", "providers", "history", "logs",
                                                         "conch"}  # fmt: skip
    assert {Path(p).name for p in report["kept"]} == {"voices", "config.toml", "gates.json"}
    assert [h["scope"] for h in report["hooks"]] == ["user"]
    assert {p: (home / p).read_bytes() for p in tree(home)} == before
    assert b"hooks reply" in populated["user_settings"].read_bytes()


@pytest.mark.audio
@pytest.mark.usefixtures("pulse")
def test_teardown_stops_a_running_speaker_and_keeps_exactly_voices_and_settings(
    populated: dict,
) -> None:
    home = populated["home"]
    # A speaker holding the conch and its control socket, mid-sentence.
    # (PulseAudio's client finds its server through the real HOME.)
    proc = start_vocal("speak", *ESPEAK, LONG_TEXT, "--json", env={"HOME": populated["real_home"]})
    run_dir = load_settings().run_dir
    wait_until(lambda: any(e.pid == proc.pid for e in endpoints(run_dir)) or
               proc.poll() is not None, what="the socket")  # fmt: skip
    assert proc.poll() is None, proc.communicate()
    endpoint = find_endpoint(run_dir, pid=proc.pid)

    def playing() -> bool:
        try:
            return send_command(endpoint, "status")["state"] == "playing"
        except ControlError:  # the description is written just before the socket is bound
            return False

    wait_until(playing, what="the speech to start")
    started = time.monotonic()
    result = run_vocal("teardown", "--yes", "--json")
    assert result.returncode == 0, result.stderr.decode()
    report = json.loads(result.stdout)
    assert report["stopped"] == [{"pid": proc.pid, "how": "control", "kind": "speak",
                                  "exited": True}]  # fmt: skip
    assert time.monotonic() - started < 10
    out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err.decode()
    assert json.loads(out.decode().splitlines()[-1])["turn"]["outcome"] == "stopped"
    # Exactly what it promises to keep, byte for byte; everything else gone.
    assert tree(home) == KEPT | {MARKER}
    for name in KEPT:
        assert (home / name).read_bytes() == populated["files"][name]
    assert sorted(p.name for p in home.iterdir()) == [MARKER, "config.toml", "gates.json",
                                                      "voices"]  # fmt: skip
    # Our hooks are out of the user's settings, which are as they were before install.
    assert populated["user_settings"].read_bytes() == populated["original"]
    assert not Path(str(populated["user_settings"]) + ".vocal-backup").exists()
    # --all takes the rest.
    everything = run_vocal("teardown", "--all", "--yes", "--json")
    assert everything.returncode == 0
    assert not home.exists()
    assert populated["user_settings"].read_bytes() == populated["original"]
