"""Measuring echo cancellation: echo return loss enhancement (ERLE) over time, its median, and
how long the canceller took to converge. Used by tests and benchmarks/aec.
"""

from __future__ import annotations

import math

import numpy as np

from vocal.duplex.canceller.aec_frames import CAPTURE_SAMPLE_RATE, ENERGY_FLOOR

#: ERLE is counted where the echo stands this far over the room's own noise (dB): where it does
#: not, a window holds mostly noise, and its ERLE says what the noise suppressor did.
ECHO_OVER_NOISE_DB = 10.0
#: ... and over this level (RMS, dBFS) in any room: a quieter window holds nothing to cancel.
QUIET_DBFS = -50.0


# -- measuring -----------------------------------------------------------------------------------
def noise_floor_dbfs(
    noise: np.ndarray, *, sample_rate: int = CAPTURE_SAMPLE_RATE, percentile: float = 90.0
) -> float:
    """A room's noise with nothing playing (dBFS): the `percentile`th of its 100 ms windows'
    power (babble has gaps; the loud windows are what echo must stand over); -120 for
    silence or for less than a window."""
    window = sample_rate // 10
    count = noise.shape[0] // window
    if count == 0:
        return -120.0
    frames = np.asarray(noise[: count * window], np.float64).reshape(count, window)
    power = float(np.percentile(np.mean(frames * frames, axis=1), percentile))
    return 10 * math.log10(max(power, 1e-12))


def active_dbfs_over(floor_dbfs: float) -> float:
    """The level a window's echo must reach to be counted in a room whose noise floor is
    `floor_dbfs` (`noise_floor_dbfs`): `ECHO_OVER_NOISE_DB` over it, never under `QUIET_DBFS`."""
    return max(QUIET_DBFS, floor_dbfs + ECHO_OVER_NOISE_DB)


def _window_energy(x: np.ndarray, window: int) -> np.ndarray:
    n = x.shape[0] // window
    frames = np.asarray(x[: n * window], np.float64).reshape(n, window)
    return np.sum(frames * frames, axis=1)


def erle_trace_db(
    captured: np.ndarray,
    cleaned: np.ndarray,
    *,
    sample_rate: int = CAPTURE_SAMPLE_RATE,
    window_ms: float = 100.0,
    active_dbfs: float = -50.0,
) -> tuple[np.ndarray, np.ndarray]:
    """ERLE per window of echo-only audio: (window start times in s, ERLE in dB).

    Windows where the captured echo is quieter than `active_dbfs` (RMS) are left out (NaN):
    there is nothing to cancel there. `cleaned` must be aligned with `captured` (drop
    `capture_delay_frames` from its start first).
    """
    window = max(1, round(window_ms * sample_rate / 1000))
    n = min(captured.shape[0], cleaned.shape[0])
    e_in = _window_energy(captured[:n], window)
    e_out = _window_energy(cleaned[:n], window)
    floor = ENERGY_FLOOR * window
    active = e_in / window > 10 ** (active_dbfs / 10)
    erle = 10 * np.log10(np.maximum(e_in, floor) / np.maximum(e_out, floor))
    erle[~active] = np.nan
    return np.arange(erle.shape[0]) * window / sample_rate, erle


def erle_db(
    captured: np.ndarray,
    cleaned: np.ndarray,
    *,
    sample_rate: int = CAPTURE_SAMPLE_RATE,
    skip_s: float = 0.0,
    window_ms: float = 100.0,
    active_dbfs: float = -50.0,
    statistic: str = "energy",
) -> float:
    """Echo return loss enhancement in dB over the active windows from `skip_s` on (after
    convergence).

    `statistic="energy"`: captured echo energy over what is left after cleaning, summed (strict:
    one leaking window pulls it down, e.g. 60 -> 42 dB for one 20 dB window in ten seconds).
    `statistic="median"`: the median of the windows' ERLE (the steady state, blind to a leak).
    """
    if statistic not in ("energy", "median"):
        raise ValueError(f"statistic must be 'energy' or 'median', got {statistic!r}")
    window = max(1, round(window_ms * sample_rate / 1000))
    start = round(skip_s * sample_rate)
    n = min(captured.shape[0], cleaned.shape[0])
    e_in = _window_energy(captured[start:n], window)
    e_out = _window_energy(cleaned[start:n], window)
    active = e_in / window > 10 ** (active_dbfs / 10)
    if not active.any():
        raise ValueError("no echo to measure: the captured signal is silent")
    if statistic == "median":
        floor = ENERGY_FLOOR * window
        per_window = np.maximum(e_in[active], floor) / np.maximum(e_out[active], floor)
        return float(np.median(10 * np.log10(per_window)))
    floor = ENERGY_FLOOR * window * int(active.sum())
    return float(10 * np.log10(max(e_in[active].sum(), floor) / max(e_out[active].sum(), floor)))


def convergence_time_s(
    captured: np.ndarray,
    cleaned: np.ndarray,
    *,
    threshold_db: float = 20.0,
    sample_rate: int = CAPTURE_SAMPLE_RATE,
    window_ms: float = 100.0,
    active_dbfs: float = -50.0,
) -> float:
    """Seconds from the start of `captured` until every later active window's ERLE stays at or
    above `threshold_db`: how long barge-in must be inhibited at the start of playback.
    Returns inf if the last active window is still below it."""
    times, erle = erle_trace_db(
        captured, cleaned, sample_rate=sample_rate, window_ms=window_ms, active_dbfs=active_dbfs
    )
    below = np.flatnonzero(np.nan_to_num(erle, nan=np.inf) < threshold_db)
    if below.size == 0:
        return 0.0
    last = int(below[-1])
    if last == erle.shape[0] - 1 or np.all(np.isnan(erle[last + 1 :])):
        return math.inf
    return float(times[last] + window_ms / 1000)
