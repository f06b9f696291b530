"""`vocal listen` on real PortAudio streams: speech played into this session's null sink while
`vocal listen` records the sink's monitor in another process.

What is asserted: the recording ends on its own shortly after the speech ends (the silence
window, 700 ms, plus at most half a second of device and scheduling slack), and the transcript
has the spoken words (word error rate at most 0.15). Times compare `time.monotonic()` in this
process with the `clock` instants `vocal listen --json` reports: one clock for all processes on
Linux.
"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
import time

import pytest

from harness.listen_audio import join, play, silence, trimmed
from harness.runner import start_vocal
from harness.words import word_error_rate

pytestmark = [pytest.mark.audio, pytest.mark.usefixtures("pulse")]

SENTENCE = "Please open the file and read me the first line."
#: espeak-ng through a null sink to tiny.en: word for word in practice; 0.15 leaves room for one
#: word in a sentence of seven to come out wrong.
MAX_WER = 0.15
#: How late after the speech the recording may end: the 700 ms window plus slack for the
#: device's buffers and a loaded 2-core machine.
END_SLACK_S = 0.5


def test_listen_ends_on_its_own_after_the_speech() -> None:
    """The silence window, live (the turn model on real speech: test_turns_corpus.py)."""
    speech = trimmed(SENTENCE)
    proc = start_vocal("listen", "--vad", "--json", "--no-turn-model")
    time.sleep(1.5)  # the microphone is open well within this (benchmarks/listen measures it)
    speech_end = play(join(speech, silence(0.1)))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()
    result = json.loads(out)
    assert word_error_rate(SENTENCE, result["text"]) <= MAX_WER, result["text"]
    assert result["end_reason"] == "silence"
    ended_after_s = result["clock"]["recorded"] - speech_end
    assert 0.7 - 0.15 <= ended_after_s <= 0.7 + END_SLACK_S, ended_after_s
    # The recording's own view: 700 ms of silence after the last speech chunk.
    assert result["timings"]["endpoint_s"] == pytest.approx(0.7, abs=0.15)
    assert result["overflows"] == 0


def test_ctrl_c_ends_the_recording_and_still_transcribes() -> None:
    # A whole sentence, not three words: one word heard differently ("files") is within the WER.
    first = trimmed(SENTENCE)
    # The window held open (no turn model, 5 s) so that only Ctrl-C can end the recording.
    proc = start_vocal("listen", "--vad", "--json", "--no-turn-model", "--silence-ms", "5000")
    time.sleep(1.5)
    play(join(first, silence(0.3)))
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()
    result = json.loads(out)
    assert result["end_reason"] == "requested"
    assert word_error_rate(SENTENCE, result["text"]) <= MAX_WER, result["text"]


def test_ctrl_c_before_anyone_spoke_exits_130() -> None:
    proc = start_vocal("listen")
    time.sleep(1.5)
    proc.send_signal(signal.SIGINT)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err.decode()
    assert out == b""
    assert err.decode().strip().splitlines() == ["vocal: error: stopped before anyone spoke"]


def test_nobody_speaking_exits_4_after_the_timeout() -> None:
    started = time.monotonic()
    proc = start_vocal("listen", "--no-speech-timeout", "1.5")
    out, err = proc.communicate(timeout=60)
    elapsed = time.monotonic() - started
    assert proc.returncode == 4, err.decode()
    assert out == b""
    assert err.decode().strip().splitlines()[-1].startswith("vocal: error: no speech heard")
    assert 1.5 <= elapsed < 1.5 + 5.0


def test_fixed_window_records_its_seconds() -> None:
    proc = start_vocal("listen", "--no-vad", "--seconds", "3", "--json")
    time.sleep(1.0)
    play(trimmed("Open the file."))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()
    result = json.loads(out)
    assert result["end_reason"] == "fixed_window"
    assert result["durations"]["recording_s"] == pytest.approx(3.0, abs=0.05)
    assert word_error_rate("Open the file.", result["text"]) <= MAX_WER, result["text"]


def test_level_meter_on_a_terminal_only() -> None:
    """stderr on a pseudo-terminal: the meter redraws one line; stdout stays clean."""
    main, side = os.openpty()
    try:
        proc = subprocess.Popen(
            [sys.executable, "-m", "vocal", "listen", "--no-speech-timeout", "1"],
            stdout=subprocess.PIPE,
            stderr=side,
            env=dict(os.environ),
        )
        os.close(side)
        chunks = []
        while True:
            ready, _, _ = select.select([main], [], [], 30)
            if not ready:
                break
            try:
                data = os.read(main, 4096)
            except OSError:  # the child closed the terminal
                break
            if not data:
                break
            chunks.append(data)
        proc.wait(30)
    finally:
        os.close(main)
    shown = b"".join(chunks).decode(errors="replace")
    assert proc.returncode == 4, shown[-2000:]
    assert "dBFS" in shown and "listening" in shown and "\r" in shown
    assert "\x1b[K" in shown, "the meter line is cleared before the error"
    assert proc.stdout.read() == b""
