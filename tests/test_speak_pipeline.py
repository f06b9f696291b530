"""The speaking pipeline on real PortAudio streams into this session's null sink, recorded back
from the sink's monitor: what is heard is what was synthesized, sentences stream without gaps,
and stop lands within 100 ms."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pytest

from harness.loopback import matched_fraction
from harness.speak_audio import Recorder, align, transcribe, wait_until
from harness.words import word_error_rate
from vocal.audio.wav import resample
from vocal.errors import EngineError
from vocal.speaking.check import check_speech
from vocal.speaking.output import open_speech_output
from vocal.speaking.speech import Speech
from vocal.tts import TtsEngine, load_tts

pytestmark = [pytest.mark.audio, pytest.mark.usefixtures("pulse")]

THREE = (
    "The first sentence is about the garden behind the house. "
    "The second one talks about the weather in the mountains. "
    "And the third sentence closes this short story."
)


@pytest.fixture(scope="module")
def hibari(tmp_path_factory: pytest.TempPathFactory) -> TtsEngine:
    cache = tmp_path_factory.mktemp("tts-cache")
    engine = load_tts("hibari", cache_dir=cache)
    engine.close()  # fast-start caches built once
    engine.synthesize("Warm up.")
    return engine


def speak(engine: TtsEngine, text: str, **options) -> tuple[Speech, object]:
    output = open_speech_output(engine.sample_rate)
    speech = Speech(engine, [text], keep_audio=True, **options)
    speech.start(output)
    return speech, output


def test_recording_from_the_monitor_matches_the_synthesized_audio(hibari: TtsEngine) -> None:
    recorder = Recorder().start()
    time.sleep(0.2)
    speech, output = speak(hibari, "Please open the window in the kitchen. Then close the door.")
    result = speech.wait(30)
    time.sleep(0.3)
    recorder.stop()
    output.close()
    assert [s.played for s in result.sentences] == [True, True]
    # What the Player sent is exactly what was synthesized, at the recorded boundaries.
    for record in result.sentences:
        sent = output.reference.read(record.start_frame, record.start_frame + record.frames)
        np.testing.assert_array_equal(sent, speech.audio[record.index])
    # What the monitor recorded is that audio (PulseAudio resampled it to the sink's 16 kHz).
    first, last = result.sentences[0], result.sentences[-1]
    played = output.reference.read(first.start_frame, last.start_frame + last.frames)
    expected = resample(played, output.sample_rate, 16_000)
    recorded = recorder.samples()
    lag, _ = align(recorded, expected, max_lag=recorded.shape[0] - expected.shape[0])
    # Window by window, so an underrun on a loaded machine (a few ms of shift) costs only the
    # windows it touches; 0.9 allows PulseAudio's resampler against ours.
    matched = matched_fraction(recorded, expected, threshold=0.9)
    assert matched > 0.85, f"only {matched:.0%} of the synthesized audio is in the recording"
    heard = transcribe(recorded[lag : lag + expected.shape[0]], 16_000)
    assert (
        word_error_rate("Please open the window in the kitchen. Then close the door.", heard)
        <= 0.25
    )


def test_sentences_stream_overlapping_synthesis_and_without_gaps(hibari: TtsEngine) -> None:
    speech, output = speak(hibari, THREE)
    result = speech.wait(60)
    output.close()
    records = result.sentences
    assert len(records) == 3 and all(r.played for r in records)
    rate = result.sample_rate
    first, second = records[0], records[1]
    # The second sentence was synthesized while the first played: the intervals overlap.
    assert second.synth_started_at_s < first.started_at_s + first.frames / rate
    assert second.synth_done_at_s > first.started_at_s
    for now, following in zip(records, records[1:], strict=False):
        # Every sentence was ready before the one before it had finished playing.
        assert following.synth_done_at_s < now.started_at_s + now.frames / rate
    assert max(result.gaps_ms()) <= 50, result.gaps_ms()
    assert result.first_audio_ms is not None and result.first_audio_ms < 2000


class SlowEngine(TtsEngine):
    """espeak-ng made slow enough that synthesis visibly runs during playback: each sentence
    takes 40 % of its own duration to 'synthesize'."""

    name = "slow-espeak"

    def __init__(self) -> None:
        self.inner = load_tts("espeak-ng")
        self.sample_rate = self.inner.sample_rate

    def synthesize(self, sentence: str, *, speed: float = 1.0) -> np.ndarray:
        samples = self.inner.synthesize(sentence, speed=speed)
        time.sleep(0.4 * samples.shape[0] / self.sample_rate)
        return samples


def test_a_slower_engine_still_streams_without_gaps() -> None:
    speech, output = speak(SlowEngine(), THREE)
    result = speech.wait(60)
    output.close()
    records = result.sentences
    assert len(records) == 3
    first, second = records[0], records[1]
    # Sentence two's synthesis (hundreds of ms) ran entirely while sentence one played.
    assert second.synth_started_at_s < first.started_at_s + 0.2
    assert second.synth_done_at_s - second.synth_started_at_s > 0.3
    assert second.synth_done_at_s < first.started_at_s + first.frames / result.sample_rate
    assert max(result.gaps_ms()) <= 50, result.gaps_ms()


def test_stop_mid_sentence_lands_within_100_ms(hibari: TtsEngine) -> None:
    recorder = Recorder().start()
    time.sleep(0.2)
    text = (
        "This is one long sentence that keeps going and going without any pause at all so that "
        "we can stop it right in the middle of a word and listen to how fast the sound ends."
    )
    speech, output = speak(hibari, text)
    assert wait_until(lambda: speech.result.first_audio_at_s is not None, 10)
    time.sleep(1.5)
    stopped_at = time.monotonic()
    threading.Thread(target=speech.stop).start()  # a control channel or barge-in thread
    result = speech.wait(5)
    time.sleep(0.5)
    recorder.stop()
    output.close()
    assert result.stopped
    assert recorder.loud_between(stopped_at - 0.3, stopped_at), "no sound right before the stop"
    last_loud = recorder.last_loud_at_s()
    assert last_loud is not None
    assert last_loud - stopped_at < 0.100, f"sound went on {1000 * (last_loud - stopped_at):.0f} ms"


def test_pause_resume_and_skip_forward(hibari: TtsEngine) -> None:
    speech, output = speak(hibari, THREE)
    assert wait_until(lambda: speech.current() is not None, 10)
    speech.pause()
    time.sleep(0.4)
    assert speech.status()["state"] == "paused"
    frames_paused = output.reference.total_frames
    speech.resume()
    speech.skip_forward()  # cut sentence one
    assert wait_until(lambda: (speech.current() or speech.result.sentences[0]).index == 1, 5)
    result = speech.wait(60)
    output.close()
    assert output.reference.total_frames > frames_paused
    first, second = result.sentences[0], result.sentences[1]
    # Sentence two started before sentence one could have played out.
    assert second.start_frame < first.start_frame + first.frames + round(0.4 * result.sample_rate)
    assert all(r.played for r in result.sentences)


def test_a_sentence_failing_the_speech_check_is_reported_not_played() -> None:
    class NoisyEngine(TtsEngine):
        name = "noisy"
        sample_rate = 16_000

        def __init__(self) -> None:
            self.inner = load_tts("espeak-ng")

        def synthesize(self, sentence: str, *, speed: float = 1.0) -> np.ndarray:
            if "noise" in sentence:
                return np.random.default_rng(1).uniform(-0.5, 0.5, 16_000).astype(np.float32)
            samples = self.inner.synthesize(sentence)
            return resample(samples, self.inner.sample_rate, 16_000)

    reports: list[str] = []
    output = open_speech_output(16_000)
    speech = Speech(NoisyEngine(), ["Good words first. Then pure noise here. Good words last."],
                    report=reports.append, keep_audio=True)  # fmt: skip
    result = speech.run(output)
    output.close()
    assert [r.played for r in result.sentences] == [True, False, True]
    assert "no quiet pauses" in result.sentences[1].failed_check
    assert len(reports) == 1 and "sentence 2 failed the speech check" in reports[0]
    assert 1 not in speech.audio
    assert check_speech(speech.audio[0], 16_000) is None


def test_engine_errors_reach_the_caller_and_silence_the_output() -> None:
    class BrokenEngine(TtsEngine):
        name = "broken"
        sample_rate = 16_000

        def synthesize(self, sentence: str, *, speed: float = 1.0) -> np.ndarray:
            raise RuntimeError("model exploded")

    output = open_speech_output(16_000)
    speech = Speech(BrokenEngine(), ["Anything."])
    with pytest.raises(EngineError, match="model exploded"):
        speech.run(output)
    output.close()
    assert output.stopped


def test_output_rate_differs_from_the_engine_rate(hibari: TtsEngine, tmp_path: Path) -> None:
    output = open_speech_output(16_000, output=tmp_path / "out.wav")
    result = Speech(hibari, ["Please open the window in the kitchen."]).run(output)
    output.close()
    from vocal.audio.wav import read_wav

    audio = read_wav(tmp_path / "out.wav")
    assert audio.sample_rate == 16_000 and result.sentences[0].frames == audio.frames
    assert (
        word_error_rate(
            "Please open the window in the kitchen.", transcribe(audio.mono_samples, 16_000)
        )
        <= 0.25
    )


def test_skip_back_replays_the_previous_sentence(hibari: TtsEngine) -> None:
    speech, output = speak(hibari, THREE)
    assert wait_until(lambda: (speech.current() or speech.result.sentences[0]).index == 1, 20)
    second_started = speech.result.sentences[1].start_frame
    speech.skip_back()  # within a second of sentence two's start: back to sentence one
    result = speech.wait(60)
    output.close()
    first, second = result.sentences[0], result.sentences[1]
    assert first.start_frame > second_started  # sentence one was played again, after
    assert second.start_frame > first.start_frame  # and sentence two again after it
    assert max(result.gaps_ms()) <= 50
