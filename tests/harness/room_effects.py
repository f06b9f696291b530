"""The room's signal processing and its named conditions (issue 20): what tests/harness/room.py
does to every 10 ms chunk between the speaker's monitor and the microphone.

The far end reaches the microphone in the order a real device imposes:

    far -> loudspeaker (distortion) -> delay line (delay, clock drift, latency jumps)
        -> short impulse response (gain, reverberant tail) -> + near end + noise -> microphone

`EchoPath` is that chain for one stream of chunks, `room_noise` the noise, `RoomConfig` their
settings and `ROOM_CONDITIONS` the named rooms that tests and benchmarks pick from
(`benchmarks/converse --room NAME`). Everything here is numpy only and pure: tests/test_room.py
checks it offline, without audio.

The default RoomConfig is the room as it was before these effects: the delay line then only
delays by whole chunks (an exact copy) and the short impulse response keeps the full one's
alignment, so the output is bit-identical to one convolution with the full impulse response
while its cost no longer grows with the delay (600 ms: 40-60 µs of CPU a chunk on a 2-core
x86_64 instead of 170-310 µs).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

import numpy as np

SAMPLE_RATE = 16_000
CHUNK_FRAMES = 160  # 10 ms: the room's processing step
NOISE_KINDS = ("white", "fan", "chatter")
#: Half the taps of the windowed-sinc interpolator that reads between samples when the clocks
#: drift: 24 Blackman-windowed taps, whose error against the exact resampled signal measured
#: -90 dB or less for sines of 0.2-5 kHz (tests/test_room.py asks < -60 dB at 200 Hz).
SINC_HALF_TAPS = 12


@dataclass(frozen=True)
class RoomConfig:
    """The echo path. Defaults follow docs/design.md's synthetic room (50 ms, 0.5, 40 ms tail)
    with none of issue 20's device effects.

    `tail_ms` is the length of the reverberant tail after the direct path: noise decaying
    exponentially to -60 dB at its end (a room whose RT60 is `tail_ms`), scaled so that its
    energy is `tail_gain`² times the direct path's (0.5: the tail is 6 dB below the direct
    sound). `noise_dbfs` adds a noise floor of that RMS at the microphone (None: none, the null
    sink's digital silence), of `noise_kind`: "white", "fan" (rumble and hum) or "chatter"
    (other people talking: the real-speech corpus).

    The device effects (0: off): `distortion` is the loudspeaker's nonlinearity (`loudspeaker`:
    1 is ~6 % THD at -12 dBFS peak); `drift_ppm` is the output clock running that much faster
    than the input's (the far end resampled by 1 + drift_ppm·1e-6 from each far-end onset on);
    `delay_jump_ms` is output latency gained `delay_jump_after_s` after each far-end onset (the
    speaker falls silent that long, as in an underrun, and carries on that much later).
    """

    delay_ms: float = 50.0
    gain: float = 0.5
    tail_ms: float = 40.0
    tail_gain: float = 0.5
    noise_dbfs: float | None = None
    seed: int = 0
    distortion: float = 0.0
    drift_ppm: float = 0.0
    delay_jump_ms: float = 0.0
    delay_jump_after_s: float = 2.0
    noise_kind: str = "white"

    def __post_init__(self) -> None:
        # The room process is started with these: a bad value should fail here, in the test,
        # not as a room that never reports "ready".
        if self.noise_kind not in NOISE_KINDS:
            raise ValueError(f"noise_kind must be one of {NOISE_KINDS}, not {self.noise_kind!r}")
        for name in ("delay_ms", "tail_ms", "distortion", "delay_jump_ms", "delay_jump_after_s"):
            if getattr(self, name) < 0:
                raise ValueError(f"{name} must not be negative, got {getattr(self, name)}")
        if self.drift_ppm > 0 and self.delay_ms * SAMPLE_RATE / 1000 <= SINC_HALF_TAPS + 1:
            limit_ms = (SINC_HALF_TAPS + 1) * 1000 / SAMPLE_RATE
            raise ValueError(
                f"clock drift needs delay_ms > {limit_ms} (its interpolator reads ahead)"
            )

    def args(self) -> list[str]:
        """The room process's command line for this config (room.py `main` reads it back)."""
        values = ((f.name, getattr(self, f.name)) for f in fields(self))
        return [
            f"--{name.replace('_', '-')}={value}" for name, value in values if value is not None
        ]


