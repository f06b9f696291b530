"""The speech worker (vocal.speaking.worker): `vocal speak` forks it at launch to load the engine
on the other core; it is adopted when it guessed right, handed over from when it fails, and never
outlives the turn. Real processes, real hibari, real playback into the null sink."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from harness.runner import run_vocal
from harness.speak_audio import transcribe
from harness.words import word_error_rate
from vocal.audio.wav import read_wav
from vocal.launch import option_value, will_speak

pytestmark = pytest.mark.usefixtures("shared_tts_cache")

MAX_WER = 0.25
LONG_TEXT = (
    "The build finished without errors. All forty two tests pass on the first try. "
    "I updated the changelog and the version number. The release notes are in the docs folder. "
    "Tell me when you want me to publish the package."
)


def processes_with(marker: str) -> list[int]:
    """Pids of live processes whose command line holds `marker` (a fork keeps its parent's)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            if marker.encode() in (entry / "cmdline").read_bytes():
                state = (entry / "stat").read_text().rsplit(")", 1)[1].split()[0]
                if state != "Z":
                    found.append(int(entry.name))
        except OSError:
            continue
    return found


def children_of(pid: int) -> list[int]:
    found: list[int] = []
    for task in Path(f"/proc/{pid}/task").iterdir():
        found += [int(c) for c in (task / "children").read_text().split()]
    return found


def wait_until_gone(pids: list[int], timeout_s: float = 3.0) -> list[int]:
    deadline = time.monotonic() + timeout_s
    left = pids
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [p for p in left if Path(f"/proc/{p}").exists() and p in processes_alive(left)]
    return left


def processes_alive(pids: list[int]) -> list[int]:
    alive = []
    for pid in pids:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if state != "Z":
            alive.append(pid)
    return alive


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["speak", "hello"], True),
        (["converse", "What next?"], True),
        (["speak", "hello", "-o", "out.wav"], True),  # a file is synthesized all the same
        (["speak", "--help"], False),
        (["listen"], False),
        (["hooks", "reply"], False),
        ([], False),
    ],
)
def test_which_command_lines_fork_the_worker(argv: list[str], expected: bool) -> None:
    assert will_speak(argv) is expected


def test_the_glance_reads_engine_and_voice_as_typer_will() -> None:
    argv = ["speak", "--engine", "piper", "--voice=en-gb", "--engine=espeak-ng", "hello"]
    assert option_value(argv, "--engine") == "espeak-ng"  # the last one wins, as in Typer
    assert option_value(argv, "--voice") == "en-gb"
    assert option_value(["speak", "hello"], "--voice") is None


def spoken_to_file(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> dict:
    """`vocal speak ARGS --output F --json TEXT`: its report, after checking what F says."""
    out = tmp_path / "out.wav"
    text = "Please open the window in the kitchen."
    result = run_vocal("speak", *args, "--output", str(out), "--json", text, env=env)
    assert result.returncode == 0, result.stderr.decode()
    audio = read_wav(out)
    assert word_error_rate(text, transcribe(audio.mono_samples, audio.sample_rate)) <= MAX_WER
    return json.loads(result.stdout)


def test_an_engine_named_on_the_command_line_is_the_workers_guess(tmp_path: Path) -> None:
    report = spoken_to_file(tmp_path, "--engine", "espeak-ng")
    assert report["engine"] == "espeak-ng" and report["worker_sentences"] == 1


@pytest.mark.parametrize("switch", ["VOCAL_SPEECH_WORKER", "VOCAL_EARLY_START"])
def test_switched_off_the_engine_runs_in_process(tmp_path: Path, switch: str) -> None:
    report = spoken_to_file(tmp_path, env={switch: "0"})
    assert report["engine"] == "hibari" and report["worker_sentences"] == 0


def test_a_wrong_guess_is_let_go_and_reaped_at_once() -> None:
    code = (
        "import os\n"
        "from vocal.speaking import remote\n"
        "from vocal.speaking import worker as speech_worker\n"
        "from vocal.config import load_settings\n"
        "speech_worker.start(engine='espeak-ng')\n"
        "pid = speech_worker._worker.pid\n"
        "print(remote.adopt('hibari', None, load_settings()) is None)\n"
        "try:\n"
        "    os.kill(pid, 0)\n"
        "    print('alive')\n"
        "except ProcessLookupError:\n"
        "    print('reaped')\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "reaped"]


def test_a_usage_error_leaves_no_worker_behind() -> None:
    marker = f"marker-{uuid.uuid4().hex}"
    result = run_vocal("speak", "--no-such-option", marker)
    assert result.returncode == 2
    assert processes_with(marker) == []  # killed and reaped before the parent exited


@pytest.mark.audio
@pytest.mark.usefixtures("pulse")
def test_a_worker_killed_mid_reply_hands_over_and_the_reply_finishes() -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "vocal", "speak", "--json", f"{LONG_TEXT} {LONG_TEXT}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        workers: list[int] = []
        deadline = time.monotonic() + 20
        while not workers and time.monotonic() < deadline and process.poll() is None:
            time.sleep(0.05)
            workers = children_of(process.pid)
        assert workers, "no worker was forked"
        time.sleep(1.5)  # speaking the first sentences by now
        os.kill(workers[0], signal.SIGKILL)
        stdout, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr.decode()
    report = json.loads(stdout)
    assert report["spoken"] == report["sentences"] == 10
    assert 1 <= report["worker_sentences"] < 10  # the rest came from the in-process engine


@pytest.mark.audio
@pytest.mark.usefixtures("pulse")
def test_sigterm_mid_reply_leaves_no_worker_behind() -> None:
    marker = f"marker {uuid.uuid4().hex}"
    process = subprocess.Popen(
        [sys.executable, "-m", "vocal", "speak", f"{LONG_TEXT} {marker}"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        time.sleep(2.0)
        workers = children_of(process.pid)
        assert workers, "no worker was forked"
        process.send_signal(signal.SIGTERM)
        process.wait(15)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode != 0
    assert wait_until_gone(workers) == []
    assert processes_with(marker) == []
