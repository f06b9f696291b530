"""What the canceller would take out of a spoken reply in this room (issue 20).

`vocal doctor --echo` plays a probe of speech-like noise; AEC3's reduction on that probe is
not what it does to speech: on a reply it either gates the echo to silence or lets it through
for a second, reply by reply, so that in a quiet room the probe reads 20 dB under the replies
and in a loud one several dB over them (benchmarks/RESULTS.md, "What the doctor's reduction
says about a reply"). The probe does measure the room well: its echo path (`measure_room`,
half a second of it, reverberation included) and, before it sounds, the room's own noise. So
the forecast runs speech through that path, adds that noise, and cleans it with a fresh
canceller told the measured delay and drift, as a turn with this profile would: several
replies, offline, in the callbacks' block sizes and order; its figure is their median ERLE
from 1 s in, counted where the echo stands over the noise, as benchmarks/converse counts it.

A clock that drifts and an output that underruns move the echo's delay during the probe; the
forecast plays the replies the same way (`vocal.duplex.measure.delay_track`). What it cannot see is
a loudspeaker's distortion: a linear path does not hold it (`EchoMeasurement.linear_db` says how
much of the echo a linear path explains), and on speech AEC3 removes it anyway (the harness's
distorting room: 69 dB on replies).
"""

from __future__ import annotations

import math
import os
import statistics
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from vocal.duplex.measure.delay_track import DelayTrack, follow_delay
from vocal.duplex.measure.erle import QUIET_DBFS, active_dbfs_over, erle_db, noise_floor_dbfs

if TYPE_CHECKING:
    from vocal.duplex.canceller.aec import EchoCanceller

SAMPLE_RATE = 16_000
#: The path kept: from a little before the direct sound to this long after it (a bare room's
#: reverberation; the design room's tail is 40 ms, the harness's reverberant room's 400 ms).
PATH_LEAD_S = 0.005
PATH_TAIL_S = 0.5
#: Regularization of the division by the probe's spectrum, relative to its mean power: where
#: the probe has no energy (under 150 Hz, over 6 kHz) the path is left at zero, not guessed.
_REGULARIZATION = 1e-3
#: The path ends where its envelope sinks under this many times the estimation noise's.
_OVER_NOISE = 2.0
#: The canceller's first second is skipped (its convergence), as the doctor and the benchmark do.
SKIP_S = 1.0
#: The audio callbacks' block sizes (frames): vocal.audio's defaults.
RENDER_BLOCK, CAPTURE_BLOCK = 256, 512
#: Each reply is forecast at several offsets of its echo (samples) across a millisecond, each
#: with the room's noise from a different place in its recording. A turn's echo never comes
#: at exactly the probe's delay: the callbacks' delay moves from one stream to the next
#: (117.5-119.2 ms over a dozen probes on PulseAudio here, 136-154 ms on PipeWire), and where
#: the echo reverberates or moves, AEC3's outcome on a reply turns on it (one reply: 23 and
#: 58 dB 1.2 ms apart). Four offsets of the five replies are 20 runs, as benchmarks/converse's
#: ten live turns are ten draws; two offsets left the forecast ~9 dB apart between probes in
#: the reverberant room, six ~4 dB. (The callbacks' phase changed nothing.)
PASSES = tuple((round(k * SAMPLE_RATE / 3000), k / 4) for k in range(4))
#: The replies forecast, spoken by the embedded voice (hibari; ~54 s in all, synthesized in
#: ~0.5 s): how much echo gets through early in a reply depends on the reply (one room gave
#: 21-55 dB over these five), so the forecast is their median. benchmarks/converse measures
#: ERLE over the same five, live.
REPLIES = (
    "The build finished. All forty two tests passed, and the report is in the docs folder. "
    "I also cleaned up the old branches and merged the release notes.",
    "I looked at the failing test. The fixture opens the socket before the server is ready, so "
    "the first request times out. I added a wait on the ready file, and it passes ten times in "
    "a row now.",
    "There are three open pull requests. The first one renames the config loader, the second "
    "adds retries to the uploader, and the third is still a draft. Do you want me to review the "
    "second one first?",
    "The benchmark ran twice. The median start-up time went from one hundred and eighty to one "
    "hundred and forty milliseconds, and the spread is smaller. I wrote the numbers into the "
    "results file.",
    "Your calendar is clear after three. I moved the design review to Thursday morning and sent "
    "the notes from yesterday's meeting to everyone on the thread.",
)


