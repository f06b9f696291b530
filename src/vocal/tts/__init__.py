"""Text to speech: one interface that yields audio sentence by sentence, engines by name.

An engine turns one sentence into mono float32 samples at its `sample_rate`. The caller splits
text into sentences and synthesizes the next while the current one plays (vocal.speaking.speech).
Engines are listed in `ENGINES` as "module:Class" strings and imported on demand, so naming one
costs nothing until it speaks (docs/design.md, "Fast start").

Voices: every engine has built-in voices (`voice_names(engine)`); `None` is the engine's
default. An unknown voice is a `UsageError` (exit 2) that lists the known ones; a missing engine
(binary, package or platform) is an `EngineError` (exit 5) that says how to install it.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from vocal.config import Settings
from vocal.errors import EngineError, UsageError

if TYPE_CHECKING:
    import numpy as np

#: name -> "module:Class"; the class takes (voice: str | None = None, **options).
ENGINES: dict[str, str] = {
    "hibari": "vocal.tts.hibari:HibariEngine",
    "espeak-ng": "vocal.tts.espeak:EspeakEngine",
    "say": "vocal.tts.say:SayEngine",
    "piper": "vocal.tts.piper:PiperEngine",
    "openai": "vocal.tts.http:OpenAiEngine",
    "elevenlabs": "vocal.tts.http:ElevenLabsEngine",
    "chatterbox": "vocal.tts.chatterbox:ChatterboxEngine",
}
#: Other names people type for an engine.
ALIASES: dict[str, str] = {"espeak": "espeak-ng", "macos": "say", "eleven": "elevenlabs"}
#: What to install when an engine is missing.
INSTALL_HINTS: dict[str, str] = {
    "hibari": "pip install hibari-tts",
    "espeak-ng": "install espeak-ng: `sudo apt-get install espeak-ng` on Debian/Ubuntu, "
    "`brew install espeak-ng` on macOS",
    "say": "`say` comes with macOS; on other systems use --engine hibari or espeak-ng",
    "piper": "pip install 'vocal[piper]' and put a voice (NAME.onnx + NAME.onnx.json) in "
    "~/.vocal/piper, e.g. `python -m piper.download_voices en_US-lessac-medium "
    "--data-dir ~/.vocal/piper`",
    "openai": "set OPENAI_API_KEY (and VOCAL_OPENAI_BASE_URL for another compatible server)",
    "elevenlabs": "set ELEVENLABS_API_KEY",
    "chatterbox": "pip install 'vocal[chatterbox]', then `vocal setup --engine chatterbox`",
}


class TtsEngine:
    """Base of every synthesis engine: subclasses implement `synthesize` for one sentence.

    Constructing an engine loads what it needs (model, binary check, API key) and raises
    `EngineError` when it cannot, or `UsageError` for a voice it does not have; `synthesize` may
    still raise `EngineError` (a server that went away). Constructors take `voice` and keyword
    options; the speech layer passes `settings=` (vocal's Settings) to every engine, so each
    accepts and ignores options meant for others. Engines are used from one thread at a time.
    """

    name: ClassVar[str] = ""
    sample_rate: int = 24_000
    #: False for engines that can only read English: lines with no Latin letter are skipped.
    multilingual: ClassVar[bool] = False
    #: The voice in use (None: the engine's default).
    voice: str | None = None
    #: Modules the speech worker (vocal.speaking.worker) imports before it builds the engine.
    preload_modules: ClassVar[tuple[str, ...]] = ()

    if TYPE_CHECKING:
        # The constructor every engine defines (ENGINES' contract, `load_tts` calls it); stated
        # for the type checker only, as the base has no state of its own to set up.
        def __init__(self, voice: str | None = None, **options: object) -> None: ...

    def synthesize(self, sentence: str, *, speed: float = 1.0) -> np.ndarray:
        """Mono float32 samples at `sample_rate` for one sentence."""
        raise NotImplementedError

    def stream(self, sentences: list[str], *, speed: float = 1.0) -> Iterator[np.ndarray]:
        """One array per sentence, each as soon as it is ready."""
        for sentence in sentences:
            yield self.synthesize(sentence, speed=speed)

    @property
    def english_only(self) -> bool:
        """True when lines with no Latin letter should be skipped rather than read."""
        return not self.multilingual

    @classmethod
    def voice_names(cls, *, settings: Settings | None = None, **options: object) -> list[str]:
        """The engine's built-in voices, default first ([] when they cannot be listed)."""
        return []

    def close(self) -> None:
        """Release what the engine holds; called once the last sentence is synthesized."""


def tts_cache_dir(settings: Settings) -> Path:
    """Where engines keep derived files: `settings.tts_cache_dir` or <cache_dir>/tts."""
    return Path(settings.tts_cache_dir) if settings.tts_cache_dir else settings.cache_dir / "tts"


def canonical_name(name: str) -> str:
    """The registry name for `name` or one of its aliases; raises UsageError for unknown ones."""
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in ENGINES:
        raise UsageError(f"unknown speech engine {name!r}", hint=f"one of {', '.join(ENGINES)}")
    return key


def engine_class(name: str) -> type[TtsEngine]:
    """Import engine `name`'s class; a missing dependency is an EngineError naming the fix."""
    name = canonical_name(name)
    module_name, class_name = ENGINES[name].split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise EngineError(
            f"the {name} speech engine is not installed ({exc})", hint=INSTALL_HINTS.get(name)
        ) from None
    return getattr(module, class_name)


def voice_names(name: str, *, settings: Settings | None = None) -> list[str]:
    """Built-in voices of engine `name` ([] when the engine is missing)."""
    try:
        return engine_class(name).voice_names(settings=settings)
    except EngineError:
        return []


def load_tts(
    name: str = Settings.tts_engine, voice: str | None = None, **options: object
) -> TtsEngine:
    """Import and construct engine `name` for `voice` (None: the engine's default voice)."""
    return engine_class(name)(voice=voice, **options)


def unknown_voice(engine: str, voice: str, known: list[str]) -> UsageError:
    """The error for a voice an engine does not have, listing a few it does."""
    shown = ", ".join(known[:12]) + (", ..." if len(known) > 12 else "")
    hint = f"{engine} voices: {shown}" if known else None
    return UsageError(f"unknown voice {voice!r} for the {engine} engine", hint=hint)


__all__ = [
    "ENGINES",
    "ALIASES",
    "INSTALL_HINTS",
    "TtsEngine",
    "canonical_name",
    "engine_class",
    "load_tts",
    "tts_cache_dir",
    "unknown_voice",
    "voice_names",
]
