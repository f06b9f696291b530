"""Pieces of one message (issue 9): `vocal speak --quotes --message ID --piece N [--final]` run
as concurrent processes, in any order; what is checked is what reached the null sink.

Each piece is one short espeak-ng line (espeak is deterministic and fast on a loaded machine);
it is found in the recording of the speaker sink's monitor by cross-correlation with the same
line rendered to a file (tests/harness/heard.py's `rendered` and `heard_intervals`), so the
order, the count and the timing of what was heard are known without trusting the processes.
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
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

from harness.conch_audio import MonitorRecorder, wait_until
from harness.heard import (
    HEAD_S,
    MIN_SCORE,
    MONITOR_RATE,
    SOUND_RMS,
    block_rms,
    heard_intervals,
    locate,
    monitor,
    rendered,
)
from harness.imports import imported_by
from harness.runner import run_vocal, start_vocal
from vocal.config import load_settings
from vocal.errors import UsageError
from vocal.floor.pieces import MessageBoard, PieceOutcome, run_piece

ESPEAK = ("--engine", "espeak-ng")
#: A line not played at all correlates with the recording far below MIN_SCORE (measured
#: 0.1-0.35 for espeak lines that share no words).
NOT_HEARD_SCORE = 0.5
HEAVY = {"numpy", "hibari", "onnxruntime", "vocal.tts", "sounddevice", "faster_whisper"}


@pytest.fixture(autouse=True)
def no_strays() -> Iterator[None]:
    """A failed test must not leave piece processes talking into the next test's recording."""
    before = set(_children())
    yield
    for pid in set(_children()) - before:
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)


def _children() -> list[int]:
    try:
        text = Path(f"/proc/{os.getpid()}/task/{os.getpid()}/children").read_text()
    except OSError:
        return []
    return [int(pid) for pid in text.split()]


def piece_args(message: str, piece: int, text: str, *extra: str) -> tuple[str, ...]:
    return ("speak", *ESPEAK, "--quotes", "--json", "--message", message, "--piece", str(piece),
            *extra, text)  # fmt: skip


def outcome(proc: subprocess.Popen, timeout_s: float = 60) -> tuple[int, dict]:
    out, err = proc.communicate(timeout=timeout_s)
    lines = out.decode().strip().splitlines()
    assert lines, err.decode()
    return proc.returncode, json.loads(lines[-1])


def message_dir(message: str) -> Path:
    return load_settings().run_dir / "messages" / "default" / message


def cursor(message: str) -> dict:
    try:
        return json.loads((message_dir(message) / "cursor.json").read_text())
    except (FileNotFoundError, ValueError):
        return {}


def best_score(recorder: MonitorRecorder, reference: np.ndarray) -> float:
    recording, _ = monitor(recorder)
    return locate(recording, reference)[1]


# -- no audio ------------------------------------------------------------------------------------
def test_bad_message_ids_and_pieces_are_usage_errors() -> None:
    for bad in ("../x", ".hidden", "a/b", "x" * 200, ""):
        result = run_vocal(*piece_args(bad, 0, "> Hi."), timeout=20)
        assert result.returncode == 2, (bad, result.stderr)
        assert b"bad message id" in result.stderr
    negative = run_vocal(*piece_args("ok", -1, "> Hi."), timeout=20)
    assert negative.returncode == 2
    half = run_vocal("speak", *ESPEAK, "--piece", "0", "> Hi.", timeout=20)
    assert half.returncode == 2 and b"--message ID and --piece N" in half.stderr


def test_muted_pieces_return_at_once_without_loading_anything() -> None:
    assert run_vocal("mute").returncode == 0
    # The floor is held elsewhere and piece 0 never comes: a muted piece must not wait for
    # either, nor import numpy or an engine.
    assert run_vocal("conch", "wait", "--session", "other").returncode == 0
    started = time.monotonic()
    loaded = imported_by(*piece_args("m", 3, "> Nobody hears this.", "--final"))
    assert time.monotonic() - started < 10  # a process start, not the 3 s piece timeout or a floor
    assert "vocal.speaking.speech" in loaded and not loaded & HEAVY, loaded & HEAVY
    plain = imported_by("speak", *ESPEAK, "Nor this, without pieces.")
    assert "vocal.speaking.speech" in plain and not plain & HEAVY, plain & HEAVY
    result = run_vocal(*piece_args("m", 1, "> Nor this."), env={"VOCAL_PIECE_TIMEOUT": "30"})
    assert result.returncode == 0 and json.loads(result.stdout)["status"] == "muted"
    assert not message_dir("m").exists()  # nothing registered: the next reply starts clean
    assert run_vocal("volume", "0").returncode == 0 and run_vocal("unmute").returncode == 0
    quiet = run_vocal(*piece_args("m", 0, "> Volume zero."), timeout=20)
    assert quiet.returncode == 0 and json.loads(quiet.stdout)["status"] == "muted"
    assert b"volume is 0" in quiet.stderr


