"""Input limits (issue 17): each named, enforced before decoding, one clear line and exit 2.

Every case here reproduces one from the issue: a 16 KB WAV at 1 Hz (794 MB in `listen`, 3.8 GB
in `voices add`), a 400 KB one (std::bad_alloc), `/dev/zero` read without end, 250 KB of text
(a 668 MB WAV, 5.3 GB peak), and NaN read from settings, flags and options.
"""

from __future__ import annotations

import contextlib
import math
import os
import resource
import struct
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from harness.runner import run_vocal
from harness.sounds import tone
from vocal.audio import wav as audio_module
from vocal.audio.vad import EndpointOptions
from vocal.audio.wav import (
    MAX_SAMPLE_RATE,
    MAX_WAV_BYTES,
    MAX_WAV_DURATION_S,
    MIN_SAMPLE_RATE,
    Audio,
    parse_wav,
    read_wav,
    wav_bytes,
)
from vocal.config import load_settings
from vocal.errors import AudioFormatError, UsageError
from vocal.hearing.endofturn import EndOfTurnOptions
from vocal.speaking.speak import text_argument
from vocal.speaking.text import MAX_TEXT_CHARS

# A child that reads without limit dies here instead of taking the machine's memory with it.
CHILD_ADDRESS_SPACE_BYTES = 3 * 1024**3


def wav_at(sample_rate: int, payload_bytes: int, *, bits: int = 16) -> bytes:
    """A PCM WAV header claiming `sample_rate`, followed by `payload_bytes` of quiet samples."""
    block = bits // 8
    header = struct.pack(
        "<4sI4s4sIHHIIHH4sI", b"RIFF", 36 + payload_bytes, b"WAVE", b"fmt ", 16, 1, 1,
        sample_rate, sample_rate * block, block, bits, b"data", payload_bytes,
    )  # fmt: skip
    return header + bytes(payload_bytes)


def assert_one_line_exit_2(result: subprocess.CompletedProcess, *fragments: str) -> None:
    """The CLI promise: exit 2, one `vocal: error:` line, no traceback."""
    stderr = result.stderr.decode()
    assert result.returncode == 2, stderr
    assert "Traceback" not in stderr and "unexpected" not in stderr, stderr
    lines = stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("vocal: error: "), stderr
    for fragment in fragments:
        assert fragment in lines[0], stderr


def run_limited(*args: str, stdin_path: str, timeout_s: float = 60) -> subprocess.CompletedProcess:
    """`vocal ARGS` with stdin from `stdin_path`, in a child whose address space is capped."""

    def cap_memory() -> None:
        limit = CHILD_ADDRESS_SPACE_BYTES
        resource.setrlimit(resource.RLIMIT_AS, (limit, limit))

    with open(stdin_path, "rb") as stdin:
        return subprocess.run(
            [sys.executable, "-m", "vocal", *args],
            stdin=stdin, capture_output=True, timeout=timeout_s, preexec_fn=cap_memory,
        )  # fmt: skip


# -- the limits are named and sensible -----------------------------------------------------------
def test_limits_are_generous_for_real_audio() -> None:
    assert MIN_SAMPLE_RATE <= 8_000 < 48_000 <= MAX_SAMPLE_RATE  # telephony to studio rates
    assert MAX_WAV_DURATION_S >= 10 * 60  # ten times listen's default cap of 60 s
    assert MAX_WAV_BYTES >= 10 * 60 * 48_000 * 2 * 2  # ten minutes of 48 kHz stereo 16-bit
    assert MAX_TEXT_CHARS >= 10_000  # a long agent reply, a README section


# -- sample rate: a range with a minimum ---------------------------------------------------------
def test_a_16_kb_wav_at_1_hz_is_refused_before_decoding() -> None:
    with pytest.raises(AudioFormatError, match="sample rate of 1 Hz"):
        parse_wav(wav_at(1, 16_000))


@pytest.mark.parametrize("sample_rate", [MIN_SAMPLE_RATE - 1, MAX_SAMPLE_RATE + 1])
def test_rates_just_outside_the_range_are_refused(sample_rate: int) -> None:
    with pytest.raises(AudioFormatError, match=f"{MIN_SAMPLE_RATE}"):
        parse_wav(wav_at(sample_rate, 64))


