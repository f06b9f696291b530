"""Audio devices: the only module that imports `sounddevice`.

`Microphone` hands captured blocks to a queue from a callback that does nothing else; `Player`
plays from a queue, can be killed within one block, paused and resumed, and keeps a monotonic
`ReferenceBuffer` of every sample it sent to the device, silence included, so echo cancellation
and tests see exactly what was played. `WavSource` and `WavSink` stand in for them when a
command gets `--input FILE` or `--output FILE`.

Wiring learnt on PulseAudio (see DESIGN.md): separate input and output streams (the full-duplex
`sd.Stream` gave xruns), and numpy imported before any stream opens (python-sounddevice #487).
"""

from __future__ import annotations

import collections
import queue
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vocal.errors import DeviceError

if TYPE_CHECKING:
    import numpy as np

# numpy is imported where it is used, not here: `vocal listen` opens the microphone before
# numpy has loaded (~150 ms), so recording starts sooner (issue 3: process start -> mic open).

PORTAUDIO_HINT = (
    "install PortAudio: `sudo apt-get install libportaudio2` on Debian/Ubuntu, "
    "`sudo dnf install portaudio` on Fedora, `brew install portaudio` on macOS"
)
NO_DEVICE_HINT = (
    "see `vocal devices`; on Linux check that PulseAudio or PipeWire is running "
    "(`pactl info`), on macOS the Sound settings"
)
#: Frames per callback for playback: 256 at 16 kHz is 16 ms, so a kill lands within ~16 ms
#: plus the device's own buffer.
DEFAULT_OUTPUT_BLOCK_FRAMES = 256
#: Frames per capture callback: one Silero VAD chunk at 16 kHz (32 ms).
DEFAULT_INPUT_BLOCK_FRAMES = 512
#: How much played audio the reference keeps: long enough for a whole reply.
DEFAULT_REFERENCE_S = 600.0

BlockHook = Callable[["np.ndarray"], None]


def sounddevice() -> Any:
    """Import sounddevice, turning a missing PortAudio into a `DeviceError` (exit 5).

    An initialization `vocal.launch` began early is waited for first: two threads inside
    Pa_Initialize at once would corrupt PortAudio's state.
    """
    from vocal.audio import portaudio

    portaudio.wait()
    portaudio.silence_library_messages()
    try:
        import sounddevice as sd
    except OSError as exc:  # "PortAudio library not found"
        raise DeviceError(f"PortAudio is not available ({exc})", hint=PORTAUDIO_HINT) from None
    return sd


def _port_audio_error(action: str, exc: Exception) -> DeviceError:
    return DeviceError(f"cannot {action}: {exc}", hint=NO_DEVICE_HINT)


# -- device listing -------------------------------------------------------------------------
@dataclass(frozen=True)
class DeviceInfo:
    """One PortAudio device as `vocal devices` shows it."""

    index: int
    name: str
    hostapi: str
    input_channels: int
    output_channels: int
    default_sample_rate: float
    default_input: bool
    default_output: bool

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def list_devices() -> list[DeviceInfo]:
    """Every device PortAudio sees, with the defaults marked."""
    sd = sounddevice()
    try:
        raw = sd.query_devices()
        hostapis = sd.query_hostapis()
        default_in, default_out = sd.default.device
    except sd.PortAudioError as exc:
        raise _port_audio_error("list audio devices", exc) from None
    devices = []
    for info in raw:
        devices.append(
            DeviceInfo(
                index=info["index"],
                name=info["name"],
                hostapi=hostapis[info["hostapi"]]["name"],
                input_channels=info["max_input_channels"],
                output_channels=info["max_output_channels"],
                default_sample_rate=info["default_samplerate"],
                default_input=info["index"] == default_in,
                default_output=info["index"] == default_out,
            )
        )
    return devices


def resolve_device(spec: str | int | None, kind: str) -> int | None:
    """A device index from `spec`: None (the default), an index, or part of a device name."""
    if spec is None or spec == "":
        sd = sounddevice()
        default_in, default_out = sd.default.device
        if (default_in if kind == "input" else default_out) < 0:
            raise DeviceError(f"there is no default audio {kind} device", hint=NO_DEVICE_HINT)
        return None
    if isinstance(spec, int) or str(spec).isdigit():
        index = int(spec)
        devices = {d.index: d for d in list_devices()}
        if index not in devices:
            raise DeviceError(f"no audio device with index {index}", hint="see `vocal devices`")
        _check_channels(devices[index], kind)
        return index
    needle = str(spec).lower()
    matches = [d for d in list_devices() if needle in d.name.lower() and _has_channels(d, kind)]
    if not matches:
        raise DeviceError(f"no {kind} device matches {spec!r}", hint="see `vocal devices`")
    return matches[0].index


def _has_channels(device: DeviceInfo, kind: str) -> bool:
    return (device.input_channels if kind == "input" else device.output_channels) > 0


