"""The `Audio` value, WAV reading and writing, and resampling.

WAV is parsed here rather than with the standard `wave` module because vocal must read float
WAVs, WAVE_FORMAT_EXTENSIBLE files and espeak-ng's streamed WAVs, whose header carries a
placeholder length (the data chunk runs to the end of the file), and must turn every malformed
file into one clear error instead of a traceback.

It stands beside soundfile (which `vocal voices add` and cues use for FLAC, OGG and MP3) on
purpose: it needs no native library (libsndfile may be missing), it checks the named limits
below on the header before a sample is decoded (libsndfile decodes whatever the header claims),
and it refused all 25 malformed files of issue 17 with one clear line each.

Input limits (issue 17: a 16 KB WAV at 1 Hz made `listen` use 794 MB and `voices add` 3.8 GB; a
400 KB one died in the resampler with std::bad_alloc; `/dev/zero` was read for ever) are named
constants, checked before decoding: `MIN_SAMPLE_RATE`..`MAX_SAMPLE_RATE`, `MAX_WAV_BYTES` (a
file is not read past it, so an endless stream ends) and `MAX_WAV_DURATION_S`.
"""

from __future__ import annotations

import os
import stat
import struct
import time
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

import numpy as np

from vocal.errors import AudioFormatError, UsageError, VocalError

#: The rate every model in vocal listens at (Whisper, Silero VAD, AEC3 frames).
STT_SAMPLE_RATE = 16_000

_WAVE_FORMAT_PCM = 0x0001
_WAVE_FORMAT_IEEE_FLOAT = 0x0003
_WAVE_FORMAT_EXTENSIBLE = 0xFFFE
# A fmt chunk is 16, 18 or 40 bytes; anything far larger is a corrupt or hostile header.
_MAX_FMT_CHUNK_BYTES = 1024
_MAX_CHANNELS = 64
#: The lowest WAV rate read. Real recordings go down to 8 kHz (telephony) and a few old formats
#: to 5.5 kHz; below 4 kHz no speech band is left to hear, and a rate near 1 Hz turns a few KB
#: into hours of audio that resampling to 16 kHz multiplies (issue 17: 794 MB from 16 KB).
MIN_SAMPLE_RATE = 4_000
#: The highest WAV rate read: 768 kHz is the top of what audio interfaces record.
MAX_SAMPLE_RATE = 768_000
#: The longest WAV read, in seconds: 20 minutes is twenty times `listen`'s default cap of 60 s
#: and a hundred times a voice's 5-9 s reference clip, yet decodes to at most ~77 MB at 16 kHz.
MAX_WAV_DURATION_S = 20 * 60
#: The largest WAV file read, in bytes: 128 MiB holds 20 minutes of 48 kHz mono 16-bit (115 MB)
#: and bounds the memory decoding takes (at most 4 bytes of float32 per byte read, 8-bit PCM).
#: A stream (a pipe, a device) is read up to this and no further.
MAX_WAV_BYTES = 128 * 1024 * 1024
#: A stream (a FIFO, a pipe, stdin) that sends nothing for this long is given up on: a named
#: pipe nobody writes blocked `listen --input` for ever (issue 37). A WAV writer sends
#: continuously; a live recording piped in sends every few ms.
STREAM_STALL_S = 30.0
#: Streams and devices are read in pieces this large, so a non-WAV stream (/dev/zero) is known
#: for what it is after one piece.
_READ_PIECE_BYTES = 1024 * 1024
# Data-chunk sizes that streaming writers (espeak-ng --stdout, ffmpeg pipes) leave as placeholders.
_PLACEHOLDER_SIZES = (0, 0x7FFFFFFF, 0xFFFFFFFF, 0xFFFFFFFF - 36)