#: The named rooms of issue 20, one device each (`benchmarks/converse --room NAME`).
ROOM_CONDITIONS: dict[str, RoomConfig] = {
    # docs/design.md's synthetic room: a clean, linear laptop-like path (50 ms, 0.5, 40 ms tail).
    "linear": RoomConfig(),
    # A small loudspeaker driven near its limit (a laptop or smart speaker at full volume).
    "nonlinear": RoomConfig(distortion=1.0),
    # A USB or Bluetooth speaker on its own clock whose buffer underruns 2 s into each reply.
    "drift": RoomConfig(drift_ppm=100.0, delay_jump_ms=20.0, delay_jump_after_s=2.0),
    # The same clock with no underrun: what compensating the drift buys
    # (vocal.duplex.canceller.drift).
    "drift-only": RoomConfig(drift_ppm=100.0),
    # A Bluetooth speaker or a TV's sound path: 600 ms from the stream to the sound.
    "long-delay": RoomConfig(delay_ms=600.0),
    # A laptop's fan running under load next to its microphones: rumble and hum at -45 dBFS.
    "noisy": RoomConfig(noise_dbfs=-45.0, noise_kind="fan"),
    # An open-plan office or a café: other people talking at -40 dBFS.
    "chatter": RoomConfig(noise_dbfs=-40.0, noise_kind="chatter"),
    # A bare room with hard walls: a 400 ms tail only 3 dB under the direct sound.
    "reverberant": RoomConfig(tail_ms=400.0, tail_gain=0.7),
}