def test_the_board_reads_in_order_skips_a_missing_piece_and_scopes_sessions(tmp_path: Path) -> None:
    """The coordination alone, with threads standing in for processes and a callback that
    records what it is asked to read (the speaking is tested below on real audio)."""
    board = MessageBoard(tmp_path / "run", None)
    read: list[tuple[int, str, float]] = []

    def reader(piece: int, text: str) -> tuple[str, None]:
        read.append((piece, text, time.monotonic()))
        time.sleep(0.05)
        return ("read" if text else "empty"), None

    outcomes: dict[int, PieceOutcome] = {}

    def send(piece: int, text: str, final: bool = False) -> threading.Thread:
        def run() -> None:
            outcomes[piece] = run_piece(board, "m1", piece, text, final=final, read=reader,
                                        timeout_s=0.5, linger_s=0.1)  # fmt: skip

        thread = threading.Thread(target=run)
        thread.start()
        return thread

    started = time.monotonic()
    threads = [send(4, "four", final=True), send(3, ""), send(0, "zero")]
    time.sleep(0.1)
    threads.append(send(1, "one"))
    for thread in threads:
        thread.join(10)
    assert [(n, t) for n, t, _ in read] == [(0, "zero"), (1, "one"), (3, ""), (4, "four")]
    skipped_at = read[2][2]
    assert 0.5 <= skipped_at - read[1][2] < 1.5  # piece 2 was waited for, for the timeout
    assert {n: o.status for n, o in outcomes.items()} == {0: "read", 1: "read", 3: "empty",
                                                          4: "read"}  # fmt: skip
    assert sum(len(o.read) for o in outcomes.values()) == 4  # each read once, by one reader
    assert time.monotonic() - started < 5
    # The message is complete: its directory is gone, and piece 2 is late.
    assert not (board.root / "m1").exists()
    late = run_piece(board, "m1", 2, "two", final=False, read=reader, timeout_s=0.5)
    assert late.status == "late" and late.exit_code == 3 and len(read) == 4
    # Another session's messages neither supersede nor are superseded by this scope's.
    other = MessageBoard(tmp_path / "run", "agent-b")
    assert other.root != board.root
    done = run_piece(other, "m2", 0, "b", final=True, read=reader, timeout_s=0.5)
    assert done.status == "read" and board.latest() == "m1" and other.latest() == "m2"
    # A piece sent twice is a usage error.
    board.register("m3", 0, "x", False)
    with pytest.raises(UsageError):
        board.register("m3", 0, "x", False)


# -- real processes, real audio --------------------------------------------------------------------
@pytest.mark.audio
@pytest.mark.usefixtures("pulse")
def test_shuffled_pieces_are_read_in_order_once_each_and_a_missing_one_costs_the_timeout(
    tmp_path: Path,
) -> None:
    timeout_s = 3.0  # the default: room for the processes' start-up spread on a loaded machine
    env = {"VOCAL_PIECE_TIMEOUT": str(timeout_s)}
    lines = {0: "Alpha one.", 1: "Bravo two.", 3: "Not quoted, so not spoken.",
             4: "Delta four.", 5: "Echo five."}  # fmt: skip
    texts = {n: (t if n == 3 else f"> {t}") for n, t in lines.items()}
    spoken = [0, 1, 4, 5]
    references = {n: rendered(lines[n], tmp_path) for n in lines}
    order = list(texts)
    random.Random(9).shuffle(order)  # piece 2 is never sent (until after the message ended)
    if order[0] == 0:  # the point is that later pieces come first
        order.append(order.pop(0))
    with MonitorRecorder() as recorder:
        procs = {}
        for n in order:
            extra = ("--final",) if n == 5 else ()
            procs[n] = start_vocal(*piece_args("reply", n, texts[n], *extra), env=env)
            time.sleep(0.1)
        results = {n: outcome(proc) for n, proc in procs.items()}
    print("launch order:", order)
    for n, (code, payload) in results.items():
        assert code == 0, (n, payload)
        assert payload["status"] == ("empty" if n == 3 else "read"), (n, payload)
    readers = [(n, p["read_by_me"]) for n, (_, p) in results.items() if p["read_by_me"]]
    read = [entry["piece"] for _, by in readers for entry in by]
    assert sorted(read) == [0, 1, 3, 4, 5] and len(set(read)) == len(read)  # once each
    # What was heard: the spoken lines in index order, each once, nothing else.
    found = heard_intervals(recorder, [references[n] for n in spoken])
    print("head correlations:", [round(score, 3) for _, _, score in found])
    assert all(score > MIN_SCORE for _, _, score in found)
    heard = []
    for (start, end, _), n in zip(found, spoken, strict=True):
        length_s = references[n].shape[0] / MONITOR_RATE
        heard.append((start, end if end is not None else start + length_s))
    for before, after in zip(heard, heard[1:], strict=False):
        assert before[1] <= after[0] + 0.02, heard
    times, rms = block_rms(recorder)
    for t in times[rms > SOUND_RMS]:
        assert any(s - 0.1 <= t <= e + 0.1 for s, e in heard), (t, heard)  # onsets, fades
    assert best_score(recorder, references[3]) < NOT_HEARD_SCORE  # the unquoted piece
    # The missing piece 2 held the rest back by the timeout, and no more (generous slack for a
    # loaded machine: the wait is counted from the settling of piece 1).
    gap_s = heard[2][0] - heard[1][1]
    print("silence between pieces heard (s):",
          [round(b[0] - a[1], 3) for a, b in zip(heard, heard[1:], strict=False)])  # fmt: skip
    print(f"silence where piece 2 was missing: {gap_s:.2f} s (timeout {timeout_s} s)")
    assert timeout_s - 0.05 <= gap_s <= timeout_s + 1.5
    # The message is complete and cleaned up; piece 2 arriving now is answered "late".
    assert not message_dir("reply").exists()
    code, payload = outcome(start_vocal(*piece_args("reply", 2, "> Charlie three."), env=env))
    assert code == 3 and payload["status"] == "late"