@pytest.mark.parametrize("sample_rate", [MIN_SAMPLE_RATE, 8_000, MAX_SAMPLE_RATE])
def test_rates_at_the_edges_of_the_range_are_read(sample_rate: int) -> None:
    assert parse_wav(wav_at(sample_rate, 64)).sample_rate == sample_rate


def test_listen_and_voices_add_refuse_a_1_hz_wav(tmp_path: Path) -> None:
    path = tmp_path / "one-hz.wav"
    path.write_bytes(wav_at(1, 16_000))
    assert_one_line_exit_2(run_vocal("listen", "--input", str(path)), "1 Hz")
    assert_one_line_exit_2(run_vocal("voices", "add", "slow", str(path)), "1 Hz")


# -- duration and size ---------------------------------------------------------------------------
def test_a_wav_longer_than_the_duration_cap_is_refused_before_decoding() -> None:
    seconds = MAX_WAV_DURATION_S + 1
    data = wav_at(MIN_SAMPLE_RATE, seconds * MIN_SAMPLE_RATE, bits=8)
    with pytest.raises(AudioFormatError, match="limit"):
        parse_wav(data)


def test_a_400_kb_wav_at_a_low_rate_is_a_clear_error(tmp_path: Path) -> None:
    # At 1 Hz this died in soxr with "unexpected MemoryError: std::bad_alloc".
    path = tmp_path / "low.wav"
    path.write_bytes(wav_at(1, 400_000))
    assert_one_line_exit_2(run_vocal("listen", "--input", str(path)), "sample rate")


def test_a_file_larger_than_the_size_cap_is_refused_before_reading(tmp_path: Path) -> None:
    path = tmp_path / "huge.wav"
    with open(path, "wb") as out:  # sparse: no disk is used for the zeros
        out.write(wav_at(16_000, 0))
        out.truncate(MAX_WAV_BYTES + 1)
    with pytest.raises(AudioFormatError, match="larger than"):
        read_wav(path)
    assert_one_line_exit_2(run_vocal("listen", "--input", str(path)), "larger than")


def test_parse_wav_refuses_bytes_over_the_size_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(audio_module, "MAX_WAV_BYTES", 1000)
    with pytest.raises(AudioFormatError, match="larger than"):
        parse_wav(wav_at(16_000, 2000))


class EndlessWav:
    """A stream that never ends: a WAV header, then zeros for ever (a device, a stuck pipe)."""

    def __init__(self) -> None:
        self.header = wav_at(16_000, 0)
        self.served = 0

    def read(self, size: int = -1) -> bytes:
        if size is None or size < 0:
            raise AssertionError("read() without a size never returns on an endless stream")
        chunk = (self.header[self.served :] + bytes(size))[:size]
        self.served += len(chunk)
        return chunk


