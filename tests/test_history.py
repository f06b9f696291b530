"""The on-disk history: bounded, replayable from new processes, and the skip_back walk (issue 6).

skip_back: the first press restarts the current or most recent utterance, each further press
steps one back, clamped at the oldest; the walk lives on disk, so it goes on across processes.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from harness.conch_audio import MonitorRecorder, timeline, tone_wav, wait_until
from harness.imports import HEAVY_FOR_REPLAY, imported_by
from harness.runner import run_vocal, start_vocal
from vocal.audio.wav import Audio, read_wav
from vocal.config import load_settings
from vocal.floor.control import endpoints, find_endpoint, send_command
from vocal.floor.history import History


def tone(frequency: float, seconds: float = 0.3, rate: int = 16_000) -> Audio:
    t = np.arange(round(seconds * rate)) / rate
    return Audio((0.3 * np.sin(2 * np.pi * frequency * t)).astype(np.float32), rate)


def fresh(size: int = 8) -> History:
    """A new History object on the test's directory: what a new process would see."""
    return History(load_settings().history_dir, size)


# -- storage ----------------------------------------------------------------------------------
def test_record_and_read_back() -> None:
    audio = tone(440, 0.5, 24_000)
    utterance = fresh().record(audio, text="Hello there.", voice="heart", session="s", agent="a")
    [entry] = fresh().entries()
    assert (entry.id, entry.text, entry.voice, entry.sample_rate) == (
        utterance.id, "Hello there.", "heart", 24_000)  # fmt: skip
    assert entry.complete and entry.session == "s" and entry.agent == "a"
    assert abs(entry.created_at - time.time()) < 5
    assert entry.frames == audio.frames and abs(entry.duration_s - 0.5) < 1e-6
    back = entry.audio()
    assert back.sample_rate == 24_000
    assert np.max(np.abs(back.mono_samples - audio.mono_samples)) < 1 / 16_000  # 16-bit PCM


def test_history_keeps_the_newest_n_on_disk() -> None:
    history = fresh(3)
    for i in range(6):
        history.record(tone(300 + 100 * i), text=f"u{i}")
    assert [u.text for u in fresh(3).entries()] == ["u5", "u4", "u3"]
    files = sorted(p.name for p in history.directory.iterdir() if p.suffix in (".json", ".pcm"))
    assert files == [f"{i:06d}.{ext}" for i in (4, 5, 6) for ext in ("json", "pcm")]
    assert (history.directory.stat().st_mode & 0o777) == 0o700
    # What was said is the user's alone (issue 17: the PCM files were 0644).
    for path in history.directory.iterdir():
        if path.suffix in (".json", ".pcm"):
            assert path.stat().st_mode & 0o077 == 0, path


def test_size_comes_from_settings_with_a_minimum_of_one(monkeypatch: pytest.MonkeyPatch) -> None:
    assert History.from_settings(load_settings()).size == 8
    monkeypatch.setenv("VOCAL_HISTORY_SIZE", "0")
    history = History.from_settings(load_settings())
    assert history.size == 1
    history.record(tone(400), text="a")
    history.record(tone(500), text="b")
    assert [u.text for u in history.entries()] == ["b"]


def test_each_utterance_is_capped(monkeypatch: pytest.MonkeyPatch) -> None:
    import vocal.floor.history

    monkeypatch.setattr(vocal.floor.history, "MAX_UTTERANCE_S", 0.25)
    utterance = fresh().record(tone(440, 2.0), text="long")
    assert utterance.frames == 4000
    assert (fresh().entries()[0].pcm_path.stat().st_size) == 8000


def test_recording_in_progress_is_already_the_newest() -> None:
    history = fresh()
    history.record(tone(300), text="before")
    recording = history.begin(text="streaming", voice=None, sample_rate=16_000)
    recording.append(tone(500, 0.1).mono_samples)
    newest = fresh().entries()[0]
    assert (newest.text, newest.complete, newest.frames) == ("streaming", False, 1600)
    recording.append(tone(500, 0.1).mono_samples)
    recording.finish()
    assert fresh().entries()[0].complete and fresh().entries()[0].frames == 3200


