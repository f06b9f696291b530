"""Test audio for `vocal wake` (issue 39): wake phrases and requests said by vocal's own voices
(hibari, piper's joe, espeak-ng at two speeds), laid end to end over a quiet room tone, with
where each spoken part's sound begins and ends.

    voices = WakeVoices(tts_cache)
    scene = wake_scene(0.5, voices.say("hibari", "Hey Jarvis, run the tests."), 1.5)
    scene.spans[0]    # (first sound, last sound) of the phrase and request, seconds
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from harness.listen_audio import RATE, noise
from harness.sounds import espeak
from vocal.audio.wav import Audio, write_wav

#: The room tone under everything (a microphone never records digital silence).
ROOM_DBFS = -65.0
#: A 10 ms frame is sound when its level is within this of the part's loudest frame.
SOUND_DB = 40.0
#: The voices and how each is made.
VOICES = ("hibari", "piper-joe", "espeak-ng", "espeak-ng-190")


class WakeVoices:
    """vocal's voices saying test text at 16 kHz mono float32, each text synthesized once.

    Args:
        tts_cache: hibari's fast-start caches (the `tts_cache` fixture).
    """

    def __init__(self, tts_cache: Path) -> None:
        self.tts_cache = tts_cache
        self._engines: dict[str, object] = {}
        self._said: dict[tuple[str, str], np.ndarray] = {}

    def _engine(self, voice: str):
        from vocal.config import load_settings
        from vocal.tts import load_tts

        if voice not in self._engines:
            if voice == "hibari":
                self._engines[voice] = load_tts("hibari", cache_dir=self.tts_cache)
            else:
                settings = load_settings(tts_cache_dir=self.tts_cache)
                self._engines[voice] = load_tts("piper", settings=settings)
        return self._engines[voice]

    def say(self, voice: str, text: str) -> np.ndarray:
        """`text` said by `voice` (one of `VOICES`), cut to its sound (engines pad it: hibari
        by ~0.3 s each side), so that the pauses a scene is given are the pauses heard."""
        key = (voice, text)
        if key not in self._said:
            if voice.startswith("espeak-ng"):
                speed = 190 if voice.endswith("190") else 150
                audio = espeak(text, words_per_minute=speed)
            else:
                engine = self._engine(voice)
                audio = Audio(engine.synthesize(text), engine.sample_rate)
            samples = audio.for_stt().mono_samples.astype(np.float32)
            first, last = sound_span(samples)
            self._said[key] = samples[round(first * RATE) : round(last * RATE)]
        return self._said[key]


def sound_span(samples: np.ndarray) -> tuple[float, float]:
    """(first, last) instant of sound in `samples`: 10 ms frames within SOUND_DB of the
    loudest."""
    frames = samples[: samples.shape[0] // 160 * 160].reshape(-1, 160)
    level = 10 * np.log10((frames.astype(np.float64) ** 2).mean(axis=1) + 1e-12)
    loud = np.flatnonzero(level >= level.max() - SOUND_DB)
    return loud[0] * 0.01, (loud[-1] + 1) * 0.01


@dataclass(frozen=True)
class WakeScene:
    """Room tone and speech end to end; `spans` holds each spoken part's sound, in seconds
    from the scene's start."""

    samples: np.ndarray
    spans: list[tuple[float, float]]

    @property
    def audio(self) -> Audio:
        return Audio(self.samples, RATE)

    def write(self, path: Path) -> Path:
        return write_wav(path, self.audio)


def wake_scene(*parts: float | np.ndarray, seed: int = 0) -> WakeScene:
    """Seconds of room tone (a number) and speech (16 kHz samples), in order, with the room
    tone under the speech too."""
    pieces, spans, at = [], [], 0
    for part in parts:
        if isinstance(part, np.ndarray):
            first, last = sound_span(part)
            spans.append((at / RATE + first, at / RATE + last))
            pieces.append(part)
        else:
            pieces.append(np.zeros(round(part * RATE), np.float32))
        at += pieces[-1].shape[0]
    samples = np.concatenate(pieces)
    samples = samples + noise(samples.shape[0] / RATE, ROOM_DBFS, seed)[: samples.shape[0]]
    return WakeScene(samples.astype(np.float32), spans)


__all__ = ["VOICES", "WakeScene", "WakeVoices", "sound_span", "wake_scene"]
