"""`vocal setup`: offline fetches fail clearly (exit 5), and the proof is a real spoken turn on
the null-sink loopback answered by a simulated person; config.toml changes only after it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.person import ANSWER, SimulatedPerson
from harness.runner import run_vocal
from harness.words import word_error_rate
from vocal.ops.onboarding import write_config


def test_embedded_defaults_need_nothing() -> None:
    result = run_vocal("setup", "--no-proof")
    assert result.returncode == 0
    assert b"need no download" in result.stderr


def test_unknown_engine_is_a_usage_error() -> None:
    result = run_vocal("setup", "--engine", "nope", "--no-proof")
    assert result.returncode == 2 and b"nope" in result.stderr


def test_offline_chatterbox_download_is_exit_5_and_keeps_the_learnt_rung_only_on_success(
    vocal_home: Path,
) -> None:
    rung = vocal_home / "providers" / "chatterbox.json"
    rung.parent.mkdir(parents=True)
    rung.write_text(json.dumps({"ladder": ["CPUExecutionProvider"], "provider": "x"}))
    env = {"HF_HUB_OFFLINE": "1", "HF_HUB_ETAG_TIMEOUT": "2", "HF_HUB_DOWNLOAD_TIMEOUT": "2"}
    result = run_vocal("setup", "--engine", "chatterbox", env=env)
    lines = result.stderr.decode().strip().splitlines()
    assert result.returncode == 5, result.stderr
    assert lines[-1].startswith("vocal: error: could not download the Chatterbox weights")
    assert rung.exists(), "a failed download must not reset what the ladder learnt"
    assert not (vocal_home / "config.toml").exists()


def test_offline_whisper_model_is_exit_5_and_writes_nothing(vocal_home: Path) -> None:
    env = {"HF_HUB_OFFLINE": "1"}
    result = run_vocal("setup", "--model", "base.en", env=env)
    assert result.returncode == 5, result.stderr
    assert result.stderr.decode().splitlines()[-1].startswith("vocal: error: ")
    assert b"resumes where it stopped" in result.stderr
    assert not (vocal_home / "config.toml").exists()


def test_a_partial_download_in_the_cache_does_not_break_a_retry(tmp_path: Path) -> None:
    # What an interrupted huggingface_hub download leaves: a blob still named .incomplete.
    repo = tmp_path / "hf" / "hub" / "models--Systran--faster-whisper-base.en"
    (repo / "blobs").mkdir(parents=True)
    (repo / "blobs" / ("0" * 64 + ".incomplete")).write_bytes(b"\0" * 4096)
    (repo / "refs").mkdir()
    env = {"HF_HOME": str(tmp_path / "hf"), "HF_HUB_OFFLINE": "1"}
    for _ in range(2):  # the retry meets the same partial file and fails just as cleanly
        result = run_vocal("setup", "--model", "base.en", "--no-proof", env=env)
        assert result.returncode == 5, result.stderr
        assert b"Traceback" not in result.stderr
    assert (repo / "blobs" / ("0" * 64 + ".incomplete")).exists(), "kept for resuming"


def test_write_config_keeps_other_keys_and_comments(tmp_path: Path) -> None:
    path = tmp_path / "config.toml"
    path.write_text('# mine\nsilence_ms = 500  # quick\nstt_model = "small.en"\n\n[extra]\nx = 1\n')
    write_config(path, {"stt_model": "base.en", "voice": 'a "quoted" voice'})
    text = path.read_text()
    assert text.startswith('# mine\nsilence_ms = 500  # quick\nstt_model = "base.en"\n')
    assert 'voice = "a \\"quoted\\" voice"' in text and text.endswith("[extra]\nx = 1\n")
    assert list(tmp_path.iterdir()) == [path], "no temporary file left behind"


def existing_config(home: Path, text: str) -> Path:
    """A config.toml the person already has."""
    home.mkdir(parents=True)
    (home / "config.toml").write_text(text)
    return home / "config.toml"


@pytest.mark.audio
@pytest.mark.usefixtures("pulse")
def test_the_proof_passes_on_the_loopback_and_only_then_writes(vocal_home: Path) -> None:
    config = existing_config(vocal_home, "# my settings\nsilence_ms = 700\n")
    with SimulatedPerson(vocal_home / "run", ANSWER) as person:
        result = run_vocal("setup", "--model", "tiny.en", "--json", timeout=180)
    assert person.answered.is_set()
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    payload = json.loads(result.stdout)
    assert word_error_rate(ANSWER, payload["heard"]) <= 0.35, payload
    assert payload["written"] == {"stt_model": "tiny.en"}
    assert config.read_text() == '# my settings\nsilence_ms = 700\nstt_model = "tiny.en"\n'


@pytest.mark.audio
@pytest.mark.usefixtures("pulse")
def test_a_proof_nobody_answers_is_exit_4_and_writes_nothing(vocal_home: Path) -> None:
    config = existing_config(vocal_home, 'stt_model = "tiny.en"\n')
    before = config.stat().st_mtime_ns, config.read_bytes()
    env = {"VOCAL_NO_SPEECH_TIMEOUT": "1.5"}
    result = run_vocal("setup", "--tts-engine", "espeak-ng", env=env, timeout=120)
    assert result.returncode == 4, result.stderr.decode()[-2000:]
    assert "nothing was written" in result.stderr.decode().splitlines()[-1]
    assert (config.stat().st_mtime_ns, config.read_bytes()) == before
    assert sorted(p.name for p in vocal_home.iterdir() if p.name.startswith(".config")) == []