def _check_channels(device: DeviceInfo, kind: str) -> None:
    if not _has_channels(device, kind):
        raise DeviceError(f"device {device.index} ({device.name}) has no {kind} channels")


# -- streams ------------------------------------------------------------------------------------
def _start_stream(
    kind: str,
    device: str | int | None,
    sample_rate: int,
    block_frames: int,
    callback: Callable[..., None],
    *,
    raw: bool = False,
    latency: float | str = "low",
    **extra: Any,
) -> Any:
    """Open and start a mono float32 input or output stream, PortAudio's "low" latency unless
    `latency` (seconds, "low" or "high") says otherwise (`raw`: an input stream that hands the
    callback a buffer, not a numpy array)."""
    sd = sounddevice()
    index = resolve_device(device, kind)
    if kind == "input":
        factory = sd.RawInputStream if raw else sd.InputStream
    else:
        factory = sd.OutputStream
    try:
        stream = factory(
            samplerate=sample_rate,
            blocksize=block_frames,
            channels=1,
            dtype="float32",
            device=index,
            latency=latency,
            callback=callback,
            **extra,
        )
        stream.start()
    except sd.PortAudioError as exc:
        what = "the microphone" if kind == "input" else "the audio output"
        raise _port_audio_error(f"open {what}", exc) from None
    return stream


