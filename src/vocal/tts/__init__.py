"""Text to speech: one interface that yields audio sentence by sentence, engines by name.

An engine turns one sentence into mono float32 samples at its `sample_rate`. The caller splits
text into sentences and synthesizes the next while the current one plays (vocal.speech).
Engines are listed in `ENGINES` as "module:Class" strings and imported on demand.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, ClassVar

from vocal.errors import EngineError

if TYPE_CHECKING:
    import numpy as np

#: name -> "module:Class"; the class takes (voice: str | None = None, **options).
ENGINES: dict[str, str] = {
    "hibari": "vocal.tts.hibari:HibariEngine",
}
#: What to install when an engine is missing.
INSTALL_HINTS: dict[str, str] = {
    "hibari": "pip install hibari-tts",
}


class TtsEngine:
    """Base of every synthesis engine: subclasses implement `synthesize` for one sentence."""

    name: ClassVar[str] = ""
    sample_rate: int = 24_000
    #: False for engines that can only read English: lines with no Latin letter are skipped.
    multilingual: ClassVar[bool] = False

    def synthesize(self, sentence: str, *, speed: float = 1.0) -> np.ndarray:
        """Mono float32 samples at `sample_rate` for one sentence."""
        raise NotImplementedError

    def stream(self, sentences: list[str], *, speed: float = 1.0) -> Iterator[np.ndarray]:
        """One array per sentence, each as soon as it is ready."""
        for sentence in sentences:
            yield self.synthesize(sentence, speed=speed)


def load_tts(name: str = "hibari", voice: str | None = None, **options: object) -> TtsEngine:
    """Import and construct engine `name` for `voice` (None: the engine's default voice)."""
    target = ENGINES.get(name)
    if target is None:
        raise EngineError(f"unknown speech engine {name!r}", hint=f"one of {', '.join(ENGINES)}")
    module_name, class_name = target.split(":")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise EngineError(
            f"the {name} speech engine is not installed ({exc})", hint=INSTALL_HINTS.get(name)
        ) from None
    return getattr(module, class_name)(voice=voice, **options)
