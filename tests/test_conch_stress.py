"""Many real `vocal play` processes on real streams take turns through the conch (issue 6).

Each process plays its own tone; the speaker's monitor is recorded in this process, so what is
checked is what was actually heard: the tones never sound at once, they come in the order the
processes arrived, and everyone finishes, also when a holder is SIGKILLed, frozen or bumped.
Arrival order is made certain by holding the floor with a gate session, starting the processes
one by one until each is seen in the queue, then releasing the gate.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest
from conch_audio import MonitorRecorder, timeline, tone_wav, wait_until
from runner import run_vocal, start_vocal

from vocal.config import load_settings
from vocal.floor.conch import Conch

pytestmark = [pytest.mark.audio, pytest.mark.usefixtures("pulse")]

FREQUENCIES = [500, 700, 900, 1100, 1300, 1500, 1700, 1900]


def floor() -> Conch:
    return Conch.from_settings(load_settings())


def queue_sessions() -> list[str]:
    return [w.session for w in floor().status().waiters]


def holder_session() -> str | None:
    holder = floor().status().holder
    return holder.session if holder else None


def queue_behind_gate(files: list[Path], sessions: list[str], *extra: str,
                      env: dict[str, str] | None = None) -> list[subprocess.Popen]:  # fmt: skip
    """Start one `vocal play --json` per file, each after the previous one is queued."""
    procs = []
    for i, (path, session) in enumerate(zip(files, sessions, strict=False)):
        procs.append(start_vocal("play", str(path), "--session", session, "--json", *extra,
                                 env=env))  # fmt: skip
        wait_until(lambda i=i: len(queue_sessions()) == i + 1, what=f"{session} to queue")
    assert queue_sessions() == sessions
    return procs


def finish(procs: list[subprocess.Popen], timeout_s: float = 60) -> list[tuple[int, bytes, bytes]]:
    results = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            raise AssertionError("a vocal play process hung") from None
        results.append((proc.returncode, out, err))
    return results


def test_eight_processes_take_turns_without_overlap_in_fifo_order(tmp_path: Path) -> None:
    files = [tone_wav(tmp_path / f"{f}.wav", f, 0.5) for f in FREQUENCIES]
    sessions = [f"s{i}" for i in range(len(files))]
    assert run_vocal("conch", "wait", "--session", "gate").returncode == 0
    with MonitorRecorder() as recorder:
        procs = queue_behind_gate(files, sessions)
        assert floor().release_session("gate") is not None
        results = finish(procs)
    for code, _, err in results:
        assert code == 0, err.decode()
    lines = [timeline(out) for _, out, _ in results]

    # FIFO: sequence numbers and the floor both follow arrival (= launch) order.
    seqs = [line["seq"] for line in lines]
    assert seqs == sorted(seqs)
    starts = [line["started_at_s"] for line in lines]
    assert starts == sorted(starts)
    # The processes' own clocks: each started after the previous one had finished playing.
    for before, after in zip(lines, lines[1:], strict=False):
        assert before["ended_at_s"] <= after["started_at_s"]

    # What was heard: each tone whole, one after the other in launch order, never two at once.
    spans = recorder.tone_spans(FREQUENCIES)
    assert sorted(spans) == FREQUENCIES
    for frequency, (start, end, audible) in spans.items():
        assert audible > 0.4 and end - start < 1.0, (frequency, spans[frequency])
    heard = [spans[f][:2] for f in FREQUENCIES]
    assert recorder.overlap_blocks(FREQUENCIES) == 0
    gaps = [b[0] - a[1] for a, b in zip(heard, heard[1:], strict=False)]
    print("silence between speakers at the monitor (s):", [round(float(g), 3) for g in gaps])
    assert min(gaps) >= 0.0 and max(gaps) < 1.0, gaps
    assert floor().status().holder is None


def test_sigkilled_holder_does_not_block_the_others(tmp_path: Path) -> None:
    expiry_s = 8.0
    env = {"VOCAL_CONCH_LOCK_EXPIRY": str(expiry_s)}
    freqs = FREQUENCIES  # the same eight, the first one killed mid-utterance
    files = [tone_wav(tmp_path / "long.wav", freqs[0], 5.0)]
    files += [tone_wav(tmp_path / f"{f}.wav", f, 0.4) for f in freqs[1:]]
    sessions = [f"k{i}" for i in range(len(files))]
    assert run_vocal("conch", "wait", "--session", "gate").returncode == 0
    with MonitorRecorder() as recorder:
        procs = queue_behind_gate(files, sessions, env=env)
        floor().release_session("gate")
        wait_until(lambda: holder_session() == "k0", what="k0 to hold the floor")
        time.sleep(0.8)  # mid-utterance
        procs[0].send_signal(signal.SIGKILL)
        killed_at = time.monotonic()
        results = finish(procs[1:], timeout_s=30)
        procs[0].wait(5)
    assert procs[0].returncode == -signal.SIGKILL
    for code, _, err in results:
        assert code == 0, err.decode()
    lines = [timeline(out) for _, out, _ in results]
    assert [line["session"] for line in lines] == sessions[1:]
    # The next speaker starts long before the expiry: the dead pid is noticed at once.
    first_next = lines[0]["started_at_s"]
    assert first_next - killed_at < expiry_s
    assert first_next - killed_at < 2.0
    spans = recorder.tone_spans(freqs)
    assert spans[freqs[0]][1] - killed_at < 0.3  # the killed tone stopped with it
    heard = [spans[f] for f in freqs[1:]]
    assert all(audible > 0.3 for _, _, audible in heard)
    for before, after in zip(heard, heard[1:], strict=False):
        assert before[1] <= after[0]  # one after the other, in FIFO order
    assert recorder.overlap_blocks(freqs) == 0
    # Nothing is left behind: the floor is free, the dead socket does not confuse clients.
    assert floor().status().holder is None and queue_sessions() == []
    status = run_vocal("control", "status", "--json", timeout=10)
    assert status.returncode == 0 and status.stdout.strip() == b"[]"


def test_frozen_holder_is_passed_over_at_the_expiry_and_stays_silent(tmp_path: Path) -> None:
    expiry_s = 1.5
    env = {"VOCAL_CONCH_LOCK_EXPIRY": str(expiry_s)}
    freqs = FREQUENCIES[:2]
    files = [tone_wav(tmp_path / "a.wav", freqs[0], 4.0),
             tone_wav(tmp_path / "b.wav", freqs[1], 1.5)]  # fmt: skip
    assert run_vocal("conch", "wait", "--session", "gate").returncode == 0
    with MonitorRecorder() as recorder:
        procs = queue_behind_gate(files, ["frozen", "next"], env=env)
        floor().release_session("gate")
        wait_until(lambda: holder_session() == "frozen")
        time.sleep(0.5)
        os.kill(procs[0].pid, signal.SIGSTOP)  # alive by pid; only the expiry can free the floor
        stopped_at = time.monotonic()
        wait_until(lambda: holder_session() == "next", timeout_s=expiry_s + 5)
        handed_over = time.monotonic() - stopped_at
        time.sleep(0.5)  # "next" is playing now
        os.kill(procs[0].pid, signal.SIGCONT)
        results = finish(procs, timeout_s=30)
    assert handed_over < expiry_s + 1.0
    frozen, after = results
    assert frozen[0] == 3, frozen[2].decode()  # it learnt it lost the floor
    assert b"floor was taken" in frozen[2]
    assert after[0] == 0, after[2].decode()
    assert recorder.overlap_blocks(freqs) == 0


def test_give_reorders_the_queue_across_processes(tmp_path: Path) -> None:
    freqs = FREQUENCIES[:3]
    files = [tone_wav(tmp_path / f"{f}.wav", f, 0.4) for f in freqs]
    assert run_vocal("conch", "wait", "--session", "gate").returncode == 0
    with MonitorRecorder() as recorder:
        procs = queue_behind_gate(files, ["a", "b", "c"])
        assert run_vocal("conch", "give", "c").returncode == 0
        assert queue_sessions() == ["c", "a", "b"]
        assert run_vocal("conch", "release", "--session", "gate").returncode == 0
        results = finish(procs)
    assert all(code == 0 for code, _, _ in results)
    lines = {timeline(out)["session"]: timeline(out) for _, out, _ in results}
    assert lines["c"]["started_at_s"] < lines["a"]["started_at_s"] < lines["b"]["started_at_s"]
    spans = recorder.tone_spans(freqs)
    heard = {s: spans[f][0] for s, f in zip("abc", freqs, strict=False)}
    assert heard["c"] < heard["a"] < heard["b"]
    assert recorder.overlap_blocks(freqs) == 0


def test_bump_stops_the_speaker_and_the_next_goes(tmp_path: Path) -> None:
    freqs = FREQUENCIES[:2]
    long = tone_wav(tmp_path / "long.wav", freqs[0], 5.0)
    short = tone_wav(tmp_path / "short.wav", freqs[1], 0.4)
    with MonitorRecorder() as recorder:
        talker = start_vocal("play", str(long), "--session", "talker", "--agent", "chatty")
        wait_until(lambda: holder_session() == "talker")
        waiter = start_vocal("play", str(short), "--session", "waiter", "--json")
        wait_until(lambda: queue_sessions() == ["waiter"])
        time.sleep(0.3)
        bumped_at = time.monotonic()
        bump = run_vocal("conch", "bump")
        talker_out = finish([talker, waiter], timeout_s=30)
    assert bump.returncode == 0 and b"bumped chatty" in bump.stderr
    (code, _, err), (next_code, next_out, next_err) = talker_out
    assert code == 3 and b"floor was taken" in err, err.decode()
    assert next_code == 0, next_err.decode()
    silent_at = recorder.silent_after(bumped_at, freqs[0])
    assert silent_at is not None and silent_at - bumped_at < 0.5
    assert timeline(next_out)["started_at_s"] > bumped_at
    spans = recorder.tone_spans(freqs)
    gap_ms = 1000 * (spans[freqs[1]][0] - spans[freqs[0]][1])
    print(
        f"bump: talker silent {1000 * (spans[freqs[0]][1] - bumped_at):.0f} ms after the "
        f"command started, next speaker after {gap_ms:.0f} ms"
    )
    assert spans[freqs[1]][2] > 0.3
    assert recorder.overlap_blocks(freqs) == 0


# -- corrupt state and kills (issue 17) -----------------------------------------------------------
def test_two_plays_of_a_session_holding_the_floor_do_not_overlap(tmp_path: Path) -> None:
    freqs = FREQUENCIES[:2]
    files = [tone_wav(tmp_path / f"{f}.wav", f, 1.0) for f in freqs]
    assert run_vocal("conch", "wait", "--session", "S").returncode == 0
    with MonitorRecorder() as recorder:
        procs = [start_vocal("play", str(path), "--session", "S", "--json") for path in files]
        results = finish(procs, timeout_s=30)
    for code, _, err in results:
        assert code == 0, err.decode()
    spans = recorder.tone_spans(freqs)
    assert all(spans[f][2] > 0.7 for f in freqs), spans  # each heard whole
    assert recorder.overlap_blocks(freqs) == 0
    assert holder_session() == "S"  # the session keeps its floor


#: What the corrupter writes over state files: garbage of every kind the issue found.
GARBAGE = [b"[" * 50_000, b'{"expires_at": "soon"}', b"\xff\xfe", b'{"seq": 1e999}', b"null",
           b'{"token": "t", "seq": 1, "session": "x", "heartbeat_at": NaN}']  # fmt: skip


def corrupt_one(home: Path, rng: random.Random) -> None:
    """Write garbage over one state file of the conch, history or run directory (never over
    the configuration: that must survive untouched)."""
    candidates = [home / "conch" / "holder.json", home / "conch" / "grant.json",
                  home / "conch" / "lock", home / "history" / "seq"]  # fmt: skip
    for sub in ("conch/queue", "history", "run"):
        with contextlib.suppress(OSError):
            candidates += [p for p in (home / sub).iterdir() if p.suffix == ".json"]
    target = rng.choice(candidates)
    with contextlib.suppress(OSError):
        target.write_bytes(rng.choice(GARBAGE))


def test_eight_agents_survive_corruption_and_kills(tmp_path: Path, vocal_home: Path) -> None:
    """8 agents speak while state files are garbled and processes SIGKILLed at random: never
    two at once, the configuration kept, and the floor free again within its expiry."""
    rng = random.Random(17)
    expiry_s = 3.0
    env = {"VOCAL_CONCH_LOCK_EXPIRY": str(expiry_s)}
    files = [tone_wav(tmp_path / f"{f}.wav", f, 0.7) for f in FREQUENCIES]
    assert run_vocal("volume", "80").returncode == 0
    config = vocal_home / "config.toml"
    config.write_text("history_size = 4  # kept\n")
    kept = {config: config.read_bytes(), vocal_home / "gates.json":
            (vocal_home / "gates.json").read_bytes()}  # fmt: skip
    stop = threading.Event()
    killed: list[int] = []

    def chaos(procs: list[subprocess.Popen]) -> None:
        while not stop.wait(rng.uniform(0.1, 0.3)):
            corrupt_one(vocal_home, rng)
            running = [p for p in procs if p.poll() is None]
            if running and len(killed) < 3 and rng.random() < 0.15:
                victim = rng.choice(running)
                victim.send_signal(signal.SIGKILL)
                killed.append(victim.pid)

    with MonitorRecorder() as recorder:
        procs = [start_vocal("play", str(path), "--session", f"a{i}", "--json", env=env)
                 for i, path in enumerate(files)]  # fmt: skip
        corrupter = threading.Thread(target=chaos, args=(procs,), daemon=True)
        corrupter.start()
        try:
            results = finish(procs, timeout_s=60)
        finally:
            stop.set()
            corrupter.join(5)
    # never two at once, whatever happened to the records
    assert recorder.overlap_blocks(FREQUENCIES) == 0
    for proc, (code, _, err) in zip(procs, results, strict=True):
        text = err.decode()
        assert "Traceback" not in text and "unexpected" not in text, text
        expected = (-signal.SIGKILL,) if proc.pid in killed else (0, 3)
        assert code in expected, (code, text)
        if code == 3:  # a speaker whose record was garbled stops (and says so); a waiter
            assert "floor was taken" in text, text  # whose record was garbled keeps its place
    outcomes = [(code, err.decode().strip().splitlines()[-1:]) for code, _, err in results]
    print("killed:", len(killed), "outcomes:", outcomes)
    assert any(code == 0 for code, _, _ in results), outcomes
    # the configuration is untouched
    for path, content in kept.items():
        assert path.read_bytes() == content, path
    # the floor recovers within its expiry, and the state reads clean
    started = time.monotonic()
    granted = run_vocal("conch", "wait", "--session", "after", "--timeout", str(expiry_s + 2),
                        env=env)  # fmt: skip
    assert granted.returncode == 0, granted.stderr.decode()
    assert time.monotonic() - started < expiry_s + 2
    status = run_vocal("conch", "status", "--json")
    assert status.returncode == 0 and b"Traceback" not in status.stderr
    assert json.loads(status.stdout)["holder"]["session"] == "after"
