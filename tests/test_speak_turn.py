"""`vocal speak` in a turn (issues 4, 5, 6): the conch, the control socket, the history, and
stored voices, through real `vocal speak` processes on real streams.

What is checked is what was heard: the speaker sink's monitor is recorded in this process (its
blocks stamped with the system-wide monotonic clock, as the processes' own timestamps are), and
each process's speech is found in the recording by cross-correlation with the same text rendered
to a file by the same engine (espeak-ng is deterministic), so each speaker's interval on the
monitor is known without trusting the processes' word for it.
"""

from __future__ import annotations

import json
import signal
import statistics
import subprocess
import time
from pathlib import Path

import numpy as np
import pytest

from harness.chatterbox_bundle import build_bundle
from harness.conch_audio import MonitorRecorder, wait_until
from harness.floor import finish, floor, holder_session, queue_sessions
from harness.heard import (
    MIN_SCORE,
    MONITOR_RATE,
    SOUND_RMS,
    block_rms,
    heard_intervals,
    rendered,
    trimmed,
)
from harness.imports import HEAVY_FOR_REPLAY, imported_by
from harness.runner import run_vocal, start_vocal
from harness.sounds import espeak, with_silence
from vocal.audio.wav import read_wav, write_wav
from vocal.config import load_settings
from vocal.floor.control import endpoints, find_endpoint, send_command
from vocal.floor.history import History
from vocal.speaking.speak import SpeakOptions, speak

audio = [pytest.mark.audio, pytest.mark.usefixtures("pulse")]

ESPEAK = ("--engine", "espeak-ng")
#: Eight short, distinct utterances (one sentence each, under the 40 characters at which the
#: first sentence is split at a comma), so each one has a single clear correlation peak.
TEXTS = ["Alpha one.", "Bravo two.", "Charlie three.", "Delta four.", "Echo five.",
         "Foxtrot six.", "Golf seven.", "Hotel eight."]  # fmt: skip
LONG_TEXT = (
    "This is a long reply that keeps on going for a while. It has several sentences in it. "
    "Each of them is synthesized while the one before it plays. Nobody should have to wait "
    "for the end of it. And yet it goes on and on, so that there is time to test things."
)


# -- helpers ------------------------------------------------------------------------------------
def speak_json(out: bytes) -> dict:
    return json.loads(out.decode().strip().splitlines()[-1])


def queue_speakers(texts: list[str], sessions: list[str],
                   env: dict[str, str] | None = None) -> list[subprocess.Popen]:  # fmt: skip
    """Start one `vocal speak --json` per text, each once the previous one is in the queue."""
    procs = []
    for i, (text, session) in enumerate(zip(texts, sessions, strict=True)):
        procs.append(start_vocal("speak", *ESPEAK, text, "--session", session, "--json", env=env))
        wait_until(lambda i=i: len(queue_sessions()) == i + 1, what=f"{session} to queue")
    assert queue_sessions() == sessions
    return procs


def start_talker(text: str = LONG_TEXT, session: str = "talker") -> subprocess.Popen:
    """A `vocal speak` whose speech has started playing."""
    proc = start_vocal("speak", *ESPEAK, text, "--session", session, "--json")
    run_dir = load_settings().run_dir
    wait_until(lambda: any(e.pid == proc.pid for e in endpoints(run_dir)), what="the socket")
    endpoint = find_endpoint(run_dir, pid=proc.pid)

    def speaking() -> bool:
        status = send_command(endpoint, "status")
        return status["state"] == "playing" and status["sentence"]["sentence"] is not None

    wait_until(speaking, what="the speech to start")
    time.sleep(0.3)  # well into the first sentence
    return proc


def silent_from(recorder: MonitorRecorder, at_s: float) -> float | None:
    """The time from which the monitor stays silent for good after `at_s` (None: never)."""
    times, rms = block_rms(recorder)
    loud = np.flatnonzero((times >= at_s) & (rms > SOUND_RMS))
    if loud.size == 0:
        return at_s
    return float(times[loud[-1]]) if loud[-1] + 1 < times.size else None


