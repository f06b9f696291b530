"""Helpers for the conch, control and history tests that use real streams.

Each speaking process plays a tone of its own frequency; `MonitorRecorder` records the speaker
sink's monitor (the default source in audio tests) in 10 ms blocks stamped with the monotonic
clock, which is system-wide, so the times compare with those the processes log and with when
this process sent a command. `tone_segments` then says when each tone was audible, and
`overlap_blocks` counts 10 ms blocks in which two tones sounded at once.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

from vocal.audio.wav import Audio, write_wav

SAMPLE_RATE = 16_000
BLOCK_FRAMES = 160  # 10 ms: FFT bins 100 Hz apart, so tones on multiples of 100 Hz are exact
#: A tone counts as sounding in a block above this amplitude (tones are played at 0.3).
PRESENT_AMPLITUDE = 0.08


def tone_wav(path: Path, frequency_hz: float, duration_s: float, amplitude: float = 0.3) -> Path:
    """Write a sine tone with 5 ms fades (no clicks, whose splatter would look like a tone)."""
    n = round(duration_s * SAMPLE_RATE)
    samples = amplitude * np.sin(2 * np.pi * frequency_hz * np.arange(n) / SAMPLE_RATE)
    fade = np.linspace(0.0, 1.0, round(0.005 * SAMPLE_RATE))
    samples[: fade.size] *= fade
    samples[n - fade.size :] *= fade[::-1]
    return write_wav(path, Audio(samples.astype(np.float32), SAMPLE_RATE))


class MonitorRecorder:
    """Records the default source (the speaker's monitor) in 10 ms blocks with their times."""

    def __init__(self) -> None:
        from vocal.audio.devices import Microphone

        self.mic = Microphone(SAMPLE_RATE, block_frames=BLOCK_FRAMES)
        self.blocks: list[np.ndarray] = []
        self.times: list[float] = []
        self._thread = threading.Thread(target=self._drain, daemon=True)

    def __enter__(self) -> MonitorRecorder:
        self.mic.open()
        self._thread.start()
        time.sleep(0.2)  # the stream runs before anything plays
        return self

    def __exit__(self, *exc: object) -> None:
        time.sleep(0.15)  # the last blocks of what was played
        self.mic.close()
        self._thread.join(5)

    def discard_until(self, until_s: float) -> None:
        """Forget the blocks captured before `until_s` (a long benchmark's memory)."""
        count = sum(1 for t in list(self.times) if t < until_s)
        # The drain thread only appends, so the first `count` of either list are old blocks.
        del self.blocks[:count]
        del self.times[:count]

    def _drain(self) -> None:
        while True:
            block = self.mic.read(5.0)
            if block is None:
                return
            self.blocks.append(block.samples)
            self.times.append(block.captured_at_s)

    def amplitudes(self, frequencies_hz: list[float]) -> np.ndarray:
        """(blocks, tones) amplitude of each tone in each block."""
        stack = np.stack(self.blocks)
        spectrum = np.abs(np.fft.rfft(stack, axis=1)) * 2 / BLOCK_FRAMES
        bins = [round(f * BLOCK_FRAMES / SAMPLE_RATE) for f in frequencies_hz]
        return spectrum[:, bins]

    def tone_segments(self, frequencies_hz: list[float], merge_gap_s: float = 0.03
                      ) -> dict[float, list[tuple[float, float]]]:  # fmt: skip
        """For each tone, the (start, end) monotonic times it was audible, in order."""
        present = self.amplitudes(frequencies_hz) > PRESENT_AMPLITUDE
        times = np.array(self.times)
        segments: dict[float, list[tuple[float, float]]] = {}
        for column, frequency in enumerate(frequencies_hz):
            runs: list[tuple[float, float]] = []
            for index in np.flatnonzero(present[:, column]):
                start, end = times[index] - BLOCK_FRAMES / SAMPLE_RATE, times[index]
                if runs and start - runs[-1][1] <= merge_gap_s:
                    runs[-1] = (runs[-1][0], end)
                else:
                    runs.append((start, end))
            segments[frequency] = runs
        return segments

    def tone_spans(self, frequencies_hz: list[float]) -> dict[float, tuple[float, float, float]]:
        """For each tone heard: (first start, last end, seconds audible). A loaded machine can
        put an underflow gap inside one speaker's audio; what matters between speakers is
        that their spans do not overlap."""
        spans = {}
        for frequency, runs in self.tone_segments(frequencies_hz).items():
            if runs:
                audible = sum(end - start for start, end in runs)
                spans[frequency] = (runs[0][0], runs[-1][1], audible)
        return spans

    def overlap_blocks(self, frequencies_hz: list[float]) -> int:
        """How many 10 ms blocks held two or more tones at once."""
        present = self.amplitudes(frequencies_hz) > PRESENT_AMPLITUDE
        return int((present.sum(axis=1) >= 2).sum())

    def silent_after(self, at_s: float, frequency_hz: float) -> float | None:
        """The first block time after `at_s` from which the tone is absent for good (None if
        it still sounds at the end)."""
        amplitude = self.amplitudes([frequency_hz])[:, 0]
        times = np.array(self.times)
        after = np.flatnonzero(times >= at_s)
        sounding = [i for i in after if amplitude[i] > PRESENT_AMPLITUDE]
        if not sounding:
            return float(times[after[0]]) if after.size else None
        last = sounding[-1]
        return float(times[last + 1]) if last + 1 < times.size else None


def wait_until(predicate: Callable[[], bool], timeout_s: float = 20.0, what: str = "it") -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def timeline(stdout: bytes) -> dict:
    """The JSON line `vocal play --json` printed."""
    return json.loads(stdout.decode().strip().splitlines()[-1])
