"""Settings: flags > `VOCAL_*` environment > `config.toml` > defaults.

Every setting is a field of `Settings`. Its environment variable is `VOCAL_<NAME>` unless the field
names another in its metadata, and its key in `config.toml` is the field name. The state directory
(`VOCAL_HOME`, default `~/.vocal`) holds `config.toml` and everything vocal keeps between
invocations: conch, control sockets, history, voices, gates, caches and logs (it is made and
checked by vocal.floor.statedir).

This module is on the `--help` path: standard library only.
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import os
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from vocal.errors import UsageError
from vocal.setting_limits import (
    SETTING_CHOICES,
    SETTING_MAX_CHARS,
    SETTING_RANGES,
    FlagRange,
    flag_range,
)

CONFIG_FILE_NAME = "config.toml"


def _env(name: str) -> dict[str, str]:
    return {"env": name}


@dataclass(frozen=True)
class Settings:
    """Every tunable of vocal, resolved once per process by `load_settings`. Each default is
    stated here once (issue 38): it is also the field's class attribute (`Settings.silence_ms`),
    where the options classes that mirror a setting and the flags' `--help` read it."""

    home: Path = field(default_factory=lambda: Path.home() / ".vocal")

    # -- devices: None is PortAudio's default; a number is a device index, text a name part.
    input_device: str | None = None
    output_device: str | None = None

    # -- listening and recognition. stt_engine: auto (the platform's local engine),
    # faster-whisper, mlx-whisper or openai (remote, below); stt_model: the local engines'
    # Whisper model (also the fallback's). early_transcription_ms: how long a pause lasts before
    # Whisper starts on the utterance so far (vocal.hearing.listening, benchmarks/listen).
    stt_engine: str = "auto"
    stt_model: str = "tiny.en"
    language: str = "en"
    # Beam width of faster-whisper's decoding (mlx-whisper decodes greedily): chosen on the
    # real-speech corpus, benchmarks/decode (issue 16).
    stt_beam_size: int = 5
    max_seconds: float = 60.0
    no_speech_timeout_s: float = field(default=15.0, metadata=_env("VOCAL_NO_SPEECH_TIMEOUT"))
    # Vocabulary hints (issue 21, vocal.stt.hints): stt_hints is text the recognizer should
    # expect (names, identifiers), or @FILE; with stt_hints_git, inside a git repository the
    # identifiers of the files being worked on (changed, new, the last 3 commits') are added.
    # The hints are Whisper's prompt (stt_hints_prompt) and the names in them are written as
    # spelled once heard (vocal.stt.respell); without the prompt the decode is untouched.
    stt_hints: str | None = None
    stt_hints_git: bool = False
    stt_hints_prompt: bool = True
    early_transcription_ms: int = 32

    # -- remote recognition (issue 21, vocal.stt.openai): stt_engine "openai" uploads each
    # turn's utterance once to {openai_stt_base_url}/audio/transcriptions (unset:
    # openai_base_url), with the key in OPENAI_API_KEY; openai_stt_timeout_s bounds the whole
    # request, retries included; openai_stt_prompt is sent as the recognizer's prompt (names,
    # jargon). stt_fallback: when the remote engine fails, the same utterance is transcribed by
    # a local engine ("local": the platform's own, or faster-whisper, mlx-whisper) with
    # stt_model; unset, the failure is the turn's error (exit 5).
    openai_stt_base_url: str | None = None
    openai_stt_model: str = "whisper-1"
    openai_stt_timeout_s: float = field(default=10.0, metadata=_env("VOCAL_OPENAI_STT_TIMEOUT"))
    openai_stt_prompt: str | None = None
    stt_fallback: str | None = None

    # -- end of turn (issues 16 and 36, vocal.hearing.endofturn): after turn_check_ms of
    # silence the voice (Smart Turn v3), the last word and the words' model (words_model:
    # SmolLM2, with vocal[words]) set how long the pause must last: short when all say
    # finished, up to max_pause_ms when the words say unfinished; with turn_model off,
    # silence_ms.
    silence_ms: int = 700
    turn_model: bool = True
    words_model: bool = True
    turn_check_ms: int = 160
    max_pause_ms: int = 2500

    # -- waking (issue 39, vocal.wake): the phrase `vocal wake` listens for when given none. A
    # bundled one (alexa, hey jarvis, hey mycroft, okay nabu) has its own model (vocal[wake]);
    # Whisper hears any other. `converse --wake` waits this long for it: a person stepping away.
    wake_phrase: str = "hey jarvis"
    wake_timeout_s: float = 300.0

    # -- speaking and voices.
    tts_engine: str = "hibari"
    voice: str | None = None
    speed: float = 1.0
    # Each sentence is cut to its sound and followed by this pause (half after a first clause
    # split off to start sooner): engines pad unevenly, hibari ~0.75 s between two sentences,
    # 0.3 s of it before the first word (vocal.speaking.trim, issue 19).
    sentence_pause_ms: int = 400
    # How long a reader of a message's pieces waits for a missing one (issue 9).
    piece_timeout_s: float = field(default=3.0, metadata=_env("VOCAL_PIECE_TIMEOUT"))
    # Engines' derived files (hibari's optimized model and G2P tables), default <cache_dir>/tts.
    tts_cache_dir: Path | None = None
    piper_voices_dir: Path | None = None
    # Cloned voices (issue 5, Chatterbox ONNX). chatterbox_dir: a local directory holding the
    # weights (default: downloaded into cache_dir); chatterbox_providers: a comma-separated
    # execution-provider ladder, best first (default: the GPU providers onnxruntime offers, CPU).
    chatterbox_dir: Path | None = None
    chatterbox_repo: str = "onnx-community/chatterbox-ONNX"
    chatterbox_providers: str | None = None
    # Cues (issue 8): what plays `vocal cue` files: "auto" (paplay on Linux, else PortAudio),
    # "paplay" or "portaudio" (vocal.agents.cues, benchmarks/cue).
    cue_player: str = "auto"

    # -- remote speech (issue 4): keys come from OPENAI_API_KEY and ELEVENLABS_API_KEY;
    # tts_http_timeout_s bounds each sentence's whole exchange. openai_base_url is remote
    # recognition's too, unless openai_stt_base_url is set.
    tts_http_timeout_s: float = field(default=20.0, metadata=_env("VOCAL_TTS_HTTP_TIMEOUT"))
    openai_base_url: str = "https://api.openai.com/v1"
    openai_tts_model: str = "gpt-4o-mini-tts"
    elevenlabs_base_url: str = "https://api.elevenlabs.io"
    elevenlabs_model: str = "eleven_flash_v2_5"

    # -- the floor: conch, focus, sessions, history (issues 6, 10). conch_mode: "wait" blocks for
    # the floor, "callback" returns at once (exit 3). A waiter with no process (remote agents)
    # keeps its place conch_remote_ttl_s; `vocal conch wait` blocks at most conch_wait_cap_s (a
    # remote agent's tool call must return). auto_focus_pane: select the tmux pane of the agent
    # that takes the floor; focus_hold_s: how long a pane the person chose keeps focus
    # (vocal.floor.focus). session, agent: who is speaking, set in an agent's environment.
    conch_mode: str = "wait"
    conch_lock_expiry_s: float = field(default=120.0, metadata=_env("VOCAL_CONCH_LOCK_EXPIRY"))
    conch_timeout_s: float = field(default=300.0, metadata=_env("VOCAL_CONCH_TIMEOUT"))
    conch_remote_ttl_s: float = field(default=90.0, metadata=_env("VOCAL_CONCH_REMOTE_TTL"))
    conch_wait_cap_s: float = field(default=60.0, metadata=_env("VOCAL_CONCH_WAIT_CAP"))
    auto_focus_pane: bool = False
    focus_hold_s: float = field(default=30.0, metadata=_env("VOCAL_FOCUS_HOLD_SECONDS"))
    session: str | None = None
    agent: str | None = None
    history_size: int = 8

    # -- barge-in and echo (issue 7). aec: "auto" (off only on headphones the platform
    # reports, vocal.audio.headphones), "on" or "off". Barge-in needs AEC; the detector's
    # options (vocal.duplex.bargein.detector.BargeInOptions) take these as their defaults and
    # hold the rest (measured, benchmarks/aec).
    aec: str = "auto"
    barge_in: bool = True
    barge_in_chunks: int = 3
    barge_in_threshold: float = 0.5
    # barge_in_onset_threshold: a lower probability allowed for the first chunk of a barge-in's
    # run (BargeInOptions.onset_threshold); unset: off (measured: benchmarks/aec).
    barge_in_onset_threshold: float | None = None
    # barge_in_fast_chunks: chunks enough while the canceller is known to cancel well
    # (BargeInOptions.fast_chunks); empty: always barge_in_chunks.
    barge_in_fast_chunks: int | None = 2
    # barge_in_double_talk_db: a barge-in's run fires only once one of its chunks is this many
    # dB louder at the raw microphone than the echo the played level predicts: residual echo
    # adds nothing there, a person does (BargeInOptions.double_talk_db); empty: off (a person
    # much quieter than the reply's echo is then heard too, and so may be echo).
    barge_in_double_talk_db: float | None = 2.0
    # barge_in_strong_chunk_db: one speech chunk this many dB above the predicted echo decides
    # a barge-in alone (BargeInOptions.strong_chunk_db); empty: always a run of chunks.
    barge_in_strong_chunk_db: float | None = 6.0
    # barge_in_backchannels: a short "yeah" / "mm-hmm" / "okay" over the reply pauses it and
    # lets it go on; a stop word ("stop", "wait", "no") or anything longer stops it
    # (vocal.duplex.bargein.backchannel). false: any barge-in stops the reply at once.
    barge_in_backchannels: bool = True
    # barge_in_trace: diagnostics, `vocal converse --json` also carries the detector's trace
    # (capture time, speech probability, inhibited) of every chunk (benchmarks/converse).
    barge_in_trace: bool = False

    # -- start-up (issues 3, 4, 7; benchmarks/listen, converse). stt_warm_up: run Whisper once
    # on near-silence right after it loads (its first call is slower). stt_process: a converse
    # turn loads and runs the recognizer in a child process, so that loading it (long native
    # stretches holding the GIL) does not starve the reply's audio callbacks
    # (vocal.hearing.stt_process); false: in the turn's own process, as `listen` does.
    stt_warm_up: bool = True
    stt_process: bool = True

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
    """Turn a value from the environment or TOML into the field's type, or raise UsageError.

    NaN and infinity are refused wherever a number is read (NaN passes every `<` check
    downstream), and so are a TOML float for an int setting that is not a whole number, TOML
    arrays, tables and dates, NUL characters, and values outside their range (`SETTING_RANGES`,
    `SETTING_MAX_CHARS`, `SETTING_CHOICES`)."""
    optional = "None" in annotation
    base = annotation.replace("| None", "").strip()
    if raw is None or (optional and isinstance(raw, str) and raw.strip() == ""):
        return None
    try:
        value = _scalar(raw, base)
    except (ValueError, OverflowError, TypeError):
        raise UsageError(f"setting {name!r} must be {base}, got {_shown(raw)}") from None
    if isinstance(value, float):
        require_finite(f"setting {name!r}", value)
    return _check_range(name, value)


