"""Measure the echo of this loudspeaker and microphone: `vocal doctor --echo` (issue 20).

A probe of speech-like noise (`probe_signal`: bursts at a syllable's rate, the band of speech)
plays through the output vocal uses while the microphone records, wired as `vocal converse`
wires them (the output callback feeds AEC3's reverse stream, the input callback its capture
stream: `vocal.duplex.wiring.EchoGuard`). From the two streams as the callbacks saw them:

- **the delay**: the strongest tap of the linear echo path fitted from what was played to what
  was captured (`vocal.duplex.echo_free.echo_path.fit_echo_path`), from the output callback handing
  a sample over to its echo reaching the input callback: output latency, the room, input latency.
  This is the stream delay AEC3 is told (`EchoCanceller(stream_delay_ms=...)`);
- **the echo's level** at the microphone (dBFS RMS over the probe) and its gain over the probe;
- **the reduction**: what the canceller took out of the probe's echo after its first second
  (ERLE, `vocal.duplex.measure.erle.erle_db`), which is what decides the verdict
  (`vocal.duplex.canceller.profile.verdict_for`);
- **the reduction on a reply**: what it would take out of spoken replies' echo, forecast from
  the echo path the probe measured and the room's noise heard before it
  (`vocal.duplex.measure.forecast`). AEC3 treats speech and noise differently, so this, not the
  probe's figure, is what benchmarks/converse's ERLE over replies is to be compared with;
- **the linear fit**: how much of the echo a linear path explains (dB). A loudspeaker that
  distorts, or a clock that drifts, leaves more that no linear canceller removes;
- **the delay's moves** during the probe: the output clock's drift against the input's (ppm)
  and any step (an underrun), `vocal.duplex.measure.delay_track`; the forecast plays replies so.
"""

from __future__ import annotations

import threading
import time
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from vocal.duplex.canceller.profile import EchoProfile, verdict_for
from vocal.duplex.measure.delay_track import DelayTrack

if TYPE_CHECKING:
    from vocal.duplex.echo_free.onset import AlignedStreams
    from vocal.duplex.measure.forecast import Forecast, MeasuredRoom

#: The probe's length: AEC3 converges within ~1 s on the design room, and the reduction is
#: measured after that.
PROBE_S = 3.0
#: The probe's level (dBFS RMS): a normal speaking level for a reply.
PROBE_DBFS = -20.0
#: Syllables per second, and the share of each that sounds.
SYLLABLE_RATE_HZ = 4.0
SYLLABLE_DUTY = 0.7
#: The band of the probe (Hz): speech's, where the microphone and the loudspeaker matter.
BAND_HZ = (150.0, 6000.0)
#: Echo delays the fit looks for (s, relative to the callbacks' clock): up to issue 20's long
#: rooms (600 ms) and a deep output buffer on top.
DELAY_RANGE_S = (-0.05, 1.0)
#: The room is recorded this long before the probe plays: its noise, for the reply forecast
#: (1 s of a room of talkers misjudged it by 9 dB).
NOISE_BEFORE_S = 2.0
#: Recording goes on this long after the probe's last sample was handed over (the echo's
#: latency and the room's tail).
TAIL_S = 0.6
#: The reduction skips the canceller's first second (its convergence).
CONVERGED_AFTER_S = 1.0
CAPTURE_SAMPLE_RATE = 16_000