@dataclass(frozen=True)
class Audio:
    """Samples as float32 in [-1, 1], shaped (frames, channels), at `sample_rate` Hz."""

    samples: np.ndarray
    sample_rate: int

    def __post_init__(self) -> None:
        samples = np.asarray(self.samples, dtype=np.float32)
        if samples.ndim == 1:
            samples = samples[:, None]
        if samples.ndim != 2:
            raise ValueError(f"samples must be 1-D or 2-D, got shape {samples.shape}")
        if self.sample_rate <= 0:
            raise ValueError(f"sample_rate must be positive, got {self.sample_rate}")
        object.__setattr__(self, "samples", samples)

    @classmethod
    def silence(cls, duration_s: float, sample_rate: int, channels: int = 1) -> Audio:
        """Digital silence of the given length."""
        return cls(np.zeros((round(duration_s * sample_rate), channels), np.float32), sample_rate)

    @property
    def frames(self) -> int:
        return self.samples.shape[0]

    @property
    def channels(self) -> int:
        return self.samples.shape[1]

    @property
    def duration_s(self) -> float:
        return self.frames / self.sample_rate

    @property
    def mono_samples(self) -> np.ndarray:
        """A 1-D float32 view (mono) or the channel average (stereo and more)."""
        if self.channels == 1:
            return self.samples[:, 0]
        return self.samples.mean(axis=1, dtype=np.float32)

    def to_mono(self) -> Audio:
        return self if self.channels == 1 else Audio(self.mono_samples, self.sample_rate)

    def resample(self, sample_rate: int) -> Audio:
        """The same audio at another rate (soxr, high quality)."""
        return Audio(resample(self.samples, self.sample_rate, sample_rate), sample_rate)

    def for_stt(self) -> Audio:
        """Mono at 16 kHz, what VAD and Whisper take."""
        return self.to_mono().resample(STT_SAMPLE_RATE)

    def peak(self) -> float:
        return float(np.max(np.abs(self.samples))) if self.frames else 0.0

    def rms(self) -> float:
        return float(np.sqrt(np.mean(np.square(self.samples)))) if self.frames else 0.0

    def concat(self, other: Audio) -> Audio:
        if other.sample_rate != self.sample_rate or other.channels != self.channels:
            raise ValueError("concat needs the same rate and channel count")
        return Audio(np.concatenate([self.samples, other.samples]), self.sample_rate)


def resample(samples: np.ndarray, from_rate: int, to_rate: int) -> np.ndarray:
    """Resample 1-D or (frames, channels) float audio; returns float32."""
    samples = np.asarray(samples, dtype=np.float32)
    if from_rate == to_rate or samples.shape[0] == 0:
        return samples
    import soxr

    return np.asarray(soxr.resample(samples, from_rate, to_rate, quality="HQ"), dtype=np.float32)


def to_int16(samples: np.ndarray) -> np.ndarray:
    """Float samples to 16-bit PCM, clipping rather than wrapping."""
    return (np.clip(samples, -1.0, 1.0) * 32767.0).round().astype("<i2")


# -- reading --------------------------------------------------------------------------------
def read_wav(source: str | os.PathLike | bytes | BinaryIO, *, allow_empty: bool = False) -> Audio:
    """Read a WAV file (path), its bytes, or a binary stream into an `Audio`.

    Handles 8/16/24/32-bit PCM, 32/64-bit float, WAVE_FORMAT_EXTENSIBLE, any channel count and
    rate, and data chunks whose declared size is a placeholder or runs past the end of the file
    (read to end of file). Raises `AudioFormatError` (exit 2) for anything else.
    """
    name = "<stdin>" if not isinstance(source, (str, os.PathLike)) else os.fspath(source)
    if isinstance(source, (str, os.PathLike)):
        data = _read_file(Path(source))
    elif isinstance(source, bytes):
        data = source
    else:
        data = _read_limited(source, name)
    audio = parse_wav(data, name=name)
    if audio.frames == 0 and not allow_empty:
        raise AudioFormatError(f"{name}: the WAV file holds no audio (0 samples)")
    return audio