# -- stored voices ------------------------------------------------------------------------------
def add_voice(name: str, text: str, voice: str, tmp_path: Path) -> None:
    clip = write_wav(tmp_path / f"{name}.wav", with_silence(espeak(text, voice=voice), 0.5, 0.5))
    result = run_vocal("voices", "add", name, str(clip))
    assert result.returncode == 0, result.stderr.decode()


SENTENCE_A = ("The quick brown fox jumps over the lazy dog, and then it runs far away into the "
              "deep green forest to rest.")  # fmt: skip
SENTENCE_B = ("Please remember to water the plants on the balcony every morning, and close the "
              "windows before you leave for work.")  # fmt: skip


def test_a_stored_voice_without_weights_is_exit_5_naming_what_is_missing(tmp_path: Path) -> None:
    add_voice("alice", SENTENCE_A, "en-us", tmp_path)
    result = run_vocal("speak", "--voice", "alice", "Hello there.")
    err = result.stderr.decode()
    assert result.returncode == 5, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("vocal: error: "), err
    assert "the cloned voice 'alice' needs the Chatterbox ONNX weights" in err
    for missing in ("onnx/speech_encoder.onnx", "onnx/embed_tokens.onnx",
                    "onnx/language_model_q4.onnx", "onnx/conditional_decoder.onnx",
                    "tokenizer.json"):  # fmt: skip
        assert missing in err
    assert "vocal setup --engine chatterbox" in err and "VOCAL_CHATTERBOX_DIR" in err
    # It failed before any cost: no floor taken, nothing in the history, no other voice spoken.
    assert floor().status().holder is None
    assert History.from_settings(load_settings()).entries() == []
    # Asking another engine for a stored voice is a usage error, not a silent switch.
    other = run_vocal("speak", "--voice", "alice", *ESPEAK, "Hello.")
    assert other.returncode == 2 and b"only the chatterbox engine speaks" in other.stderr