def _close_stream(stream: Any) -> None:
    """Abort and close `stream` (None is fine)."""
    if stream is None:
        return
    try:
        stream.abort()
        stream.close()
    except Exception:  # a vanished device must not hide the error that got us here
        pass


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
    Every block sent to the device goes to `reference` and to `on_block` (AEC's reverse stream).
    """

    def __init__(
        self,
        sample_rate: int,
        *,
        device: str | int | None = None,
        block_frames: int = DEFAULT_OUTPUT_BLOCK_FRAMES,
        volume: float = 1.0,
        on_block: BlockHook | None = None,
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
        self._on_block = on_block
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
        self._stream: Any = None
        self._sd: Any = None  # bound in open() so the callback never imports
        self.started_at_s: float | None = None  # time.monotonic() of the first callback
        self.underflows = 0

    # lifecycle
    def open(self) -> Player:
        self._sd = sounddevice()
        self._stream = _start_stream(
            "output", self._device, self.sample_rate, self.block_frames, self._callback,
            latency=self.latency, finished_callback=self._on_stream_finished,
        )  # fmt: skip
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
        _close_stream(stream)
        self._done.set()

    def __enter__(self) -> Player:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

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
    def _callback(self, outdata: np.ndarray, frames: int, _time: Any, status: Any) -> None:
        if self.started_at_s is None:
            self.started_at_s = time.monotonic()
        if status.output_underflow:
            self.underflows += 1
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
        out[filled:] = 0.0
        if self.volume != 1.0:
            out *= self.volume
        self.reference.write(out)
        if self._on_block is not None:
            self._on_block(out)
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


# -- input ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Block:
    """One captured block: mono float32 samples and the monotonic time its callback ran."""

    samples: np.ndarray
    captured_at_s: float


class Microphone:
    """A PortAudio input stream whose callback only copies each block into a queue.

    Iterate `blocks()` (or call `read()`) from the consumer thread. `overflows` counts blocks the
    device reported lost; `on_block`, if given, runs in the callback on the raw block (AEC's
    capture stream) and returns the samples to queue.

    Without `on_block` the stream is a RawInputStream whose callback queues bytes, turned into
    numpy arrays by `read()`: the microphone can then open before numpy is imported.
    """

    def __init__(
        self,
        sample_rate: int = 16_000,
        *,
        device: str | int | None = None,
        block_frames: int = DEFAULT_INPUT_BLOCK_FRAMES,
        on_block: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> None:
        self.sample_rate = sample_rate
        self.block_frames = block_frames
        self.overflows = 0
        self._device = device
        self._on_block = on_block
        self._queue: queue.SimpleQueue[Block | None] = queue.SimpleQueue()
        self._stream: Any = None
        self.opened_at_s: float | None = None

    def open(self) -> Microphone:
        raw = self._on_block is None
        self._stream = _start_stream(
            "input", self._device, self.sample_rate, self.block_frames,
            self._raw_callback if raw else self._callback, raw=raw,
        )  # fmt: skip
        self.opened_at_s = time.monotonic()
        return self

    def close(self) -> None:
        stream, self._stream = self._stream, None
        _close_stream(stream)
        self._queue.put(None)  # wake a reader

    def __enter__(self) -> Microphone:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _callback(self, indata: np.ndarray, frames: int, _time: Any, status: Any) -> None:
        if status.input_overflow:
            self.overflows += 1
        block = indata[:, 0].copy()
        if self._on_block is not None:
            block = self._on_block(block)
        self._queue.put(Block(block, time.monotonic()))

    def _raw_callback(self, indata: Any, frames: int, _time: Any, status: Any) -> None:
        if status.input_overflow:
            self.overflows += 1
        self._queue.put(Block(bytes(indata), time.monotonic()))

    def read(self, timeout_s: float | None = None) -> Block | None:
        """The next block, or None when closed (or after `timeout_s` with nothing captured)."""
        try:
            block = self._queue.get(timeout=timeout_s)
        except queue.Empty:
            return None
        if block is not None and isinstance(block.samples, bytes):
            import numpy as np

            block = Block(np.frombuffer(block.samples, np.float32).copy(), block.captured_at_s)
        return block

    def blocks(self, timeout_s: float = 2.0) -> Iterator[Block]:
        """Captured blocks until `close()`; a device that delivers nothing for `timeout_s`
        raises `DeviceError` (a microphone that vanished mid-turn)."""
        while True:
            block = self.read(timeout_s)
            if block is None:
                if self._stream is None:
                    return
                raise DeviceError(f"the microphone delivered nothing for {timeout_s:.1f} s")
            yield block


# -- file stand-ins -----------------------------------------------------------------------------
class WavSource:
    """`--input FILE`: a WAV read as if captured, in blocks at `sample_rate` mono, as fast as
    the consumer takes them."""

    #: Not a live source: `vocal.hearing.listening.listen` endpoints it on the file's own clock.
    live = False

    def __init__(self, path: str | Path, sample_rate: int = 16_000, *, block_frames: int = 512):
        self.path = Path(path)
        self.sample_rate = sample_rate
        self.block_frames = block_frames
        self.overflows = 0
        from vocal.audio.wav import read_wav

        self.audio = read_wav(self.path).to_mono().resample(sample_rate)
        self.opened_at_s: float | None = None

    def open(self) -> WavSource:
        self.opened_at_s = time.monotonic()
        return self

    def close(self) -> None:
        pass

    def __enter__(self) -> WavSource:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def blocks(self, timeout_s: float = 2.0) -> Iterator[Block]:
        import numpy as np

        samples = self.audio.mono_samples
        n = self.block_frames
        for start in range(0, samples.shape[0], n):
            block = samples[start : start + n]
            if block.shape[0] < n:
                block = np.concatenate([block, np.zeros(n - block.shape[0], np.float32)])
            yield Block(block, time.monotonic())


class WavSink:
    """`--output FILE`: the Player interface, writing a WAV instead of playing.

    Nothing plays in real time: `finish()` writes the whole file at once, through
    `vocal.audio.wav.write_wav` (a temporary file renamed over the old one). A turn that is
    stopped, fails or is interrupted before `finish()` writes nothing, so an existing file
    is left byte for byte as it was (issue 17: a failed `speak -o keep.wav` used to leave an
    empty 44-byte WAV). `open()` refuses a destination that cannot be written (a directory,
    a missing parent) before any synthesis cost is paid.
    """

    def __init__(self, path: str | Path, sample_rate: int, *, volume: float = 1.0) -> None:
        self.path = Path(path)
        self.sample_rate = sample_rate
        self.volume = volume
        self.reference = ReferenceBuffer(1)
        self._parts: list[np.ndarray] = []
        self._done = threading.Event()
        self._stopped = False
        self.paused = False

    def open(self) -> WavSink:
        """Check the destination can take a file; raises `UsageError` (exit 2) if not."""
        self._check_destination()
        return self

    def close(self) -> None:
        """Release the sink; unless `finish()` wrote it, the file is not touched."""
        self._done.set()

    def __enter__(self) -> WavSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def play(self, samples: np.ndarray) -> None:
        import numpy as np

        if not self._stopped:
            self._parts.append(np.asarray(samples, np.float32).reshape(-1) * self.volume)

    def finish(self) -> None:
        """Write everything played so far as the file (once)."""
        if self._done.is_set():
            return
        try:
            self._write()
        finally:
            self._done.set()  # a failed write is not retried: the error went to the caller

    def stop(self) -> None:
        """End without writing: the file stays as it was."""
        self._stopped = True
        self._done.set()

    def wait(self, timeout_s: float | None = None) -> bool:
        return self._done.wait(timeout_s)

    def pause(self) -> None:
        pass

    def resume(self) -> None:
        pass

    @property
    def played_frames(self) -> int:
        return sum(p.shape[0] for p in self._parts)

    def _write(self) -> None:
        import numpy as np

        from vocal.audio.wav import Audio, write_wav

        samples = np.concatenate(self._parts) if self._parts else np.zeros(0, np.float32)
        write_wav(self.path, Audio(samples, self.sample_rate))

    def _check_destination(self) -> None:
        """A `UsageError` unless a WAV can be written at the path: not a directory, and in a
        directory that exists. Checked before the work, so the error comes first and alone
        (`speak -o DIR` printed a traceback from the feeder thread, then the error)."""
        from vocal.errors import UsageError

        if self.path.is_dir():
            raise UsageError(f"{self.path} is a directory", hint="give a file name")
        if not self.path.parent.is_dir():
            raise UsageError(f"{self.path}: the directory {self.path.parent} does not exist")