@dataclass(frozen=True)
class EchoMeasurement:
    """What one probe measured (see the module docstring); `profile()` is what is kept."""

    output: str
    input: str
    delay_ms: float
    echo_dbfs: float
    probe_dbfs: float
    reduction_db: float | None
    linear_db: float
    verdict: str
    underflows: int
    overflows: int
    #: What the canceller took out live, starting cold (no profile: every turn until now).
    cold_reduction_db: float | None = None
    #: What it would take out of spoken replies with this profile: their median and each
    #: reply's (`vocal.duplex.measure.forecast`; None where it could not be forecast).
    reply_reduction_db: float | None = None
    reply_reductions_db: tuple[float | None, ...] = ()
    #: How the echo's delay moved during the probe (`vocal.duplex.measure.delay_track`): the output
    #: clock's drift against the input's (ppm), and steps (an underrun) as (s in, ms).
    drift_ppm: float = 0.0
    delay_steps: tuple[tuple[float, float], ...] = ()

    @property
    def echo_gain_db(self) -> float:
        return self.echo_dbfs - self.probe_dbfs

    def profile(self) -> EchoProfile:
        return EchoProfile(
            output=self.output,
            input=self.input,
            delay_ms=self.delay_ms,
            echo_dbfs=self.echo_dbfs,
            echo_gain_db=round(self.echo_gain_db, 1),
            reduction_db=self.reduction_db,
            verdict=self.verdict,
            measured_at=time.time(),
            drift_ppm=self.drift_ppm,
        )

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "echo_gain_db": round(self.echo_gain_db, 1)}


def probe_signal(
    sample_rate: int = CAPTURE_SAMPLE_RATE, duration_s: float = PROBE_S, seed: int = 20
) -> np.ndarray:
    """Speech-like noise: white noise limited to `BAND_HZ`, tilted -3 dB per octave like
    speech, in bursts of `SYLLABLE_RATE_HZ` with raised-cosine edges, at `PROBE_DBFS` RMS over
    its bursts. Deterministic for one seed."""
    count = round(duration_s * sample_rate)
    rng = np.random.default_rng(seed)
    spectrum = np.fft.rfft(rng.standard_normal(count))
    freqs = np.fft.rfftfreq(count, 1 / sample_rate)
    band = (freqs >= BAND_HZ[0]) & (freqs <= BAND_HZ[1])
    tilt = np.where(band, 1 / np.sqrt(np.maximum(freqs, 1.0) / BAND_HZ[0]), 0.0)
    noise = np.fft.irfft(spectrum * tilt, count)
    t = np.arange(count) / sample_rate
    phase = (t * SYLLABLE_RATE_HZ) % 1.0
    on = phase < SYLLABLE_DUTY
    # Raised-cosine bursts: silent between syllables, as speech is, so the echo path's
    # onsets and tails are both in the fit.
    envelope = np.where(on, np.sin(np.pi * np.clip(phase / SYLLABLE_DUTY, 0, 1)) ** 0.5, 0.0)
    signal = noise * envelope
    rms = float(np.sqrt(np.mean(signal[on] ** 2)))
    return (signal * (10 ** (PROBE_DBFS / 20) / rms)).astype(np.float32)


def dbfs(samples: np.ndarray) -> float:
    """RMS level in dBFS (floor -200)."""
    mean_square = float(np.mean(np.square(samples, dtype=np.float64))) if samples.size else 0.0
    return 10 * float(np.log10(max(mean_square, 1e-20)))