def _scalar(raw: object, base: str) -> object:
    """`raw` as a `base` ("bool", "int", "float", "Path" or "str"); ValueError when it is not."""
    if isinstance(raw, str) and "\x00" in raw:
        raise ValueError("NUL in text")
    if not isinstance(raw, (str, int, float)):  # TOML arrays, tables, dates and times
        raise TypeError(type(raw).__name__)
    if base == "bool":
        if isinstance(raw, bool):
            return raw
        text = str(raw).strip().lower()
        if text in ("1", "true", "yes", "on"):
            return True
        if text in ("0", "false", "no", "off"):
            return False
        raise ValueError(text)
    if isinstance(raw, bool) and base in ("int", "float"):
        raise ValueError(raw)
    if base == "int":
        if isinstance(raw, float) and not raw.is_integer():  # 700.5, nan, inf: never rounded
            raise ValueError(raw)
        return int(raw)
    if base == "float":
        return float(raw)
    if base == "Path":
        if not isinstance(raw, str):
            raise TypeError(type(raw).__name__)
        return _expanded(raw)
    return str(raw)


def _expanded(raw: str) -> Path:
    """`raw` with a leading ~ or ~user expanded; ValueError for a user with no home."""
    try:
        return Path(raw).expanduser()
    except RuntimeError:  # "~0": no such user, or no home to expand to
        raise ValueError(raw) from None


