"""Settings precedence: flags > VOCAL_* environment > config.toml > defaults."""

from __future__ import annotations

from pathlib import Path

import pytest

from vocal.config import Settings, load_settings
from vocal.errors import UsageError
from vocal.floor.statedir import ensure_private_dir


def test_defaults_and_home_from_environment(vocal_home: Path) -> None:
    settings = load_settings()
    assert settings.home == vocal_home
    assert settings.silence_ms == Settings().silence_ms
    assert settings.voices_dir == vocal_home / "voices"


def test_precedence_flag_over_env_over_file_over_default(
    vocal_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    vocal_home.mkdir(parents=True)
    (vocal_home / "config.toml").write_text(
        'silence_ms = 900\ntts_engine = "espeak-ng"\nspeed = 1.2\nvoice = "heart"\n'
    )
    settings = load_settings()
    assert (settings.silence_ms, settings.tts_engine, settings.speed) == (900, "espeak-ng", 1.2)

    monkeypatch.setenv("VOCAL_SILENCE_MS", "500")
    monkeypatch.setenv("VOCAL_CONCH_LOCK_EXPIRY", "7.5")  # a documented name without the _s
    settings = load_settings()
    assert settings.silence_ms == 500 and settings.conch_lock_expiry_s == 7.5
    assert settings.tts_engine == "espeak-ng"

    settings = load_settings(silence_ms=300, tts_engine=None)
    assert settings.silence_ms == 300 and settings.tts_engine == "espeak-ng"


def test_empty_env_clears_an_optional_setting(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOCAL_VOICE", "")
    assert load_settings().voice is None


def test_flag_home_overrides_env(tmp_path: Path) -> None:
    assert load_settings(home=tmp_path / "elsewhere").home == tmp_path / "elsewhere"


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("silence_ms = [", "not valid TOML"),
        ("no_such_setting = 1", "unknown setting"),
        ('silence_ms = "long"', "must be int"),
        # Issue 17: read as numbers they reached the endpointer as NaN, or as 700 from 700.5.
        ("max_seconds = nan", "must be a finite number"),
        ("silence_ms = inf", "must be int"),
        ("silence_ms = 700.5", "must be int"),
        ("speed = 0.1", "between 0.25 and 4.0"),
        ("voice = [1, 2]", "must be str"),
        ("stt_model = 1979-05-27", "must be str"),
        ('voice = "a\\u0000b"', "must be str"),
    ],
)
def test_bad_config_file_is_a_usage_error(vocal_home: Path, content: str, message: str) -> None:
    vocal_home.mkdir(parents=True)
    (vocal_home / "config.toml").write_text(content)
    with pytest.raises(UsageError, match=message):
        load_settings()


def test_bad_environment_value_names_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOCAL_HISTORY_SIZE", "many")
    with pytest.raises(UsageError, match="VOCAL_HISTORY_SIZE"):
        load_settings()


def test_private_dir_is_0700(tmp_path: Path) -> None:
    path = ensure_private_dir(tmp_path / "a" / "run")
    assert path.stat().st_mode & 0o777 == 0o700
