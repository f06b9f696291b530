"""Comparing what was played with what a real stream recorded from the sink's monitor."""

from __future__ import annotations

from typing import Any

import numpy as np


def matched_fraction(
    recorded: np.ndarray, signal: np.ndarray, window: int = 320, threshold: float = 0.99
) -> float:
    """The share of the 20 ms windows of sound in `signal` that are found in `recorded`
    (correlation above `threshold`).

    One underrun on a loaded machine shifts the rest of a recording by a few ms, so each window
    is aligned on its own, within 40 ms of the global lag, rather than the whole at once."""
    lag = align(recorded, signal)
    slack = 640
    matched, total = 0, 0
    for start in range(0, len(signal) - window + 1, window):
        piece = signal[start : start + window] - signal[start : start + window].mean()
        if np.sqrt(np.mean(piece**2)) < 1e-3:
            continue  # silence matches anything: only sound is counted
        total += 1
        lo = max(0, lag + start - slack)
        region = recorded[lo : lag + start + window + slack]
        if len(region) < window:
            continue
        dots = np.correlate(region, piece, mode="valid")
        sums = np.concatenate([[0.0], np.cumsum(region, dtype=np.float64)])
        squares = np.concatenate([[0.0], np.cumsum(region.astype(np.float64) ** 2)])
        window_sum = sums[window:] - sums[:-window]
        window_var = squares[window:] - squares[:-window] - window_sum**2 / window
        norms = np.sqrt(np.maximum(window_var, 1e-12)) * np.linalg.norm(piece)
        matched += float(np.max(dots / np.maximum(norms, 1e-9))) > threshold
    return matched / max(total, 1)


def align(recorded: np.ndarray, reference: np.ndarray) -> int:
    """The lag of `reference` inside `recorded`, by FFT cross-correlation."""
    n = len(recorded) + len(reference)
    size = 1 << (n - 1).bit_length()
    corr = np.fft.irfft(np.fft.rfft(recorded, size) * np.conj(np.fft.rfft(reference, size)), size)
    return int(np.argmax(corr[: len(recorded)]))


def captured(mic: Any, sample_rate: int = 16_000) -> tuple[np.ndarray, np.ndarray]:
    """All samples of a closed `vocal.audio.devices.Microphone` and each one's capture time
    (monotonic s), from the time stamp of the block it came in."""
    blocks = list(mic.blocks())
    samples = np.concatenate([b.samples for b in blocks])
    times = np.concatenate(
        [b.captured_at_s - (len(b.samples) - 1 - np.arange(len(b.samples))) / sample_rate
         for b in blocks]
    )  # fmt: skip
    return samples, times