def _shown(raw: object) -> str:
    """`raw` for an error message: its repr, cut short (a TOML array may be long)."""
    text = repr(raw)
    return text if len(text) <= 60 else f"{text[:57]}..."


def _check_range(name: str, value: object, field_name: str | None = None) -> object:
    """`value`, or a UsageError naming `name` (a field, its variable or its flag) when it is
    outside the range of its setting (`field_name`, default the one `name` sets): bounds for a
    number, a longest length for a text or a path, the words a mode may be."""
    setting = field_name or _setting_of(name)
    bounds = SETTING_RANGES.get(setting)
    if bounds is not None and isinstance(value, (int, float)) and not isinstance(value, bool):
        low, high = bounds
        if not low <= value <= high:
            raise UsageError(
                f"setting {name!r} must be between {low} and {high}, got {_shown(value)}"
            )
    limit = SETTING_MAX_CHARS.get(setting)
    if limit is not None and isinstance(value, (str, Path)) and len(str(value)) > limit:
        raise UsageError(
            f"setting {name!r} must be at most {limit} characters, got {len(str(value))}"
        )
    choices = SETTING_CHOICES.get(setting)
    if choices is not None and isinstance(value, str) and value.strip().lower() not in choices:
        wanted = ", ".join(choices)
        raise UsageError(f"setting {name!r} must be one of {wanted}, got {_shown(value)}")
    return value


def _setting_of(name: str) -> str:
    """The `Settings` field that `name` (a field name or its environment variable) sets."""
    for f in dataclasses.fields(Settings):
        if name in (f.name, env_name(f)):
            return f.name
    return name


