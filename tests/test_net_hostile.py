"""Remote engines against a hostile server (issue 37): keys stay with their host, the deadline
holds whatever the server's pace, and every answer is bounded.

Each remote engine (`listen --engine openai`, `speak --engine openai`, `speak --engine
elevenlabs`) is pointed at harness.hostile_http's server on 127.0.0.1 and run as a person
would, under the 4 GB address-space cap (harness.hostile), or in-process through the engine's
real class where a case has many variants (every redirect status). A redirect points at a
second server on another loopback address, which records whether a key reached it. Model
downloads from the hub (vocal.hub) are checked the same way against a fake hub.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from harness.hostile import HostileResult, assert_one_line_error, run_hostile
from harness.hostile_http import (
    HUB_FILES,
    HostileServer,
    deep_json,
    second_loopback,
    transcript_json,
)
from harness.listen_audio import join, silence, trimmed
from harness.words import word_error_rate
from vocal.audio.wav import Audio, write_wav
from vocal.config import load_settings
from vocal.errors import EXIT_UNAVAILABLE, EngineError
from vocal.net.deadline import run_by
from vocal.stt import load_stt
from vocal.stt.openai import MAX_ANSWER_BYTES, max_transcript_chars
from vocal.tts import load_tts
from vocal.tts.http import MAX_AUDIO_BYTES

KEY = "sk-hostile-test-key"
SENTENCE = "Please open the file and read me the first line."
#: The deadline the hostile runs set (openai_stt_timeout_s, tts_http_timeout_s), and how long
#: past it a run may take: starting Python and vocal, and on a loaded machine some more.
DEADLINE_S = 1.5
SLACK_S = 20.0
#: Today's code hangs on a trickle for as long as the server trickles: the test fails then.
HANG_S = 60.0
#: Each remote engine, and the setting that names its server.
BASE_SETTINGS = {
    "listen-openai": "openai_stt_base_url",
    "speak-openai": "openai_base_url",
    "speak-elevenlabs": "elevenlabs_base_url",
}
ENGINES = tuple(BASE_SETTINGS)


@pytest.fixture(scope="module")
def sentence_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    audio = join(silence(0.3), trimmed(SENTENCE), silence(1.0))
    return write_wav(tmp_path_factory.mktemp("hostile") / "sentence.wav", audio)


@pytest.fixture
def other_host() -> Iterator[HostileServer]:
    """Where a redirect points: another loopback address, answering as a server would."""
    with HostileServer(
        host=second_loopback(), body=transcript_json("the other host speaks")
    ) as server:
        yield server


def engine_run(
    engine: str,
    server: HostileServer,
    sentence_file: Path,
    tmp_path: Path,
    *extra: str,
    env: dict[str, str] | None = None,
) -> HostileResult:
    """`engine` run through the CLI against `server` with the test's deadline."""
    deadline = f"{DEADLINE_S:g}"
    if engine == "listen-openai":
        args = ["listen", "--engine", "openai", "--input", str(sentence_file), *extra]
        variables = {
            "VOCAL_OPENAI_STT_BASE_URL": f"{server.origin}/v1",
            "OPENAI_API_KEY": KEY,
            "VOCAL_OPENAI_STT_TIMEOUT": deadline,
        }
    elif engine == "speak-openai":
        args = ["speak", "--engine", "openai", "-o", str(tmp_path / "out.wav"), "Hello there."]
        variables = {
            "VOCAL_OPENAI_BASE_URL": f"{server.origin}/v1",
            "OPENAI_API_KEY": KEY,
            "VOCAL_TTS_HTTP_TIMEOUT": deadline,
        }
    else:
        args = ["speak", "--engine", "elevenlabs", "-o", str(tmp_path / "out.wav"), "Hello there."]
        variables = {
            "VOCAL_ELEVENLABS_BASE_URL": server.origin,
            "ELEVENLABS_API_KEY": KEY,
            "VOCAL_TTS_HTTP_TIMEOUT": deadline,
        }
    return run_hostile(*args, env={**variables, **(env or {})}, timeout_s=HANG_S)


# -- keys stay with their host -------------------------------------------------------------------
@pytest.mark.parametrize("engine", ENGINES)
def test_a_redirect_to_another_host_is_refused_and_no_key_goes_there(
    engine: str, other_host: HostileServer, sentence_file: Path, tmp_path: Path
) -> None:
    """Today's urllib followed a 302 as a GET with the key to the other host, and `listen`
    printed that host's answer as the person's words."""
    with HostileServer(
        behaviour="redirect", redirect_status=302, redirect_to=other_host.origin
    ) as server:
        result = engine_run(engine, server, sentence_file, tmp_path)
    assert other_host.requests == [], "the redirect was followed"
    assert other_host.credentials_seen() == []
    assert "the other host speaks" not in result.stdout
    assert_one_line_error(
        result,
        EXIT_UNAVAILABLE,
        f"redirected to {other_host.origin}/",
        "(HTTP 302)",
        "API key was sent there",
        f"set {BASE_SETTINGS[engine]} to its address",
    )
    assert KEY not in result.stderr


