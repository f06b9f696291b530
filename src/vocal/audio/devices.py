"""Audio devices: the only module that imports `sounddevice`.

Listing and resolving devices, opening and closing streams, and input: `Microphone` hands
captured blocks to a queue from a callback that does nothing else. Output is `Player`
(vocal.audio.player); `WavSource` and `WavSink` (vocal.audio.file_devices) stand in for both
when a command gets `--input FILE` or `--output FILE`.

Wiring learnt on PulseAudio (see docs/design.md): separate input and output streams (the full-duplex
`sd.Stream` gave xruns), and numpy imported before any stream opens (python-sounddevice #487).
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from types import ModuleType
from typing import TYPE_CHECKING, Protocol

from vocal.errors import DeviceError

if TYPE_CHECKING:
    import numpy as np
    from _typeshed import ReadableBuffer

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


class AudioStream(Protocol):
    """The part of a sounddevice stream vocal uses (sounddevice ships no types)."""

    def start(self) -> None: ...

    def abort(self) -> None: ...

    def close(self) -> None: ...


class CallbackTime(Protocol):
    """PortAudio's clock for one callback (seconds on the stream's time base)."""

    inputBufferAdcTime: float
    outputBufferDacTime: float
    currentTime: float


class CallbackFlags(Protocol):
    """What went wrong since the last callback (sounddevice.CallbackFlags)."""

    input_overflow: bool
    output_underflow: bool


def sounddevice() -> ModuleType:
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

    def to_dict(self) -> dict[str, object]:
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
def start_stream(
    kind: str,
    device: str | int | None,
    sample_rate: int,
    block_frames: int,
    callback: Callable[..., None],
    *,
    raw: bool = False,
    latency: float | str = "low",
    **extra: object,
) -> AudioStream:
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


def close_stream(stream: AudioStream | None) -> None:
    """Abort and close `stream` (None is fine)."""
    if stream is None:
        return
    try:
        stream.abort()
        stream.close()
    except Exception:  # a vanished device must not hide the error that got us here
        pass


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
        #: Blocks, or (bytes, time) from the raw callback until `read` makes them arrays.
        self._queue: queue.SimpleQueue[Block | tuple[bytes, float] | None] = queue.SimpleQueue()
        self._stream: AudioStream | None = None
        self.opened_at_s: float | None = None

    def open(self) -> Microphone:
        raw = self._on_block is None
        self._stream = start_stream(
            "input",
            self._device,
            self.sample_rate,
            self.block_frames,
            self._raw_callback if raw else self._callback,
            raw=raw,
        )
        self.opened_at_s = time.monotonic()
        return self

    def close(self) -> None:
        stream, self._stream = self._stream, None
        close_stream(stream)
        self._queue.put(None)  # wake a reader

    def __enter__(self) -> Microphone:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _callback(
        self, indata: np.ndarray, frames: int, _time: CallbackTime, status: CallbackFlags
    ) -> None:
        if status.input_overflow:
            self.overflows += 1
        block = indata[:, 0].copy()
        if self._on_block is not None:
            block = self._on_block(block)
        self._queue.put(Block(block, time.monotonic()))

    def _raw_callback(
        self, indata: ReadableBuffer, frames: int, _time: CallbackTime, status: CallbackFlags
    ) -> None:
        if status.input_overflow:
            self.overflows += 1
        self._queue.put((bytes(indata), time.monotonic()))

    def read(self, timeout_s: float | None = None) -> Block | None:
        """The next block, or None when closed (or after `timeout_s` with nothing captured)."""
        try:
            block = self._queue.get(timeout=timeout_s)
        except queue.Empty:
            return None
        if isinstance(block, tuple):
            import numpy as np

            data, captured_at_s = block
            return Block(np.frombuffer(data, np.float32).copy(), captured_at_s)
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
