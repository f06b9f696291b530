"""`vocal doctor` on real audio: this session's null sink, a null source standing in for a muted
microphone, a tone played while it listens, and the problems it must name with their fix."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.pulse import PulseSinks
from harness.runner import run_vocal
from harness.sounds import tone
from vocal.audio.endpoints import device_pair
from vocal.duplex.canceller.profile import FULL_DUPLEX, EchoProfile, save_profile
from vocal.ops.check import Check

pytestmark = [pytest.mark.audio, pytest.mark.usefixtures("pulse")]


def doctor(*args: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, dict], str]:
    """Run `vocal doctor --json`: exit code, checks by name, stderr."""
    result = run_vocal("doctor", "--json", "--listen-s", "0.3", *args, env=env, timeout=60)
    checks = {check["name"]: check for check in json.loads(result.stdout)}
    return result.returncode, checks, result.stderr.decode()


def test_a_working_machine_names_the_null_sink_and_exits_0(pulse: PulseSinks) -> None:
    code, checks, stderr = doctor()
    assert code == 0, stderr
    assert pulse.speaker in checks["devices"]["detail"]
    assert f"{pulse.speaker}.monitor" in checks["devices"]["detail"]
    # The loopback's monitor is digital silence, said for what it is: a warning, not a fault.
    assert checks["microphone"]["status"] == "warn"
    assert "monitor" in checks["microphone"]["detail"] and checks["microphone"]["fix"]
    for name in ("audio backend", "state directory", "conch", "engine hibari",
                 "engine faster-whisper", "model tiny.en (embedded)"):  # fmt: skip
        assert checks[name]["status"] == "ok", checks[name]
    assert checks["conch"]["detail"] == "free"


def test_the_configured_speech_engine_is_the_one_built() -> None:
    # espeak-ng configured: it is the engine line (built, not just found on PATH), hibari is
    # not checked at all; hibari configured: it is built, and espeak-ng stays the fallback line.
    _, checks, stderr = doctor(env={"VOCAL_TTS_ENGINE": "espeak-ng"})
    assert checks["engine espeak-ng"]["status"] == "ok", stderr
    assert checks["engine espeak-ng"]["detail"].startswith("loads in ")
    assert "engine hibari" not in checks
    _, checks, stderr = doctor(env={"VOCAL_TTS_ENGINE": "hibari"})
    assert checks["engine hibari"]["status"] == "ok", stderr
    assert checks["engine hibari"]["detail"].startswith("loads in ")
    assert checks["engine espeak-ng"]["status"] == "ok"  # the fallback voice, on PATH
    # An engine that cannot be built fails with its own reason and fix.
    code, checks, _ = doctor(env={"VOCAL_TTS_ENGINE": "openai", "OPENAI_API_KEY": ""})
    assert code == 1 and checks["engine openai"]["status"] == "fail"
    assert checks["engine openai"]["detail"] == "does not load: OPENAI_API_KEY is not set"
    assert "OPENAI_API_KEY" in checks["engine openai"]["fix"]


def test_the_echo_profile_is_asked_for_until_one_is_kept(vocal_home: Path) -> None:
    # The null sink is no headset: echo is cancelled (aec auto), and nothing was measured.
    _, checks, _ = doctor()
    kept = checks["echo profile"]
    assert kept["status"] == "warn" and kept["detail"].endswith("not measured")
    assert "vocal doctor --echo" in kept["fix"]
    output, input = device_pair(None, None)  # the pair the doctor resolved, as a turn would
    assert f"{output} into {input}" in kept["detail"]
    save_profile(vocal_home, EchoProfile(output=output, input=input, delay_ms=118.0,
                                         echo_dbfs=-30.0, echo_gain_db=-10.0, reduction_db=41.0,
                                         verdict=FULL_DUPLEX, measured_at=time.time()))  # fmt: skip
    _, checks, _ = doctor()
    assert checks["echo profile"]["status"] == "ok"
    assert "full-duplex (echo delay 118 ms, cancelled 41 dB)" in checks["echo profile"]["detail"]
    _, checks, _ = doctor(env={"VOCAL_AEC": "off"})
    assert checks["echo profile"]["detail"] == "not needed: no echo is cancelled (aec off)"


def test_text_report_has_a_fix_under_each_problem() -> None:
    result = run_vocal("doctor", "--listen-s", "0.2", env={"VOCAL_STT_MODEL": "/nonexistent/m"})
    lines = result.stdout.decode().splitlines()
    assert result.returncode == 1
    failing = [i for i, line in enumerate(lines) if line.startswith("FAIL")]
    assert failing and all(lines[i + 1].lstrip().startswith("fix: ") for i in failing)
    assert result.stderr.decode().strip().splitlines() == [
        "vocal: error: 1 check(s) failed: model /nonexistent/m (configured) "
        "(see the fix under each)"
    ]


def test_no_portaudio(tmp_path: Path) -> None:
    # Hide the library from ctypes' lookup, the way a machine without libportaudio2 looks.
    (tmp_path / "sitecustomize.py").write_text(
        "import ctypes.util\n"
        "_find = ctypes.util.find_library\n"
        "ctypes.util.find_library = lambda n: None if 'portaudio' in n else _find(n)\n"
    )
    code, checks, _ = doctor(env={"PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path[1:]])})
    assert code == 1
    assert checks["audio backend"]["status"] == "fail"
    assert "libportaudio2" in checks["audio backend"]["fix"]
    assert checks["devices"]["status"] == "skip" and checks["microphone"]["status"] == "skip"


def test_no_devices(tmp_path: Path) -> None:
    code, checks, _ = doctor(env={"PULSE_SERVER": f"unix:{tmp_path}/no-such-socket"})
    assert code == 1
    assert checks["devices"]["status"] == "fail"
    assert "no audio devices" in checks["devices"]["detail"]
    assert "pactl info" in checks["devices"]["fix"]
    assert checks["audio backend"]["status"] == "fail"  # the sound server does not answer
    assert checks["microphone"]["status"] == "skip"


def test_a_muted_microphone_is_digital_silence_not_quiet(pulse: PulseSinks) -> None:
    # A null source delivers exact zeros, as a muted or permission-less microphone does.
    source = f"{pulse.prefix}_muted"
    module = subprocess.run(
        ["pactl", "load-module", "module-null-source", f"source_name={source}", "rate=16000",
         "channels=1"], check=True, capture_output=True, text=True, timeout=10,
    ).stdout.strip()  # fmt: skip
    try:
        code, checks, _ = doctor(env=pulse.route(source=source))
    finally:
        subprocess.run(["pactl", "unload-module", module], capture_output=True, timeout=10)
    mic = checks["microphone"]
    assert code == 1 and mic["status"] == "fail", mic
    assert "digital silence" in mic["detail"] and "muted, or no permission" in mic["detail"]
    assert "unmute" in mic["fix"]


def test_a_microphone_that_hears_a_tone_is_ok() -> None:
    from vocal.audio.player import Player

    with Player(16_000) as player:  # into the speaker sink, whose monitor doctor records
        player.play(tone(440, 6.0, amplitude=0.3))
        code, checks, stderr = doctor()
        player.stop()
    mic = checks["microphone"]
    assert code == 0 and mic["status"] == "ok", (mic, stderr)
    peak_db = float(mic["detail"].split("peak ")[1].split(" dBFS")[0])
    assert -16 < peak_db < -5, mic  # 0.3 is -10.5 dBFS


def test_an_unwritable_state_directory(tmp_path: Path) -> None:
    if os.geteuid() == 0:  # root writes anywhere chmod allows nothing: use sysfs, which refuses
        home = Path(f"/sys/vocal-doctor-test-{os.getpid()}")
    else:
        home = tmp_path / "home"
        home.mkdir(mode=0o500)
    code, checks, _ = doctor(env={"VOCAL_HOME": str(home)})
    state = checks["state directory"]
    assert code == 1 and state["status"] == "fail", state
    assert "not writable" in state["detail"] and "VOCAL_HOME" in state["fix"]


def test_a_check_that_breaks_is_its_own_failed_line(monkeypatch: pytest.MonkeyPatch) -> None:
    from vocal.ops.doctor import guarded

    def reads_state(home: Path) -> Check:
        if home == Path("/unreachable"):
            raise PermissionError(13, "Permission denied", str(home / "gates.json"))
        return Check("state files", "ok", "none malformed")

    monkeypatch.delenv("VOCAL_DEBUG", raising=False)
    assert guarded("state files", reads_state, Path("/home")).status == "ok"
    broken = guarded("state files", reads_state, Path("/unreachable"))
    assert (broken.name, broken.status) == ("state files", "fail")
    assert broken.detail == (
        "the check itself failed: PermissionError: [Errno 13] Permission denied: "
        "'/unreachable/gates.json'"
    )
    assert broken.fix and "VOCAL_DEBUG=1" in broken.fix
    monkeypatch.setenv("VOCAL_DEBUG", "1")  # a developer wants the traceback
    with pytest.raises(PermissionError):
        guarded("state files", reads_state, Path("/unreachable"))


def test_a_missing_model(tmp_path: Path) -> None:
    missing = tmp_path / "no-such-model"
    code, checks, _ = doctor(env={"VOCAL_STT_MODEL": str(missing)})
    model = checks[f"model {missing} (configured)"]
    assert code == 1 and model["status"] == "fail", model
    assert "does not exist" in model["detail"] and "vocal setup --model" in model["fix"]
    assert checks["model tiny.en (embedded)"]["status"] == "ok"


def test_a_broken_config_is_reported_and_the_rest_still_checked(vocal_home: Path) -> None:
    vocal_home.mkdir(parents=True)
    (vocal_home / "config.toml").write_text("stt_model = \n")
    code, checks, _ = doctor()
    assert code == 1 and checks["config"]["status"] == "fail"
    assert "not valid TOML" in checks["config"]["detail"]
    assert checks["state directory"]["status"] == "ok"


def test_a_malformed_state_file_is_set_aside_and_reported(vocal_home: Path) -> None:
    """Deeply nested JSON in gates.json (issue 17): `vocal volume` still works (the file is
    quarantined, not a crash), and doctor names what was set aside."""
    vocal_home.mkdir(parents=True, exist_ok=True)
    (vocal_home / "gates.json").write_text("[" * 100_000 + "]" * 100_000)
    fixed = run_vocal("volume", "50")
    assert fixed.returncode == 0, fixed.stderr.decode()
    assert b"Traceback" not in fixed.stderr
    code, checks, _ = doctor()
    assert checks["state files"]["status"] == "warn", checks["state files"]
    assert "gates.json.bad-" in checks["state files"]["detail"]
    assert checks["state files"]["fix"]