@contextlib.contextmanager
def bad_setting(what: str) -> Iterator[None]:
    """The one place an options class's `ValueError` (`EndpointOptions`, `EndOfTurnOptions`,
    `BargeInOptions` built from these settings and a command's flags) becomes a usage error:
    "bad <what> setting: <why>" (exit 2)."""
    try:
        yield
    except ValueError as exc:
        raise UsageError(f"bad {what} setting: {exc}") from None


def require_finite(name: str, value: float | None) -> float | None:
    """`value` unless it is NaN or infinite, which no option or setting means: a UsageError
    (exit 2) naming `name`. Click's float options take "nan" and "inf" (`--max-seconds nan`
    passes `min=0.1`, since every comparison with NaN is false), and so does `float()`."""
    if value is not None and not math.isfinite(value):
        raise UsageError(f"{name} must be a finite number, got {value}")
    return value


#: config.toml holds a few lines of settings; a larger file is not one (issue 37).
MAX_CONFIG_BYTES = 256 * 1024


def read_config_file(path: Path) -> dict[str, object]:
    """The `[vocal]`-less flat table of `config.toml`, or {} when there is no file."""
    from vocal.files.bounded import BoundedReadError, read_regular

    try:  # a FIFO or /dev/zero linked there is refused, not read forever
        data = read_regular(path, max_bytes=MAX_CONFIG_BYTES, what="the config file")
    except FileNotFoundError:
        return {}
    except BoundedReadError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror}") from None
    return parse_config(data, path)


def parse_config(data: bytes, path: Path) -> dict[str, object]:
    """The table in config.toml's bytes `data` (UsageError naming `path` when not TOML)."""
    # Imported only when there is a file to parse: a cue hook pays 10-17 ms for tomllib.
    if sys.version_info >= (3, 11):
        import tomllib
    else:  # pragma: no cover - exercised on 3.10 only
        import tomli as tomllib
    from vocal.files.bounded import MAX_TOML_KEY_PARTS, toml_key_depth

    try:
        text = data.decode("utf-8")
        if toml_key_depth(text) > MAX_TOML_KEY_PARTS:  # tomllib's cost grows as its square
            deep = f"{path} has a dotted key of over {MAX_TOML_KEY_PARTS} parts"
            raise UsageError(f"{deep}: not vocal's config")
        return tomllib.loads(text)
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path} is not valid TOML: {exc}") from None
    except RecursionError:  # tables nested thousands deep (issue 17)
        raise UsageError(f"{path} is nested too deeply to be vocal's config") from None


def load_settings(**flags: object) -> Settings:
    """Resolve settings: `flags` (None means not given) > environment > config.toml > defaults."""
    fields = {f.name: f for f in dataclasses.fields(Settings)}
    unknown = set(flags) - set(fields)
    if unknown:
        raise TypeError(f"unknown settings: {sorted(unknown)}")
    hints = {name: str(f.type) for name, f in fields.items()}

    home_raw = flags.get("home") or os.environ.get("VOCAL_HOME")
    if home_raw:
        _check_range("home" if flags.get("home") else "VOCAL_HOME", str(home_raw), "home")
    try:
        home = _expanded(str(home_raw)) if home_raw else Settings().home
    except ValueError:
        raise UsageError(f"VOCAL_HOME: cannot expand {_shown(home_raw)}: no such home") from None
    file_values = read_config_file(home / CONFIG_FILE_NAME)
    bad_keys = set(file_values) - set(fields) - {"home"}
    if bad_keys:
        raise UsageError(
            f"{home / CONFIG_FILE_NAME}: unknown setting(s) {', '.join(sorted(bad_keys))}",
            hint=f"known settings: {', '.join(n for n in fields if n != 'home')}",
        )

    # One value per Settings field, each converted to its field's type by _convert: the dict
    # is heterogeneous by construction, so Any is its honest value type.
    values: dict[str, Any] = {"home": home}
    for name, f in fields.items():
        if name == "home":
            continue
        if flags.get(name) is not None:
            value = flags[name]
            if isinstance(value, float):  # a command-line float: click takes "nan" and "inf"
                require_finite(f"--{name.replace('_', '-')}", value)
            values[name] = _check_range(name, value, name)
        elif env_name(f) in os.environ:
            values[name] = _convert(env_name(f), os.environ[env_name(f)], hints[name])
        elif name in file_values:
            values[name] = _convert(name, file_values[name], hints[name])
    return Settings(**values)


__all__ = [
    "FlagRange",
    "SETTING_CHOICES",
    "SETTING_MAX_CHARS",
    "SETTING_RANGES",
    "Settings",
    "flag_range",
    "env_name",
    "load_settings",
    "parse_config",
    "read_config_file",
    "require_finite",
]