def test_a_stored_voice_speaks_through_the_bundle_end_to_end(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VOCAL_CHATTERBOX_DIR", str(build_bundle(tmp_path / "bundle")))
    add_voice("alice", SENTENCE_A, "en-us", tmp_path)
    add_voice("bob", SENTENCE_B, "en-gb", tmp_path)
    text = "Hello there, this is a test. And here is a second sentence."
    outputs = {}
    for name in ("alice", "bob"):
        path = tmp_path / f"{name}-out.wav"
        result = run_vocal("speak", "--voice", name, text, "-o", str(path), "--json")
        assert result.returncode == 0, result.stderr.decode()
        payload = speak_json(result.stdout)
        assert payload["engine"] == "chatterbox" and payload["voice"] == name
        assert payload["sentences"] == payload["spoken"] >= 2
        assert payload["failed"] == 0 and payload["turn"] is None  # a file: no turn
        written = read_wav(path)
        assert written.sample_rate == 24_000
        assert abs(written.duration_s - payload["audio_s"]) < 0.01 and written.duration_s > 1
        outputs[name] = written.mono_samples
    # Each voice's own conditioning: the same text differs from one voice to the other.
    a, b = outputs["alice"], outputs["bob"]
    assert a.shape != b.shape or not np.allclose(a, b, atol=1e-3)


# -- the conch: many speakers -------------------------------------------------------------------
@pytest.mark.audio
@pytest.mark.usefixtures("pulse")
def test_eight_speakers_take_turns_in_fifo_order_without_overlap(tmp_path: Path) -> None:
    references = [rendered(text, tmp_path) for text in TEXTS]
    sessions = [f"s{i}" for i in range(len(TEXTS))]
    assert run_vocal("conch", "wait", "--session", "gate").returncode == 0
    with MonitorRecorder() as recorder:
        procs = queue_speakers(TEXTS, sessions)
        assert floor().release_session("gate") is not None
        results = finish(procs)
    for code, _, err in results:
        assert code == 0, err.decode()
    lines = [speak_json(out) for _, out, _ in results]
    assert [line["turn"]["session"] for line in lines] == sessions
    assert all(line["turn"]["outcome"] == "finished" and line["spoken"] == 1 for line in lines)
    # FIFO by the processes' own clocks: sequence numbers and first audio follow arrival.
    seqs = [line["turn"]["seq"] for line in lines]
    assert seqs == sorted(seqs)
    spans = [(line["timestamps"]["first_audio"], line["timestamps"]["finished"]) for line in lines]
    for before, after in zip(spans, spans[1:], strict=False):
        assert before[1] <= after[0]
    # What was heard: each utterance at the time its speaker says, in arrival order, one after
    # the other.
    found = heard_intervals(recorder, references)
    print("head correlations:", [round(score, 3) for _, _, score in found])
    assert all(score > MIN_SCORE for _, _, score in found), [round(s, 3) for _, _, s in found]
    heard = []
    for (start, end, _), (own_start, own_end), reference in zip(found, spans, references,
                                                                strict=True):  # fmt: skip
        assert abs(start - own_start) < 0.15  # the processes' timestamps agree with the monitor
        end = end if end is not None else max(own_end, start + reference.shape[0] / MONITOR_RATE)
        assert end - start > reference.shape[0] / MONITOR_RATE - 0.01  # heard whole
        heard.append((start, end))
    tolerance_s = 0.02  # the correlation peak's and the monitor blocks' granularity
    for before, after in zip(heard, heard[1:], strict=False):
        assert before[1] <= after[0] + tolerance_s
    gaps = [round(b[0] - a[1], 3) for a, b in zip(heard, heard[1:], strict=False)]
    print("silence between speakers at the monitor (s):", gaps)
    # Nothing else sounded: every loud block lies inside one of the heard utterances.
    times, rms = block_rms(recorder)
    for t in times[rms > SOUND_RMS]:
        # 0.1 s: quiet onsets and fades under the references' trim level, and block times that
        # jitter on a loaded machine (seen: a block 52-60 ms outside its utterance).
        assert any(s - 0.1 <= t <= e + 0.1 for s, e in heard), t
    assert floor().status().holder is None and queue_sessions() == []


@pytest.mark.audio
@pytest.mark.usefixtures("pulse")
def test_a_sigkilled_speaker_does_not_block_the_others(tmp_path: Path) -> None:
    expiry_s = 8.0
    env = {"VOCAL_CONCH_LOCK_EXPIRY": str(expiry_s)}
    texts = [LONG_TEXT, *TEXTS[1:6]]
    sessions = [f"k{i}" for i in range(len(texts))]
    references = [rendered(text, tmp_path) for text in texts[1:]]
    assert run_vocal("conch", "wait", "--session", "gate").returncode == 0
    with MonitorRecorder() as recorder:
        procs = queue_speakers(texts, sessions, env=env)
        floor().release_session("gate")
        wait_until(lambda: holder_session() == "k0", what="k0 to hold the floor")
        time.sleep(1.0)  # mid-utterance
        procs[0].send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        results = finish(procs[1:], timeout_s=30)
        procs[0].wait(5)
    assert procs[0].returncode == -signal.SIGKILL
    for code, _, err in results:
        assert code == 0, err.decode()
    lines = [speak_json(out) for _, out, _ in results]
    assert [line["turn"]["session"] for line in lines] == sessions[1:]
    first_next = lines[0]["timestamps"]["first_audio"]
    assert first_next - killed_at < 2.0 < expiry_s  # the dead pid is noticed at once
    found = heard_intervals(recorder, references)
    assert all(score > MIN_SCORE for _, _, score in found), [round(s, 3) for _, _, s in found]
    heard = []
    for (start, end, _), line in zip(found, lines, strict=True):
        assert abs(start - line["timestamps"]["first_audio"]) < 0.15
        heard.append((start, end if end is not None else line["timestamps"]["finished"]))
    for before, after in zip(heard, heard[1:], strict=False):
        assert before[1] <= after[0] + 0.02  # one after the other, in arrival order
    # The killed speaker went quiet with its process: silence until the next one starts.
    times, rms = block_rms(recorder)
    between = rms[(times > killed_at + 0.2) & (times < heard[0][0] - 0.03)]
    assert between.size == 0 or between.max() < SOUND_RMS
    assert floor().status().holder is None and queue_sessions() == []
    status = run_vocal("control", "status", "--json", timeout=10)
    assert status.returncode == 0 and status.stdout.strip() == b"[]"


# -- control --------------------------------------------------------------------------------------
@pytest.mark.audio
@pytest.mark.usefixtures("pulse")
def test_control_commands_land_on_a_running_speak(tmp_path: Path) -> None:
    with MonitorRecorder() as recorder:
        proc = start_talker()
        endpoint = find_endpoint(load_settings().run_dir, pid=proc.pid)
        landed, windows = [], []
        for _ in range(2):
            reply = send_command(endpoint, "pause")
            assert reply["ok"] and reply["state"] == "paused" and reply["paused"] is True
            landed.append(reply["applied_at_s"] - reply["sent_at_s"])
            paused_at = reply["sent_at_s"]
            time.sleep(0.5)
            reply = send_command(endpoint, "resume")
            assert reply["ok"] and reply["paused"] is False and reply["state"] == "playing"
            landed.append(reply["applied_at_s"] - reply["sent_at_s"])
            windows.append((paused_at, reply["sent_at_s"]))
            time.sleep(0.6)
        reply = send_command(endpoint, "stop")
        landed.append(reply["applied_at_s"] - reply["sent_at_s"])
        stopped_at = reply["sent_at_s"]
        out, err = proc.communicate(timeout=10)
    assert proc.returncode == 0, err.decode()
    payload = speak_json(out)
    assert payload["turn"]["outcome"] == "stopped" and payload["stopped"] is True
    assert 0 < payload["spoken"] < payload["sentences"] or payload["sentences"] <= 2
    print(f"control on speak: send->applied median {statistics.median(landed) * 1000:.2f} ms, "
          f"max {max(landed) * 1000:.2f} ms")  # fmt: skip
    assert max(landed) < 0.100  # the bound
    times, rms = block_rms(recorder)
    for paused_at, resumed_at in windows:
        quiet = rms[(times > paused_at + 0.15) & (times < resumed_at)]
        assert quiet.size and quiet.max() < SOUND_RMS  # silent within 150 ms of pause
        back = times[(times > resumed_at) & (rms > SOUND_RMS)]
        assert back.size and back[0] - resumed_at < 0.5  # and speaking again after resume
    silent_at = silent_from(recorder, stopped_at)
    assert silent_at is not None and silent_at - stopped_at < 0.15
    assert floor().status().holder is None


@pytest.mark.audio
@pytest.mark.usefixtures("pulse")
def test_skip_forward_ends_the_speech_and_bump_exits_3(tmp_path: Path) -> None:
    with MonitorRecorder() as recorder:
        proc = start_talker()
        listing = run_vocal("control", "status").stdout.decode()
        assert f"pid {proc.pid} speak (talker)" in listing
        skip = run_vocal("control", "skip-forward", "--json")
        assert skip.returncode == 0 and json.loads(skip.stdout)["cmd"] == "skip_forward"
        skipped_at = time.monotonic()
        out, err = proc.communicate(timeout=10)
        assert proc.returncode == 0, err.decode()
        assert speak_json(out)["turn"]["outcome"] == "skipped"

        talker = start_talker(session="bumped")
        bumped_at = time.monotonic()
        bump = run_vocal("conch", "bump")
        out, err = talker.communicate(timeout=10)
    assert bump.returncode == 0
    assert talker.returncode == 3 and b"floor was taken" in err, err.decode()
    times, rms = block_rms(recorder)
    # skip-forward: quiet from shortly after the command (the CLI's own start-up included).
    between = rms[(times > skipped_at + 0.1) & (times < bumped_at - 2.0)]
    assert between.size == 0 or between.max() < SOUND_RMS
    silent_at = silent_from(recorder, bumped_at)
    assert silent_at is not None and silent_at - bumped_at < 0.5
    assert floor().status().holder is None


# -- history ---------------------------------------------------------------------------------------
@pytest.mark.audio
@pytest.mark.usefixtures("pulse")
def test_replay_plays_what_speak_said_without_speech_engines(tmp_path: Path) -> None:
    text = "Replay me later, please."
    result = run_vocal("speak", *ESPEAK, text, "--json")
    assert result.returncode == 0, result.stderr.decode()
    ids = speak_json(result.stdout)["turn"]["utterance_ids"]
    entries = History.from_settings(load_settings()).entries()
    assert [u.id for u in entries] == ids and entries[0].text == text
    assert entries[0].complete and entries[0].voice is None
    # The history holds exactly what was played (16-bit), at the engine's rate.
    kept = entries[0].audio()
    said = tmp_path / "said.wav"
    speak(text, SpeakOptions(engine="espeak-ng", output=said), load_settings(), report=None)
    reference = read_wav(said)
    assert kept.sample_rate == reference.sample_rate
    assert kept.mono_samples.shape == reference.mono_samples.shape
    assert np.max(np.abs(kept.mono_samples - reference.mono_samples)) < 2 / 32768
    # A new process replays it to the speaker, loading no synthesis or recognition.
    with MonitorRecorder() as recorder:
        loaded = imported_by("replay")
    assert not loaded & HEAVY_FOR_REPLAY
    heard_reference = trimmed(reference.resample(MONITOR_RATE).mono_samples)
    ((start, end, score),) = heard_intervals(recorder, [heard_reference])
    assert score > MIN_SCORE
    assert end is None or -0.01 < (end - start) - heard_reference.shape[0] / MONITOR_RATE < 0.2


def test_muted_speak_takes_no_floor_and_records_nothing() -> None:
    assert run_vocal("mute").returncode == 0
    assert run_vocal("conch", "wait", "--session", "other").returncode == 0
    # The floor is held by someone else: a muted speak must not wait for it.
    result = run_vocal("speak", *ESPEAK, "Nobody hears this.", timeout=10,
                       env={"VOCAL_CONCH_TIMEOUT": "30"})  # fmt: skip
    assert result.returncode == 0 and b"muted" in result.stderr
    assert queue_sessions() == [] and holder_session() == "other"
    assert History.from_settings(load_settings()).entries() == []


@pytest.mark.audio
@pytest.mark.usefixtures("pulse")
def test_output_file_no_conch_and_callback_mode(tmp_path: Path) -> None:
    assert run_vocal("conch", "wait", "--session", "other").returncode == 0
    to_file = run_vocal("speak", *ESPEAK, "Not now.", "-o", str(tmp_path / "x.wav"), timeout=20)
    assert to_file.returncode == 0  # a file is not the speaker: no floor, no socket, no history
    callback = run_vocal("speak", *ESPEAK, "Not now.", env={"VOCAL_CONCH_MODE": "callback"})
    assert callback.returncode == 3, callback.stderr.decode()
    assert History.from_settings(load_settings()).entries() == []
    anyway = run_vocal("speak", *ESPEAK, "Talking over you.", "--no-conch", "--json", timeout=20)
    assert anyway.returncode == 0, anyway.stderr.decode()
    assert speak_json(anyway.stdout)["turn"]["seq"] is None and holder_session() == "other"
    assert [u.text for u in History.from_settings(load_settings()).entries()] == [
        "Talking over you."
    ]
