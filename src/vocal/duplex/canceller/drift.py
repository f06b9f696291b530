"""Clock-drift compensation of AEC3's far end (issue 20).

An output on its own clock (USB, Bluetooth) plays `drift_ppm` millionths faster than the
microphone records, so the echo's delay creeps through a stream (0.5 ms over a 5 s reply at
100 ppm) and AEC3, whose filter assumes a still path, chases it: offline, on the harness's
linear path, the median ERLE 1 s into a reply fell from 69.8 to ~46 dB and spread over 37 dB
(benchmarks/aec_warmup --study moves). `DriftCompensator` hands AEC3 the far end as the
output played it on the microphone's clock: sample n of the reference is the far end at
n(1 + drift) - `hold`, read with a windowed-sinc interpolator. The read runs ahead by
drift x samples, so it is held back `hold` samples (`HOLD_MS`): over a reply of up to
`HOLD_MS / drift` (30 s at 100 ppm) it tracks; past that it stops where the samples end.
`warped` does the same to a whole recording at once, for the fit of an interruption's
echo-free onset (vocal.duplex.echo_free.onset).
"""

from __future__ import annotations

import numpy as np

#: Half the taps of the windowed-sinc interpolator (this one, and vocal.duplex.measure.delay_track's
#: that plays a sound at the probe's fractional delays).
HALF_TAPS = 12
#: How far the reference is held back, beyond the interpolator's reach (ms).
HOLD_MS = 3.0
#: A drift this large (ppm) is compensated: 10 ppm moves the echo 0.1 ms over a 10 s reply.
DRIFT_PPM = 10.0


def compensator_for(drift_ppm: float, sample_rate: int) -> DriftCompensator | None:
    """A `DriftCompensator` for a drift worth compensating (`DRIFT_PPM`), else None."""
    return DriftCompensator(drift_ppm, sample_rate) if abs(drift_ppm) >= DRIFT_PPM else None


#: The interpolator's kernels, one per fraction of a sample in `PHASES` steps (blended
#: linearly between rows): one table lookup per block instead of a sinc per tap and sample.
PHASES = 512
_TAPS = np.arange(-HALF_TAPS + 1, HALF_TAPS + 1, dtype=np.float64)
_TAP_OFFSETS = _TAPS.astype(np.int64)[None, :]


def windowed_sinc(t: np.ndarray) -> np.ndarray:
    """The interpolator's weight at `t` samples from the point read (|t| < HALF_TAPS): a sinc
    under a Blackman window."""
    taper = 0.42 + 0.5 * np.cos(np.pi * t / HALF_TAPS) + 0.08 * np.cos(2 * np.pi * t / HALF_TAPS)
    return np.sinc(t) * taper


def _kernels() -> np.ndarray:
    return windowed_sinc(_TAPS[None, :] - (np.arange(PHASES + 1) / PHASES)[:, None])


class DriftCompensator:
    """A streaming resampler by 1 + `drift_ppm`·1e-6 (the output's clock over the input's)
    that keeps each block's length: `process` returns as many samples as it is given, the
    far end `hold` samples late (HALF_TAPS + `hold_ms`)."""

    def __init__(self, drift_ppm: float, sample_rate: int, hold_ms: float = HOLD_MS) -> None:
        self.drift_ppm = drift_ppm
        self.ratio = 1.0 + drift_ppm * 1e-6
        self.hold = HALF_TAPS + round(hold_ms * sample_rate / 1000)
        self._kernels = _kernels()
        self._buffer = np.zeros(0, np.float64)
        self._base = 0  # absolute index of _buffer[0]
        self._out = 0

    def process(self, block: np.ndarray) -> np.ndarray:
        """The reference for `block` (mono float32): the far end on the drifting clock."""
        count = block.shape[0]
        if count == 0:
            return block
        self._buffer = np.concatenate([self._buffer, block.astype(np.float64)])
        written = self._base + self._buffer.shape[0]
        n = np.arange(self._out, self._out + count, dtype=np.float64)
        self._out += count
        # Never read past what has been written (the drift outran the hold).
        position = np.minimum(n * self.ratio - self.hold, written - HALF_TAPS - 1.0)
        out = _read(self._buffer, position - self._base, self._kernels)
        # Keep only what the next block's reads can reach.
        drop = int(np.floor(position[-1])) - HALF_TAPS - self._base
        if drop > 0:
            self._buffer = self._buffer[drop:]
            self._base += drop
        return out.astype(np.float32)


def warped(signal: np.ndarray, drift_ppm: float, anchor: int) -> np.ndarray:
    """`signal` as an output `drift_ppm` faster than the input played it, on the input's grid:
    sample n is `signal` at anchor + (n - anchor)(1 + drift_ppm·1e-6), so the two agree at
    `anchor` and part by `drift_ppm` millionths of a sample per sample either side of it (zeros
    where the read falls outside `signal`). A fit of a drifting echo path on this holds across
    seconds where one on `signal` holds for a fraction of one (vocal.duplex.echo_free.onset)."""
    n = np.arange(signal.shape[0], dtype=np.float64)
    position = anchor + (n - anchor) * (1.0 + drift_ppm * 1e-6)
    return _read(signal.astype(np.float64), position, _kernels()).astype(np.float32)


def _read(buffer: np.ndarray, position: np.ndarray, kernels: np.ndarray) -> np.ndarray:
    """`buffer` read at fractional `position`s (samples) with the windowed-sinc interpolator;
    taps outside `buffer` read zero."""
    base = np.floor(position).astype(np.int64)
    row = (position - base) * PHASES
    low = row.astype(np.int64)
    blend = (row - low)[:, None]
    weights = kernels[low] * (1 - blend) + kernels[low + 1] * blend
    local = base[:, None] + _TAP_OFFSETS
    inside = (local >= 0) & (local < buffer.shape[0])
    picked = buffer[np.clip(local, 0, buffer.shape[0] - 1)]
    return np.einsum("ij,ij->i", np.where(inside, picked, 0.0), weights)


__all__ = [
    "DRIFT_PPM",
    "HALF_TAPS",
    "DriftCompensator",
    "compensator_for",
    "warped",
    "windowed_sinc",
]
