"""`vocal setup` keeps the real download path; here, with no hub, it must fail clearly."""

from __future__ import annotations

import json
from pathlib import Path

from runner import run_vocal


def test_embedded_defaults_need_nothing() -> None:
    result = run_vocal("setup")
    assert result.returncode == 0
    assert b"need no download" in result.stderr


def test_unknown_engine_is_a_usage_error() -> None:
    result = run_vocal("setup", "--engine", "nope")
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


def test_offline_whisper_model_is_exit_5() -> None:
    env = {"HF_HUB_OFFLINE": "1"}
    result = run_vocal("setup", "--model", "base.en", env=env)
    assert result.returncode == 5, result.stderr
    assert result.stderr.decode().startswith("vocal: error: ")
