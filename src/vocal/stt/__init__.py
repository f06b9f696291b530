"""Speech to text: one interface, engines registered by name and imported on demand.

`load_stt(name, model)` returns a loaded engine; `engine.transcribe(audio)` returns a
`Transcript`. Engines live in their own modules and are listed in `ENGINES` as "module:Class"
strings, so choosing one imports nothing until it is used (docs/design.md, "Fast start").
"""

from __future__ import annotations

import importlib
import platform
import sys
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from vocal.config import Settings
from vocal.errors import EngineError

if TYPE_CHECKING:
    from vocal.audio.wav import Audio

#: name -> "module:Class"; the class takes (model: str, **options).
ENGINES: dict[str, str] = {
    "faster-whisper": "vocal.stt.faster_whisper:FasterWhisperEngine",
    "mlx-whisper": "vocal.stt.mlx_whisper:MlxWhisperEngine",
    "openai": "vocal.stt.openai:OpenAiSttEngine",
}
#: Engines that send the audio to a server: they load no model (nothing to hide in a child
#: process) and are called once per turn, not in pauses (vocal.hearing.early).
REMOTE_ENGINES = frozenset({"openai"})
#: What to `pip install` when an engine's import fails.
INSTALL_HINTS: dict[str, str] = {
    "faster-whisper": "pip install faster-whisper",
    "mlx-whisper": "reinstall vocal (mlx-whisper is its dependency on Apple Silicon), or pip "
    "install --no-deps mlx-whisper (its declared torch is never imported)",
    "openai": "it needs only the standard library: reinstall vocal",
}


@dataclass(frozen=True)
class Transcript:
    """What an engine heard: text, language, and how long decoding took.

    `engine` names the engine that made it (None: the engine it was asked of; a remote
    engine's local fallback names the local one); `fallback_reason` is why the local fallback
    made it instead of the remote engine (vocal.stt.fallback), None when it did not. A segment
    that was mended holds `repaired` and what was `heard` (see `repaired`)."""

    text: str
    language: str | None = None
    duration_s: float = 0.0
    transcribe_s: float = 0.0
    segments: list[dict] = field(default_factory=list)
    engine: str | None = None
    fallback_reason: str | None = None

    @property
    def repaired(self) -> str | None:
        """How a decode that said a phrase twice was mended (vocal.stt.repeats): "retried"
        (decoded again), "removed" (the repetition cut out), or None when none was. Kept in
        the segments, which cross the recognizer's process (vocal.hearing.stt_process)."""
        return next((s["repaired"] for s in self.segments if s.get("repaired")), None)


class SttEngine(Protocol):
    """A loaded speech-to-text model."""

    name: str

    def transcribe(self, audio: Audio) -> Transcript:
        """Transcribe mono 16 kHz (or any: engines resample) audio."""
        ...


def default_engine_name() -> str:
    """mlx-whisper on Apple Silicon, faster-whisper everywhere else."""
    if sys.platform == "darwin" and platform.machine() == "arm64":
        return "mlx-whisper"
    return "faster-whisper"


def local_engine_name(name: str) -> str:
    """The local engine that loads the `stt_model` setting's model for engine setting `name`:
    `name` itself, or the platform's own for "auto" and a remote engine (whose local fallback
    uses that model)."""
    return default_engine_name() if name == "auto" or name in REMOTE_ENGINES else name


def is_remote(engine: object) -> bool:
    """Whether `engine` sends the audio to a server (an engine without the `remote` attribute
    runs here)."""
    return bool(getattr(engine, "remote", False))


def load_stt(
    name: str = Settings.stt_engine, model: str = Settings.stt_model, **options: object
) -> SttEngine:
    """Import and load engine `name` ("auto" picks by platform, never a remote engine) with
    `model`."""
    if name == "auto":
        name = default_engine_name()
    target = ENGINES.get(name)
    if target is None:
        raise EngineError(
            f"unknown speech-to-text engine {name!r}", hint=f"one of {', '.join(ENGINES)}"
        )
    module_name, class_name = target.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise EngineError(
            f"the {name} engine is not installed ({exc})", hint=INSTALL_HINTS.get(name)
        ) from None
    return getattr(module, class_name)(model, **options)
