"""The engine a turn speaks with: which engine and voice (`resolve_voice`), and a loader that
adopts the speech worker `vocal.launch` forked or loads the engine in this process
(`engine_loader`).

Both import the engine registry only when called, so a muted turn never loads vocal.tts.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vocal.config import Settings
    from vocal.tts import TtsEngine


def resolve_voice(
    voice: str | None, engine: str | None, settings: Settings
) -> tuple[str, str | None]:
    """`vocal.tts.resolve.resolve_voice`, imported when called (a muted turn never loads
    vocal.tts)."""
    from vocal.tts.resolve import resolve_voice as resolve

    return resolve(voice, engine, settings)


def engine_loader(name: str, voice: str | None, settings: Settings) -> Callable[[], TtsEngine]:
    """A callable that loads engine `name` for `voice` (run it in the worker thread): the
    speech worker `vocal.launch` forked when it guessed this engine and voice, else the engine
    in this process."""
    from vocal.speaking.remote import adopt
    from vocal.tts import load_tts

    def load() -> TtsEngine:
        remote = adopt(name, voice, settings)
        return remote if remote is not None else load_tts(name, voice, settings=settings)

    return load


__all__ = ["engine_loader", "resolve_voice"]