def measure_echo(
    *,
    output: str,
    input: str,
    output_device: str | int | None = None,
    input_device: str | int | None = None,
    probe_s: float = PROBE_S,
    sample_rate: int = CAPTURE_SAMPLE_RATE,
) -> EchoMeasurement:
    """Play the probe through the output while recording the input; see the module docstring.
    `output` and `input` name the pair for the profile (`vocal.audio.endpoints.device_pair`).

    Raises:
        DeviceError: a device could not be opened or delivered nothing.
        EngineError: the echo canceller (livekit) is missing.
    """
    from vocal.audio.devices import Microphone
    from vocal.audio.player import Player
    from vocal.duplex.canceller.aec import EchoCanceller
    from vocal.duplex.wiring import EchoGuard
    from vocal.errors import DeviceError

    probe = probe_signal(sample_rate, probe_s)
    canceller = EchoCanceller(render_sample_rate=sample_rate, raw_when_quiet_s=None)
    guard = EchoGuard(canceller)
    raw: list[np.ndarray] = []
    # The room's own sound first (the reply forecast's noise), kept from the canceller: it
    # meets the probe as a turn's meets a reply (2 s of chatter before it cost its reduction
    # 6 dB).
    noise: list[np.ndarray] = []
    guarded = threading.Event()

    def capture(block: np.ndarray) -> np.ndarray:
        if not guarded.is_set():
            noise.append(block.copy())
            return block
        raw.append(block.copy())
        return guard.capture(block)

    delivered: list[np.ndarray] = []  # every block handed out, the unguarded first

    def next_block() -> np.ndarray:
        block = mic.read(timeout_s=5.0)
        if block is None:
            raise DeviceError("the microphone delivered nothing for 5 s")
        delivered.append(block.samples)
        return block.samples

    with Microphone(CAPTURE_SAMPLE_RATE, device=input_device, on_block=capture) as mic:
        while sum(part.shape[0] for part in noise[1:]) < NOISE_BEFORE_S * CAPTURE_SAMPLE_RATE:
            next_block()
        guarded.set()
        # Play only once the canceller has a block: it must see the echo from its first sample.
        while len(delivered) <= len(noise):
            next_block()
        player = Player(sample_rate, device=output_device, on_block=guard.render).open()
        try:
            player.play(probe)
            player.finish()
            deadline = None
            for block in mic.blocks():
                delivered.append(block.samples)
                if deadline is None and player.done:
                    deadline = time.monotonic() + TAIL_S
                if deadline is not None and time.monotonic() >= deadline:
                    break
        finally:
            player.close()
        overflows = mic.overflows
    assert guard.taps is not None
    streams = guard.taps.aligned()
    if streams is None:
        raise DeviceError("nothing was played or captured")
    recording = Recording(
        streams,
        guard.taps.played.snapshot(),
        sample_rate,
        np.concatenate(raw),
        np.concatenate(delivered[len(noise) :])[guard.capture_delay_frames :],
        canceller.activity.first_loud_s,
        player.underflows,
        overflows,
        # The first block is the stream starting up, not the room.
        np.concatenate(noise[1:])[-round(NOISE_BEFORE_S * CAPTURE_SAMPLE_RATE) :],
    )
    return _measured(output, input, recording)


@dataclass(frozen=True)
class Recording:
    """What one probe left: both streams as the callbacks saw them (the played blocks as
    (stamp, position, samples) at `played_rate`), the capture raw and cleaned (aligned), when
    the probe first sounded, and the streams' glitches."""

    streams: AlignedStreams
    played_blocks: list[tuple[float, int, np.ndarray]]
    played_rate: int
    captured: np.ndarray
    cleaned: np.ndarray
    first_loud_s: float | None
    underflows: int
    overflows: int
    #: The room before the probe, at the capture rate (empty: not recorded).
    noise: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))


