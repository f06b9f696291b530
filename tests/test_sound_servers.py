"""Smoke test of the session's sound server (VOCAL_TEST_SOUND_SERVER, tests/harness/pulse.py):
speak, listen and one barge-in, on whichever server the session runs.

scripts/test runs the whole suite on PulseAudio, then this module once more on a private
PipeWire server (scripts/pipewire-up), so both servers are covered in every CI run. The first
test checks that `pactl info` names the server that was asked for: a misconfigured run (a
PULSE_SERVER from the outer environment, say) must not test the same server twice.

The barge-in runs last: its room (harness.room) moves the microphone to the room's output
for the rest of the module.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from harness.converse import LONG_REPLY, NEAR_WORDS, barge_in, quiet_after_person_s, words_in
from harness.converse import near_wav as write_near_wav
from harness.listen_audio import join, play, silence, trimmed
from harness.pulse import (
    SOUND_SERVER,
    MonitorCapture,
    PulseSinks,
    loudest_dbfs,
    server_option,
    sound_server,
)
from harness.room import running_room
from harness.runner import run_vocal, start_vocal

pytestmark = [
    pytest.mark.audio,
    pytest.mark.sound_server,
    pytest.mark.usefixtures("pulse", "shared_tts_cache"),
]

SPOKEN = "Hello there. The sound server plays what vocal says."
#: Said by espeak-ng into the speaker sink while `vocal listen` records its monitor.
HEARD = "Please open the file and read me the first line."
HEARD_WORDS = ("open", "file", "first", "line")
#: Speech at a normal level is far above this (hibari's reply: about -20 dBFS over 100 ms); a
#: sink that stayed silent, or played only noise from a broken stream, is far below.
MIN_LEVEL_DBFS = -40.0


@pytest.fixture(scope="module")
def room(pulse: PulseSinks):
    with running_room(pulse) as started:
        yield started


@pytest.fixture(scope="module")
def near_wav(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_near_wav(tmp_path_factory.mktemp("near"))


def test_the_session_runs_on_the_requested_server(record_testsuite_property) -> None:
    name = sound_server()
    record_testsuite_property("sound_server", name)  # in a JUnit XML report, where one is written
    assert server_option(name) == SOUND_SERVER, (
        f"VOCAL_TEST_SOUND_SERVER={SOUND_SERVER}, but `pactl info` names {name!r}"
    )


def test_speak_is_heard_on_the_speakers_monitor(pulse: PulseSinks, tmp_path: Path) -> None:
    with MonitorCapture(f"{pulse.speaker}.monitor", tmp_path / "heard.raw") as heard:
        result = run_vocal("speak", "--json", SPOKEN)
    assert result.returncode == 0, result.stderr.decode()
    report = json.loads(result.stdout)
    assert report["spoken"] == 2 and report["failed"] == 0, report
    samples = heard.samples()
    level = loudest_dbfs(samples)
    assert level > MIN_LEVEL_DBFS, f"{level:.1f} dBFS on {pulse.speaker}.monitor"
    # All of it, not a first fragment: the monitor held sound for most of the reply's length.
    loud = (abs(samples) > 10 ** (MIN_LEVEL_DBFS / 20)).nonzero()[0]
    heard_s = (loud[-1] - loud[0]) / heard.sample_rate
    assert heard_s > 0.7 * report["audio_s"], (heard_s, report["audio_s"])


def test_listen_hears_speech_played_into_the_sink() -> None:
    proc = start_vocal("listen", "--vad", "--json", "--no-turn-model")
    time.sleep(1.5)  # the microphone is open well within this (test_listen_stream.py)
    play(join(trimmed(HEARD), silence(0.1)))
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err.decode()
    result = json.loads(out)
    assert words_in(result["text"], HEARD_WORDS) == list(HEARD_WORDS), result["text"]
    assert result["end_reason"] == "silence", result


def test_near_end_speech_stops_the_reply(room, near_wav: Path) -> None:
    """tests/test_converse.py's barge-in (the same run, harness.converse), with its essentials
    asserted: the reply was cut and the person's words are in the transcript."""
    near_id, code, result, err = barge_in(room, near_wav)
    assert code == 0, err
    assert result["interrupted"] is True, result
    assert words_in(result["text"], (*NEAR_WORDS, "file")), result
    # Cut soon after the person began, on the room's clock (not by how much of the reply was
    # heard: under load the room itself may start the person late).
    quiet_s = quiet_after_person_s(room, near_id)
    assert quiet_s < 1.0, (quiet_s, result["timings"], result["counters"])
    heard = result["heard_reply"]
    assert heard and len(heard) < len(LONG_REPLY) and LONG_REPLY.startswith(heard), heard
