"""Which engine speaks a `--voice` name: the one place a voice name becomes (engine, voice).

A stored voice (vocal.tts.voices) speaks through the Chatterbox engine (and fails with exit 5,
naming the missing files, when its weights are absent, rather than speaking in another voice);
any other name goes to an engine as one of its built-in voices.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vocal.errors import UsageError
from vocal.tts import canonical_name, unknown_voice, voice_names
from vocal.tts.voices import CLONING_ENGINE, VoiceStore

if TYPE_CHECKING:
    from vocal.config import Settings


# -- which engine speaks a --voice ------------------------------------------------------------
def check_cloning_available(settings: Settings, voice: str | None = None) -> None:
    """Raise `EngineError` (exit 5) naming every missing Chatterbox file and how to get them."""
    from vocal.tts.chatterbox_weights import find_weights

    find_weights(settings, voice=voice)


def resolve_stored_voice(
    name: str | None,
    settings: Settings,
    *,
    engine: str | None = None,
    check: bool = True,
) -> tuple[str, str | None]:
    """The engine and voice that speak `--voice NAME`.

    - A stored voice: ("chatterbox", path of its reference clip). With `check`, the cloning
      weights must be present: otherwise an `EngineError` (exit 5) says exactly which files are
      missing and how to get them, instead of speaking in another voice.
    - Any other name (an espeak or hibari voice, ...) or None: (engine or settings.tts_engine,
      name) for that engine to accept or refuse as one of its built-in voices.

    `name` None falls back to `settings.voice`. `engine` is an explicit `--engine`: asking a
    non-cloning engine for a stored voice is a `UsageError`, not a silent switch.
    """
    name = name if name is not None else settings.voice
    found = stored_voice(name, settings, engine=engine, check=check)
    if found is not None:
        return found
    return (engine or settings.tts_engine), name


def stored_voice(
    name: str | None,
    settings: Settings,
    *,
    engine: str | None = None,
    check: bool = True,
) -> tuple[str, str] | None:
    """("chatterbox", reference clip path) when `name` is a stored voice, else None.

    The first step of any voice resolution (`resolve_voice`, `resolve_stored_voice`, or an engine
    search of one's own): stored voices win over engines' built-in voices of the same name. Raises
    like `resolve_voice` for a stored voice that cannot speak.
    """
    store = VoiceStore.from_settings(settings)
    if name is None or not store.exists(name):
        return None
    if engine is not None and engine != CLONING_ENGINE:
        raise UsageError(
            f"{name!r} is a cloned voice, which only the {CLONING_ENGINE} engine speaks",
            hint=f"drop --engine {engine}, or use --engine {CLONING_ENGINE}",
        )
    reference = store.get(name).reference()
    if check:
        check_cloning_available(settings, voice=name)
    return CLONING_ENGINE, str(reference)


#: Engines searched for a voice name when no engine is named (local ones: listing is free).
_VOICE_SEARCH = ("hibari", "espeak-ng", "piper")


def resolve_voice(
    voice: str | None, engine: str | None, settings: Settings
) -> tuple[str, str | None]:
    """The one place a voice name becomes (engine name, engine voice).

    `voice` may be "ENGINE:VOICE". With an engine named (flag, VOCAL_TTS_ENGINE or config), the
    voice is that engine's and the engine checks it. With none, a voice of the default engine
    is used as is, else the first local engine that has a voice of that name (`--voice en-gb`
    picks espeak-ng). A stored voice (`vocal voices add`) comes first, before any engine's
    built-in voice of that name: it speaks through the chatterbox engine, and the voice is the
    path of its reference clip; its cloning weights must be there (else an `EngineError`,
    exit 5, naming the missing files and how to get them, rather than another voice).
    """
    if voice is not None and ":" in voice and not voice.startswith(("/", ".", "~")):
        prefix, _, rest = voice.partition(":")
        return canonical_name(prefix), rest or None
    # Stored voice names hold no ":" (vocal.tts.voices.validate_voice_name). Looking at the
    # directory first keeps `--voice en-gb` from importing the voice store.
    if voice is not None and "/" not in voice and (settings.voices_dir / voice).is_dir():
        found = stored_voice(voice, settings, engine=canonical_name(engine) if engine else None)
        if found is not None:
            return found
    name = canonical_name(engine or settings.tts_engine)
    if voice is None or engine is not None:
        return name, voice
    for candidate in (name, *[e for e in _VOICE_SEARCH if e != name]):
        if voice in voice_names(candidate, settings=settings):
            return candidate, voice
    if name not in _VOICE_SEARCH:  # HTTP engines: the server knows its voices
        return name, voice
    raise unknown_voice(name, voice, voice_names(name, settings=settings))


__all__ = ["check_cloning_available", "resolve_stored_voice", "resolve_voice", "stored_voice"]
