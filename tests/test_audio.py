"""WAV reading and writing, the Audio value, resampling, and bad input."""

from __future__ import annotations

import struct
import subprocess
from pathlib import Path

import numpy as np
import pytest

from harness.runner import run_vocal
from harness.sounds import tone
from vocal.audio.wav import Audio, parse_wav, read_wav, resample, wav_bytes, write_wav
from vocal.errors import AudioFormatError, UsageError


def _wav(samples: np.ndarray, sample_rate: int, *, fmt: int, bits: int, channels: int) -> bytes:
    """A WAV built by hand, to test the parser against bytes it did not write itself."""
    if fmt == 3:
        payload = samples.astype("<f4" if bits == 32 else "<f8").tobytes()
    elif bits == 8:
        payload = (np.clip(samples, -1, 1) * 127 + 128).astype(np.uint8).tobytes()
    elif bits == 24:
        ints = (np.clip(samples, -1, 1) * 8388607).astype("<i4")
        payload = b"".join(int(v).to_bytes(3, "little", signed=True) for v in ints.reshape(-1))
    else:
        dtype = {16: "<i2", 32: "<i4"}[bits]
        payload = (np.clip(samples, -1, 1) * (2 ** (bits - 1) - 1)).astype(dtype).tobytes()
    block = channels * bits // 8
    header = struct.pack(
        "<4sI4s4sIHHIIHH4sI", b"RIFF", 36 + len(payload), b"WAVE", b"fmt ", 16, fmt, channels,
        sample_rate, sample_rate * block, block, bits, b"data", len(payload),
    )  # fmt: skip
    return header + payload


@pytest.mark.parametrize(
    ("fmt", "bits", "channels", "sample_rate", "tolerance"),
    [
        (1, 16, 1, 16000, 1e-4),
        (1, 16, 2, 44100, 1e-4),
        (1, 8, 1, 8000, 1e-2),
        (1, 24, 1, 48000, 1e-6),
        (1, 32, 2, 22050, 1e-8),
        (3, 32, 1, 24000, 0),
        (3, 64, 2, 16000, 1e-7),
    ],
)
def test_reads_pcm_and_float_any_rate_and_channels(fmt, bits, channels, sample_rate, tolerance):
    rng = np.random.default_rng(1)
    samples = rng.uniform(-0.9, 0.9, (500, channels)).astype(np.float32)
    audio = parse_wav(_wav(samples, sample_rate, fmt=fmt, bits=bits, channels=channels))
    assert audio.sample_rate == sample_rate
    assert audio.samples.shape == (500, channels)
    assert np.max(np.abs(audio.samples - samples)) <= tolerance + 1 / 2 ** (bits - 1)


def test_write_then_read_round_trip(tmp_path: Path) -> None:
    original = Audio(np.stack([tone(440, 0.5), tone(660, 0.5)], axis=1), 16000)
    for float32 in (False, True):
        path = write_wav(tmp_path / f"x{float32}.wav", original, float32=float32)
        back = read_wav(path)
        assert back.sample_rate == 16000 and back.channels == 2
        assert np.max(np.abs(back.samples - original.samples)) < (1e-7 if float32 else 1e-4)


def test_espeak_placeholder_length_header_is_read_to_end_of_file() -> None:
    wav = subprocess.run(
        ["espeak-ng", "--stdout", "a header that lies about its length"],
        check=True, capture_output=True,
    ).stdout  # fmt: skip
    (declared,) = struct.unpack_from("<I", wav, 40)
    assert declared in (0, 0x7FFFFFFF, 0xFFFFFFFF) or declared + 44 != len(wav)
    audio = parse_wav(wav)
    assert audio.sample_rate == 22050
    assert audio.frames == (len(wav) - 44) // 2
    assert audio.duration_s > 1.0


def test_data_chunk_longer_than_file_reads_what_is_there() -> None:
    wav = bytearray(wav_bytes(Audio(tone(440, 0.1), 16000)))
    struct.pack_into("<I", wav, 40, 10_000_000)
    assert parse_wav(bytes(wav)).frames == 1600


def test_chunks_before_data_are_skipped() -> None:
    good = wav_bytes(Audio(tone(440, 0.1), 16000))
    extra = b"LIST" + struct.pack("<I", 5) + b"hello" + b"\0"  # odd size: padded
    wav = good[:36] + extra + good[36:]
    assert parse_wav(wav).frames == 1600


def test_resample_preserves_a_tone() -> None:
    audio = Audio(tone(440, 1.0, sample_rate=22050), 22050).resample(16000)
    assert audio.frames == 16000
    spectrum = np.abs(np.fft.rfft(audio.mono_samples))
    assert abs(np.argmax(spectrum) * 16000 / audio.frames - 440) < 2
    assert resample(np.zeros(0, np.float32), 8000, 16000).shape == (0,)


