"""Settings: flags > `VOCAL_*` environment > `config.toml` > defaults, and the state directory.

Every setting is a field of `Settings`. Its environment variable is `VOCAL_<NAME>` unless the field
names another in its metadata, and its key in `config.toml` is the field name. The state directory
(`VOCAL_HOME`, default `~/.vocal`) holds `config.toml` and everything vocal keeps between
invocations: conch, control sockets, history, voices, gates, caches and logs.

This module is on the `--help` path: standard library only.
"""

from __future__ import annotations

import dataclasses
import os
import sys
from dataclasses import dataclass, field
from pathlib import Path

from vocal.errors import UsageError

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - exercised on 3.10 only
    import tomli as tomllib

CONFIG_FILE_NAME = "config.toml"


def _env(name: str) -> dict[str, str]:
    return {"env": name}


@dataclass(frozen=True)
class Settings:
    """Every tunable of vocal, resolved once per process by `load_settings`."""

    home: Path = field(default_factory=lambda: Path.home() / ".vocal")
    # Audio devices: None is PortAudio's default; a number is a device index, text a name part.
    input_device: str | None = None
    output_device: str | None = None
    # Listening.
    stt_engine: str = "auto"
    stt_model: str = "tiny.en"
    language: str = "en"
    silence_ms: int = 700
    max_seconds: float = 60.0
    no_speech_timeout_s: float = field(default=15.0, metadata=_env("VOCAL_NO_SPEECH_TIMEOUT"))
    # Speaking.
    tts_engine: str = "hibari"
    voice: str | None = None
    speed: float = 1.0
    # Turn-taking and history.
    conch_lock_expiry_s: float = field(default=120.0, metadata=_env("VOCAL_CONCH_LOCK_EXPIRY"))
    conch_timeout_s: float = field(default=300.0, metadata=_env("VOCAL_CONCH_TIMEOUT"))
    history_size: int = 8

    # -- the state directory's layout --------------------------------------------------------
    @property
    def config_path(self) -> Path:
        return self.home / CONFIG_FILE_NAME

    @property
    def run_dir(self) -> Path:
        """Control sockets; created 0700."""
        return self.home / "run"

    @property
    def conch_dir(self) -> Path:
        return self.home / "conch"

    @property
    def history_dir(self) -> Path:
        return self.home / "history"

    @property
    def voices_dir(self) -> Path:
        override = os.environ.get("VOCAL_VOICES_DIR")
        return Path(override).expanduser() if override else self.home / "voices"

    @property
    def cache_dir(self) -> Path:
        """Downloaded and converted models, encoded references: safe to delete."""
        return self.home / "cache"

    @property
    def log_dir(self) -> Path:
        return self.home / "logs"


def env_name(f: dataclasses.Field) -> str:
    """The environment variable that sets field `f`."""
    return f.metadata.get("env", f"VOCAL_{f.name.upper()}")


def _convert(name: str, raw: object, annotation: str) -> object:
    """Turn a value from the environment or TOML into the field's type, or raise UsageError."""
    optional = "None" in annotation
    base = annotation.replace("| None", "").strip()
    if raw is None or (optional and isinstance(raw, str) and raw.strip() == ""):
        return None
    try:
        if base == "bool":
            if isinstance(raw, bool):
                return raw
            text = str(raw).strip().lower()
            if text in ("1", "true", "yes", "on"):
                return True
            if text in ("0", "false", "no", "off"):
                return False
            raise ValueError(text)
        if base == "int":
            if isinstance(raw, bool):
                raise ValueError(raw)
            return int(raw)
        if base == "float":
            if isinstance(raw, bool):
                raise ValueError(raw)
            return float(raw)
        if base == "Path":
            return Path(str(raw)).expanduser()
        return str(raw)
    except ValueError:
        raise UsageError(f"setting {name!r} must be {base}, got {raw!r}") from None


def read_config_file(path: Path) -> dict[str, object]:
    """The `[vocal]`-less flat table of `config.toml`, or {} when there is no file."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return {}
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    try:
        return tomllib.loads(data.decode("utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path} is not valid TOML: {exc}") from None


def load_settings(**flags: object) -> Settings:
    """Resolve settings: `flags` (None means not given) > environment > config.toml > defaults."""
    fields = {f.name: f for f in dataclasses.fields(Settings)}
    unknown = set(flags) - set(fields)
    if unknown:
        raise TypeError(f"unknown settings: {sorted(unknown)}")
    hints = {name: str(f.type) for name, f in fields.items()}

    home_raw = flags.get("home") or os.environ.get("VOCAL_HOME")
    home = Path(str(home_raw)).expanduser() if home_raw else Settings().home
    file_values = read_config_file(home / CONFIG_FILE_NAME)
    bad_keys = set(file_values) - set(fields) - {"home"}
    if bad_keys:
        raise UsageError(
            f"{home / CONFIG_FILE_NAME}: unknown setting(s) {', '.join(sorted(bad_keys))}",
            hint=f"known settings: {', '.join(n for n in fields if n != 'home')}",
        )

    values: dict[str, object] = {"home": home}
    for name, f in fields.items():
        if name == "home":
            continue
        if flags.get(name) is not None:
            values[name] = flags[name]
        elif env_name(f) in os.environ:
            values[name] = _convert(env_name(f), os.environ[env_name(f)], hints[name])
        elif name in file_values:
            values[name] = _convert(name, file_values[name], hints[name])
    return Settings(**values)


def ensure_private_dir(path: Path) -> Path:
    """Create `path` (and parents) and make it 0700: sockets and locks live there."""
    path.mkdir(parents=True, exist_ok=True)
    os.chmod(path, 0o700)
    return path


__all__ = ["Settings", "load_settings", "env_name", "ensure_private_dir", "read_config_file"]