def _measured(output: str, input: str, recording: Recording) -> EchoMeasurement:
    """The figures from the recorded streams (see `measure_echo`)."""
    from vocal.duplex.echo_free.echo_path import fit_echo_path
    from vocal.errors import DeviceError

    streams = recording.streams
    rate, reference, mic = streams.rate, streams.reference, streams.raw
    played = np.flatnonzero(reference)
    if played.size == 0:
        raise DeviceError("the probe never reached the output callback")
    start, stop = int(played[0]), int(played[-1]) + 1
    lags = (round(DELAY_RANGE_S[0] * rate), round(DELAY_RANGE_S[1] * rate))
    # The echo of [start, stop) arrives up to the longest delay later.
    path = fit_echo_path(reference, mic, slice(start, min(mic.shape[0], stop + lags[1])), lags)
    shift = 0 if path is None else path.delay_samples
    # Levels over the probe's bursts (its gaps are digital silence), the echo's shifted by
    # the delay: what a person would call the probe's and the echo's loudness.
    sounding = reference[start:stop] != 0
    heard = np.zeros(stop - start, np.float32)
    lo, hi = max(0, start + shift), min(mic.shape[0], stop + shift)
    if lo < hi:
        heard[lo - start - shift : hi - start - shift] = mic[lo:hi]
    echo_dbfs = round(dbfs(heard[sounding]), 1)
    delay_ms = round(shift * 1000 / rate, 1)
    first = 0
    if recording.first_loud_s is not None:
        first = max(0, streams.base + streams.index(recording.first_loud_s))
    cold = _reduction_db(recording.captured, recording.cleaned, first)
    # What a turn with this profile gets: the canceller run again on the same two streams,
    # in the callbacks' order, told the delay just measured.
    warm = _reduction_db(*_replayed(recording, round(delay_ms)), first)
    room = None
    if path is not None and rate == CAPTURE_SAMPLE_RATE and shift >= 0:
        from vocal.duplex.measure.forecast import measure_room

        room = measure_room(reference, mic, slice(start, stop), shift, recording.noise)
    replies = None if room is None else _forecast(room, round(delay_ms))
    track = DelayTrack() if room is None else room.track
    return EchoMeasurement(
        output=output,
        input=input,
        delay_ms=delay_ms,
        echo_dbfs=echo_dbfs,
        probe_dbfs=round(dbfs(reference[start:stop][sounding]), 1),
        reduction_db=warm,
        linear_db=round(path.removed_db, 1) if path is not None else 0.0,
        verdict=verdict_for(echo_dbfs, warm),
        underflows=recording.underflows,
        overflows=recording.overflows,
        cold_reduction_db=cold,
        reply_reduction_db=None if replies is None else replies.median_db,
        reply_reductions_db=() if replies is None else tuple(replies.per_reply_db),
        drift_ppm=track.drift_ppm,
        delay_steps=tuple(
            (round(at / rate, 2), round(size * 1000 / rate, 1)) for at, size in track.steps
        ),
    )


def _forecast(room: MeasuredRoom, stream_delay_ms: int) -> Forecast | None:
    """What the replies would get in `room` from a canceller told `stream_delay_ms`; None
    without the voice to speak them."""
    from vocal.duplex.measure.forecast import forecast, spoken_replies
    from vocal.errors import VocalError

    try:
        replies, rate = spoken_replies()
    except VocalError:
        return None
    return forecast(room, replies, rate, stream_delay_ms)


def _reduction_db(captured: np.ndarray, cleaned: np.ndarray, first: int) -> float | None:
    """ERLE from sample `first` (the probe's first sound) on, the canceller's first second
    skipped, as the benchmarks measure it; None when nothing reached the microphone."""
    from vocal.duplex.measure.erle import erle_db

    n = min(captured.shape[0], cleaned.shape[0])
    try:
        return round(erle_db(captured[first:n], cleaned[first:n], skip_s=CONVERGED_AFTER_S), 1)
    except ValueError:
        return None


def _replayed(recording: Recording, stream_delay_ms: int) -> tuple[np.ndarray, np.ndarray]:
    """(captured, cleaned) from a fresh canceller given the recording's blocks in the order
    their callbacks ran, as `EchoCanceller(stream_delay_ms=...)` would clean them live."""
    from vocal.duplex.canceller.aec import EchoCanceller, fresh_apm

    canceller = EchoCanceller(
        render_sample_rate=recording.played_rate,
        apm=fresh_apm(),
        raw_when_quiet_s=None,
        stream_delay_ms=stream_delay_ms,
    )
    raw_blocks = recording.streams.raw_blocks
    events = sorted(
        [(stamp, 0, i) for i, (stamp, _, _) in enumerate(recording.played_blocks)]
        + [(stamp, 1, i) for i, (stamp, _, _) in enumerate(raw_blocks)]
    )
    captured, cleaned = [], []
    for _, kind, i in events:
        if kind == 0:
            canceller.render(recording.played_blocks[i][2].copy())
        else:
            captured.append(raw_blocks[i][2])
            cleaned.append(canceller.capture(raw_blocks[i][2].copy()))
    delay = canceller.capture_delay_frames or 0
    return np.concatenate(captured), np.concatenate(cleaned)[delay:]


__all__ = ["PROBE_S", "EchoMeasurement", "measure_echo", "probe_signal"]
