"""The recognizer in a child process (vocal.hearing.stt_process): a real child, the real
embedded tiny.en model, real (espeak-ng) speech; its errors as the in-process engine's."""

from __future__ import annotations

import os
import signal
import threading

import pytest

from harness.listen_audio import join, silence, trimmed
from harness.words import word_error_rate
from vocal.config import Settings
from vocal.errors import EXIT_UNAVAILABLE, EngineError
from vocal.hearing.stt_loading import ProcessSttLoader, SttLoader, stt_loader
from vocal.hearing.stt_process import ProcessStt

SENTENCE = "Please open the file and read me the first line."


def test_the_child_loads_warms_up_and_transcribes_then_ends_when_closed() -> None:
    loader = ProcessSttLoader("faster-whisper", "tiny.en", warm_up=True, language="en")
    engine = loader.engine()
    assert isinstance(engine, ProcessStt) and engine.name == "faster-whisper"
    assert loader.ready_engine() is engine and loader.warmed_at_s is not None
    # Two requests in a row from two threads: one at a time through the pipe, each answered.
    audio = join(silence(0.3), trimmed(SENTENCE), silence(0.3))
    texts: list[str] = []
    threads = [threading.Thread(target=lambda: texts.append(engine.transcribe(audio).text))
               for _ in range(2)]  # fmt: skip
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert len(texts) == 2
    assert all(word_error_rate(SENTENCE, text) <= 0.1 for text in texts), texts
    transcript = engine.transcribe(join(silence(1.0)))
    assert transcript.text == "" and transcript.duration_s == pytest.approx(1.0)
    loader.close()
    assert engine.process.poll() is not None


def test_a_model_that_does_not_load_is_the_same_engine_error_as_in_process() -> None:
    loader = ProcessSttLoader("faster-whisper", "no-such-model", warm_up=False)
    with pytest.raises(EngineError) as raised:
        loader.engine()
    assert "unknown Whisper model" in str(raised.value)
    assert raised.value.exit_code == EXIT_UNAVAILABLE
    loader.close()


def test_a_child_that_died_is_an_engine_error_not_a_hang() -> None:
    loader = ProcessSttLoader("faster-whisper", "tiny.en", warm_up=False, language="en")
    engine = loader.engine()
    assert isinstance(engine, ProcessStt)
    os.kill(engine.process.pid, signal.SIGKILL)
    engine.process.wait(10)
    with pytest.raises(EngineError, match="process ended"):
        engine.transcribe(join(silence(0.5)))
    loader.close()


def test_only_a_turn_that_plays_loads_in_a_child_and_the_setting_turns_it_off() -> None:
    settings = Settings()
    beside = stt_loader(settings, beside_playback=True)
    alone = stt_loader(settings)
    off = stt_loader(Settings(stt_process=False), beside_playback=True)
    try:
        assert isinstance(beside, ProcessSttLoader)
        assert type(alone) is SttLoader and type(off) is SttLoader
    finally:
        for loader in (beside, alone, off):
            loader.wait(30)
            loader.close()
