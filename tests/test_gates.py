"""`vocal mute`, `vocal unmute`, `vocal volume N`: persisted, and checked before any synthesis
cost is paid (muted or volume 0: no engine is even imported)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from harness.runner import run_vocal
from vocal.config import load_settings
from vocal.floor.gates import Gates, gates_path, read_gates, set_muted, set_volume
from vocal.speaking.speak import SpeakOptions, speak


def imported_by(args: list[str]) -> tuple[int, set[str], str]:
    result = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "vocal", *args],
        capture_output=True, text=True, timeout=60, env=dict(os.environ),
    )  # fmt: skip
    names = {
        line.rsplit("|", 1)[1].strip().split(".")[0]
        for line in result.stderr.splitlines()
        if line.startswith("import time:") and "|" in line
    }
    return result.returncode, names, result.stderr


def test_gates_persist_across_invocations(vocal_home: Path) -> None:
    assert run_vocal("volume").stdout.decode().strip() == "100"
    assert run_vocal("volume", "40").returncode == 0
    assert run_vocal("mute").returncode == 0
    assert json.loads(run_vocal("volume", "--json").stdout) == {
        "muted": True, "volume_percent": 40, "silent": True,
    }  # fmt: skip
    assert run_vocal("volume").stdout.decode().strip() == "40 (muted)"
    assert run_vocal("unmute").returncode == 0
    assert read_gates(vocal_home) == Gates(muted=False, volume_percent=40)
    assert json.loads(gates_path(vocal_home).read_text()) == {"muted": False, "volume_percent": 40}


@pytest.mark.parametrize("value", ["201", "-1", "loud"])
def test_bad_volume_is_a_usage_error(value: str) -> None:
    result = run_vocal("volume", "--", value)
    assert result.returncode == 2
    assert b"Traceback" not in result.stderr


@pytest.mark.parametrize("gate", [["mute"], ["volume", "0"]])
def test_silenced_speak_loads_no_engine_and_succeeds(gate: list[str]) -> None:
    assert run_vocal(*gate).returncode == 0
    code, modules, stderr = imported_by(["speak", "--json", "Hello there, this is not spoken."])
    assert code == 0, stderr
    assert "nothing spoken" in stderr
    assert not modules & {"numpy", "onnxruntime", "hibari", "sounddevice", "soxr"}


def test_silenced_speak_with_stdin_is_also_a_no_op() -> None:
    run_vocal("mute")
    result = run_vocal("speak", "-", "--json", input="Said to nobody.")
    assert result.returncode == 0
    assert json.loads(result.stdout)["muted"] is True


def test_gates_do_not_apply_to_writing_a_file(tmp_path: Path) -> None:
    run_vocal("mute")
    out = tmp_path / "out.wav"
    result = run_vocal("speak", "--engine", "espeak-ng", "-o", str(out), "Written anyway.")
    assert result.returncode == 0, result.stderr.decode()
    assert out.stat().st_size > 1000


def test_a_broken_gates_file_means_the_defaults(vocal_home: Path) -> None:
    vocal_home.mkdir(parents=True, exist_ok=True)
    gates_path(vocal_home).write_text("{not json")
    assert read_gates(vocal_home) == Gates()
    gates_path(vocal_home).write_text('{"muted": "yes", "volume_percent": 50}')
    assert read_gates(vocal_home) == Gates()


@pytest.mark.audio
@pytest.mark.usefixtures("pulse")
def test_volume_gate_sets_the_playback_gain(vocal_home: Path) -> None:
    set_volume(vocal_home, 50)
    set_muted(vocal_home, False)
    seen: list[float] = []
    options = SpeakOptions(engine="espeak-ng")
    result = speak(
        "Half as loud.", options, load_settings(), on_start=lambda s: seen.append(s.output.volume)
    )
    assert seen == [0.5] and result is not None and result.played
    result = speak("Twice as loud.", SpeakOptions(engine="espeak-ng", volume=1.5), load_settings(),
                   on_start=lambda s: seen.append(s.output.volume))  # fmt: skip
    assert seen == [0.5, 1.5]


# -- corrupt state heals itself (issue 17) ------------------------------------------------------
BAD_GATES = [
    "[" * 100_000 + "]" * 100_000,  # RecursionError in json
    '{"muted": "yes", "volume_percent": 50}',
    '{"muted": false, "volume_percent": 1e999}',
    '{"muted": false, "volume_percent": NaN}',
    "\xff\xfe",
    "[]",
]


@pytest.mark.parametrize("content", BAD_GATES)
def test_a_malformed_gates_file_is_quarantined_and_repaired(vocal_home: Path,
                                                            content: str) -> None:  # fmt: skip
    vocal_home.mkdir(parents=True, exist_ok=True)
    gates_path(vocal_home).write_text(content, errors="surrogateescape")
    assert read_gates(vocal_home) == Gates()
    assert [p.name.startswith("gates.json.bad-") for p in vocal_home.iterdir()
            if ".bad-" in p.name] == [True]  # fmt: skip
    assert "gates.json" in (vocal_home / "logs" / "statefiles.log").read_text()


@pytest.mark.parametrize("repair", [["unmute"], ["volume", "50"], ["volume"], ["mute"]])
def test_repair_commands_work_over_deep_json(vocal_home: Path, repair: list[str]) -> None:
    vocal_home.mkdir(parents=True, exist_ok=True)
    gates_path(vocal_home).write_text(BAD_GATES[0])
    result = run_vocal(*repair)
    assert result.returncode == 0, result.stderr
    assert b"Traceback" not in result.stderr and b"unexpected" not in result.stderr
    if repair == ["volume"]:  # only reads: the defaults, the bad file set aside
        assert result.stdout.strip() == b"100" and not gates_path(vocal_home).exists()
        return
    assert json.loads(gates_path(vocal_home).read_text())["volume_percent"] in (50, 100)
    assert gates_path(vocal_home).stat().st_mode & 0o077 == 0


def test_mute_refuses_a_state_directory_others_can_write(vocal_home: Path) -> None:
    """Anyone who can write the state directory could swap the gates (issue 17): mute and
    volume refuse it with the fix, as every command that writes state does."""
    vocal_home.mkdir(parents=True, exist_ok=True)
    os.chmod(vocal_home, 0o777)
    for args in (["mute"], ["volume", "40"]):
        result = run_vocal(*args)
        assert result.returncode == 2, result.stderr.decode()
        assert b"chmod 700" in result.stderr and b"Traceback" not in result.stderr
    assert not gates_path(vocal_home).exists()
