"""Output to the sound device: `Player` plays from a queue, can be killed within one block,
paused and resumed, and keeps a monotonic `ReferenceBuffer` of every sample it sent to the
device, silence included, so echo cancellation and tests see exactly what was played.

Its stream comes from vocal.audio.devices (the only module that imports `sounddevice`).
"""

from __future__ import annotations

import collections
import threading
import time
from types import ModuleType
from typing import TYPE_CHECKING

from vocal.audio.devices import (
    DEFAULT_OUTPUT_BLOCK_FRAMES,
    DEFAULT_REFERENCE_S,
    AudioStream,
    CallbackFlags,
    CallbackTime,
    close_stream,
    sounddevice,
    start_stream,
)
from vocal.errors import DeviceError

if TYPE_CHECKING:
    import numpy as np

    from vocal.audio.output import BlockObserver


# -- the reference ------------------------------------------------------------------------------
class ReferenceBuffer:
    """A ring of the last `capacity_frames` samples played, addressed by absolute frame index.

    `total_frames` only grows: frame i of the whole playback is `read(i, i + 1)` for as long as
    it is inside the ring. Written from the audio callback, so `write` does no allocation beyond
    numpy views.
    """

    def __init__(self, capacity_frames: int) -> None:
        import numpy as np

        self._ring = np.zeros(max(1, capacity_frames), np.float32)
        self.total_frames = 0

    @property
    def capacity_frames(self) -> int:
        return self._ring.shape[0]

    def write(self, block: np.ndarray) -> None:
        n = block.shape[0]
        cap = self._ring.shape[0]
        if n >= cap:
            self._ring[:] = block[n - cap :]
            self.total_frames += n
            return
        start = self.total_frames % cap
        first = min(n, cap - start)
        self._ring[start : start + first] = block[:first]
        if first < n:
            self._ring[: n - first] = block[first:]
        self.total_frames += n

    def read(self, start: int = 0, stop: int | None = None) -> np.ndarray:
        """A copy of frames [start, stop) of everything played; raises if no longer held."""
        import numpy as np

        stop = self.total_frames if stop is None else min(stop, self.total_frames)
        cap = self._ring.shape[0]
        if start < self.total_frames - cap:
            raise IndexError(f"frame {start} has left the reference ring")
        if stop <= start:
            return np.zeros(0, np.float32)
        idx = np.arange(start, stop) % cap
        return self._ring[idx].copy()