@dataclass(frozen=True)
class MeasuredRoom:
    """The echo path from the output callback to the input callback (`ir`, at `SAMPLE_RATE`,
    starting `lag` samples after the reference), how its delay moved while the probe played
    (`track`), and the room's own sound at the microphone."""

    lag: int
    ir: np.ndarray
    noise: np.ndarray
    track: DelayTrack = DelayTrack()

    def echo(self, far: np.ndarray) -> np.ndarray:
        """`far` (at `SAMPLE_RATE`, on the output callback's clock) as the microphone hears it,
        the room's noise not included; its delay moves as the probe's did."""
        wet = np.convolve(self.track.warp(far).astype(np.float64), self.ir.astype(np.float64))
        out = np.zeros(far.shape[0], np.float64)
        if self.lag < far.shape[0]:
            part = wet[: far.shape[0] - self.lag]
            out[self.lag : self.lag + part.shape[0]] = part
        return out.astype(np.float32)

    def noise_for(self, count: int) -> np.ndarray:
        """`count` samples of the room's noise: its recording, then backwards, then forwards
        again (a loop would click at every seam, and a click is sound no canceller removes);
        silence if none."""
        if self.noise.size == 0:
            return np.zeros(count, np.float32)
        there_and_back = np.concatenate([self.noise, self.noise[::-1]])
        return np.resize(there_and_back, count).astype(np.float32)

    def active_dbfs(self) -> float:
        """The level a 100 ms window's echo must reach to be counted over this room's noise,
        as benchmarks/converse counts it (`vocal.duplex.measure.erle.active_dbfs_over`)."""
        return active_dbfs_over(noise_floor_dbfs(self.noise, sample_rate=SAMPLE_RATE))


def measure_room(
    reference: np.ndarray, mic: np.ndarray, probe: slice, delay_samples: int, noise: np.ndarray
) -> MeasuredRoom:
    """The echo path of the probe `reference[probe]` in `mic` (same grid, `SAMPLE_RATE`),
    deconvolved over the whole probe and its tail and kept from `PATH_LEAD_S` before the
    direct sound (`delay_samples`, from `vocal.duplex.echo_free.echo_path.fit_echo_path`) to
    `PATH_TAIL_S` after it; `noise` is what the microphone heard before the probe."""
    start, stop = probe.start or 0, probe.stop if probe.stop is not None else reference.shape[0]
    lead, tail = round(PATH_LEAD_S * SAMPLE_RATE), round(PATH_TAIL_S * SAMPLE_RATE)
    first = max(0, delay_samples - lead)
    # The probe as the output played it: the path is then the same all through it.
    track = follow_delay(reference, mic, probe, delay_samples)
    x = track.warp(reference[start:stop]).astype(np.float64)
    y = mic[start : min(mic.shape[0], stop + first + lead + tail)].astype(np.float64)
    size = 1 << math.ceil(math.log2(x.shape[0] + y.shape[0]))
    spectrum = np.fft.rfft(x, size)
    power = np.abs(spectrum) ** 2
    path = np.fft.irfft(
        np.fft.rfft(y, size) * np.conj(spectrum) / (power + _REGULARIZATION * power.mean()), size
    )
    # Lags before the probe (the end of the circular result) hold no echo, only what the
    # division made of the room's noise and of what a linear path does not explain. The path
    # is kept until its envelope sinks to that level, so that a noisy or distorting room does
    # not leave a half-second tail of estimation noise that no room has.
    chunk = SAMPLE_RATE // 100
    before = path[size - x.shape[0] + chunk : size - chunk]
    noise_energy = float(np.mean(before * before)) * chunk if before.size else 0.0
    kept = path[first : first + lead + tail].copy()
    count = kept.shape[0] // chunk
    energy = np.sum(kept[: count * chunk].reshape(count, chunk) ** 2, axis=1)
    # Smoothed over 30 ms: one quiet chunk inside a reverberant tail does not end it.
    envelope = np.convolve(energy, np.ones(3) / 3, mode="same")
    direct = int(np.argmax(energy))
    ended = np.flatnonzero(envelope[direct:] < _OVER_NOISE * noise_energy)
    if ended.size:
        kept[(direct + int(ended[0])) * chunk :] = 0.0
    return MeasuredRoom(
        lag=first, ir=kept.astype(np.float32), noise=np.asarray(noise, np.float32), track=track
    )


@dataclass(frozen=True)
class Forecast:
    """The replies' ERLE from 1 s in (dB; None where no window stood over the noise) and
    their median."""

    per_reply_db: list[float | None]

    @property
    def median_db(self) -> float | None:
        known = [v for v in self.per_reply_db if v is not None]
        return round(statistics.median(known), 1) if known else None