def test_damaged_entries_are_skipped() -> None:
    history = fresh()
    history.record(tone(300), text="good")
    (history.directory / "000099.json").write_text("{torn")
    (history.directory / "000098.json").write_text(json.dumps({"id": 98, "sample_rate": 0}))
    (history.directory / "000097.json").write_text(json.dumps({"id": 97, "sample_rate": 16000}))
    assert [u.text for u in fresh().entries()] == ["good"]  # 97 has no PCM


# -- the skip_back walk --------------------------------------------------------------------------
def test_skip_back_walk_exactly_as_specified() -> None:
    for i in range(4):
        fresh(4).record(tone(300 + 100 * i), text=f"u{i}")
    # Each press from a new History object, as from a new process.
    walk = [fresh(4).step_back().text for _ in range(6)]
    assert walk == ["u3", "u2", "u1", "u0", "u0", "u0"]  # restart, back, back, back, clamped
    fresh(4).record(tone(900), text="u4")  # a new utterance starts a new walk
    assert [fresh(4).step_back().text for _ in range(3)] == ["u4", "u3", "u2"]
    fresh(4).set_cursor(fresh(4).get(4).id)  # a replay of the oldest moves the walk there
    assert fresh(4).step_back().text == "u1"
    assert fresh(4).step_back().text == "u1"


def test_skip_back_on_an_empty_history_and_with_one_utterance() -> None:
    assert fresh().step_back() is None
    fresh().record(tone(300), text="only")
    assert [fresh().step_back().text for _ in range(3)] == ["only"] * 3


def test_walk_survives_pruning() -> None:
    for i in range(3):
        fresh(2).record(tone(300 + 100 * i), text=f"u{i}")
    assert [fresh(2).step_back().text for _ in range(3)] == ["u2", "u1", "u1"]


# -- vocal replay -------------------------------------------------------------------------------
def test_replay_list_and_output(tmp_path: Path) -> None:
    history = fresh()
    first = tone(330, 0.4)
    history.record(first, text="first words", voice="v1")
    history.record(tone(550, 0.2, 24_000), text="second words")
    listing = json.loads(run_vocal("replay", "--list", "--json").stdout)
    assert [e["text"] for e in listing] == ["second words", "first words"]
    assert listing[1]["voice"] == "v1" and listing[0]["sample_rate"] == 24_000
    text = run_vocal("replay", "--list").stdout.decode()
    assert "1. #2 0.2 s second words" in text and "[v1] first words" in text
    out = tmp_path / "again.wav"
    assert run_vocal("replay", "2", "--output", str(out)).returncode == 0
    again = read_wav(out)
    assert again.sample_rate == 16_000 and again.frames == first.frames
    assert np.max(np.abs(again.mono_samples - first.mono_samples)) < 2 / 32768


def test_replay_errors() -> None:
    result = run_vocal("replay")
    assert result.returncode == 2 and b"history is empty" in result.stderr
    fresh().record(tone(300), text="x")
    result = run_vocal("replay", "3")
    assert result.returncode == 2 and b"holds 1 utterance(s), not 3" in result.stderr
    assert run_vocal("replay", "0").returncode == 2


def test_replay_never_loads_speech_engines(tmp_path: Path) -> None:
    fresh().record(tone(300), text="x")
    loaded = imported_by("replay", "--output", str(tmp_path / "x.wav"))
    assert "vocal.floor.history" in loaded and not loaded & HEAVY_FOR_REPLAY


# -- across real processes ----------------------------------------------------------------------
audio_marks = [pytest.mark.audio, pytest.mark.usefixtures("pulse")]