@pytest.mark.audio
@pytest.mark.usefixtures("pulse")
def test_a_newer_message_stops_the_older_at_its_line_and_answers_its_late_pieces(
    tmp_path: Path,
) -> None:
    a_lines = ["Alpha one.",
               "This line is long enough to be cut in the middle by the newer message, "
               "which stops it before the quick brown fox reaches the riverbank at dusk.",
               "Charlie waits in vain.", "Delta never comes."]  # fmt: skip
    b_lines = ["Kilo is the news.", "Lima ends it."]
    a_refs = [rendered(t, tmp_path) for t in a_lines]
    b_refs = [rendered(t, tmp_path) for t in b_lines]
    with MonitorRecorder() as recorder:
        a_procs = [start_vocal(*piece_args("A", n, f"> {a_lines[n]}")) for n in range(3)]
        # Message A is on its long line 1 once piece 0 is settled; let it play a while.
        wait_until(lambda: "0" in cursor("A").get("results", {}), timeout_s=30,
                   what="piece 0 of A to be read")  # fmt: skip
        time.sleep(1.0)
        b_procs = [start_vocal(*piece_args("B", n, f"> {b_lines[n]}", *(("--final",) if n else ())))
                   for n in range(2)]  # fmt: skip

        # Closed as superseded, or already closed and tidied away by its last process.
        def a_superseded() -> bool:
            return cursor("A").get("closed") == "superseded" or not message_dir("A").exists()

        wait_until(a_superseded, timeout_s=30, what="A to be superseded")
        late = start_vocal(*piece_args("A", 3, f"> {a_lines[3]}", "--final"))
        a_results = [outcome(p) for p in [*a_procs, late]]
        b_results = [outcome(p) for p in b_procs]
    assert a_results[0][0] == 0 and a_results[0][1]["status"] == "read", a_results[0]
    for n in (1, 2, 3):
        code, payload = a_results[n]
        assert code == 3 and payload["status"] == "superseded", (n, payload)
        assert payload["superseded_by"] == "B"
    assert a_results[3][1]["finished_at_s"] - a_results[3][1]["arrived_at_s"] < 0.5  # at once
    for code, payload in b_results:
        assert code == 0 and payload["status"] == "read", payload
    b_speech = [s for _, p in b_results for s in p["speech"]]
    print("B's reader:", [(s["first_audio_ms"], s["engine_ready_ms"], s["turn"]["waited_s"])
                          for s in b_speech])  # fmt: skip
    b_arrived = min(p["arrived_at_s"] for _, p in b_results)
    # Heard: A's line 0 whole, the head of line 1 and not its tail, none of A's lines 2 and 3,
    # then B whole, in order.
    (a0,), b_found = heard_intervals(recorder, a_refs[:1]), heard_intervals(recorder, b_refs)
    recording, t0 = monitor(recorder)
    a1_at, a1_score = locate(recording, a_refs[1][: round(HEAD_S * MONITOR_RATE)])
    a1_head = (t0 + a1_at / MONITOR_RATE, None, a1_score)
    assert a0[2] > MIN_SCORE and a1_head[2] > MIN_SCORE
    tail = a_refs[1][-round(0.6 * MONITOR_RATE) :]
    assert best_score(recorder, tail) < NOT_HEARD_SCORE  # line 1 was cut
    assert best_score(recorder, a_refs[2]) < NOT_HEARD_SCORE
    assert best_score(recorder, a_refs[3]) < NOT_HEARD_SCORE
    assert all(score > MIN_SCORE for _, _, score in b_found)
    assert a0[0] < a1_head[0] < b_arrived < b_found[0][0] < b_found[1][0]
    print(f"B arrived {b_arrived - a1_head[0]:.2f} s into A's line 1; B heard "
          f"{b_found[0][0] - b_arrived:.2f} s after it arrived")  # fmt: skip
    assert b_found[0][0] - b_arrived < 6.0  # A let go of the floor (B loads its engine meanwhile)
    # A fell silent when B arrived: nothing loud between then (+ a poll, the device buffer and
    # slack for a loaded machine) and B's first line.
    times, rms = block_rms(recorder)
    between = rms[(times > b_arrived + 0.5) & (times < b_found[0][0] - 0.03)]
    assert between.size == 0 or between.max() < SOUND_RMS
    assert not message_dir("A").exists() and not message_dir("B").exists()