def _read_file(path: Path) -> bytes:
    """The bytes of the file at `path`: a regular file over `MAX_WAV_BYTES` is refused before
    it is read, anything else (a device, a FIFO) is read up to the limit."""
    if path.is_dir():
        raise UsageError(f"{path} is a directory, not a WAV file")
    try:
        # Non-blocking open: a FIFO with no writer yet would block `open` itself; the reads
        # below wait for each piece with a deadline instead.
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
        with open(fd, "rb", buffering=0) as stream:
            info = os.fstat(fd)
            if stat.S_ISREG(info.st_mode) and info.st_size > MAX_WAV_BYTES:
                raise _too_large(str(path))
            return _read_limited(stream, str(path))
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except PermissionError:
        raise UsageError(f"{path}: permission denied") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror}") from None


def _read_limited(stream: BinaryIO, name: str) -> bytes:
    """Read `stream` to its end, but never more than `MAX_WAV_BYTES` (+1 to know it is over).

    A stream that does not start like a WAV file stops after its first piece: parse_wav says
    what it is, and `/dev/zero` is not read for ever."""
    pieces: list[bytes] = []
    total = 0
    while total <= MAX_WAV_BYTES:
        piece = _next_piece(stream, min(_READ_PIECE_BYTES, MAX_WAV_BYTES + 1 - total), name)
        if not piece:
            break
        pieces.append(piece)
        total += len(piece)
        if total >= 12 and total == len(piece) and not _looks_like_riff(piece):
            break
    if total > MAX_WAV_BYTES:
        raise _too_large(name)
    return b"".join(pieces)


def _next_piece(stream: BinaryIO, size: int, name: str) -> bytes:
    """Up to `size` bytes of `stream`; from a FIFO opened by path (unbuffered), waiting at
    most `STREAM_STALL_S` for them. Anything else is read directly: a buffered stream (stdin)
    may hold bytes a wait on its descriptor would not see."""
    import io
    import select

    try:
        fd = stream.fileno()
        waited = isinstance(stream, io.RawIOBase) and stat.S_ISFIFO(os.fstat(fd).st_mode)
    except (AttributeError, OSError, ValueError):
        waited = False
    if not waited:
        return stream.read(size) or b""
    deadline = time.monotonic() + STREAM_STALL_S
    while True:
        left_s = deadline - time.monotonic()
        if left_s <= 0 or not select.select([fd], [], [], left_s)[0]:
            raise UsageError(f"{name}: nothing came for {STREAM_STALL_S:g} s")
        try:
            return os.read(fd, size)
        except BlockingIOError:  # woken with nothing to read: wait again
            continue


def _looks_like_riff(head: bytes) -> bool:
    return head[:4] in (b"RIFF", b"RIFX") and head[8:12] == b"WAVE"


def _too_large(name: str) -> AudioFormatError:
    return AudioFormatError(
        f"{name}: the file is larger than {MAX_WAV_BYTES // (1024 * 1024)} MiB, "
        "the limit for a WAV file",
        hint="cut it first, e.g. `sox in.wav out.wav trim 0 60`",
    )


def parse_wav(data: bytes, *, name: str = "<bytes>") -> Audio:
    """Parse the bytes of a RIFF/WAVE file. See `read_wav`.

    The limits (`MAX_WAV_BYTES`, the sample-rate range, `MAX_WAV_DURATION_S`) are checked on
    the header, before any sample is decoded."""
    if len(data) > MAX_WAV_BYTES:
        raise _too_large(name)
    if len(data) < 12 or data[:4] not in (b"RIFF", b"RIFX") or data[8:12] != b"WAVE":
        hint = "convert it first, e.g. `sox in.mp3 out.wav`" if data else None
        what = "an empty file" if not data else "not a WAV file (no RIFF/WAVE header)"
        raise AudioFormatError(f"{name}: {what}", hint=hint)
    if data[:4] == b"RIFX":
        raise AudioFormatError(f"{name}: big-endian (RIFX) WAV is not supported")

    fmt: tuple[int, int, int, int] | None = None
    pos = 12
    while pos + 8 <= len(data):
        chunk_id = data[pos : pos + 4]
        (size,) = struct.unpack_from("<I", data, pos + 4)
        body = pos + 8
        if chunk_id == b"fmt ":
            if size < 16 or size > _MAX_FMT_CHUNK_BYTES or body + size > len(data):
                raise AudioFormatError(f"{name}: corrupt WAV header (fmt chunk of {size} bytes)")
            fmt = _parse_fmt(data[body : body + size], name)
        elif chunk_id == b"data":
            if fmt is None:
                raise AudioFormatError(f"{name}: corrupt WAV header (data before fmt)")
            end = (
                len(data) if size in _PLACEHOLDER_SIZES or body + size > len(data) else body + size
            )
            return _decode(data[body:end], fmt, name)
        elif body + size > len(data):
            raise AudioFormatError(
                f"{name}: corrupt WAV header (chunk {chunk_id!r} claims {size} bytes, "
                f"the file has {len(data) - body} left)"
            )
        pos = body + size + (size & 1)  # chunks are word-aligned
    if fmt is None:
        raise AudioFormatError(f"{name}: corrupt WAV header (no fmt chunk)")
    raise AudioFormatError(f"{name}: the WAV file holds no audio (no data chunk)")


