"""Test audio for listening: speech with known voiced spans, pauses, noise at a set level, and
`play` to play it into the speaker sink while `vocal listen` records the sink's monitor."""

from __future__ import annotations

import time

import numpy as np

from harness.sounds import espeak
from vocal.audio.wav import STT_SAMPLE_RATE, Audio

RATE = STT_SAMPLE_RATE


def voiced_span_s(audio: Audio, threshold: float = 0.01) -> tuple[float, float]:
    """First and last instants where |sample| exceeds `threshold` (espeak pads its own WAVs
    with silence, so a clip's length is not where its speech ends)."""
    loud = np.flatnonzero(np.abs(audio.mono_samples) > threshold)
    return loud[0] / audio.sample_rate, (loud[-1] + 1) / audio.sample_rate


def trimmed(text: str) -> Audio:
    """espeak-ng speech with its own leading and trailing silence cut off."""
    audio = espeak(text)
    start, end = voiced_span_s(audio)
    return Audio(audio.mono_samples[round(start * RATE) : round(end * RATE)], RATE)


def silence(duration_s: float) -> np.ndarray:
    return np.zeros(round(duration_s * RATE), np.float32)


def noise(duration_s: float, dbfs: float, seed: int = 0) -> np.ndarray:
    """White noise whose RMS is `dbfs` dB below full scale."""
    rng = np.random.default_rng(seed)
    return rng.normal(0.0, 10 ** (dbfs / 20), round(duration_s * RATE)).astype(np.float32)


def join(*parts: np.ndarray | Audio) -> Audio:
    """Concatenate samples and Audio (16 kHz mono) into one Audio."""
    arrays = [p.mono_samples if isinstance(p, Audio) else p for p in parts]
    return Audio(np.concatenate(arrays), RATE)


def play(audio: Audio) -> float:
    """Play `audio` into the speaker sink (PULSE_SINK); the monotonic time its last sample was
    played."""
    from vocal.audio.player import Player

    player = Player(audio.sample_rate).open()
    try:
        player.play(audio.mono_samples)
        player.finish()
        assert player.wait(audio.duration_s + 10), "playback did not finish"
        return time.monotonic()
    finally:
        player.close()
