"""Test speech made at test time with espeak-ng (DESIGN.md), cached per text for the session."""

from __future__ import annotations

import functools
import re
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


def words(text: str) -> list[str]:
    """Lower-case words without punctuation, for word error rates."""
    return re.findall(r"[a-z0-9']+", text.lower())


def word_edits(reference: list[str], hypothesis: list[str]) -> int:
    """Levenshtein distance between two word lists (substitutions, insertions, deletions)."""
    previous = list(range(len(hypothesis) + 1))
    for i, r in enumerate(reference, 1):
        current = [i] + [0] * len(hypothesis)
        for j, h in enumerate(hypothesis, 1):
            current[j] = min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (r != h))
        previous = current
    return previous[-1]


def word_error_rate(reference: str, hypothesis: str) -> float:
    """Levenshtein distance over words, divided by the reference length."""
    ref, hyp = words(reference), words(hypothesis)
    if not ref:
        return float(bool(hyp))
    return word_edits(ref, hyp) / len(ref)