def check_audio_limits(name: str, *, sample_rate: int, frames: int | None = None) -> None:
    """An `AudioFormatError` (exit 2) when a header's rate is outside `MIN_SAMPLE_RATE`..
    `MAX_SAMPLE_RATE` or its `frames` last longer than `MAX_WAV_DURATION_S`: checked before
    decoding, here and by any other decoder (soundfile's `info` says both for FLAC or OGG)."""
    if not MIN_SAMPLE_RATE <= sample_rate <= MAX_SAMPLE_RATE:
        raise AudioFormatError(
            f"{name}: the header says a sample rate of {sample_rate} Hz "
            f"(vocal reads {MIN_SAMPLE_RATE}-{MAX_SAMPLE_RATE} Hz)",
            hint="resample it first, e.g. `sox in.wav -r 16000 out.wav`",
        )
    if frames is not None and frames / sample_rate > MAX_WAV_DURATION_S:
        raise AudioFormatError(
            f"{name}: {frames / sample_rate:.0f} s of audio, over the limit of "
            f"{MAX_WAV_DURATION_S} s",
            hint="cut it first, e.g. `sox in.wav out.wav trim 0 60`",
        )


def _parse_fmt(chunk: bytes, name: str) -> tuple[int, int, int, int]:
    format_tag, channels, sample_rate, _byte_rate, _block_align, bits = struct.unpack_from(
        "<HHIIHH", chunk
    )
    if format_tag == _WAVE_FORMAT_EXTENSIBLE:
        if len(chunk) < 26:
            raise AudioFormatError(f"{name}: corrupt WAV header (short extensible fmt)")
        (format_tag,) = struct.unpack_from("<H", chunk, 24)  # first two bytes of the GUID
    if channels == 0:
        raise AudioFormatError(f"{name}: the WAV header says 0 channels")
    if channels > _MAX_CHANNELS:
        raise AudioFormatError(f"{name}: the WAV header says {channels} channels")
    check_audio_limits(name, sample_rate=sample_rate)
    supported = {_WAVE_FORMAT_PCM: (8, 16, 24, 32), _WAVE_FORMAT_IEEE_FLOAT: (32, 64)}
    if format_tag not in supported:
        raise AudioFormatError(
            f"{name}: WAV encoding 0x{format_tag:04x} is not supported (PCM or float only)",
            hint="convert it first, e.g. `sox in.wav -b 16 out.wav`",
        )
    if bits not in supported[format_tag]:
        raise AudioFormatError(f"{name}: {bits}-bit samples are not supported for this encoding")
    return format_tag, channels, sample_rate, bits


