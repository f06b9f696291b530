"""The Chatterbox ONNX cloning engine, driven end to end through a tiny generated bundle.

The bundle (tests/harness/chatterbox_bundle.py) has the hub export's file names and tensor
contract; real onnxruntime sessions run it. The provider ladder is exercised with real
onnxruntime providers: a name this build rejects, the Azure provider every CPU wheel carries,
and the CPU.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from harness.chatterbox_bundle import SAMPLES_PER_TOKEN, build_bundle
from harness.runner import run_vocal
from harness.sounds import espeak, with_silence
from vocal.audio.wav import Audio, read_wav
from vocal.config import load_settings
from vocal.errors import EXIT_UNAVAILABLE, EngineError
from vocal.providers import CPU, ProviderFailure, ProviderLadder, default_ladder, parse_ladder
from vocal.tts import load_tts
from vocal.tts.chatterbox import ChatterboxEngine
from vocal.tts.chatterbox_model import (
    MAX_NEW_TOKENS,
    SAMPLE_RATE,
    check_speech,
    max_new_tokens,
    normalize_text,
)
from vocal.tts.chatterbox_weights import (
    download_weights,
    find_weights,
    missing_weights,
    weights_dir,
)
from vocal.tts.resolve import resolve_stored_voice
from vocal.tts.voices import VoiceStore

AZURE = "AzureExecutionProvider"  # in every onnxruntime CPU wheel; runs nothing itself
SENTENCE_A = (
    "The quick brown fox jumps over the lazy dog, and then it runs far away into the deep green "
    "forest to rest."
)
SENTENCE_B = (
    "Please remember to water the plants on the balcony every morning, and close the windows "
    "before you leave for work."
)


def clip(text: str, voice: str) -> Audio:
    return with_silence(espeak(text, voice=voice), before_s=0.5, after_s=0.5)


@pytest.fixture(scope="session")
def bundles(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("chatterbox")
    default_voice = clip(SENTENCE_B, "en-us").resample(SAMPLE_RATE).mono_samples
    return {
        "good": build_bundle(root / "good", default_voice=default_voice),
        "never_stop": build_bundle(root / "never_stop", never_stop=True),
        "silent": build_bundle(root / "silent", silent=True),
        "fp32_name": build_bundle(root / "fp32", language_model_file="language_model.onnx"),
    }


@pytest.fixture
def bundle(bundles: dict[str, Path], monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("VOCAL_CHATTERBOX_DIR", str(bundles["good"]))
    return bundles["good"]


@pytest.fixture
def voices(vocal_home: Path, tmp_path: Path) -> VoiceStore:
    """Two stored voices from different reference clips: alice (en-us) and bob (en-gb)."""
    from vocal.audio.wav import write_wav

    store = VoiceStore.from_settings(load_settings())
    for name, text, voice in (("alice", SENTENCE_A, "en-us"), ("bob", SENTENCE_B, "en-gb")):
        path = write_wav(tmp_path / f"{name}.wav", clip(text, voice))
        store.add(name, path)
    return store


def engine_for(voice: str, **options: object) -> ChatterboxEngine:
    name, reference = resolve_stored_voice(voice, load_settings())
    options.setdefault("report", lambda _message: None)
    return load_tts(name, voice=reference, settings=load_settings(), **options)


def text_tokens(engine: ChatterboxEngine, text: str) -> int:
    return sum(1 for i in engine._tokenizer.encode(normalize_text(text)).ids if i < 6561)


# -- end to end -------------------------------------------------------------------------------
def test_the_engine_speaks_end_to_end(bundle: Path, voices: VoiceStore) -> None:
    engine = engine_for("alice")
    assert engine.voice == "alice" and engine.provider == CPU
    text = "Hello there, this is a test."
    samples = engine.synthesize(text)
    assert samples.dtype == np.float32 and samples.ndim == 1
    assert engine.sample_rate == SAMPLE_RATE == 24_000
    # The bundle's language model stops after three speech tokens per text token, which the
    # engine only sees if it feeds the KV cache and the attention mask right (a wrong mask is
    # NaN). The decoder drops the prompt tokens: one 40 ms tone per generated token remains.
    assert engine.last_stopped
    assert engine.last_token_count == 3 * text_tokens(engine, text)
    assert len(samples) == engine.last_token_count * SAMPLES_PER_TOKEN
    assert check_speech(samples) is None
    assert engine.conditioning_source == "encoded"


def test_sentences_stream_one_array_each(bundle: Path, voices: VoiceStore) -> None:
    engine = engine_for("bob")
    parts = list(engine.stream(["One.", "Two and three.", "  "]))
    assert [len(p) > 0 for p in parts] == [True, True, False]
    assert len(parts[1]) > len(parts[0])


def test_different_reference_clips_give_different_conditioning(
    bundle: Path, voices: VoiceStore
) -> None:
    alice, bob, alice_again = engine_for("alice"), engine_for("bob"), engine_for("alice")
    said = {e: e.synthesize("Good morning to you.") for e in (alice, bob, alice_again)}
    a, b, a2 = alice._conditioning, bob._conditioning, alice_again._conditioning
    assert not np.allclose(a.speaker_embeddings, b.speaker_embeddings, atol=1e-3)
    assert not np.array_equal(a.audio_tokens, b.audio_tokens)
    assert not np.allclose(a.audio_features, b.audio_features, atol=1e-3)
    assert np.array_equal(a.speaker_embeddings, a2.speaker_embeddings)
    assert not np.array_equal(said[alice], said[bob])
    assert np.array_equal(said[alice], said[alice_again])


def test_the_default_voice_comes_with_the_weights(bundle: Path) -> None:
    engine = load_tts("chatterbox", settings=load_settings(), report=lambda _m: None)
    assert engine.voice == "default" and engine.reference == bundle / "default_voice.wav"
    assert check_speech(engine.synthesize("Hi.")) is None


def test_a_voice_by_name_or_by_path(bundle: Path, voices: VoiceStore, tmp_path: Path) -> None:
    by_name = load_tts("chatterbox", voice="bob", settings=load_settings())
    assert by_name.reference == voices.root / "bob" / "default.wav"
    loose = tmp_path / "loose.wav"
    shutil.copyfile(voices.root / "alice" / "default.wav", loose)
    assert load_tts("chatterbox", voice=str(loose), settings=load_settings()).voice == "loose"
    with pytest.raises(Exception, match="no voice named 'carol'"):
        load_tts("chatterbox", voice="carol", settings=load_settings())


def test_a_language_model_without_the_q4_suffix_is_found(
    bundles: dict[str, Path], voices: VoiceStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VOCAL_CHATTERBOX_DIR", str(bundles["fp32_name"]))
    weights = find_weights(load_settings())
    assert weights.language_model.name == "language_model.onnx"
    assert check_speech(engine_for("alice").synthesize("Fine.")) is None


def test_a_flat_weights_directory_works(
    bundles: dict[str, Path], voices: VoiceStore, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    flat = tmp_path / "flat"
    flat.mkdir()
    for path in bundles["good"].rglob("*"):
        if path.is_file():
            shutil.copyfile(path, flat / path.name)
    monkeypatch.setenv("VOCAL_CHATTERBOX_DIR", str(flat))
    assert check_speech(engine_for("alice").synthesize("Flat.")) is None


# -- the conditioning cache -------------------------------------------------------------------
def test_the_reference_is_encoded_once_and_cached_on_disk(
    bundle: Path, voices: VoiceStore, tmp_path: Path
) -> None:
    first = engine_for("alice")
    cache = first.conditioning_path()
    assert cache.parent == load_settings().cache_dir / "chatterbox" / "conditioning"
    assert cache.name.startswith("alice-") and not cache.exists()
    said = first.synthesize("Cache me.")
    assert first.conditioning_source == "encoded" and cache.is_file()

    second = engine_for("alice")
    assert np.array_equal(second.synthesize("Cache me."), said)
    assert second.conditioning_source == "cache"
    assert second._sessions.encoder is None  # the speech encoder was never even opened

    # A new take of the voice is a new cache entry, encoded afresh.
    from vocal.audio.wav import write_wav

    retake = write_wav(tmp_path / "retake.wav", clip(SENTENCE_B, "en-us"))
    voices.add("alice", retake, force=True)
    third = engine_for("alice")
    assert third.conditioning_path() != cache
    third.synthesize("Cache me.")
    assert third.conditioning_source == "encoded"


def test_a_corrupt_cache_entry_is_encoded_again(bundle: Path, voices: VoiceStore) -> None:
    engine = engine_for("bob")
    engine.conditioning_path().parent.mkdir(parents=True)
    engine.conditioning_path().write_bytes(b"not an npz")
    engine.synthesize("Again.")
    assert engine.conditioning_source == "encoded"
    assert engine_for("bob").synthesize("Again.") is not None


# -- the length ceiling -----------------------------------------------------------------------
def test_max_new_tokens_is_in_proportion_to_the_text() -> None:
    assert max_new_tokens("Hi.") == 44  # 25 * (1 + 3/4)
    assert max_new_tokens("x" * 100) == 650
    # 6.25 tokens (a quarter second) more per character, up to the model's limit.
    assert max_new_tokens("x" * 80) - max_new_tokens("x" * 40) == 250
    assert max_new_tokens("x" * 10_000) == MAX_NEW_TOKENS


def test_a_model_that_never_stops_is_cut_at_the_ceiling(
    bundles: dict[str, Path], voices: VoiceStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VOCAL_CHATTERBOX_DIR", str(bundles["never_stop"]))
    engine = engine_for("alice")
    lengths = {}
    for text in ("Short one.", "A noticeably longer sentence than the first one by far."):
        samples = engine.synthesize(text)
        assert not engine.last_stopped
        assert engine.last_token_count == max_new_tokens(normalize_text(text))
        lengths[text] = len(samples)
    short, long = lengths.values()
    assert long > 3 * short
    assert long == max_new_tokens("A noticeably longer sentence than the first one by far.") * 960


# -- the provider ladder ----------------------------------------------------------------------
def preview(*args: str, providers: str | None = None) -> tuple[dict, str]:
    env = {"VOCAL_CHATTERBOX_PROVIDERS": providers} if providers else None
    result = run_vocal(
        "voices",
        "preview",
        "alice",
        "A test of the ladder.",
        "--json",
        "-o",
        str(load_settings().home / "out.wav"),
        *args,
        env=env,
    )
    assert result.returncode == 0, result.stderr.decode()
    return json.loads(result.stdout), result.stderr.decode()


def test_a_rejected_provider_moves_down_and_the_next_process_starts_there(
    bundle: Path, voices: VoiceStore
) -> None:
    ladder = f"BogusExecutionProvider,{CPU}"
    report, err = preview(providers=ladder)
    assert report["tried"] == ["BogusExecutionProvider", CPU]
    assert report["failures"] == [["BogusExecutionProvider", "is not in this onnxruntime build"]]
    assert report["provider"] == CPU and report["conditioning"] == "encoded"
    assert (
        "chatterbox: BogusExecutionProvider is not in this onnxruntime build; trying "
        "CPUExecutionProvider" in err
    )
    rung = json.loads((load_settings().home / "providers" / "chatterbox.json").read_text())
    assert rung["ladder"] == ["BogusExecutionProvider", CPU] and rung["provider"] == CPU
    audio = read_wav(load_settings().home / "out.wav")
    assert audio.sample_rate == 24_000 and audio.frames == report["tokens"] * 960

    # The next process starts on the remembered rung: the failure is not paid again.
    report, err = preview(providers=ladder)
    assert report["tried"] == [CPU] and report["failures"] == []
    assert report["conditioning"] == "cache"
    assert "Bogus" not in err

    # Another ladder (a GPU build installed, the setting changed) starts from its top.
    report, _ = preview(providers=f"{AZURE},{CPU}")
    assert report["tried"] == [AZURE] and report["provider"] == AZURE
    rung = json.loads((load_settings().home / "providers" / "chatterbox.json").read_text())
    assert rung["provider"] == AZURE


def test_non_speech_on_every_rung_is_exit_5_and_nothing_is_remembered(
    bundles: dict[str, Path], voices: VoiceStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VOCAL_CHATTERBOX_DIR", str(bundles["silent"]))
    monkeypatch.setenv("VOCAL_CHATTERBOX_PROVIDERS", f"{AZURE},{CPU}")
    messages: list[str] = []
    engine = engine_for("alice", report=messages.append)
    with pytest.raises(EngineError) as caught:
        engine.synthesize("Is anybody there?")
    assert caught.value.exit_code == EXIT_UNAVAILABLE
    assert str(caught.value).startswith("no execution provider could run chatterbox (")
    assert f"{AZURE} produced non-speech (silence" in str(caught.value)
    assert f"{CPU} produced non-speech (silence" in str(caught.value)
    assert engine.ladder.tried == [AZURE, CPU]
    assert messages[0].startswith(f"chatterbox: {AZURE} produced non-speech")
    assert messages[0].endswith(f"trying {CPU}")
    assert not (load_settings().home / "providers" / "chatterbox.json").exists()
    # Conditioning from a run that produced no speech is not cached.
    assert not engine.conditioning_path().exists()

    result = run_vocal("voices", "preview", "alice", "-o", str(load_settings().home / "x.wav"))
    assert result.returncode == EXIT_UNAVAILABLE
    assert (
        result.stderr.decode()
        .splitlines()[-1]
        .startswith("vocal: error: no execution provider could run chatterbox")
    )


def test_a_rung_yielding_non_speech_moves_one_down_with_real_sessions(
    bundles: dict[str, Path], tmp_path: Path
) -> None:
    """The ladder itself, on real onnxruntime sessions: the top rung is given the decoder that
    renders silence (as a broken GPU provider would), the CPU rung the working one."""
    import onnxruntime as ort

    decoders = {AZURE: bundles["silent"], CPU: bundles["good"]}
    state = tmp_path / "providers"
    tokens = np.array([[5, 9, 11, 300, 17, 42]], np.int64)
    feed = {
        "speech_tokens": tokens,
        "speaker_embeddings": np.full((1, 192), 0.1, np.float32),
        "speaker_features": np.zeros((1, 4, 80), np.float32),
    }

    def run_on(ladder: ProviderLadder) -> np.ndarray:
        def opener(provider: str):  # noqa: ANN202
            path = decoders[provider] / "onnx" / "conditional_decoder.onnx"
            return ort.InferenceSession(str(path), providers=[provider], enable_fallback=0)

        session = ladder.start(opener)
        while True:
            waveform = session.run(None, feed)[0].reshape(-1)
            problem = check_speech(waveform)
            if problem is None:
                ladder.remember()
                return waveform
            session = ladder.step_down(f"produced non-speech ({problem})", opener)

    available = tuple(ort.get_available_providers())
    first = ProviderLadder("decoder", (AZURE, CPU), state, available, report=lambda _m: None)
    waveform = run_on(first)
    assert len(waveform) == 4 * 960 and check_speech(waveform) is None
    assert first.tried == [AZURE, CPU] and first.current == CPU
    assert first.failures == [(AZURE, "produced non-speech (silence (RMS -240 dBFS))")]
    assert json.loads((state / "decoder.json").read_text())["provider"] == CPU

    following = ProviderLadder("decoder", (AZURE, CPU), state, available, report=lambda _m: None)
    run_on(following)
    assert following.tried == [CPU]


def test_ladder_memory_is_tied_to_the_ladder(tmp_path: Path) -> None:
    opened: list[str] = []

    def opener(provider: str) -> str:
        opened.append(provider)
        if provider == "A":
            raise ProviderFailure("failed to open x.onnx: no device")
        return provider

    first = ProviderLadder("m", ("A", "B", "C"), tmp_path, report=lambda _m: None)
    assert first.start(opener) == "B"
    first.remember()
    assert ProviderLadder("m", ("A", "B", "C"), tmp_path).remembered() == "B"
    assert ProviderLadder("m", ("A", "C"), tmp_path).remembered() is None
    assert ProviderLadder("other", ("A", "B", "C"), tmp_path).remembered() is None
    (tmp_path / "m.json").write_text("{not json")
    assert ProviderLadder("m", ("A", "B", "C"), tmp_path).remembered() is None
    first.remember()
    first.forget()
    assert not (tmp_path / "m.json").exists()


def test_a_ladder_with_no_working_rung_is_exit_5_listing_each(tmp_path: Path) -> None:
    def opener(provider: str) -> str:
        raise ProviderFailure(f"failed to open x.onnx: {provider} exploded")

    ladder = ProviderLadder("m", ("A", CPU), tmp_path, available=(CPU,), report=lambda _m: None)
    with pytest.raises(EngineError) as caught:
        ladder.start(opener)
    assert caught.value.exit_code == EXIT_UNAVAILABLE
    assert "A is not in this onnxruntime build" in str(caught.value)
    assert f"{CPU} failed to open x.onnx: {CPU} exploded" in str(caught.value)


def test_default_and_configured_ladders() -> None:
    assert default_ladder([AZURE, CPU]) == (CPU,)
    assert default_ladder([CPU, "CoreMLExecutionProvider", "CUDAExecutionProvider"]) == (
        "CUDAExecutionProvider",
        "CoreMLExecutionProvider",
        CPU,
    )
    assert parse_ladder(" CUDAExecutionProvider , CPUExecutionProvider ") == (
        "CUDAExecutionProvider",
        CPU,
    )
    for bad in ("", " , ", f"{CPU},{CPU}"):
        with pytest.raises(Exception, match="execution provider"):
            parse_ladder(bad)


def test_engine_sessions_are_really_on_the_chosen_provider(
    bundle: Path, voices: VoiceStore, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VOCAL_CHATTERBOX_PROVIDERS", f"{AZURE},{CPU}")
    engine = engine_for("alice")
    assert engine.provider == AZURE
    assert engine._sessions.language_model.get_providers()[0] == AZURE
    assert check_speech(engine.synthesize("Fine.")) is None


# -- missing weights and the download path -----------------------------------------------------
def test_no_weights_names_every_missing_file_and_the_fix(voices: VoiceStore) -> None:
    settings = load_settings()
    root, missing = missing_weights(settings)
    assert root == settings.cache_dir / "chatterbox" / "onnx-community--chatterbox-ONNX"
    assert missing == [
        "onnx/speech_encoder.onnx",
        "onnx/speech_encoder.onnx_data",
        "onnx/embed_tokens.onnx",
        "onnx/embed_tokens.onnx_data",
        "onnx/language_model_q4.onnx (or onnx/language_model.onnx)",
        "onnx/language_model_q4.onnx_data",
        "onnx/conditional_decoder.onnx",
        "onnx/conditional_decoder.onnx_data",
        "tokenizer.json",
    ]
    with pytest.raises(EngineError) as caught:
        load_tts("chatterbox", voice="alice", settings=settings)
    message = str(caught.value)
    assert caught.value.exit_code == EXIT_UNAVAILABLE
    assert message.startswith(
        "the cloned voice 'alice' needs the Chatterbox ONNX weights, and "
        f"9 file(s) are missing from {root} (the directory does not exist)"
    )
    assert ", ".join(missing) in message
    assert "run `vocal setup --engine chatterbox` to download them" in message
    assert "huggingface.co/onnx-community/chatterbox-ONNX" in message


def test_preview_without_weights_is_exit_5_in_one_line(voices: VoiceStore) -> None:
    result = run_vocal("voices", "preview", "alice")
    assert result.returncode == EXIT_UNAVAILABLE
    lines = result.stderr.decode().strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        "vocal: error: the cloned voice 'alice' needs the Chatterbox ONNX weights"
    )
    assert (
        "onnx/conditional_decoder.onnx" in lines[0]
        and "vocal setup --engine chatterbox" in lines[0]
    )
    assert result.stdout == b""


def test_an_interrupted_download_is_reported_file_by_file(
    bundles: dict[str, Path], voices: VoiceStore
) -> None:
    target = weights_dir(load_settings())
    shutil.copytree(bundles["good"], target)
    assert missing_weights(load_settings())[1] == []
    (target / "onnx" / "embed_tokens.onnx_data").unlink()
    (target / "tokenizer.json").unlink()
    assert missing_weights(load_settings())[1] == ["onnx/embed_tokens.onnx_data", "tokenizer.json"]
    with pytest.raises(
        EngineError,
        match=r"2 file\(s\) are missing .*: onnx/embed_tokens.onnx_data, "
        r"tokenizer.json",
    ):
        resolve_stored_voice("alice", load_settings())


def test_a_local_directory_missing_a_graph(
    bundles: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    local = shutil.copytree(bundles["good"], tmp_path / "local")
    (local / "onnx" / "conditional_decoder.onnx").unlink()
    monkeypatch.setenv("VOCAL_CHATTERBOX_DIR", str(local))
    with pytest.raises(EngineError) as caught:
        find_weights(load_settings())
    assert f"1 file(s) are missing from {local}: onnx/conditional_decoder.onnx (" in str(
        caught.value
    )
    assert "unset VOCAL_CHATTERBOX_DIR" in str(caught.value)


def test_the_download_fails_clearly_without_the_hub(
    vocal_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(EngineError) as caught:
        download_weights(load_settings(), progress=False)
    assert caught.value.exit_code == EXIT_UNAVAILABLE
    assert str(caught.value).startswith(
        "could not download the Chatterbox weights from "
        "huggingface.co/onnx-community/chatterbox-ONNX: "
    )
    assert weights_dir(load_settings()).is_dir()  # where the files would have gone


# -- helpers ----------------------------------------------------------------------------------
def test_check_speech_flags_what_broken_providers_produce() -> None:
    t = np.arange(24_000) / 24_000
    speech_like = (0.1 * np.sin(2 * np.pi * 180 * t)).astype(np.float32)
    assert check_speech(speech_like) is None
    assert check_speech(speech_like * 0.01) is None  # quiet is still speech
    assert check_speech(np.zeros(0, np.float32)) == "no samples"
    assert check_speech(np.full(100, np.nan, np.float32)) == "NaN or infinite samples"
    assert check_speech(np.zeros(24_000, np.float32)).startswith("silence")
    assert check_speech(np.sign(speech_like)) == "samples pinned at full scale"


def test_text_is_normalised_as_chatterbox_reads_it() -> None:
    assert normalize_text("  hello   world ") == "Hello world."
    assert normalize_text("Wait… what: now; ok") == "Wait, what, now, ok."
    assert normalize_text("Really?") == "Really?"
    assert normalize_text(" \n ") == ""


@pytest.mark.audio
@pytest.mark.usefixtures("pulse")
def test_preview_plays_the_cloned_voice_to_the_speaker(
    bundle: Path, voices: VoiceStore, pulse, tmp_path: Path
) -> None:
    import signal
    import subprocess
    import time

    raw = tmp_path / "heard.raw"
    recorder = subprocess.Popen(
        ["parecord", "--raw", "--format=s16le", "--rate=16000", "--channels=1",
         "-d", f"{pulse.speaker}.monitor", str(raw)],
    )  # fmt: skip
    try:
        time.sleep(0.3)
        result = run_vocal("voices", "preview", "alice", "Can you hear me now?", "--json")
        time.sleep(0.3)
    finally:
        recorder.send_signal(signal.SIGINT)
        recorder.wait(timeout=10)
    assert result.returncode == 0, result.stderr.decode()
    played_s = json.loads(result.stdout)["duration_s"]
    heard = np.frombuffer(raw.read_bytes(), dtype="<i2").astype(np.float32) / 32768
    loud = np.abs(heard) > 0.05
    assert loud.any(), "nothing was heard on the speaker's monitor"
    heard_s = (np.flatnonzero(loud)[-1] - np.flatnonzero(loud)[0]) / 16_000
    assert heard_s == pytest.approx(played_s, abs=0.25)