def engine_call(engine: str, base: str, **settings: Any) -> Any:
    """One request from `engine`'s real class (in-process) to the server at `base`."""
    if engine == "listen-openai":
        stt = load_stt("openai", "whisper-1", base_url=f"{base}/v1", **settings)
        return stt.transcribe(Audio(np.zeros(16_000, np.float32), 16_000))
    name = engine.removeprefix("speak-")
    url_setting = (
        {"openai_base_url": f"{base}/v1"} if name == "openai" else {"elevenlabs_base_url": base}
    )
    tts = load_tts(name, settings=load_settings(**url_setting, **settings))
    return tts.synthesize("Hello there.")


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
@pytest.mark.parametrize("engine", ENGINES)
def test_no_redirect_status_carries_a_key_anywhere(
    engine: str, status: int, other_host: HostileServer, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    monkeypatch.setenv("ELEVENLABS_API_KEY", KEY)
    with HostileServer(
        behaviour="redirect", redirect_status=status, redirect_to=other_host.origin
    ) as server:
        with pytest.raises(EngineError, match=f"redirected to .* \\(HTTP {status}\\)"):
            engine_call(engine, server.origin)
    assert len(server.requests) == 1 and server.requests[0]["method"] == "POST"
    assert other_host.requests == []


# -- the deadline holds whatever the server's pace -----------------------------------------------
@pytest.mark.parametrize(
    ("engine", "behaviour"),
    [
        ("listen-openai", "trickle-headers"),
        ("speak-openai", "trickle-headers"),
        ("speak-elevenlabs", "trickle-body"),
    ],
)
def test_a_trickling_server_is_cut_off_at_the_deadline(
    engine: str, behaviour: str, sentence_file: Path, tmp_path: Path
) -> None:
    """One byte every half second kept every recv inside the socket timeout: today's runs
    hung for as long as the server trickled."""
    with HostileServer(behaviour=behaviour) as server:
        result = engine_run(engine, server, sentence_file, tmp_path)
    assert_one_line_error(
        result,
        EXIT_UNAVAILABLE,
        f"did not answer within {DEADLINE_S:g} s",
        within_s=DEADLINE_S + SLACK_S,
    )


def test_the_deadline_holds_for_a_wait_no_socket_timeout_bounds() -> None:
    """A name lookup takes no timeout: the caller goes on at the deadline without the worker."""
    release = threading.Event()
    started_s = time.monotonic()
    with pytest.raises(EngineError, match="late"):
        run_by(lambda _sockets: release.wait(30), time.monotonic() + 0.3, EngineError("late"))
    assert time.monotonic() - started_s < 5
    release.set()


def test_the_local_fallback_runs_when_the_server_trickles(
    sentence_file: Path, tmp_path: Path
) -> None:
    with HostileServer(behaviour="trickle-body") as server:
        result = engine_run(
            "listen-openai",
            server,
            sentence_file,
            tmp_path,
            "--json",
            env={"VOCAL_STT_FALLBACK": "local"},
        )
    assert result.returncode == 0, result.stderr
    assert result.elapsed_s < DEADLINE_S + SLACK_S, result.elapsed_s
    out = json.loads(result.stdout)
    assert out["stt_engine"] == "faster-whisper"
    assert f"did not answer within {DEADLINE_S:g} s" in out["stt_fallback_reason"]
    assert word_error_rate(SENTENCE, out["text"]) <= 0.1, out["text"]


# -- every answer bounded ------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("engine", "behaviour", "cap"),
    [("listen-openai", "huge", "1 MB"), ("speak-openai", "huge-unsized", "64 MB")],
)
def test_a_huge_answer_is_refused_at_its_cap(
    engine: str, behaviour: str, cap: str, sentence_file: Path, tmp_path: Path
) -> None:
    """A transcription's JSON answer is capped far below a sentence's audio; a size declared
    past the cap is refused unread, an undeclared one when the cap is reached."""
    with HostileServer(behaviour=behaviour) as server:
        result = engine_run(engine, server, sentence_file, tmp_path)
    assert_one_line_error(
        result, EXIT_UNAVAILABLE, f"sent an answer larger than {cap}", within_s=DEADLINE_S + SLACK_S
    )


