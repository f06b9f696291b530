"""AEC3's side of the audio: 10 ms frames at the rates AEC3 takes (`Frame`, with the repeat
factors for 8/16 kHz render into 44.1 kHz frames; see vocal.duplex.canceller.aec), and the render
side's activity (`RenderActivity`: what was played when, for echo-path levels and quiet spans).
"""

from __future__ import annotations

import math

import numpy as np

#: Energies below this (per sample, ~-100 dBFS) count as silence, so a suppressor's exact zeros
#: give a finite ERLE.
ENERGY_FLOOR = 1e-10

#: The capture rate vocal uses everywhere (VAD, Whisper) and the rate the reference is resampled
#: to when the output rate has no whole 10 ms frame.
CAPTURE_SAMPLE_RATE = 16_000

_INT16_SCALE = 32768.0
#: A played block whose peak is below this (-50 dBFS) is silence: the far end is quiet.
RENDER_LOUD_PEAK = 10 ** (-50 / 20)


def frame_frames(sample_rate: int) -> int | None:
    """Samples in 10 ms at `sample_rate`, or None when that is not a whole number."""
    return sample_rate // 100 if sample_rate % 100 == 0 else None


#: Largest sample repetition used to reach a rate with whole 10 ms frames (11 025 Hz needs 4).
MAX_REPEAT = 8


def repeat_factor(sample_rate: int) -> int | None:
    """The least k with a whole 10 ms frame at k * sample_rate (1 for 16 kHz, 2 for 22 050)."""
    k = 100 // math.gcd(sample_rate, 100)
    return k if k <= MAX_REPEAT else None


class Frame:
    """One preallocated 10 ms int16 frame in the form `process_*_stream` takes."""

    def __init__(self, sample_rate: int) -> None:
        from livekit.rtc.audio_frame import AudioFrame

        self.frames = sample_rate // 100
        self.buffer = bytearray(self.frames * 2)
        self.int16 = np.frombuffer(self.buffer, np.int16)  # a writable view of `buffer`
        self.scratch = np.zeros(self.frames, np.float32)
        self.audio_frame = AudioFrame(self.buffer, sample_rate, 1, self.frames)

    def load(self, samples: np.ndarray) -> None:
        """float32 in [-1, 1] -> int16, clipped, without allocating."""
        np.multiply(samples, _INT16_SCALE, out=self.scratch)
        np.clip(self.scratch, -32768.0, 32767.0, out=self.scratch)
        self.int16[:] = self.scratch

    def unload(self, out: np.ndarray) -> None:
        np.multiply(self.int16, 1.0 / _INT16_SCALE, out=out)


class RenderActivity:
    """When the far end (what the speaker plays) was loud, from the output callback's view.

    Times are `time.monotonic()` when the block was handed to the device (it is heard one
    output latency later). Barge-in inhibits on these: the canceller converges from the first
    loud block (`first_loud_s`), and the room's tail rings on after the far end turns quiet
    (`quiet_since_s`, None while it is loud). Written by one thread, read by another: each field
    is one float store.
    """

    #: No output callback for this long means the stream stopped (killed mid-sentence): quiet.
    STOPPED_AFTER_S = 0.1

    def __init__(self) -> None:
        self.first_loud_s: float | None = None
        self.last_loud_s: float | None = None
        self.quiet_since_s: float | None = None
        self.last_block_s: float | None = None

    def update(self, block: np.ndarray, now_s: float) -> None:
        """Note one played block (in the output callback: max/min allocate nothing)."""
        self.last_block_s = now_s
        if block.shape[0] == 0:
            return
        if max(float(block.max()), -float(block.min())) >= RENDER_LOUD_PEAK:
            if self.first_loud_s is None:
                self.first_loud_s = now_s
            self.last_loud_s = now_s
            self.quiet_since_s = None
        elif self.last_loud_s is not None and self.quiet_since_s is None:
            self.quiet_since_s = now_s

    @property
    def playing(self) -> bool:
        """The far end has been loud and is loud now."""
        return self.last_loud_s is not None and self.quiet_since_s is None

    def quiet_for_s(self, now_s: float) -> float:
        """How long the far end has been quiet at `now_s`: inf if it never played, 0 while it
        plays; a stream that stopped calling back (`Player.stop`) is quiet since its last loud
        block."""
        if self.last_loud_s is None:
            return math.inf
        if self.quiet_since_s is not None:
            return max(0.0, now_s - self.quiet_since_s)
        if self.last_block_s is not None and now_s - self.last_block_s > self.STOPPED_AFTER_S:
            return max(0.0, now_s - self.last_loud_s)
        return 0.0


__all__ = [
    "CAPTURE_SAMPLE_RATE",
    "ENERGY_FLOOR",
    "RENDER_LOUD_PEAK",
    "Frame",
    "RenderActivity",
    "frame_frames",
    "repeat_factor",
]
