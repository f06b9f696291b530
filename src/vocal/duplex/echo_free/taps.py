"""The last seconds of a stream as its callbacks handed them, and the stream's clock.

A tap keeps each block with the count of samples before it, so positions within a stream are
exact; only the mapping between two streams (the capture and the output) comes from the
clock, read from the callbacks' stamps (`stream_clock_s`). vocal.duplex.echo_free.onset fits the
echo path on two taps.
"""

from __future__ import annotations

import collections
import threading

import numpy as np

#: How much of each stream a tap keeps.
KEEP_S = 8.0
#: The percentile of (callback time - position) that gives a stream's clock (`stream_clock_s`).
CLOCK_PERCENTILE = 5.0


class StreamTap:
    """The last `keep_s` of one stream: (stamp, samples before it, samples) per block."""

    def __init__(self, sample_rate: int, keep_s: float = KEEP_S) -> None:
        self.sample_rate = sample_rate
        self.blocks: collections.deque[tuple[float, int, np.ndarray]] = collections.deque()
        self.total = 0
        self._keep = round(keep_s * sample_rate)
        self._lock = threading.Lock()

    def add(self, samples: np.ndarray, stamp_s: float) -> None:
        with self._lock:
            self.blocks.append((stamp_s, self.total, samples.copy()))
            self.total += samples.shape[0]
            while self.blocks and self.total - self.blocks[0][1] > self._keep:
                self.blocks.popleft()

    def snapshot(self) -> list[tuple[float, int, np.ndarray]]:
        with self._lock:
            return list(self.blocks)


def position_at(blocks: list[tuple[float, int, np.ndarray]], at_s: float, rate: int) -> float:
    """The stream position (samples) played or captured at `at_s`, from the nearest block's
    stamp (a stamp is taken when its block's callback runs: the block's end)."""
    stamp, before, samples = min(blocks, key=lambda b: abs(b[0] - at_s))
    return before + samples.shape[0] + (at_s - stamp) * rate


def stream_clock_s(stamps: np.ndarray, ends: np.ndarray, rate: int) -> float:
    """A stream's clock: the monotonic time at which its position 0 would have passed, such
    that position p passes at `clock + p / rate`. From each callback's stamp and the
    position at its block's end, the low envelope (5th percentile): a callback can run late
    (the scheduler, PulseAudio handing two capture blocks at once: input stamps here spread
    +-16 ms around their median), never before its block is due, so the earliest ones show
    the stream's timing. The median instead put `vocal doctor --echo`'s delay 15 ms off."""
    return float(np.percentile(stamps - ends / rate, CLOCK_PERCENTILE))


def clock_offset(
    raw_blocks: list[tuple[float, int, np.ndarray]],
    played_blocks: list[tuple[float, int, np.ndarray]],
    rate: int,
    played_rate: int,
) -> float:
    """Where the capture stood minus where the output stood, in raw samples, at one instant,
    through each stream's clock (`stream_clock_s`). One block would do on a steady clock, but
    an output's first callbacks come in a burst (PortAudio filling the device's buffer), and
    mapped through the first block the reference sat ~30 ms off its true delay."""

    def clock(blocks: list[tuple[float, int, np.ndarray]], stream_rate: int) -> float:
        stamps = np.array([stamp for stamp, _, _ in blocks])
        ends = np.array([before + samples.shape[0] for _, before, samples in blocks])
        return stream_clock_s(stamps, ends, stream_rate)

    return (clock(played_blocks, played_rate) - clock(raw_blocks, rate)) * rate


def joined(blocks: list[tuple[float, int, np.ndarray]], start: int, stop: int) -> np.ndarray:
    """Samples `start` to `stop` of a stream (zeros where the tap holds nothing)."""
    out = np.zeros(max(0, stop - start), np.float32)
    for _stamp, before, samples in blocks:
        lo, hi = max(start, before), min(stop, before + samples.shape[0])
        if lo < hi:
            out[lo - start : hi - start] = samples[lo - before : hi - before]
    return out


__all__ = ["StreamTap", "clock_offset", "joined", "position_at", "stream_clock_s"]