def test_the_caps_are_what_the_messages_say(monkeypatch: pytest.MonkeyPatch) -> None:
    assert MAX_ANSWER_BYTES == 1 << 20 and MAX_AUDIO_BYTES == 64 << 20
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    with HostileServer(behaviour="huge-unsized") as server:
        with pytest.raises(EngineError, match="larger than 1 MB"):
            engine_call("listen-openai", server.origin)


def test_deeply_nested_json_is_an_engine_error_not_a_crash(
    sentence_file: Path, tmp_path: Path
) -> None:
    with HostileServer(body=deep_json()) as server:
        result = engine_run("listen-openai", server, sentence_file, tmp_path)
    assert_one_line_error(result, EXIT_UNAVAILABLE, "sent no transcript", "nested deeper")


def test_a_ten_megabyte_transcript_is_refused_before_the_hints_respell_it(
    sentence_file: Path, tmp_path: Path
) -> None:
    """Today the 10 MB was printed as the person's words (and respelled for the hints)."""
    text = "open parse config and the room level d b " * (10_000_000 // 42)
    with HostileServer(body=transcript_json(text)) as server:
        result = engine_run(
            "listen-openai",
            server,
            sentence_file,
            tmp_path,
            "--hints",
            "parse_config, room_level_db",
        )
    assert_one_line_error(
        result, EXIT_UNAVAILABLE, "sent an answer larger than 1 MB", within_s=DEADLINE_S + SLACK_S
    )
    assert result.stdout == ""


def test_a_transcript_longer_than_the_audio_could_hold_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Under the body cap, but 200,000 characters for one second of audio."""
    monkeypatch.setenv("OPENAI_API_KEY", KEY)
    limit = max_transcript_chars(1.0)
    assert 2_000 <= limit <= 5_000
    assert max_transcript_chars(600.0) >= 600 * 20, "ten minutes of fast speech fits"
    with HostileServer(body=transcript_json("a" * (limit + 1))) as server:
        with pytest.raises(
            EngineError, match=f"characters for 1.0 s of audio \\(at most {limit:,}"
        ):
            engine_call("listen-openai", server.origin)
    with HostileServer(body=transcript_json("word " * (limit // 5))) as server:
        assert engine_call("listen-openai", server.origin).text.startswith("word word")


# -- model downloads from the hub ----------------------------------------------------------------
def hub_listen(hub: HostileServer, sentence_file: Path, tmp_path: Path) -> HostileResult:
    """`listen` with a Whisper model that is not cached, so it comes from `hub`."""
    env = {
        "HF_ENDPOINT": hub.origin,
        "HF_HOME": str(tmp_path / "hf"),
        "HF_TOKEN": KEY,
        "HF_HUB_DOWNLOAD_TIMEOUT": "1",
        "HF_HUB_DISABLE_TELEMETRY": "1",
        "HF_HUB_OFFLINE": "0",
    }
    return run_hostile(
        "listen",
        "--engine",
        "faster-whisper",
        "--model",
        "tiny",
        "--input",
        str(sentence_file),
        env=env,
        timeout_s=HANG_S,
    )


def test_a_hub_download_keeps_the_token_on_the_hub(sentence_file: Path, tmp_path: Path) -> None:
    """The hub redirects each file to a CDN on another host, as the real one does: the files
    come from there without the token, which only the hub saw. (The files are not a model,
    which is the clear error the run ends with.)"""
    with (
        HostileServer(host=second_loopback(), body=b"not a model") as cdn,
        HostileServer(behaviour="hub", redirect_to=cdn.origin, body=cdn.body) as hub,
    ):
        result = hub_listen(hub, sentence_file, tmp_path)
    assert sorted(r["path"].rsplit("/", 1)[-1] for r in cdn.requests) == sorted(HUB_FILES)
    assert cdn.credentials_seen() == []
    assert hub.requests and all(
        r["headers"].get("authorization") == f"Bearer {KEY}" for r in hub.requests
    )
    assert_one_line_error(result, EXIT_UNAVAILABLE, "cannot load the Whisper model")


def test_a_silent_hub_fails_after_the_stall_bound(sentence_file: Path, tmp_path: Path) -> None:
    """huggingface_hub asks for a repository's files with no timeout at all: a hub (or a
    proxy) that never answered hung the first download for ever."""
    with HostileServer(behaviour="silent") as hub:
        result = hub_listen(hub, sentence_file, tmp_path)
    assert_one_line_error(
        result, EXIT_UNAVAILABLE, "cannot download the Whisper model tiny", within_s=SLACK_S
    )
