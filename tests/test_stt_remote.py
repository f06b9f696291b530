"""Remote recognition (issue 21): the openai engine against a local fake server that checks
every request's shape (harness.stt_server), its retries, deadline and errors, the local
fallback (the real faster-whisper tiny.en), once-per-turn calls, and `vocal listen --engine
openai --input FILE --json` end to end.

No audio devices: files and 127.0.0.1 only.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from harness.listen_audio import RATE, join, silence, trimmed
from harness.runner import run_vocal
from harness.speak_audio import closed_port
from harness.stt_server import FakeTranscriptionServer
from harness.words import word_error_rate
from vocal.audio.file_devices import WavSource
from vocal.audio.wav import Audio, to_int16, write_wav
from vocal.config import load_settings
from vocal.errors import EXIT_UNAVAILABLE, EXIT_USAGE, EngineError, UsageError
from vocal.hearing.listening import listen
from vocal.hearing.stt_loading import ProcessSttLoader, SttLoader, stt_loader
from vocal.net.multipart import FilePart, form_data
from vocal.stt import load_stt

SENTENCE = "Please open the file and read me the first line."
FIRST, SECOND = "Open the file.", "Read me the first line."
MAX_WER = 0.1


@pytest.fixture
def server(monkeypatch: pytest.MonkeyPatch) -> FakeTranscriptionServer:
    fake = FakeTranscriptionServer().start()
    monkeypatch.setenv("OPENAI_API_KEY", fake.key or "")
    yield fake
    fake.stop()


@pytest.fixture(scope="module")
def sentence() -> Audio:
    return join(silence(0.3), trimmed(SENTENCE), silence(0.3))


def engine_for(server: FakeTranscriptionServer, **options: object):  # noqa: ANN201
    return load_stt("openai", "whisper-1", base_url=server.url, **options)


# -- the request ---------------------------------------------------------------------------------
def test_the_utterance_is_uploaded_once_as_a_16khz_mono_wav(
    server: FakeTranscriptionServer, sentence: Audio
) -> None:
    server.expect_prompt = "vocal, Typer, CTranslate2"
    engine = engine_for(server, language="en", prompt="vocal, Typer, CTranslate2")
    result = engine.transcribe(sentence)
    server.check()
    assert result.text == server.text and result.language == "en"
    assert result.engine == "openai" and result.fallback_reason is None
    assert result.duration_s == pytest.approx(sentence.duration_s)
    assert 0 < result.transcribe_s < 5
    (request,) = server.requests
    assert request.method == "POST" and request.path == "/v1/audio/transcriptions"
    assert request.headers["authorization"] == f"Bearer {server.key}"
    assert request.fields == {"model": "whisper-1", "language": "en", "response_format": "json",
                              "prompt": "vocal, Typer, CTranslate2"}  # fmt: skip
    # The very samples, as 16-bit PCM: nothing cut, padded or resampled on the way (reading
    # divides by 32768 where writing multiplied by 32767: one step of 16-bit at most).
    assert request.audio.frames == sentence.frames
    sent = to_int16(sentence.mono_samples).astype(np.int32)
    received = np.round(request.audio.mono_samples * 32768.0).astype(np.int32)
    assert np.array_equal(received, sent)


def test_any_rate_and_channel_count_is_sent_as_16khz_mono(
    server: FakeTranscriptionServer, sentence: Audio
) -> None:
    stereo_8k = Audio(np.repeat(sentence.mono_samples[:, None], 2, axis=1), RATE).resample(8000)
    engine_for(server).transcribe(stereo_8k)
    server.check()
    assert server.requests[0].audio.duration_s == pytest.approx(sentence.duration_s, abs=0.001)


def test_language_auto_and_no_prompt_leave_the_fields_out(
    server: FakeTranscriptionServer, sentence: Audio
) -> None:
    server.expect_language = None
    engine_for(server, language="auto").transcribe(sentence)
    server.check()
    assert "language" not in server.requests[0].fields
    assert "prompt" not in server.requests[0].fields


def test_the_base_url_falls_back_to_openai_base_url(
    server: FakeTranscriptionServer, sentence: Audio
) -> None:
    own = stt_loader(load_settings(stt_engine="openai", openai_base_url=server.url))
    assert own.engine().url == f"{server.url}/audio/transcriptions"
    other = stt_loader(load_settings(stt_engine="openai", openai_base_url="http://nowhere/v1",
                                     openai_stt_base_url=server.url))  # fmt: skip
    assert other.engine().transcribe(sentence).text == server.text
    server.check()


def test_a_compatible_server_may_take_requests_without_a_key(
    monkeypatch: pytest.MonkeyPatch, sentence: Audio
) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with FakeTranscriptionServer(key=None) as fake:
        assert engine_for(fake).transcribe(sentence).text == fake.text
        fake.check()
        assert "authorization" not in fake.requests[0].headers


def test_the_official_host_needs_the_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    with pytest.raises(EngineError, match="OPENAI_API_KEY is not set") as info:
        load_stt("openai", "whisper-1")
    assert info.value.exit_code == EXIT_UNAVAILABLE
    assert "openai_stt_base_url" in str(info.value)
    with pytest.raises(UsageError, match="http"):
        load_stt("openai", "whisper-1", base_url="ftp://example.com/v1")


def test_a_rejected_key_is_a_clear_error(
    server: FakeTranscriptionServer, sentence: Audio, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", "wrong")
    with pytest.raises(EngineError, match="rejected the API key") as info:
        engine_for(server).transcribe(sentence)
    assert info.value.exit_code == EXIT_UNAVAILABLE
    assert len(server.requests) == 1, "a 4xx is not retried"
    server.check()


def test_a_server_that_sends_no_transcript_is_an_engine_error(
    server: FakeTranscriptionServer, sentence: Audio
) -> None:
    server.text = None  # type: ignore[assignment]  # {"text": null}
    with pytest.raises(EngineError, match='without a transcript \\(no "text"\\)'):
        engine_for(server).transcribe(sentence)


# -- failures: retries, the deadline, offline ----------------------------------------------------
def test_5xx_answers_are_retried(server: FakeTranscriptionServer, sentence: Audio) -> None:
    server.fail_first = 2
    started = time.monotonic()
    assert engine_for(server).transcribe(sentence).text == server.text
    assert len(server.requests) == 3
    assert time.monotonic() - started < 2.0  # backoff 0.1 s + 0.3 s
    server.check()


def test_5xx_after_the_retries_is_one_clear_error(
    server: FakeTranscriptionServer, sentence: Audio
) -> None:
    server.fail_first = 10
    with pytest.raises(EngineError, match="answered HTTP 500.*the fake server failed.*3 attempts"
                       ) as info:  # fmt: skip
        engine_for(server).transcribe(sentence)
    assert info.value.exit_code == EXIT_UNAVAILABLE
    assert len(server.requests) == 3


def test_a_dropped_connection_is_retried(server: FakeTranscriptionServer, sentence: Audio) -> None:
    server.drop_first = 1
    assert engine_for(server).transcribe(sentence).text == server.text
    assert len(server.requests) == 2


def test_a_server_that_never_answers_fails_at_the_deadline(
    server: FakeTranscriptionServer, sentence: Audio
) -> None:
    server.hang = True
    started = time.monotonic()
    with pytest.raises(EngineError, match=r"127\.0\.0\.1:\d+/v1/audio/transcriptions did not "
                                          r"answer within 1 s") as info:  # fmt: skip
        engine_for(server, timeout_s=1.0).transcribe(sentence)
    assert info.value.exit_code == EXIT_UNAVAILABLE
    assert time.monotonic() - started < 2.0
    assert len(server.requests) == 1, "a timeout is not retried: the deadline is spent"


def test_offline_is_a_quick_clear_error_without_credentials(sentence: Audio) -> None:
    url = f"http://user:secret@127.0.0.1:{closed_port()}/v1?api_key=abc"
    started = time.monotonic()
    with pytest.raises(EngineError, match="cannot reach http://127.0.0.1") as info:
        load_stt("openai", "whisper-1", base_url=url).transcribe(sentence)
    assert info.value.exit_code == EXIT_UNAVAILABLE
    assert "secret" not in str(info.value) and "abc" not in str(info.value)
    assert time.monotonic() - started < 1.0, "a refused connection is not retried"


# -- the local fallback --------------------------------------------------------------------------
def fallback_loader(url: str, **settings: object) -> SttLoader:
    return stt_loader(load_settings(stt_engine="openai", openai_stt_base_url=url,
                                    stt_fallback="local", **settings))  # fmt: skip


def test_offline_falls_back_to_the_local_engine(sentence: Audio) -> None:
    engine = fallback_loader(f"http://127.0.0.1:{closed_port()}/v1").engine()
    result = engine.transcribe(sentence)
    assert result.engine == "faster-whisper"
    assert result.fallback_reason.startswith("cannot reach http://127.0.0.1")
    assert word_error_rate(SENTENCE, result.text) <= MAX_WER, result.text


def test_5xx_after_retries_and_a_timeout_fall_back_too(
    server: FakeTranscriptionServer, sentence: Audio
) -> None:
    server.fail_first = 10
    engine = fallback_loader(server.url).engine()
    result = engine.transcribe(sentence)
    assert result.engine == "faster-whisper" and "HTTP 500" in result.fallback_reason
    assert len(server.requests) == 3
    server.fail_first, server.hang = 0, True
    engine = fallback_loader(server.url, openai_stt_timeout_s=0.5).engine()
    result = engine.transcribe(sentence)
    assert "did not answer within 0.5 s" in result.fallback_reason
    assert word_error_rate(SENTENCE, result.text) <= MAX_WER, result.text


def test_a_missing_key_falls_back_and_a_working_server_is_used(
    server: FakeTranscriptionServer, sentence: Audio, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert fallback_loader(server.url).engine().transcribe(sentence).fallback_reason is None
    monkeypatch.delenv("OPENAI_API_KEY")
    result = fallback_loader("https://api.openai.com/v1").engine().transcribe(sentence)
    assert result.engine == "faster-whisper" and "OPENAI_API_KEY" in result.fallback_reason


def test_without_a_fallback_the_failure_is_the_error(sentence: Audio) -> None:
    url = f"http://127.0.0.1:{closed_port()}/v1"
    loader = stt_loader(load_settings(stt_engine="openai", openai_stt_base_url=url))
    with pytest.raises(EngineError, match="cannot reach"):
        loader.engine().transcribe(sentence)


def test_a_fallback_that_names_no_local_engine_is_a_usage_error() -> None:
    for bad in ("openai", "festival"):
        with pytest.raises(UsageError, match="stt_fallback") as info:
            stt_loader(load_settings(stt_engine="openai", stt_fallback=bad))
        assert info.value.exit_code == EXIT_USAGE


def test_the_remote_engine_loads_in_process_even_beside_playback(
    server: FakeTranscriptionServer,
) -> None:
    settings = load_settings(stt_engine="openai", openai_stt_base_url=server.url)
    loader = stt_loader(settings, beside_playback=True)
    assert settings.stt_process, "the default: local engines load in a child beside playback"
    assert not isinstance(loader, ProcessSttLoader) and loader.warm_up is False
    assert loader.engine().name == "openai"


def test_a_backchannel_over_the_reply_is_not_sent_to_the_server(
    server: FakeTranscriptionServer,
) -> None:
    from vocal.duplex.handover import short_words

    loader = stt_loader(load_settings(stt_engine="openai", openai_stt_base_url=server.url))
    assert short_words(loader, [], 0.0, 0.5, 0.0, fit=None) is None  # type: ignore[arg-type]
    assert server.requests == []


def test_the_local_model_setting_belongs_to_the_fallback() -> None:
    from vocal.stt import default_engine_name, local_engine_name

    assert local_engine_name("openai") == local_engine_name("auto") == default_engine_name()
    assert local_engine_name("mlx-whisper") == "mlx-whisper"


def test_the_engine_imports_nothing_heavy() -> None:
    code = ("import sys; from vocal.stt import load_stt\n"
            "load_stt('openai', base_url='http://127.0.0.1:9/v1')\n"
            "print(sorted(m for m in ('numpy', 'faster_whisper', 'ctranslate2', 'onnxruntime')"
            " if m in sys.modules))")  # fmt: skip
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=60, check=True).stdout  # fmt: skip
    assert out.strip() == "[]"


# -- once per turn -------------------------------------------------------------------------------
def test_a_turn_with_a_pause_makes_one_request_for_the_final_utterance(
    server: FakeTranscriptionServer, tmp_path: Path
) -> None:
    audio = join(silence(0.5), trimmed(FIRST), silence(0.45), trimmed(SECOND), silence(1.5))
    path = write_wav(tmp_path / "turn.wav", audio)
    result = listen(WavSource(path).open(), stt=engine_for(server))
    server.check()
    assert len(server.requests) == 1, "no request in the pause"
    assert result.timings["transcribed_early"] is False
    assert result.text == server.text and result.stt_engine == "openai"
    assert server.requests[0].audio.frames == result.audio.frames  # the endpointed utterance
    assert result.to_dict()["stt_fallback_reason"] is None


# -- the command line ----------------------------------------------------------------------------
def listen_cli(path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess:
    return run_vocal("listen", "--engine", "openai", "--input", str(path), "--json", *args,
                     env=env)  # fmt: skip


@pytest.fixture(scope="module")
def sentence_file(tmp_path_factory: pytest.TempPathFactory, sentence: Audio) -> Path:
    return write_wav(tmp_path_factory.mktemp("remote") / "sentence.wav",
                     join(sentence, silence(1.0)))  # fmt: skip


def test_listen_engine_openai_end_to_end(
    server: FakeTranscriptionServer, sentence_file: Path
) -> None:
    result = listen_cli(sentence_file, server.env())
    assert result.returncode == 0, result.stderr.decode()
    out = json.loads(result.stdout)
    server.check()
    assert out["text"] == server.text
    assert out["stt_engine"] == "openai" and out["stt_fallback_reason"] is None
    (request,) = server.requests
    assert request.audio.duration_s == pytest.approx(out["durations"]["transcribed_s"], abs=1e-3)
    assert out["timings"]["transcribed_early"] is False


def test_listen_takes_the_base_url_from_openai_base_url(
    server: FakeTranscriptionServer, sentence_file: Path
) -> None:
    env = {"VOCAL_OPENAI_BASE_URL": server.url, "OPENAI_API_KEY": server.key or ""}
    result = listen_cli(sentence_file, env)
    assert result.returncode == 0, result.stderr.decode()
    assert json.loads(result.stdout)["text"] == server.text
    server.check()


def test_listen_offline_exits_5_with_a_clear_message(sentence_file: Path) -> None:
    env = {"VOCAL_OPENAI_STT_BASE_URL": f"http://127.0.0.1:{closed_port()}/v1",
           "OPENAI_API_KEY": "k"}  # fmt: skip
    result = listen_cli(sentence_file, env)
    assert result.returncode == EXIT_UNAVAILABLE
    lines = result.stderr.decode().strip().splitlines()
    assert lines[-1].startswith("vocal: error: cannot reach http://127.0.0.1:"), lines


def test_listen_falls_back_to_the_local_engine(sentence_file: Path) -> None:
    env = {"VOCAL_OPENAI_STT_BASE_URL": f"http://127.0.0.1:{closed_port()}/v1",
           "OPENAI_API_KEY": "k", "VOCAL_STT_FALLBACK": "local"}  # fmt: skip
    result = listen_cli(sentence_file, env)
    assert result.returncode == 0, result.stderr.decode()
    out = json.loads(result.stdout)
    assert out["stt_engine"] == "faster-whisper"
    assert out["stt_fallback_reason"].startswith("cannot reach")
    assert word_error_rate(SENTENCE, out["text"]) <= MAX_WER, out["text"]
    assert "remote recognition failed" in result.stderr.decode()


def test_converse_names_its_recognizer_apart_from_its_voice() -> None:
    result = run_vocal("converse", "--help")
    assert result.returncode == 0
    text = result.stdout.decode()
    assert "--stt-engine" in text and "openai" in text
    # --stt-engine reaches the recognizer's settings: a bad fallback for the remote engine is
    # refused where the recognizer starts loading, before any device opens (no sound server
    # here either, so a regression fails instead of playing).
    env = {"VOCAL_STT_FALLBACK": "festival", "VOCAL_SPEECH_WORKER": "0",
           "PULSE_SERVER": "unix:/nonexistent"}  # fmt: skip
    refused = run_vocal("converse", "--stt-engine", "openai", "--no-conch", "Hi.", env=env)
    assert refused.returncode == EXIT_USAGE, refused.stderr.decode()
    assert "stt_fallback" in refused.stderr.decode()


# -- the multipart encoder -----------------------------------------------------------------------
def test_form_data_parses_back_with_the_standard_library() -> None:
    import email.parser
    import email.policy

    payload = b"RIFF\r\n--not-a-boundary\r\n" + bytes(range(256))
    body, content_type = form_data(
        {"model": "whisper-1", 'odd"name': "caf\u00e9\r\nline"},
        [FilePart("file", 'a"b.wav', "audio/wav", payload)],
    )
    message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode() + body
    )
    parts = list(message.iter_parts())
    assert [p.get_param("name", header="content-disposition") for p in parts] == [
        "model", "odd%22name", "file"]  # fmt: skip
    assert parts[1].get_payload(decode=True).decode() == "caf\u00e9\r\nline"
    assert parts[2].get_filename() == "a%22b.wav" and parts[2].get_content_type() == "audio/wav"
    assert parts[2].get_payload(decode=True) == payload


def test_hints_join_the_prompt_sent_and_reach_the_local_fallback(
    server: FakeTranscriptionServer, sentence: Audio
) -> None:
    """The hints (vocal.stt.hints) follow the openai_stt_prompt setting in the request's
    `prompt`; the local fallback gets them as its own."""
    loader = stt_loader(load_settings(
        stt_engine="openai", openai_stt_base_url=server.url, openai_stt_prompt="vocal, Typer",
        stt_hints="parse_config, VOCAL_HOME", stt_fallback="local",
    ))  # fmt: skip
    loader.engine().transcribe(sentence)
    wanted = "vocal, Typer We talked about parse_config and VOCAL_HOME."
    assert server.requests[0].fields["prompt"] == wanted
    assert loader.used_hints is not None and loader.used_hints.source == "setting"
    assert (
        loader.fallback["local_options"]["hints"] == "We talked about parse_config and VOCAL_HOME."
    )