@pytest.mark.audio
@pytest.mark.usefixtures("pulse")
def test_replay_plays_the_stored_pcm_without_speech_engines(tmp_path: Path) -> None:
    fresh().record(tone(700, 0.6), text="seven hundred")
    fresh().record(tone(900, 0.3), text="nine hundred")
    with MonitorRecorder() as recorder:
        loaded = imported_by("replay", "2")
    spans = recorder.tone_spans([700, 900])
    assert 900 not in spans and 0.5 < spans[700][2] < 0.7
    assert not loaded & HEAVY_FOR_REPLAY


@pytest.mark.audio
@pytest.mark.usefixtures("pulse")
def test_skip_back_walks_the_history_across_process_restarts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VOCAL_HISTORY_SIZE", "4")
    freqs = {"u1": 500, "u2": 700, "u3": 900, "u4": 1100, "u5": 1300}
    files = {name: tone_wav(tmp_path / f"{name}.wav", f, 0.3) for name, f in freqs.items()}
    files["u4"] = tone_wav(tmp_path / "u4.wav", freqs["u4"], 6.0)  # long: pressed while playing
    for name in ("u1", "u2", "u3"):  # three turns, three processes
        assert run_vocal("play", str(files[name]), "--text", name).returncode == 0
    ids = {u.text: u.id for u in fresh().entries()}

    with MonitorRecorder() as recorder:
        # A fourth turn is speaking u4: the first press restarts it, the second steps to u3.
        proc = start_vocal("play", str(files["u4"]), "--text", "u4", "--json")
        run_dir = load_settings().run_dir
        wait_until(lambda: find_endpoint(run_dir, pid=proc.pid) is not None)
        endpoint = find_endpoint(run_dir, pid=proc.pid)
        wait_until(lambda: send_command(endpoint, "status")["state"] == "playing")
        time.sleep(0.5)
        first = run_vocal("control", "skip-back", "--json")
        time.sleep(0.5)
        second = run_vocal("control", "skip-back", "--json")
        out, err = proc.communicate(timeout=20)
        assert proc.returncode == 0, err.decode()
        # No turn is running now: each press replays from a new process, going on back.
        presses = [run_vocal("control", "skip-back", "--json") for _ in range(3)]
    ids["u4"] = fresh().entries()[0].id
    assert json.loads(first.stdout)["target"]["text"] == "u4"  # restart the current
    assert json.loads(second.stdout)["target"]["text"] == "u3"  # one back
    assert timeline(out)["played_ids"] == [ids["u4"], ids["u4"], ids["u3"]]
    for press in presses:
        assert press.returncode == 0, press.stderr.decode()
    replayed = [json.loads(p.stdout)["replayed"]["text"] for p in presses]
    assert replayed == ["u2", "u1", "u1"]  # across restarts, clamped at the oldest

    # What was heard: u4 (cut by the first press, then restarted: the same tone, so the
    # monitor cannot tell the seam), then u3, u2 and u1 whole, u1 twice.
    spans = recorder.tone_spans(list(freqs.values()))
    assert freqs["u5"] not in spans
    heard = sorted((spans[freqs[name]][0], name) for name in ("u4", "u3", "u2", "u1"))
    assert [name for _, name in heard] == ["u4", "u3", "u2", "u1"]
    assert 0.7 < spans[freqs["u4"]][2] < 3.5  # two cut stretches, not the whole 6 s
    assert 0.25 < spans[freqs["u3"]][2] < 0.35 and 0.25 < spans[freqs["u2"]][2] < 0.35
    assert 0.5 < spans[freqs["u1"]][2] < 0.7

    # A new utterance starts a new walk: the next press restarts it.
    assert run_vocal("play", str(files["u5"]), "--text", "u5").returncode == 0
    press = run_vocal("control", "skip-back", "--json")
    assert json.loads(press.stdout)["replayed"]["text"] == "u5"
    assert [u.text for u in fresh().entries()] == ["u5", "u4", "u3", "u2"]  # size 4, u1 gone
    assert endpoints(load_settings().run_dir) == []
    assert os.listdir(load_settings().run_dir) == []