def _decode(payload: bytes, fmt: tuple[int, int, int, int], name: str) -> Audio:
    format_tag, channels, sample_rate, bits = fmt
    frame_bytes = channels * bits // 8
    usable = len(payload) - len(payload) % frame_bytes  # a streamed file may end mid-frame
    check_audio_limits(name, sample_rate=sample_rate, frames=usable // frame_bytes)
    raw = payload[:usable]
    if format_tag == _WAVE_FORMAT_IEEE_FLOAT:
        samples = np.frombuffer(raw, dtype="<f4" if bits == 32 else "<f8").astype(np.float32)
        # Audio's samples are in [-1, 1]: a float file may hold NaN, infinities or 1e38, whose
        # square is infinite in float32 (an RMS, a level meter).
        samples = np.clip(np.nan_to_num(samples, nan=0.0, posinf=1.0, neginf=-1.0), -1.0, 1.0)
    elif bits == 8:
        samples = (np.frombuffer(raw, dtype=np.uint8).astype(np.float32) - 128.0) / 128.0
    elif bits == 16:
        samples = np.frombuffer(raw, dtype="<i2").astype(np.float32) / 32768.0
    elif bits == 24:
        triplets = np.frombuffer(raw, dtype=np.uint8).reshape(-1, 3).astype(np.int32)
        ints = triplets[:, 0] | (triplets[:, 1] << 8) | (triplets[:, 2] << 16)
        ints = np.where(ints & 0x800000, ints - 0x1000000, ints)
        samples = ints.astype(np.float32) / 8388608.0
    else:
        samples = np.frombuffer(raw, dtype="<i4").astype(np.float32) / 2147483648.0
    return Audio(samples.reshape(-1, channels), sample_rate)


# -- writing --------------------------------------------------------------------------------
def wav_bytes(audio: Audio, *, float32: bool = False) -> bytes:
    """Encode `audio` as a WAV file: 16-bit PCM by default, or 32-bit float."""
    if float32:
        payload, format_tag, bits = (
            audio.samples.astype("<f4").tobytes(),
            _WAVE_FORMAT_IEEE_FLOAT,
            32,
        )
    else:
        payload, format_tag, bits = to_int16(audio.samples).tobytes(), _WAVE_FORMAT_PCM, 16
    channels, sample_rate = audio.channels, audio.sample_rate
    block_align = channels * bits // 8
    byte_rate = sample_rate * block_align
    # A canonical WAV's three chunks, each packed on its own: RIFF, fmt (16 bytes), data.
    riff = struct.pack("<4sI4s", b"RIFF", 36 + len(payload), b"WAVE")
    fmt = struct.pack(
        "<4sIHHIIHH", b"fmt ", 16, format_tag, channels, sample_rate, byte_rate, block_align, bits
    )
    data = struct.pack("<4sI", b"data", len(payload))
    return riff + fmt + data + payload


def _is_special_file(path: Path) -> bool:
    """True when `path` exists and is not a regular file (a device, a FIFO, a socket)."""
    try:
        mode = os.stat(path).st_mode
    except OSError:
        return False
    return not (stat.S_ISREG(mode) or stat.S_ISDIR(mode))


def write_wav(path: str | os.PathLike, audio: Audio, *, float32: bool = False) -> Path:
    """Write `audio` to `path` atomically (a reader never sees half a file)."""
    path = Path(path)
    data = wav_bytes(audio, float32=float32)
    if _is_special_file(path):
        # /dev/null, a FIFO, a terminal: write through it. Renaming a temporary file over it
        # would replace the device with a regular file (as root, /dev/null for everyone).
        try:
            with open(path, "wb") as out:
                out.write(data)
        except OSError as exc:
            raise UsageError(f"{path}: {exc.strerror or exc}") from None
        return path
    from vocal.files.atomic import write_atomic

    try:
        write_atomic(path, data)  # through a symlink; an existing file keeps its mode
    except FileNotFoundError:
        raise UsageError(f"{path}: the directory {path.parent} does not exist") from None
    except IsADirectoryError:
        raise UsageError(f"{path} is a directory", hint="give a file name") from None
    except PermissionError:
        raise UsageError(f"{path}: permission denied") from None
    except OSError as exc:  # a full disk, a quota, a file-size limit: exit 1, one line
        raise VocalError(
            f"{path} was not written: {exc.strerror or exc}",
            hint="a file that was there is as it was",
        ) from None
    return path
