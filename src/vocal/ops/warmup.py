"""`vocal warmup`: prime every on-disk cache so the first turn pays no lazy set-up.

A Claude Code SessionStart hook runs `vocal warmup --detach`, which returns at once and warms up
in a background process: the speech engine's `prime(settings)` where the engine module has one
(hibari builds its optimized ONNX model and G2P tables there), one short synthesis with its
audio thrown away (engine caches built on first use, imports paged in), the speech-to-text model
loaded once (its files in the page cache; the MLX conversion made), and the audio library's
start-up. Each step is timed; one that fails is reported and skipped.
"""

from __future__ import annotations

import importlib
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypedDict

if TYPE_CHECKING:
    from vocal.config import Settings

WARM_TEXT = "Ready."


class WarmStepDict(TypedDict):
    """`WarmStep.to_dict`: one step of `vocal warmup --json`."""

    name: str
    ms: float
    error: str | None


@dataclass
class WarmStep:
    """One warm-up step: its name, how long it took, and why it was skipped (if it was)."""

    name: str
    ms: float
    error: str | None = None

    def to_dict(self) -> WarmStepDict:
        return {"name": self.name, "ms": round(self.ms, 1), "error": self.error}


def _timed(name: str, action: Callable[[], object]) -> WarmStep:
    started = time.perf_counter()
    try:
        action()
        error = None
    except Exception as exc:  # warming up must never fail a session: report and go on
        error = f"{type(exc).__name__}: {exc}".splitlines()[0][:200]
    return WarmStep(name, (time.perf_counter() - started) * 1000, error)


def _prime_tts(settings: Settings) -> None:
    from vocal.tts import ENGINES, canonical_name

    module = importlib.import_module(ENGINES[canonical_name(settings.tts_engine)].split(":")[0])
    prime = getattr(module, "prime", None)
    if prime is not None:
        prime(settings)


def _synthesize(settings: Settings) -> None:
    from vocal.speaking.speech import resolve_voice
    from vocal.tts import load_tts

    name, voice = resolve_voice(settings.voice, None, settings)
    engine = load_tts(name, voice, settings=settings)
    try:
        engine.synthesize(WARM_TEXT, speed=settings.speed)
    finally:
        engine.close()  # hibari writes its caches here


def _load_stt(settings: Settings) -> None:
    from vocal.stt import REMOTE_ENGINES, load_stt, local_engine_name

    if settings.stt_engine in REMOTE_ENGINES and not settings.stt_fallback:
        return  # a remote recognizer loads no model, and none stands in for it
    load_stt(local_engine_name(settings.stt_engine), settings.stt_model)


def _audio() -> None:
    from vocal.audio.devices import sounddevice

    sounddevice()


def warm_up(settings: Settings) -> list[WarmStep]:
    """Run every warm-up step in this process; the steps with their times."""
    return [
        _timed("tts-prime", lambda: _prime_tts(settings)),
        _timed("tts-synthesis", lambda: _synthesize(settings)),
        _timed("stt-model", lambda: _load_stt(settings)),
        _timed("audio", _audio),
    ]


def start_detached(settings: Settings, engine: str | None = None) -> subprocess.Popen:
    """`vocal warmup` in its own session, output to the log directory; returns at once."""
    args = [sys.executable, "-m", "vocal", "warmup"]
    if engine:
        args += ["--engine", engine]
    from vocal.floor.statedir import ensure_private_dir

    ensure_private_dir(settings.log_dir)  # vocal's logs: 0700 (issue 37)
    with open(settings.log_dir / "warmup.log", "ab") as log:
        return subprocess.Popen(
            args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
            start_new_session=True,
            close_fds=True,
        )


__all__ = ["WarmStep", "warm_up", "start_detached"]