# -- corrupt state heals itself (issue 17) ------------------------------------------------------
#: A writer process: records argv[2] utterances of 50 ms into a history of size argv[1].
WRITER = """
import sys
import numpy as np
from vocal.audio.wav import Audio
from vocal.config import load_settings
from vocal.floor.history import History
history = History(load_settings().history_dir, int(sys.argv[1]))
for i in range(int(sys.argv[2])):
    with history.begin(text=f"w{i}", voice=None, sample_rate=16000) as recording:
        recording.append(np.zeros(800, np.float32))
"""


def entry_files(directory: Path) -> tuple[set[str], set[str]]:
    names = os.listdir(directory)
    return ({n[:-5] for n in names if n.endswith(".json") and n[:-5].isdigit()},
            {n[:-4] for n in names if n.endswith(".pcm")})  # fmt: skip


@pytest.mark.parametrize("bad", [
    {"sample_rate": float("inf")}, {"sample_rate": 1}, {"sample_rate": "16000"},
    {"created_at": float("nan")}, {"text": ["x"]}, {"id": 5}, {"complete": "yes"},
])  # fmt: skip
def test_a_malformed_entry_is_quarantined_and_the_size_limit_holds(bad: dict) -> None:
    history = fresh(3)
    history.record(tone(300), text="good")
    path = history.directory / "000002.json"
    path.write_text(json.dumps({"id": 2, "text": "bad", "sample_rate": 16000, **bad},
                               allow_nan=True))  # fmt: skip
    (history.directory / "000002.pcm").write_bytes(b"\0\0" * 100)
    (history.directory / "seq").write_text("2")
    assert [u.text for u in fresh(3).entries()] == ["good"]
    assert any(n.startswith("000002.json.bad-") for n in os.listdir(history.directory))
    for i in range(5):  # speaking goes on, and the limit holds
        history.record(tone(300), text=f"u{i}")
    assert [u.text for u in fresh(3).entries()] == ["u4", "u3", "u2"]
    jsons, pcms = entry_files(history.directory)
    assert jsons == pcms and len(jsons) == 3
    listing = run_vocal("replay", "--list", "--json")
    assert listing.returncode == 0 and b"Traceback" not in listing.stderr


def test_sample_rate_1e999_does_not_break_speaking_through_the_cli() -> None:
    history = fresh()
    history.record(tone(300), text="good")
    (history.directory / "000002.json").write_text(
        '{"id": 2, "text": "x", "sample_rate": 1e999}')  # fmt: skip
    (history.directory / "000002.pcm").write_bytes(b"")
    result = run_vocal("replay", "--list")
    assert result.returncode == 0, result.stderr
    assert b"good" in result.stdout and b"unexpected" not in result.stderr
    assert run_vocal("replay", "1", "--output", os.devnull).returncode in (0, 1, 2)


def test_orphans_are_trimmed() -> None:
    history = fresh(2)
    history.record(tone(300), text="a")
    (history.directory / "000007.json").write_text(json.dumps({"id": 7, "sample_rate": 16000}))
    (history.directory / "000008.pcm").write_bytes(b"\0\0")
    (history.directory / "000009.json").write_text("[" * 50_000)
    history.record(tone(300), text="b")
    jsons, pcms = entry_files(history.directory)
    assert jsons == pcms and len(jsons) == 2
    assert [u.text for u in fresh(2).entries()] == ["b", "a"]


def test_ten_concurrent_writers_leave_no_orphans() -> None:
    directory = load_settings().history_dir
    writers = [subprocess.Popen([sys.executable, "-c", WRITER, "3", "6"]) for _ in range(10)]
    for writer in writers:
        assert writer.wait(120) == 0
    jsons, pcms = entry_files(directory)
    assert jsons == pcms, (sorted(jsons), sorted(pcms))
    assert len(jsons) == 3
    assert all(u.complete for u in fresh(3).entries())
