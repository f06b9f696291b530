"""`vocal doctor`'s end-of-turn line (vocal.ops.turn_check): which models a turn will have."""

from __future__ import annotations

import json
from dataclasses import replace

import pytest

from harness.runner import run_vocal
from vocal.config import Settings
from vocal.hearing.words_model import MODEL_ENV
from vocal.ops.check import OK, WARN
from vocal.ops.turn_check import check_end_of_turn


def test_both_models_found_where_vocal_words_is_installed() -> None:
    check = check_end_of_turn(Settings())
    assert check.status == OK and "smart-turn" in check.detail and ".gguf" in check.detail


def test_a_missing_words_model_is_a_warning_with_its_fix(monkeypatch, tmp_path) -> None:  # noqa: ANN001
    monkeypatch.setenv(MODEL_ENV, str(tmp_path / "missing.gguf"))
    check = check_end_of_turn(Settings())
    assert check.status == WARN and "missing.gguf" in check.detail and check.fix


def test_models_turned_off_are_said_so() -> None:
    assert "words' model off" in check_end_of_turn(replace(Settings(), words_model=False)).detail
    off = check_end_of_turn(replace(Settings(), turn_model=False))
    assert off.status == OK and "silence_ms" in off.detail


@pytest.mark.usefixtures("pulse")
def test_the_doctor_reports_it() -> None:
    result = run_vocal("doctor", "--json", "--listen-s", "0.3", timeout=60)
    lines = {check["name"]: check for check in json.loads(result.stdout)}
    assert lines["end of turn"]["status"] == OK, lines["end of turn"]
