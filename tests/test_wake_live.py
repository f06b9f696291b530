"""`vocal wake` on real PortAudio streams (issue 39): a phrase and a request played into this
session's null sink while `vocal wake` records the sink's monitor in another process, with the
real models.

What is asserted: the request after the phrase is printed (word error rate at most MAX_WER),
by the detector the phrase calls for; `vocal wake` exits within EXIT_SLACK_S of the first pause
it may end on after the request (the 700 ms silence window); vocal's own voice saying the phrase
while it holds the floor does not wake it; and --timeout ends the wait with exit 4. And
`vocal converse --wake`: nobody answers its reply, and the phrase with the request said a few
seconds later is its answer.
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest

from harness.listen_audio import play
from harness.runner import run_vocal, start_vocal
from harness.wake_audio import WakeVoices, wake_scene
from harness.words import word_error_rate

pytestmark = [pytest.mark.audio, pytest.mark.usefixtures("pulse")]
pytest.importorskip("pymicro_wakeword", reason="vocal[wake] (pymicro-wakeword) is not installed")

REQUEST = "run the tests"
#: Through a null sink to tiny.en: one word of a short request may come out wrong.
MAX_WER = 0.34
#: The microphone is open and the models loaded well within this after the process starts.
READY_S = 3.0
#: How late after the request's last sound `vocal wake` may exit: the 700 ms silence window,
#: the transcription (tiny.en, ~0.3 s here) and slack for a loaded 2-core machine.
EXIT_SLACK_S = 2.5


@pytest.fixture(scope="module")
def voices(tts_cache: Path) -> WakeVoices:
    return WakeVoices(tts_cache)


def wake_result(proc) -> tuple[dict, float]:
    """`vocal wake --json`'s result, and when it exited (monotonic)."""
    out, err = proc.communicate(timeout=90)
    exited = time.monotonic()
    assert proc.returncode == 0, err.decode()
    return json.loads(out), exited


class TestWakeOnTheNullSink:
    @pytest.mark.parametrize("voice", ["hibari", "piper-joe"])
    def test_the_request_after_the_bundled_phrase(self, voices: WakeVoices, voice: str) -> None:
        scene = wake_scene(0.3, voices.say(voice, f"Hey Jarvis, {REQUEST}."), 0.3)
        proc = start_vocal("wake", "--json", "--no-cue", "--timeout", "30")
        time.sleep(READY_S)
        played_end = play(scene.audio)
        result, exited = wake_result(proc)
        assert result["detector"] == "micro" and result["woke"]
        assert word_error_rate(REQUEST, result["text"]) <= MAX_WER, result
        request_end = played_end - (scene.samples.shape[0] / 16_000 - scene.spans[0][1])
        assert 0.7 <= exited - request_end <= 0.7 + EXIT_SLACK_S, exited - request_end

    def test_the_phrase_alone_prints_an_empty_line(self, voices: WakeVoices) -> None:
        scene = wake_scene(0.3, voices.say("hibari", "Hey Jarvis."), 0.3)
        proc = start_vocal("wake", "--no-cue", "--timeout", "30")
        time.sleep(READY_S)
        play(scene.audio)
        out, err = proc.communicate(timeout=90)
        assert proc.returncode == 0, err.decode()
        assert out == b"\n"

    def test_a_custom_phrase(self, voices: WakeVoices) -> None:
        said = voices.say("hibari", "Hey computer, open the config file.")
        proc = start_vocal("wake", "hey computer", "--json", "--no-cue", "--timeout", "30")
        time.sleep(READY_S)
        play(wake_scene(0.3, said, 0.3).audio)
        result, _ = wake_result(proc)
        assert result["detector"] == "whisper"
        assert word_error_rate("open the config file", result["text"]) <= MAX_WER, result

    def test_the_request_is_heard_over_the_cue(self, voices: WakeVoices) -> None:
        """The Wake cue plays into the same sink as the request (a loudspeaker beside the
        microphone): the request is still heard."""
        scene = wake_scene(0.3, voices.say("piper-joe", f"Hey Jarvis, {REQUEST}."), 0.3)
        proc = start_vocal("wake", "--json", "--timeout", "30")
        time.sleep(READY_S)
        play(scene.audio)
        result, _ = wake_result(proc)
        assert word_error_rate(REQUEST, result["text"]) <= MAX_WER, result

    def test_not_woken_by_vocal_saying_the_phrase(self) -> None:
        proc = start_vocal("wake", "--json", "--no-cue", "--timeout", "10")
        time.sleep(READY_S)
        spoken = run_vocal(
            "speak",
            "Hey Jarvis, run the tests.",
            "--engine",
            "piper",
            "--voice",
            "en_US-joe-medium",
        )
        assert spoken.returncode == 0, spoken.stderr.decode()
        out, err = proc.communicate(timeout=90)
        assert proc.returncode == 4, err.decode()
        result = json.loads(out)
        assert not result["woke"] and result["ignored"], result  # heard, and ignored
        assert all("floor" in e["reason"] or "running" in e["reason"] for e in result["ignored"])

    def test_timeout_exits_4(self) -> None:
        started = time.monotonic()
        proc = start_vocal("wake", "--timeout", "2")
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 4, err.decode()
        assert out == b"" and b"was not heard in 2 s" in err
        assert time.monotonic() - started < 2 + 10  # the stream's 2 s, and start-up


class TestConverseWake:
    def test_the_answer_after_the_phrase_when_nobody_answered_the_reply(
        self, voices: WakeVoices
    ) -> None:
        """`vocal converse --wake`: nobody answers "Anything else?" within the 2 s no-speech
        timeout; after the reply and 3 s of silence "hey jarvis, run the tests" is said, and
        "run the tests" is the answer."""
        scene = wake_scene(0.3, voices.say("hibari", f"Hey Jarvis, {REQUEST}."), 0.3)
        proc = start_vocal(
            "converse", "--wake", "--no-speech-timeout", "2", "--json", "Anything else?"
        )
        lines: list[bytes] = []

        def read_stderr() -> None:
            for line in proc.stderr:
                lines.append(line)

        reader = threading.Thread(target=read_stderr, daemon=True)
        reader.start()
        # Printed once the turn has ended (the reply, then 2 s heard with nobody speaking)
        # and the microphone is open for the phrase.
        deadline = time.monotonic() + 60
        while not any(b"nobody spoke: listening for 'hey jarvis'" in line for line in lines):
            assert proc.poll() is None, b"".join(lines).decode()
            assert time.monotonic() < deadline, b"".join(lines).decode()
            time.sleep(0.05)
        time.sleep(1.0)  # 3 s of silence after the reply, and the detector loaded
        play(scene.audio)
        out = proc.stdout.read()
        proc.wait(timeout=90)
        reader.join(5)
        assert proc.returncode == 0, b"".join(lines).decode()
        result = json.loads(out)
        woke = result["woke"]
        assert woke["detector"] == "micro" and woke["phrase"] == "hey jarvis", woke
        assert woke["score"] > 0.9 and woke["waited_s"] > 1.0 and woke["woke_at_s"] > 3.0
        assert result["speech_heard"] and result["reply"] == "Anything else?"
        # The answer's words ("run the test" once under load), as the other tests score them.
        assert word_error_rate(REQUEST, result["text"]) <= MAX_WER, result["text"]