# -- the linear path ---------------------------------------------------------------------------
def impulse_response(config: RoomConfig, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """The room's impulse response: `gain` at `delay_ms`, then a decaying noise tail."""
    delay = round(config.delay_ms * sample_rate / 1000)
    tail = round(config.tail_ms * sample_rate / 1000)
    ir = np.zeros(delay + 1 + tail, np.float32)
    ir[delay] = config.gain
    if tail:
        rng = np.random.default_rng(config.seed)
        t = np.arange(1, tail + 1) / tail
        decay = 10 ** (-3 * t)  # -60 dB at the end of the tail
        shape = decay * rng.standard_normal(tail)
        shape *= config.tail_gain / np.sqrt(np.sum(shape * shape))  # energy relative to direct
        ir[delay + 1 :] = config.gain * shape
    return ir


class Convolver:
    """Streaming overlap-add convolution with a fixed impulse response."""

    def __init__(self, ir: np.ndarray) -> None:
        self.ir = np.asarray(ir, np.float32)
        self._tail = np.zeros(max(0, self.ir.shape[0] - 1), np.float32)

    def process(self, x: np.ndarray) -> np.ndarray:
        y = np.convolve(x, self.ir).astype(np.float32)  # len(x) + len(ir) - 1
        y[: self._tail.shape[0]] += self._tail
        n = x.shape[0]
        self._tail = y[n:].copy()
        return y[:n]


# -- the loudspeaker -----------------------------------------------------------------------------
#: The loudspeaker at distortion 1 (`loudspeaker`): a tanh soft clipper at ±0.5 (full scale is 1),
#: then a 2nd-order term (even harmonics: a cone's asymmetric excursion) and a compressive
#: 3rd-order one. The clip level is divided by, the terms multiplied by, `distortion`; with these
#: constants the curve stays monotonic at every `distortion` (no fold-back, as no speaker has).
CLIP_AT_1 = 0.5
SECOND_ORDER_AT_1 = 0.5
THIRD_ORDER_AT_1 = -0.3


def loudspeaker(x: np.ndarray, distortion: float) -> np.ndarray:
    """What a loudspeaker emits for `x`: memoryless, gain 1 for small signals, and soft
    clipping plus 2nd and 3rd harmonics that grow with `distortion` (0: `x` itself, untouched).

    THD of a 1 kHz sine at -12 dBFS peak (measured with `thd`, harmonics 2-5): distortion 0.25:
    1.6 %, 0.5: 3.2 %, 1: 6.2 %, 2: 11.6 %; at -6 dBFS peak, 1: 12 %. At distortion 1 a
    -12 dBFS sine's fundamental comes out 0.6 dB lower (compression). Being memoryless, the
    2nd-order term also makes a DC offset that follows the envelope (5.5 % of that sine's peak
    at distortion 1), which no real speaker radiates; the canceller's high-pass removes it.
    """
    if distortion <= 0:
        return x
    clip = CLIP_AT_1 / distortion
    v = clip * np.tanh(x / clip)
    y = v + distortion * (SECOND_ORDER_AT_1 * v * v + THIRD_ORDER_AT_1 * v * v * v)
    return y.astype(np.float32)


def thd(signal: np.ndarray, frequency_hz: float, sample_rate: int = SAMPLE_RATE,
        harmonics: int = 5) -> float:  # fmt: skip
    """Total harmonic distortion of a sine of `frequency_hz` in `signal`: the RMS of its
    harmonics 2..`harmonics` over the fundamental's (each found by projection, so `signal`
    should hold a whole number of periods)."""
    x = np.asarray(signal, np.float64)
    t = np.arange(x.shape[0]) / sample_rate
    amplitude = [abs(np.dot(x, np.exp(-2j * np.pi * k * frequency_hz * t)))
                 for k in range(1, harmonics + 1)]  # fmt: skip
    return math.sqrt(sum(a * a for a in amplitude[1:])) / amplitude[0]


# -- the delay line ---------------------------------------------------------------------------
#: Its kernels, tabulated at this many fractions of a sample and blended linearly between them
#: (cheaper than computing each sample's sincs, and as exact).
SINC_PHASES = 256
#: How long one far-end burst may drift when the output clock is the slower one (its read
#: position falls behind, and the ring keeps that much more history). Past it the offset holds.
MAX_DRIFT_S = 600.0


class DelayLine:
    """The far end delayed by `delay_frames` in a ring buffer, one output sample per input
    sample (the room is clocked by the speaker sink).

    It can move, as real output paths do, both reset at every far-end onset (`far_onset`) so
    that each turn starts from `delay_frames` again:
    - clock drift: from the onset on, the read position moves by `drift_ppm`·1e-6 samples a
      sample (positive: the output clock is the faster one, the echo comes earlier and earlier;
      +100 ppm is 16 samples, 1 ms, in 10 s), read between samples with a windowed sinc;
    - a latency jump: `jump_after_frames` after the onset the output falls silent for
      `jump_frames` (an underrun) and carries on where it was, that much later.
    With neither, a read is an exact copy of what was written `delay_frames` before. Positive
    drift stops where the read would pass the newest sample (after `delay_frames` -
    `SINC_HALF_TAPS` samples of offset: 490 s at 100 ppm for 50 ms), negative drift after
    `MAX_DRIFT_S`. The reset skips what the drift and the jump had added (or repeats what drift
    took): an onset follows 0.5 s of quiet, so for delays under that it happens in silence.
    """

    def __init__(
        self,
        delay_frames: int,
        *,
        drift_ppm: float = 0.0,
        jump_frames: int = 0,
        jump_after_frames: int = 0,
        max_chunk_frames: int = 4 * CHUNK_FRAMES,
    ) -> None:
        self.delay_frames = delay_frames
        self.drift = drift_ppm * 1e-6
        self.jump_frames = jump_frames
        self.jump_after_frames = jump_after_frames
        self._ahead = delay_frames - SINC_HALF_TAPS  # the most the read may run ahead
        if self.drift > 0 and self._ahead < 1:
            raise ValueError(f"clock drift needs a delay of more than {SINC_HALF_TAPS} samples "
                             "(its interpolator reads that far ahead)")  # fmt: skip
        self._behind = math.ceil(-self.drift * MAX_DRIFT_S * SAMPLE_RATE) if self.drift < 0 else 0
        self.max_chunk_frames = max_chunk_frames
        size = delay_frames + jump_frames + self._behind + 2 * SINC_HALF_TAPS + max_chunk_frames
        self._size = size
        # The ring's first 2 * SINC_HALF_TAPS samples again after its end, so that every
        # interpolator window is one contiguous row of `_windows`.
        self._ring = np.zeros(size + 2 * SINC_HALF_TAPS, np.float32)
        self._windows = np.lib.stride_tricks.sliding_window_view(self._ring, 2 * SINC_HALF_TAPS)
        self._kernels = _sinc_kernels() if self.drift else None
        self._written = 0  # samples written so far: the index of the next one (and next output)
        self._onset: int | None = None  # the last far-end onset (a sample index)
        self._jump_at: int | None = None  # where that turn's jump starts
        #: Where in the last chunk a latency jump began (the room reports it), else None.
        self.jumped_at: int | None = None

    def far_onset(self) -> None:
        """The far end starts a burst with the next chunk: drift and jump start again."""
        self._onset = self._written
        if self.jump_frames:
            self._jump_at = self._written + self.jump_after_frames

    def process(self, x: np.ndarray) -> np.ndarray:
        """One chunk in, the same number of samples out (float32)."""
        frames = x.shape[0]
        if frames > self.max_chunk_frames:
            raise ValueError(f"chunks of at most {self.max_chunk_frames} samples")
        size = self._size
        n = self._written + np.arange(frames)  # the output samples' indices
        at = n % size
        self._ring[at] = x
        copy = at < 2 * SINC_HALF_TAPS
        self._ring[at[copy] + size] = x[copy]
        self._written += frames
        lag = self.delay_frames
        self.jumped_at = None
        silent = None
        if self._jump_at is not None:
            after = n >= self._jump_at
            lag = lag + self.jump_frames * after  # an array from here on
            silent = after & (n < self._jump_at + self.jump_frames)
            if n[0] <= self._jump_at <= n[-1]:
                self.jumped_at = self._jump_at - int(n[0])
        if self.drift == 0 or self._onset is None:
            out = self._ring[(n - lag) % size]  # whole samples: an exact copy
        else:
            offset = np.clip(self.drift * (n - self._onset), -self._behind, self._ahead)
            whole = np.floor(offset)
            out = self._interpolate(n - lag + whole.astype(np.int64), offset - whole)
        if silent is not None:
            out[silent] = 0.0
        return out

    def _interpolate(self, base: np.ndarray, fraction: np.ndarray) -> np.ndarray:
        """The ring read at `base + fraction` (fraction in [0, 1)) through `_sinc_kernels`."""
        phase = fraction * SINC_PHASES
        row = phase.astype(np.int64)
        kernels, steps = self._kernels
        weights = kernels[row] + (phase - row)[:, None] * steps[row]
        samples = self._windows[(base + 1 - SINC_HALF_TAPS) % self._size]
        return np.einsum("ij,ij->i", samples, weights).astype(np.float32)


def _sinc_kernels() -> tuple[np.ndarray, np.ndarray]:
    """The interpolator's kernels at fractions 0, 1/SINC_PHASES, ... 1 of a sample (rows; taps
    -SINC_HALF_TAPS+1 .. SINC_HALF_TAPS), each a Blackman-windowed sinc with unit gain at DC, and
    each row's step to the next (for the linear blend)."""
    taps = np.arange(1 - SINC_HALF_TAPS, SINC_HALF_TAPS + 1)
    t = taps[None, :] - (np.arange(SINC_PHASES + 1) / SINC_PHASES)[:, None]
    window = 0.42 + 0.5 * np.cos(np.pi * t / SINC_HALF_TAPS)
    window += 0.08 * np.cos(2 * np.pi * t / SINC_HALF_TAPS)
    kernels = np.sinc(t) * window
    kernels /= kernels.sum(axis=1, keepdims=True)
    return kernels[:-1], np.diff(kernels, axis=0)


class EchoPath:
    """The far end's way to the microphone for one stream of chunks: `loudspeaker`, a
    `DelayLine`, then the impulse response after the delay (`Convolver`), so a 600 ms echo costs
    what a 50 ms one does.

    Fed `chunk_frames` at a time with the path fixed (no drift, no jump), the delay line holds
    whole chunks of the delay less one and the short impulse response starts with the rest (at
    least one chunk of zeros): every output sample is then the same float32 dot product, summed
    in the same order, as one `Convolver` with the full impulse response: bit-identical. When
    the path moves, the whole delay is in the line (drift needs the headroom) and the short
    impulse response starts at the direct sound.
    """

    def __init__(self, config: RoomConfig, sample_rate: int = SAMPLE_RATE,
                 chunk_frames: int = CHUNK_FRAMES) -> None:  # fmt: skip
        ir = impulse_response(config, sample_rate)
        delay = round(config.delay_ms * sample_rate / 1000)
        moves = config.drift_ppm != 0 or config.delay_jump_ms != 0
        if moves:
            line = delay
        else:
            line = max(0, (delay // chunk_frames - 1) * chunk_frames)
        self.distortion = config.distortion
        self.delay_line = DelayLine(
            line,
            drift_ppm=config.drift_ppm,
            jump_frames=round(config.delay_jump_ms * sample_rate / 1000),
            jump_after_frames=round(config.delay_jump_after_s * sample_rate),
            max_chunk_frames=max(chunk_frames, 4 * CHUNK_FRAMES),
        )
        self.convolver = Convolver(ir[line:])

    def far_onset(self) -> None:
        """A far-end onset at the next chunk (the room's `far_onset` event)."""
        self.delay_line.far_onset()

    @property
    def jumped_at(self) -> int | None:
        """Where in the last chunk the output latency jumped, else None."""
        return self.delay_line.jumped_at

    def process(self, far: np.ndarray) -> np.ndarray:
        """One chunk of the speaker's signal -> its echo at the microphone (float32)."""
        return self.convolver.process(self.delay_line.process(loudspeaker(far, self.distortion)))


# -- noise ----------------------------------------------------------------------------------------
class WhiteNoise:
    """Gaussian white noise of RMS `rms` (the room's noise before issue 20, sample for sample)."""

    def __init__(self, rms: float, seed: int) -> None:
        self.rms = rms
        self._rng = np.random.default_rng(seed)

    def next(self, frames: int) -> np.ndarray:
        return (self.rms * self._rng.standard_normal(frames)).astype(np.float32)


class LoopedNoise:
    """A precomputed loop whose end runs seamlessly into its start, played at RMS `rms`."""

    def __init__(self, loop: np.ndarray, rms: float) -> None:
        loop = np.asarray(loop, np.float64)
        self._loop = (loop * (rms / np.sqrt(np.mean(loop * loop)))).astype(np.float32)
        self._at = 0

    def next(self, frames: int) -> np.ndarray:
        size = self._loop.shape[0]
        out = self._loop[(self._at + np.arange(frames)) % size]
        self._at = (self._at + frames) % size
        return out


#: The fan (`fan_loop`): pink noise above 20 Hz rolled off at 12 dB/octave above this ...
FAN_CORNER_HZ = 400.0
#: ... a motor hum and its harmonics, in all this far under the rumble ...
FAN_HUM_HZ = 120.0
FAN_HUM_DB = -12.0
#: ... and the whole swelling and fading by ±20 % over 5 s, as a fan under changing load does.
FAN_SWELL_HZ = 0.2
FAN_SWELL_DEPTH = 0.2


def fan_loop(seed: int, sample_rate: int = SAMPLE_RATE, seconds: float = 20.0) -> np.ndarray:
    """`seconds` of fan noise at unit RMS that loops without a seam: the rumble is shaped in
    the frequency domain (circular by construction) and the hum and the swell fit a whole number
    of periods in it."""
    frames = round(seconds * sample_rate)
    rng = np.random.default_rng(seed)
    bins = frames // 2 + 1
    spectrum = rng.standard_normal(bins) + 1j * rng.standard_normal(bins)
    f = np.fft.rfftfreq(frames, 1 / sample_rate)
    shape = np.where(f > 20.0, 1 / np.sqrt(np.maximum(f, 1.0)), 0.0) / (
        1 + (f / FAN_CORNER_HZ) ** 2
    )
    rumble = np.fft.irfft(spectrum * shape, frames)
    rumble /= np.sqrt(np.mean(rumble * rumble))
    t = np.arange(frames) / sample_rate
    hum = sum(level * np.sin(2 * np.pi * FAN_HUM_HZ * k * t + rng.uniform(0, 2 * np.pi))
              for k, level in ((1, 1.0), (2, 0.5), (3, 0.3), (4, 0.2)))  # fmt: skip
    hum *= 10 ** (FAN_HUM_DB / 20) / np.sqrt(np.mean(hum * hum))
    swell = 1 + FAN_SWELL_DEPTH * np.sin(2 * np.pi * FAN_SWELL_HZ * t)
    loop = (rumble + hum) * swell
    return loop / np.sqrt(np.mean(loop * loop))


#: Chatter (`chatter_loop`): this many people talking at once, each reading corpus clips one
#: after another; with six, no one voice is followed (babble), yet it is speech to a detector.
CHATTER_VOICES = 6
#: The crossfade that closes the loop (its end runs into its start).
LOOP_FADE_S = 0.05


def chatter_loop(clips: list[np.ndarray], seed: int, sample_rate: int = SAMPLE_RATE,
                 seconds: float = 30.0, voices: int = CHATTER_VOICES) -> np.ndarray:  # fmt: skip
    """`seconds` of babble at unit RMS that loops without a seam: `voices` streams of the clips
    (each at unit RMS, so no voice dominates) in shuffled orders from random points, summed."""
    frames = round(seconds * sample_rate)
    fade = round(LOOP_FADE_S * sample_rate)
    units = [c / np.sqrt(np.mean(c * c)) for c in (np.asarray(c, np.float64) for c in clips)
             if c.size and np.any(c)]  # fmt: skip
    if not units:
        raise ValueError("chatter needs at least one clip with sound in it")
    rng = np.random.default_rng(seed)
    mix = np.zeros(frames + fade)
    for _ in range(voices):
        parts: list[np.ndarray] = []
        while sum(p.shape[0] for p in parts) < 2 * (frames + fade):
            parts.extend(units[i] for i in rng.permutation(len(units)))
        voice = np.concatenate(parts)
        start = int(rng.integers(0, voice.shape[0] - (frames + fade)))
        mix += voice[start : start + frames + fade]
    ramp = np.linspace(0.0, 1.0, fade)
    loop = mix[:frames].copy()
    loop[:fade] = mix[:fade] * ramp + mix[frames:] * (1 - ramp)  # continues from loop[-1]
    return loop / np.sqrt(np.mean(loop * loop))


def corpus_speech(sample_rate: int = SAMPLE_RATE) -> list[np.ndarray]:
    """Every clip of the real-speech corpus (tests/corpus/README.md) as float32 at
    `sample_rate`. Raises RuntimeError, saying what to do, if it cannot: the room process does
    not build the corpus (scripts/corpus takes a minute and the network)."""
    try:
        from harness.corpus import corpus_dir, load_clips
    except ImportError as exc:  # the room started by path without tests/ on its path
        raise RuntimeError(
            "chatter noise reads the real-speech corpus through harness.corpus, which is not "
            "importable here: run scripts/setup (it puts tests/ on .venv's path)"
        ) from exc
    from vocal.audio.wav import read_wav
    from vocal.errors import VocalError

    root = corpus_dir()
    if not (root / "manifest.json").is_file():
        raise RuntimeError(f"chatter noise needs the real-speech corpus, and {root} holds none: "
                           "run scripts/corpus (tests/corpus/README.md)")  # fmt: skip
    clips = []
    for clip in load_clips():
        try:
            audio = read_wav(clip.path).to_mono().resample(sample_rate)
        except (OSError, VocalError) as exc:
            raise RuntimeError(f"chatter noise cannot read the corpus clip {clip.path}: {exc} "
                               "(scripts/corpus --rebuild)") from exc  # fmt: skip
        clips.append(audio.mono_samples.astype(np.float32))
    if not clips:
        raise RuntimeError(f"chatter noise: the corpus in {root} has no clips (scripts/corpus)")
    return clips


def room_noise(
    config: RoomConfig, sample_rate: int = SAMPLE_RATE
) -> WhiteNoise | LoopedNoise | None:
    """The noise the room adds at the microphone (`next(frames)` a chunk), or None without
    `noise_dbfs`. Each kind has its own seed, derived from `config.seed`."""
    if config.noise_dbfs is None:
        return None
    rms = 10 ** (config.noise_dbfs / 20)
    if config.noise_kind == "fan":
        return LoopedNoise(fan_loop(config.seed + 2, sample_rate), rms)
    if config.noise_kind == "chatter":
        return LoopedNoise(
            chatter_loop(corpus_speech(sample_rate), config.seed + 3, sample_rate), rms
        )
    return WhiteNoise(rms, config.seed + 1)  # the seed white noise has always had


def small_room(
    reference: np.ndarray, delay_s: float = 0.12, sample_rate: int = 16_000
) -> np.ndarray:
    """`reference` through a small fixed room, offline: a direct path (gain 0.5) after
    `delay_s` and a decaying 40 ms tail, the same tail at any delay (an underrun moves the
    whole path). The echo fit's tests (tests/test_onset.py, tests/test_handover.py) use it."""
    rng = np.random.default_rng(3)
    ir = np.zeros(round((delay_s + 0.05) * sample_rate), np.float32)
    start = round(delay_s * sample_rate)
    ir[start] = 0.5
    tail = rng.standard_normal(640).astype(np.float32) * np.exp(-np.arange(640) / 160) * 0.02
    ir[start + 1 : start + 641] += tail
    return np.convolve(reference, ir)[: reference.shape[0]].astype(np.float32)
