"""Test sounds made at test time: speech by espeak-ng (docs/design.md, cached per text for the
session), tones, and padding with silence. Word error rates are in harness.words."""

from __future__ import annotations

import functools
import subprocess

import numpy as np

from vocal.audio.wav import STT_SAMPLE_RATE, Audio, parse_wav


@functools.lru_cache(maxsize=64)
def espeak(text: str, *, voice: str = "en-us", words_per_minute: int = 160) -> Audio:
    """`text` spoken by espeak-ng, mono 16 kHz. espeak's --stdout header has a placeholder
    length, which vocal.audio.wav reads to end of file."""
    wav = subprocess.run(
        ["espeak-ng", "-v", voice, "-s", str(words_per_minute), "--stdout", text],
        check=True, capture_output=True, timeout=30,
    ).stdout  # fmt: skip
    return parse_wav(wav, name="espeak-ng").for_stt()


def with_silence(audio: Audio, before_s: float = 0.0, after_s: float = 0.0) -> Audio:
    """`audio` padded with digital silence."""
    rate = audio.sample_rate
    parts = [
        np.zeros(round(before_s * rate), np.float32),
        audio.mono_samples,
        np.zeros(round(after_s * rate), np.float32),
    ]
    return Audio(np.concatenate(parts), rate)


def tone(frequency_hz: float, duration_s: float, sample_rate: int = STT_SAMPLE_RATE,
         amplitude: float = 0.5) -> np.ndarray:  # fmt: skip
    """A sine tone as mono float32."""
    t = np.arange(round(duration_s * sample_rate)) / sample_rate
    return (amplitude * np.sin(2 * np.pi * frequency_hz * t)).astype(np.float32)