def test_an_endless_stream_is_read_up_to_the_cap(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(audio_module, "MAX_WAV_BYTES", 1 << 20)
    stream = EndlessWav()
    with pytest.raises(AudioFormatError, match="larger than"):
        read_wav(stream)
    assert stream.served <= (1 << 20) + 1


def test_dev_zero_is_not_read_for_ever(tmp_path: Path) -> None:
    with pytest.raises(AudioFormatError, match="not a WAV file"):
        read_wav("/dev/zero")
    result = run_limited("listen", "--input", "/dev/zero", stdin_path="/dev/null")
    assert_one_line_exit_2(result, "not a WAV file")


def test_an_endless_wav_stream_through_the_cli_stops_at_the_size_cap(tmp_path: Path) -> None:
    # A FIFO that serves a WAV header, then zeros for as long as anyone reads.
    fifo = tmp_path / "endless.wav"
    os.mkfifo(fifo)

    def serve() -> None:
        with contextlib.suppress(OSError), open(fifo, "wb") as out:
            out.write(wav_at(16_000, 0))
            while True:
                out.write(bytes(1 << 20))

    writer = threading.Thread(target=serve, daemon=True)
    writer.start()
    try:
        result = run_limited("listen", "--input", str(fifo), stdin_path="/dev/null")
    finally:
        if writer.is_alive():  # still blocked in open(): release it
            with contextlib.suppress(OSError):
                os.close(os.open(fifo, os.O_RDONLY | os.O_NONBLOCK))
        writer.join(timeout=10)
    assert_one_line_exit_2(result, "larger than")


# -- text length ---------------------------------------------------------------------------------
def test_text_longer_than_the_cap_is_refused() -> None:
    with pytest.raises(UsageError, match="too long"):
        text_argument("word " * (MAX_TEXT_CHARS // 5 + 1))
    assert text_argument("word " * (MAX_TEXT_CHARS // 5))[0].startswith("word")


def test_250_kb_of_text_is_refused_before_synthesis(tmp_path: Path) -> None:
    text = "This is a sentence of an enormous reply. " * 6_200  # ~250 KB
    output = tmp_path / "long.wav"
    for command in ("speak", "converse"):
        args = (command, "-", "--engine", "espeak-ng")
        result = run_vocal(*args, *(("--output", str(output)) if command == "speak" else ()),
                           input=text, timeout=60)  # fmt: skip
        assert_one_line_exit_2(result, "too long", f"{MAX_TEXT_CHARS}")
    assert not output.exists()


def test_endless_stdin_text_is_read_up_to_the_cap(tmp_path: Path) -> None:
    # /dev/zero as the text: read without limit it took all memory; now reading stops at
    # MAX_TEXT_BYTES.
    output = str(tmp_path / "o.wav")
    result = run_limited("speak", "-", "--output", output, stdin_path="/dev/zero")
    assert_one_line_exit_2(result)


# -- NaN and infinity, wherever a number is read -------------------------------------------------
@pytest.mark.parametrize("value", ["nan", "NaN", "inf", "-inf", "1e999"])
def test_non_finite_numbers_from_the_environment_are_usage_errors(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VOCAL_MAX_SECONDS", value)
    with pytest.raises(UsageError, match="VOCAL_MAX_SECONDS.*finite"):
        load_settings()


@pytest.mark.parametrize("literal", ["nan", "inf", "-inf"])
def test_non_finite_numbers_from_config_toml_are_usage_errors(
    literal: str, vocal_home: Path
) -> None:
    vocal_home.mkdir(parents=True)
    (vocal_home / "config.toml").write_text(f"no_speech_timeout_s = {literal}\n")
    with pytest.raises(UsageError, match="no_speech_timeout_s.*finite"):
        load_settings()


@pytest.mark.parametrize("literal", ["inf", "nan", "700.5", "1e400"])
def test_an_int_setting_from_a_toml_float_is_a_usage_error(literal: str, vocal_home: Path) -> None:
    vocal_home.mkdir(parents=True)
    (vocal_home / "config.toml").write_text(f"silence_ms = {literal}\n")
    with pytest.raises(UsageError, match="silence_ms"):
        load_settings()


@pytest.mark.parametrize("value", ["-1", "0", "0.2", "4.5", "nan"])
def test_vocal_speed_is_range_checked_like_the_flag(
    value: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VOCAL_SPEED", value)
    with pytest.raises(UsageError, match="VOCAL_SPEED"):
        load_settings()


@pytest.mark.parametrize("value", ["0.25", "1", "4.0"])
def test_vocal_speed_in_range_is_read(value: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("VOCAL_SPEED", value)
    assert load_settings().speed == float(value)


def test_speed_in_config_toml_is_range_checked(vocal_home: Path) -> None:
    vocal_home.mkdir(parents=True)
    (vocal_home / "config.toml").write_text("speed = 10.0\n")
    with pytest.raises(UsageError, match="speed.*0.25"):
        load_settings()


@pytest.mark.parametrize(
    "options",
    [
        {"min_silence_ms": math.nan},
        {"pre_roll_ms": math.nan},
        {"post_roll_ms": math.nan},
        {"min_speech_ms": math.nan},
        {"min_speech_ms": -1},
        {"max_duration_s": math.nan},
        {"max_duration_s": math.inf},
        {"no_speech_timeout_s": math.nan},
        {"no_speech_timeout_s": math.inf},
        {"start_threshold": math.nan},
        {"stop_threshold": math.nan},
        {"min_silence_ms": math.inf},
    ],
)
def test_endpoint_options_refuse_nan_and_infinity(options: dict) -> None:
    with pytest.raises(ValueError):
        EndpointOptions(**options)


@pytest.mark.parametrize(
    "options",
    [
        {"check_ms": math.nan},
        {"max_pause_ms": math.nan},
        {"max_pause_ms": math.inf},
        {"check_ms": math.inf, "max_pause_ms": math.inf},
        {"audio_finished": math.nan},
        {"audio_unfinished": math.inf},
        {"words_finished": -math.inf},
        {"words_unfinished": math.nan},
        {"finished_ms": math.nan},
        {"finished_ms": math.inf, "max_pause_ms": math.inf},
    ],
)
def test_end_of_turn_options_refuse_nan_and_infinity(options: dict) -> None:
    with pytest.raises(ValueError):
        EndOfTurnOptions(**options)


def test_valid_options_still_build() -> None:
    EndpointOptions()
    EndOfTurnOptions()
    EndOfTurnOptions(enabled=False, check_ms=0, finished_ms=1, max_pause_ms=1)


@pytest.fixture
def speech_wav(tmp_path: Path) -> Path:
    path = tmp_path / "x.wav"
    path.write_bytes(wav_bytes(Audio(tone(440, 0.5), 16_000)))
    return path


def test_vocal_max_seconds_nan_through_the_cli(speech_wav: Path) -> None:
    result = run_vocal("listen", "--input", str(speech_wav), env={"VOCAL_MAX_SECONDS": "nan"})
    assert_one_line_exit_2(result, "VOCAL_MAX_SECONDS", "finite")


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (("listen", "--max-seconds", "nan"), "--max-seconds"),
        (("listen", "--max-seconds", "inf"), "--max-seconds"),
        (("listen", "--no-speech-timeout", "nan"), "--no-speech-timeout"),
        (("listen", "--no-vad", "--seconds", "nan"), "--seconds"),
        (("converse", "hello", "--speed", "nan", "--no-conch"), "--speed"),
        (("converse", "hello", "--max-seconds", "nan", "--no-conch"), "--max-seconds"),
        (("converse", "hello", "--no-speech-timeout", "inf", "--no-conch"), "--no-speech-timeout"),
    ],
)
def test_nan_flags_are_refused_before_any_audio(
    args: tuple[str, ...], flag: str, speech_wav: Path
) -> None:
    # Click's FloatRange takes "nan" (every comparison with it is false) and "inf".
    extra = ("--input", str(speech_wav)) if args[0] == "listen" else ()
    assert_one_line_exit_2(run_vocal(*args, *extra, timeout=60), flag, "finite")


@pytest.mark.parametrize(
    "args",
    [
        ["speak", "--speed", "nan", "-o", "out.wav", "hi"],
        ["speak", "--volume", "nan", "-o", "out.wav", "hi"],
        ["play", "--volume", "nan", "in.wav"],
        ["replay", "--volume", "inf"],
        ["listen", "--max-seconds", "nan", "--input", "in.wav"],
        ["converse", "--speed", "inf", "hi"],
        ["conch", "wait", "--timeout", "nan"],
        ["focus", "hold", "--seconds", "nan"],
    ],
)
def test_every_float_flag_refuses_nan_and_infinity(args: list[str], tmp_path: Path) -> None:
    """Click's FloatRange lets NaN through (every comparison with it is false): each float
    option has the `finite` callback."""
    result = run_vocal(*[str(tmp_path / a) if a.endswith(".wav") else a for a in args])
    assert result.returncode == 2, result.stderr.decode()
    assert b"finite" in result.stderr or b"range" in result.stderr
    assert b"Traceback" not in result.stderr


def test_a_hook_event_is_read_with_a_limit() -> None:
    """`vocal hooks reply` reads its event from stdin: an endless or huge input is refused,
    not read into memory whole (issue 17); exit 1, as from any hook (issue 37: never 2)."""
    result = run_vocal("hooks", "reply", input=b"\0" * (5 * 1024 * 1024))
    assert result.returncode == 1 and b"not a hook event" in result.stderr
    assert b"Traceback" not in result.stderr
