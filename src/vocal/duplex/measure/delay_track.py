"""How the echo's delay moves while a sound plays: clock drift and output underruns (issue 20).

A loudspeaker on its own clock (USB, Bluetooth) plays a little fast or slow against the
microphone, so its echo's delay creeps by that many parts per million; an output that runs dry
carries on later, so the delay steps. `follow_delay` follows the delay of a probe's echo
through the probe in overlapping windows (the cross-correlation's peak, to a fraction of a
sample) and reads the two off it: `DelayTrack`. `DelayTrack.warp` then plays any sound the
way that output played the probe, from the sound's first sample on, which is what
`vocal.duplex.measure.forecast` runs replies through.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from vocal.duplex.canceller.drift import HALF_TAPS, windowed_sinc

SAMPLE_RATE = 16_000
#: The delay is read in windows this long, this far apart.
WINDOW_S, STEP_S = 0.5, 0.25
#: How far from the probe's delay it is looked for (s, either way): a deep underrun's step.
REACH_S = 0.05
#: A move this large (samples) between two windows is a step: drift moves it 0.4 samples at
#: 100 ppm.
STEP_MIN_SAMPLES = 8.0


@dataclass(frozen=True)
class DelayTrack:
    """The echo's delay over a sound, counted from its first sample. `drift_ppm`: the output's
    clock runs that much faster than the input's, so the delay shrinks by that many millionths
    of a sample a sample; it grows by `size` samples at each (`at`, `size`) step (`at`:
    samples from the first)."""

    drift_ppm: float = 0.0
    steps: tuple[tuple[int, int], ...] = ()

    def offsets(self, count: int) -> np.ndarray:
        """The delay's move at each of `count` samples from the first (samples)."""
        n = np.arange(count, dtype=np.float64)
        moved = -self.drift_ppm * 1e-6 * n
        for at, size in self.steps:
            moved[at:] += size
        return moved

    def warp(self, sound: np.ndarray) -> np.ndarray:
        """`sound` as the output played it: from its first sample over -60 dBFS on, later by
        `offsets`; an upward step leaves a gap of silence (the underrun), a downward one skips."""
        loud = np.flatnonzero(np.abs(sound) > 1e-3)
        if loud.size == 0 or (not self.drift_ppm and not self.steps):
            return sound
        onset = int(loud[0])
        played = sound[onset:].astype(np.float64)
        count = played.shape[0]
        position = np.arange(count) - self.offsets(count)
        base = np.floor(position).astype(np.int64)
        fraction = position - base
        out = np.zeros(count, np.float64)
        for k in range(-HALF_TAPS + 1, HALF_TAPS + 1):
            t = k - fraction
            index = base + k
            inside = (index >= 0) & (index < count)
            out += np.where(inside, played[np.clip(index, 0, count - 1)], 0.0) * windowed_sinc(t)
        for at, size in self.steps:
            if size > 0:
                out[at : at + size] = 0.0
        return np.concatenate([sound[:onset], out.astype(sound.dtype)])


def follow_delay(
    reference: np.ndarray, mic: np.ndarray, probe: slice, delay_samples: int
) -> DelayTrack:
    """The track of the echo of `reference[probe]` in `mic` (same grid, `SAMPLE_RATE`) around
    `delay_samples`; no move where the probe is too short to follow (under three windows)."""
    start, stop = probe.start or 0, probe.stop if probe.stop is not None else reference.shape[0]
    window, step = round(WINDOW_S * SAMPLE_RATE), round(STEP_S * SAMPLE_RATE)
    reach = round(REACH_S * SAMPLE_RATE)
    centres, delays = [], []
    for at in range(start, stop - window + 1, step):
        x = reference[at : at + window].astype(np.float64)
        lo = at + delay_samples - reach
        if not x.any() or lo < 0 or lo + window + 2 * reach > mic.shape[0]:
            continue
        y = mic[lo : lo + window + 2 * reach].astype(np.float64)
        size = 1 << int(np.ceil(np.log2(y.shape[0] + window)))
        corr = np.fft.irfft(np.fft.rfft(y, size) * np.conj(np.fft.rfft(x, size)), size)
        corr = np.abs(corr[: 2 * reach + 1])
        k = int(np.argmax(corr))
        between = 0.0
        if 0 < k < corr.shape[0] - 1:
            # The peak between samples: the parabola through it and its neighbours.
            curve = float(corr[k - 1] - 2 * corr[k] + corr[k + 1])
            between = 0.5 * float(corr[k - 1] - corr[k + 1]) / curve if curve else 0.0
        centres.append(at + window // 2 - start)
        delays.append(delay_samples - reach + k + between)
    if len(delays) < 3:
        return DelayTrack()
    d = np.asarray(delays)
    steps = []
    for i in range(1, d.shape[0]):
        move = d[i] - d[i - 1]
        # A step holds: the next window (if any) reads the new delay too.
        holds = i + 1 == d.shape[0] or abs(d[i + 1] - d[i]) < STEP_MIN_SAMPLES
        if abs(move) >= STEP_MIN_SAMPLES and holds:
            steps.append(((centres[i - 1] + centres[i]) // 2, round(move)))
    return DelayTrack(
        drift_ppm=round(-_slope(np.asarray(centres), d, steps, window) * 1e6, 1), steps=tuple(steps)
    )


def _slope(
    centres: np.ndarray, delays: np.ndarray, steps: list[tuple[int, int]], window: int
) -> float:
    """The delay's drift (samples a sample): one slope through every stretch between steps (each at
    its own level), leaving out the windows a step falls in (they read in between)."""
    segment = np.zeros(centres.shape[0], np.int64)
    keep = np.ones(centres.shape[0], bool)
    for at, _ in steps:
        segment += centres > at
        keep &= np.abs(centres - at) >= window // 2
    num = den = 0.0
    for part in np.unique(segment[keep]):
        chosen = keep & (segment == part)
        if chosen.sum() < 2:
            continue
        t = centres[chosen] - centres[chosen].mean()
        num += float(np.sum(t * (delays[chosen] - delays[chosen].mean())))
        den += float(np.sum(t * t))
    return num / den if den else 0.0


__all__ = ["DelayTrack", "follow_delay"]