# -- output ----------------------------------------------------------------------------------
class Player:
    """Plays mono float32 audio from a queue through a PortAudio output stream it owns.

    `play()` queues samples and returns at once; `finish()` says nothing more is coming and
    `wait()` blocks until the device has played it all. `stop()` is the kill handle: the callback
    writes silence from its next block and the stream is aborted, so sound stops within one block
    plus the device's buffer. `pause()`/`resume()` hold the position and play silence meanwhile.
    Every block sent to the device goes to `reference`, then to the block observers in order
    (`on_block` first, then each `add_block_observer`; the chain is described in
    vocal.audio.output). It implements `vocal.audio.output.Output`.
    """

    def __init__(
        self,
        sample_rate: int,
        *,
        device: str | int | None = None,
        block_frames: int = DEFAULT_OUTPUT_BLOCK_FRAMES,
        volume: float = 1.0,
        on_block: BlockObserver | None = None,
        reference_s: float = DEFAULT_REFERENCE_S,
        latency: float | str = "low",
    ) -> None:
        self.sample_rate = sample_rate
        self.block_frames = block_frames
        #: The output buffer asked of PortAudio: "low" (~21 ms here) or seconds. A deeper
        #: buffer rides out scheduling stalls on a loaded machine (benchmarks/aec: fewer
        #: underflows, steadier echo path); `stop()` still cuts at once, since aborting the
        #: stream drops what is buffered (tests/test_devices.py checks both).
        self.latency = latency
        self.volume = volume
        self.reference = ReferenceBuffer(round(reference_s * sample_rate))
        self._device = device
        self._observers: list[BlockObserver] = [] if on_block is None else [on_block]
        self._chunks: collections.deque[np.ndarray] = collections.deque()
        self._current: np.ndarray | None = None
        self._offset = 0
        self._queued_frames = 0
        self._consumed = 0
        self._last_sample_dac_s = 0.0
        self._flush_requested = False
        self._flush_dropped = 0
        self._flushed = threading.Event()
        self._finishing = False
        self._stopped = False
        self._paused = False
        self._done = threading.Event()
        self._played_out = False
        self._closing = False
        self._ended_by_itself = False
        self._stream: AudioStream | None = None
        self._sd: ModuleType  # bound in open() so the callback never imports
        self.started_at_s: float | None = None  # time.monotonic() of the first callback
        #: The device ran dry after queued audio had begun to play: the rest of the stream may
        #: reach the speaker later for good, and its echo with it (a glitch to the canceller,
        #: the barge-in detector and the echo's learnt delay).
        self.underflows = 0
        #: ... and before: the stream starting while the process is busy (loading a voice)
        #: runs dry into silence, and nothing played after it moves against its echo
        #: (benchmarks/RESULTS.md, "Underflows before the first sound"). Counted apart.
        self.underflows_before_audio = 0
        self._audio_began = False

    # lifecycle
    def open(self) -> Player:
        self._sd = sounddevice()
        self._stream = start_stream(
            "output",
            self._device,
            self.sample_rate,
            self.block_frames,
            self._callback,
            latency=self.latency,
            finished_callback=self._on_stream_finished,
        )
        return self

    def _on_stream_finished(self) -> None:
        # PortAudio ends a stream itself only when the device or the sound server dropped it:
        # every ending of ours goes through close() (stop included) or the played-out check.
        if not self._closing and not self._played_out:
            self._ended_by_itself = True
        self._done.set()

    @property
    def failed(self) -> bool:
        """The output stream ended by itself before its audio was played out (the device went
        away, the sound server killed the stream): not a stop, not a close, not the end."""
        return self._ended_by_itself

    def close(self) -> None:
        self._closing = True
        stream, self._stream = self._stream, None
        close_stream(stream)
        self._done.set()

    def __enter__(self) -> Player:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def add_block_observer(self, observer: BlockObserver) -> None:
        """Call `observer(block)` in the output callback after those added before it (see
        vocal.audio.output for the chain and the rules an observer follows). Add observers
        before `open`, or accept that one may join mid-stream."""
        self._observers.append(observer)

    # producer side
    def play(self, samples: np.ndarray) -> None:
        """Queue mono samples at `sample_rate` for playback."""
        import numpy as np

        block = np.ascontiguousarray(samples, dtype=np.float32).reshape(-1)
        if block.shape[0]:
            self._queued_frames += block.shape[0]
            self._chunks.append(block)

    def finish(self) -> None:
        """Nothing more will be queued: the stream ends once the queue has played out."""
        self._finishing = True

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until everything queued has played (after `finish`) or `stop`; True if so."""
        return self._done.wait(timeout_s)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def stop(self) -> None:
        """The kill handle: silence from the next block on, then abort the stream."""
        self._stopped = True
        self._chunks.clear()
        self.close()

    def pause(self) -> None:
        self._paused = True

    def resume(self) -> None:
        self._paused = False

    @property
    def paused(self) -> bool:
        return self._paused

    @property
    def stopped(self) -> bool:
        return self._stopped

    @property
    def played_frames(self) -> int:
        """Frames sent to the device so far, silence included."""
        return self.reference.total_frames

    @property
    def consumed_frames(self) -> int:
        """Frames of queued audio sent to the device so far (silence not counted): frame i of
        everything passed to `play()` has been sent once this exceeds i."""
        return self._consumed

    def flush(self, timeout_s: float = 0.5) -> int:
        """Drop everything queued but not yet sent, keep the stream running (silence), and
        return how many frames were dropped; they count as consumed.

        The audio callback does the dropping at its next block, so it never races with the
        callback's own reads; with no stream running it happens here.
        """
        if self._stream is None or self._done.is_set():
            return self._drop_pending()
        self._flushed.clear()
        self._flush_requested = True
        if not self._flushed.wait(timeout_s):
            raise DeviceError("the audio output stopped calling back while flushing")
        return self._flush_dropped

    def _drop_pending(self) -> int:
        dropped = 0
        if self._current is not None:
            dropped += self._current.shape[0] - self._offset
            self._current = None
        while self._chunks:
            dropped += self._chunks.popleft().shape[0]
        self._consumed += dropped
        return dropped

    @property
    def pending_frames(self) -> int:
        """Frames queued but not yet sent to the device."""
        return max(0, self._queued_frames - self._consumed)

    # the audio callback: copy, count, hand on; nothing that blocks
    def _callback(
        self, outdata: np.ndarray, frames: int, _time: CallbackTime, status: CallbackFlags
    ) -> None:
        if self.started_at_s is None:
            self.started_at_s = time.monotonic()
        if status.output_underflow:
            if self._audio_began:
                self.underflows += 1
            else:
                self.underflows_before_audio += 1
        out = outdata[:, 0]
        filled = 0
        if self._flush_requested:
            self._flush_dropped = self._drop_pending()
            self._flush_requested = False
            self._flushed.set()
        if not self._stopped and not self._paused:
            while filled < frames:
                if self._current is None:
                    if not self._chunks:
                        break
                    self._current, self._offset = self._chunks.popleft(), 0
                take = min(frames - filled, self._current.shape[0] - self._offset)
                out[filled : filled + take] = self._current[self._offset : self._offset + take]
                filled += take
                self._offset += take
                if self._offset >= self._current.shape[0]:
                    self._current = None
            self._consumed += filled
            self._audio_began = self._audio_began or filled > 0
        out[filled:] = 0.0
        if self.volume != 1.0:
            out *= self.volume
        self.reference.write(out)
        for observer in self._observers:
            observer(out)
        if self._stopped:
            raise self._sd.CallbackAbort
        if filled:
            # When the last real sample of this block reaches the speaker, by PortAudio's clock.
            self._last_sample_dac_s = _time.outputBufferDacTime + filled / self.sample_rate
        elif (
            self._finishing
            and self._current is None
            and not self._chunks
            and not self._paused
            and _time.currentTime >= self._last_sample_dac_s
        ):
            # Played out. Not CallbackStop: PortAudio's finished callback fires when the host API
            # has the last block, ~25 ms before PulseAudio plays it, and closing then cuts it.
            self._played_out = True
            self._done.set()