def forecast(
    room: MeasuredRoom, replies: Sequence[np.ndarray], rate: int, stream_delay_ms: int | None
) -> Forecast:
    """Each reply (mono float32 at `rate`) through `room` into a fresh canceller told
    `stream_delay_ms`, as a turn with this profile starts it; see the module docstring.

    Raises:
        EngineError: the echo canceller (livekit) is missing.
    """
    from vocal.audio.wav import resample

    active_dbfs = room.active_dbfs()
    far = [np.asarray(reply, np.float32) for reply in replies]
    echoes = [room.echo(resample(reply, rate, SAMPLE_RATE)) for reply in far]

    def run(job: tuple[int, int]) -> float | None:
        (offset, noise_from), i = PASSES[job[0]], job[1]
        echo = np.concatenate([np.zeros(offset, np.float32), echoes[i]])[: echoes[i].shape[0]]
        hum = room.noise_for(round(noise_from * room.noise.shape[0]) + echo.shape[0])
        captured = echo + hum[hum.shape[0] - echo.shape[0] :]
        canceller = fresh_canceller(rate, stream_delay_ms, room.track.drift_ppm)
        cleaned = feed(canceller, far[i], rate, captured)
        return _scored(echo, captured, cleaned, active_dbfs)

    jobs = [(k, i) for k in range(len(PASSES)) for i in range(len(far))]
    # Each run is its own canceller: they run side by side (AEC3 lets go of the GIL).
    with ThreadPoolExecutor(max_workers=min(len(jobs), os.cpu_count() or 1) or 1) as pool:
        return Forecast(list(pool.map(run, jobs)))


def _scored(
    echo: np.ndarray, captured: np.ndarray, cleaned: np.ndarray, active_dbfs: float
) -> float | None:
    """ERLE from `SKIP_S` after the echo's first sound (a voice's leading silence is not
    reply) to the end; None where no window's echo stood over the noise."""
    n = min(captured.shape[0], cleaned.shape[0])
    loud = np.flatnonzero(np.abs(echo[:n]) > 10 ** (QUIET_DBFS / 20))
    if loud.size == 0:
        return None
    first = int(loud[0])
    try:
        return round(
            erle_db(captured[first:n], cleaned[first:n], skip_s=SKIP_S, active_dbfs=active_dbfs), 1
        )
    except ValueError:  # nothing over the noise: the room drowns this reply's echo
        return None


def spoken_replies(engine: str = "hibari") -> tuple[list[np.ndarray], int]:
    """`REPLIES` as `engine`'s default voice speaks them, and its sample rate.

    Raises:
        VocalError: the engine could not be loaded or failed.
    """
    from vocal.tts import load_tts

    voice = load_tts(engine)
    return [np.asarray(voice.synthesize(text), np.float32) for text in REPLIES], voice.sample_rate


def fresh_canceller(
    rate: int, stream_delay_ms: int | None = None, drift_ppm: float = 0.0
) -> EchoCanceller:
    """AEC3 as a turn starts it (every turn is a new process), its far end at `rate`, told
    `stream_delay_ms` and `drift_ppm` as an echo profile would."""
    from vocal.duplex.canceller.aec import EchoCanceller, fresh_apm

    return EchoCanceller(
        render_sample_rate=rate,
        apm=fresh_apm(),
        raw_when_quiet_s=None,
        stream_delay_ms=stream_delay_ms,
        drift_ppm=drift_ppm,
    )


def feed(canceller: EchoCanceller, far: np.ndarray, rate: int, captured: np.ndarray) -> np.ndarray:
    """`captured` cleaned by `canceller` fed `far` (at `rate`) and `captured` in the audio
    callbacks' blocks and order (a capture block is handed over once its last sample is in),
    aligned with `captured`."""
    events = [(k * RENDER_BLOCK / rate, 0, k) for k in range(far.shape[0] // RENDER_BLOCK)]
    events += [
        ((j + 1) * CAPTURE_BLOCK / SAMPLE_RATE, 1, j)
        for j in range(captured.shape[0] // CAPTURE_BLOCK)
    ]
    cleaned = np.zeros_like(captured)
    for _, kind, i in sorted(events):
        if kind == 0:
            canceller.render(far[i * RENDER_BLOCK : (i + 1) * RENDER_BLOCK].copy())
        else:
            block = slice(i * CAPTURE_BLOCK, (i + 1) * CAPTURE_BLOCK)
            cleaned[block] = canceller.capture(captured[block].copy())
    return cleaned[canceller.capture_delay_frames or 0 :]


__all__ = [
    "REPLIES",
    "Forecast",
    "MeasuredRoom",
    "feed",
    "forecast",
    "fresh_canceller",
    "measure_room",
    "spoken_replies",
]