def test_for_stt_mixes_stereo_8k_down_to_16k_mono() -> None:
    audio = Audio(np.stack([tone(300, 1, 8000), tone(300, 1, 8000)], axis=1), 8000).for_stt()
    assert (audio.sample_rate, audio.channels, audio.frames) == (16000, 1, 16000)


# -- bad input: each one clear line, the right exit code, no traceback -----------------------
def _zero_channels() -> bytes:
    wav = bytearray(wav_bytes(Audio(tone(440, 0.1), 16000)))
    struct.pack_into("<H", wav, 22, 0)
    return bytes(wav)


def _huge_header() -> bytes:
    wav = bytearray(wav_bytes(Audio(tone(440, 0.1), 16000)))
    struct.pack_into("<I", wav, 16, 0xFFFFFF00)  # fmt chunk claims ~4 GB
    return bytes(wav)


def _huge_unknown_chunk() -> bytes:
    good = wav_bytes(Audio(tone(440, 0.1), 16000))
    return good[:36] + b"junk" + struct.pack("<I", 0xFFFFFFF0) + good[36:]


def _at_rate(sample_rate: int, payload_bytes: int) -> bytes:
    """An 8-bit mono WAV header claiming `sample_rate`, then `payload_bytes` of silence."""
    return _wav(np.zeros(payload_bytes, np.float32), sample_rate, fmt=1, bits=8, channels=1)


BAD_FILES = {
    "empty file": (b"", "an empty file"),
    "not a wav": (b"hello, I am a text file\n" * 10, "not a WAV file"),
    "header only": (wav_bytes(Audio(np.zeros(0, np.float32), 16000)), "holds no audio"),
    "zero channels": (_zero_channels(), "0 channels"),
    "huge fmt header": (_huge_header(), "corrupt WAV header"),
    "huge chunk": (_huge_unknown_chunk(), "corrupt WAV header"),
    "truncated": (b"RIFF\x10\0\0\0WAVEfmt ", "no fmt chunk"),
    # Issue 17: 16 KB at 1 Hz is 4.4 hours of audio (794 MB in `listen`, 3.8 GB in `voices add`).
    "1 Hz": (_at_rate(1, 16_000), "sample rate of 1 Hz"),
    "over the duration limit": (_at_rate(4_000, 4_000 * 20 * 60 + 4_000), "over the limit"),
}


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_wav_raises_a_clear_error(case: str, tmp_path: Path) -> None:
    data, message = BAD_FILES[case]
    path = tmp_path / "bad.wav"
    path.write_bytes(data)
    with pytest.raises(AudioFormatError, match=message):
        read_wav(path)


@pytest.mark.parametrize("case", sorted(BAD_FILES))
def test_bad_wav_on_the_command_line_is_one_line_exit_2(case: str, tmp_path: Path) -> None:
    data, message = BAD_FILES[case]
    path = tmp_path / "bad.wav"
    path.write_bytes(data)
    result = run_vocal("play", str(path), "--output", str(tmp_path / "out.wav"))
    lines = result.stderr.decode().strip().splitlines()
    assert result.returncode == 2
    assert len(lines) == 1 and lines[0].startswith("vocal: error: ") and message in lines[0]


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="no such file"):
        read_wav(tmp_path / "nope.wav")
    with pytest.raises(UsageError, match="is a directory"):
        read_wav(tmp_path)
    result = run_vocal("play", str(tmp_path / "nope.wav"))
    assert result.returncode == 2 and b"no such file" in result.stderr


def test_write_into_missing_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="does not exist"):
        write_wav(tmp_path / "no" / "such" / "dir.wav", Audio(tone(440, 0.1), 16000))


def test_write_wav_writes_through_a_fifo_instead_of_replacing_it(tmp_path: Path) -> None:
    # The atomic rename once turned `-o /dev/null` into a regular file named /dev/null (as root,
    # for the whole machine). A FIFO stands in for the device: it must still be one afterwards.
    import os
    import stat
    import threading

    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()), daemon=True)
    reader.start()
    audio = Audio(tone(440.0, 0.1), 16000)
    try:
        write_wav(fifo, audio)
    finally:
        reader.join(timeout=10)
        if reader.is_alive():  # still blocked in open(): release it, or the session hangs
            os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert received and parse_wav(received[0]).frames == audio.frames
    assert [p.name for p in tmp_path.iterdir()] == ["pipe"]  # no temporary file left behind
