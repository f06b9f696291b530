"""The room harness (tests/harness/room.py): what the speaker plays arrives at the microphone
through the configured echo path, and near-end speech is mixed in when asked.

The signal processing (tests/harness/room_effects.py: the echo path, the device effects and
noises of issue 20) is tested offline, without audio; the room process, with audio.
"""

from __future__ import annotations

import time

import numpy as np
import pytest

from harness.corpus import ensure_corpus
from harness.loopback import captured
from harness.room import Room, microphone_on, parse_args, running_room, without_room_stall
from harness.room_effects import (
    ROOM_CONDITIONS,
    Convolver,
    DelayLine,
    EchoPath,
    RoomConfig,
    WhiteNoise,
    impulse_response,
    loudspeaker,
    room_noise,
    thd,
)
from harness.sounds import espeak
from vocal.audio.devices import Microphone
from vocal.audio.player import Player
from vocal.audio.wav import write_wav

SAMPLE_RATE = 16_000


@pytest.fixture(scope="module")
def room(pulse):
    """The room harness with docs/design.md's echo path; the microphone records its output."""
    with running_room(pulse) as started:
        yield started


#: What the room adds to the configured delay: parec + pacat buffers and the two monitors'
#: capture timestamps (measured 6-25 ms here; the bound leaves room for a loaded machine).
MAX_ROOM_LATENCY_S = 0.08


def test_impulse_response_shape() -> None:
    config = RoomConfig(delay_ms=50, gain=0.5, tail_ms=40, tail_gain=0.5)
    ir = impulse_response(config)
    assert np.argmax(np.abs(ir)) == 800
    assert ir[800] == pytest.approx(0.5)
    assert not ir[:800].any()
    tail = ir[801:]
    assert tail.shape[0] == 640
    assert np.sum(tail**2) == pytest.approx((0.5 * 0.5) ** 2, rel=1e-3)  # 6 dB below direct
    assert np.sum(tail[-64:] ** 2) < 1e-3 * np.sum(tail[:64] ** 2)  # decays


def test_convolver_streams_like_one_convolution() -> None:
    ir = impulse_response(RoomConfig(delay_ms=20, tail_ms=100))
    x = np.random.default_rng(1).standard_normal(5000).astype(np.float32)
    convolver = Convolver(ir)
    streamed = np.concatenate([convolver.process(x[i : i + 160]) for i in range(0, 5000, 160)])
    np.testing.assert_allclose(streamed, np.convolve(x, ir)[:5000], atol=1e-5)


def stream(process, x: np.ndarray, chunk: int = 160) -> np.ndarray:
    """`process` applied to `x` chunk by chunk, as the room does, joined."""
    return np.concatenate([process(x[i : i + chunk]) for i in range(0, x.shape[0], chunk)])


def test_the_conditions_are_named_once_and_reach_the_room_process() -> None:
    assert set(ROOM_CONDITIONS) == {"linear", "nonlinear", "drift", "drift-only", "long-delay",
                                    "noisy", "chatter", "reverberant"}  # fmt: skip
    assert ROOM_CONDITIONS["linear"] == RoomConfig()
    for config in ROOM_CONDITIONS.values():  # every field survives the command line
        assert parse_args(["--speaker", "s", "--room", "r", *config.args()]) == ("s", "r", config)
        assert EchoPath(config).process(np.zeros(160, np.float32)).shape == (160,)
    with pytest.raises(ValueError, match="noise_kind"):
        RoomConfig(noise_kind="pink")


@pytest.mark.parametrize("delay_ms", [50, 600, 47.3, 5])
def test_delay_line_and_short_ir_are_bit_identical_to_one_convolution(delay_ms: float) -> None:
    """The default path (no effects): a delay line of whole chunks, then the rest of the impulse
    response; the same samples as convolving with the whole impulse response, bit for bit, at a
    cost that does not grow with the delay."""
    config = RoomConfig(delay_ms=delay_ms)
    x = np.random.default_rng(2).uniform(-0.5, 0.5, 2 * SAMPLE_RATE).astype(np.float32)
    ir = impulse_response(config)
    path = EchoPath(config)
    echo = stream(path.process, x)
    assert echo.tobytes() == stream(Convolver(ir).process, x).tobytes()  # the room before
    np.testing.assert_allclose(echo, np.convolve(x, ir)[: x.shape[0]], atol=1e-6)
    assert path.convolver.ir.shape[0] <= 2 * 160 + round(config.tail_ms * 16)  # short


def test_default_noise_is_the_white_noise_of_before() -> None:
    noise = room_noise(RoomConfig(noise_dbfs=-65))
    rng = np.random.default_rng(1)  # RoomConfig.seed + 1, as run_room seeded it
    for _ in range(3):
        expected = (10 ** (-65 / 20) * rng.standard_normal(160)).astype(np.float32)
        assert noise.next(160).tobytes() == expected.tobytes()
    assert room_noise(RoomConfig()) is None


def test_loudspeaker_distortion_grows_from_none() -> None:
    t = np.arange(SAMPLE_RATE) / SAMPLE_RATE
    sine = (0.25 * np.sin(2 * np.pi * 1000 * t)).astype(np.float32)  # -12 dBFS peak
    assert loudspeaker(sine, 0.0) is sine  # off: untouched
    assert thd(sine, 1000) < 1e-4
    distortions = [0.25, 0.5, 1.0, 2.0]
    measured = [thd(loudspeaker(sine, d), 1000) for d in distortions]
    assert measured == sorted(measured) and measured[0] > 0.01
    assert 0.05 < measured[2] < 0.10  # distortion 1: clearly audible (docstring: 6.2 %)
    quiet = sine * 1e-3  # -72 dBFS: the speaker's gain is 1 for small signals
    out = loudspeaker(quiet, 1.0)
    assert np.dot(out, quiet) / np.dot(quiet, quiet) == pytest.approx(1.0, abs=1e-3)
    assert thd(out, 1000) < 1e-3
    config = RoomConfig(distortion=1.0)  # the speaker distorts, then the room echoes
    np.testing.assert_allclose(stream(EchoPath(config).process, sine),
                               stream(Convolver(impulse_response(config)).process,
                                      loudspeaker(sine, 1.0)), atol=1e-6)  # fmt: skip


def test_clock_drift_moves_the_echo_16_samples_in_10_s_at_100_ppm() -> None:
    """The far end resampled by 1 + 100e-6: over 10 s the echo arrives 1 ms (16 samples)
    earlier, smoothly (a sine stays a sine), continuous across chunks of any size."""
    n = np.arange(10 * SAMPLE_RATE)
    sine = (0.5 * np.sin(2 * np.pi * 200 * n / SAMPLE_RATE)).astype(np.float32)

    def drifted(x: np.ndarray, ppm: float, chunk: int = 160) -> np.ndarray:
        line = DelayLine(800, drift_ppm=ppm)
        line.far_onset()
        return stream(line.process, x, chunk)

    def lag_samples(y: np.ndarray, at: slice) -> float:
        """How far `y` lags the sine around `at`, in samples (its 200 Hz phase)."""
        ref = np.exp(-2j * np.pi * 200 * n[at] / SAMPLE_RATE)
        turn = np.angle(np.dot(sine[at], ref) / np.dot(y[at], ref)) / (2 * np.pi)
        return float(turn * SAMPLE_RATE / 200)

    y = drifted(sine, 100.0)
    start, end = slice(1600, 3200), slice(n.shape[0] - 1600, None)
    change = lag_samples(y, start) - lag_samples(y, end)
    assert change == pytest.approx(16.0, abs=2)
    assert change == pytest.approx(100e-6 * (n[end].mean() - n[start].mean()), abs=0.05)
    exact = 0.5 * np.sin(2 * np.pi * 200 * (n - 800 + 100e-6 * n) / SAMPLE_RATE)
    error = y[800:] - exact[800:]
    assert 10 * np.log10(np.mean(error**2) / np.mean(exact**2)) < -60
    # Against white noise the echo's lag, found by cross-correlation, shrinks by 16 samples.
    noise = np.random.default_rng(3).uniform(-0.5, 0.5, n.shape[0]).astype(np.float32)
    heard = drifted(noise, 100.0)

    def lag_at(at: int) -> int:
        """The echo's delay (samples) over the 4000 samples from `at`, searched within ±20."""
        window = heard[at : at + 4000]
        return 800 + 20 - int(np.argmax(np.correlate(noise[at - 820 : at + 4000 - 780], window)))

    assert lag_at(2000) - lag_at(n.shape[0] - 4000) == pytest.approx(16, abs=2)
    assert drifted(noise, 100.0, chunk=37).tobytes() == heard.tobytes()  # chunking: no seams
    assert (
        drifted(noise, 0.0).tobytes()
        == np.concatenate([np.zeros(800), noise[:-800]]).astype(np.float32).tobytes()
    )  # 0 ppm: the delayed input, bit for bit


def test_latency_jump_delays_the_echo_after_each_onset() -> None:
    """`delay_jump_after_s` after a far-end onset the echo falls silent for `delay_jump_ms` and
    carries on that much later; the next onset starts from the configured delay again."""
    config = RoomConfig(delay_ms=50, gain=1.0, tail_ms=0, delay_jump_ms=20, delay_jump_after_s=1.0)
    path = EchoPath(config)
    x = np.random.default_rng(4).uniform(-0.5, 0.5, 4 * SAMPLE_RATE).astype(np.float32)
    out, jumps = [], []
    for i in range(0, x.shape[0], 160):
        if i in (0, 2 * SAMPLE_RATE):  # far-end onsets
            path.far_onset()
        out.append(path.process(x[i : i + 160]))
        if path.jumped_at is not None:
            jumps.append(i + path.jumped_at)
    y = np.concatenate(out)
    assert jumps == [SAMPLE_RATE, 3 * SAMPLE_RATE]
    for onset in (0, 2 * SAMPLE_RATE):
        jump = onset + SAMPLE_RATE
        before = slice(max(onset, 800), jump)
        np.testing.assert_array_equal(y[before], x[before.start - 800 : jump - 800])
        assert not y[jump : jump + 320].any()  # the output's underrun
        after = slice(jump + 320, onset + 2 * SAMPLE_RATE)
        np.testing.assert_array_equal(y[after], x[after.start - 1120 : after.stop - 1120])


def spectral_flatness(x: np.ndarray, frame: int = 512) -> float:
    """Geometric over arithmetic mean of the averaged power spectrum (1 for white noise)."""
    frames = x[: x.shape[0] // frame * frame].reshape(-1, frame) * np.hanning(frame)
    power = np.mean(np.abs(np.fft.rfft(frames, axis=1)) ** 2, axis=0)[1:]
    return float(np.exp(np.mean(np.log(power))) / np.mean(power))


@pytest.mark.parametrize("kind", ["fan", "chatter"])
def test_structured_noise_has_its_level_and_is_not_white(kind: str) -> None:
    if kind == "chatter":
        ensure_corpus()  # the chatter is the corpus's recordings
    noise = room_noise(RoomConfig(noise_dbfs=-45, noise_kind=kind))
    x = np.concatenate([noise.next(160) for _ in range(1000)])  # 10 s
    assert 20 * np.log10(np.sqrt(np.mean(x.astype(np.float64) ** 2))) == pytest.approx(-45, abs=1)
    white = WhiteNoise(10 ** (-45 / 20), seed=0).next(x.shape[0])
    assert spectral_flatness(x) < 0.5 * spectral_flatness(white)


def test_chatter_without_the_corpus_is_a_clear_error(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("VOCAL_CORPUS_DIR", str(tmp_path / "no-corpus"))
    with pytest.raises(RuntimeError, match="scripts/corpus"):
        room_noise(RoomConfig(noise_dbfs=-40, noise_kind="chatter"))


@pytest.mark.audio
def test_played_signal_reaches_the_microphone_delayed_and_scaled(pulse) -> None:
    """White noise to the speaker; the room's output, recorded at the same time as the
    speaker's monitor, is that noise through the configured impulse response."""
    config = RoomConfig(delay_ms=120, gain=0.4, tail_ms=60, tail_gain=0.5)
    rng = np.random.default_rng(7)
    noise = rng.uniform(-0.4, 0.4, 2 * SAMPLE_RATE).astype(np.float32)

    def measure() -> tuple:
        with microphone_on(f"{pulse.speaker}.monitor"):
            speaker = Microphone(SAMPLE_RATE, block_frames=160).open()
        with microphone_on(f"{pulse.room}.monitor"):
            mic = Microphone(SAMPLE_RATE, block_frames=160).open()
        time.sleep(0.3)
        with Player(SAMPLE_RATE) as player:
            player.play(noise)
            player.finish()
            assert player.wait(10)
        time.sleep(0.5)
        speaker.close()
        mic.close()
        glitches = speaker.overflows + mic.overflows + player.underflows
        return captured(speaker), captured(mic), glitches

    # A room process that stalls on a loaded machine drops audio, and so does a stream of ours
    # that overflows or underflows: that run measures the machine, not the room, so it is
    # measured again (tests/harness/room.py without_room_stall).
    with Room.start(pulse.speaker, pulse.room, config) as room:
        (far, far_t), (near, near_t), _ = without_room_stall(
            room, measure, clean=lambda result: result[2] == 0
        )
    # The noise in the speaker's monitor, and the same instant in the room's output (the two
    # streams share the monotonic clock; block timestamps jitter by about one block).
    far_at = int(np.argmax(np.correlate(far, noise, "valid")))
    offset = int(np.argmin(np.abs(near_t - far_t[far_at])))
    # The noise is white, so its cross-correlation with the room's output is the room's impulse
    # response. Estimated on four half-second windows: their median shrugs off one glitch.
    window = SAMPLE_RATE // 2
    lags = round(0.4 * SAMPLE_RATE)
    estimates = []
    for w in range(4):
        played = far[far_at + w * window : far_at + (w + 1) * window]
        heard = near[offset + w * window : offset + (w + 1) * window + lags]
        estimates.append(np.correlate(heard, played, "valid")[:lags] / np.dot(played, played))
    peaks = [int(np.argmax(np.abs(e))) for e in estimates]
    delay_s = float(np.median(peaks)) / SAMPLE_RATE
    assert config.delay_ms / 1000 - 0.015 <= delay_s <= config.delay_ms / 1000 + MAX_ROOM_LATENCY_S
    gains = [e[p] for e, p in zip(estimates, peaks, strict=True)]
    assert float(np.median(gains)) == pytest.approx(config.gain, rel=0.1)
    # The tail: after the direct path, for its length, the configured share of the energy;
    # after it only the estimate's own noise (measured at lags past any echo).
    best = int(np.argmax(gains))
    estimate, peak = estimates[best], peaks[best]
    floor = np.mean(estimate[round(0.3 * SAMPLE_RATE) :] ** 2)
    tail_frames = round(config.tail_ms * SAMPLE_RATE / 1000)
    tail_energy = np.sum(estimate[peak + 1 : peak + 1 + tail_frames] ** 2) - floor * tail_frames
    expected = (config.gain * config.tail_gain) ** 2
    assert expected * 0.6 < tail_energy < expected * 1.6
    after = estimate[peak + tail_frames + 80 : peak + tail_frames + 80 + tail_frames]
    assert np.mean(after**2) < 2 * floor


@pytest.mark.audio
def test_near_end_speech_is_mixed_in_at_the_chosen_time(pulse, tmp_path) -> None:
    speech = espeak("hello there")
    path = write_wav(tmp_path / "near.wav", speech)

    def measure(harness: Room) -> dict:
        with microphone_on(harness.microphone_source):
            mic = Microphone(SAMPLE_RATE, block_frames=160).open()
        time.sleep(0.2)
        asked = time.monotonic()
        near_id = harness.say(path, delay_s=0.5)
        start = harness.wait_event("near_start", id=near_id)
        harness.wait_event("near_end", id=near_id)
        time.sleep(0.2)
        mic.close()
        # Scheduled after a far-end onset: starts `delay_s` after the speaker starts playing.
        far_id = harness.say(path, delay_s=0.3, after="far")
        time.sleep(0.3)
        waited = harness.find_event("near_start", id=far_id) is None  # waits for the speaker
        with Player(SAMPLE_RATE) as player:
            player.play(0.3 * np.ones(SAMPLE_RATE // 2, np.float32))
            player.finish()
            onset = harness.wait_event("far_onset", after=len(harness.events))
            far_start = harness.wait_event("near_start", id=far_id)
            assert player.wait(5)
        return {"asked": asked, "start": start, "waited": waited, "onset": onset,
                "far_start": far_start, "recording": captured(mic)}  # fmt: skip

    with Room.start(pulse.speaker, pulse.room, RoomConfig()) as harness:
        got = without_room_stall(harness, lambda: measure(harness))
    assert 0.45 < got["start"]["at_s"] - got["asked"] < 0.8
    assert got["waited"]
    assert abs(got["far_start"]["frame"] - got["onset"]["frame"] - 0.3 * SAMPLE_RATE) <= 160
    recorded, times = got["recording"]
    samples = speech.mono_samples
    at = int(np.argmax(np.correlate(recorded, samples, "valid")))
    assert abs(times[at] - got["start"]["at_s"]) < MAX_ROOM_LATENCY_S
    gain = np.dot(recorded[at : at + samples.shape[0]], samples) / np.dot(samples, samples)
    assert gain == pytest.approx(1.0, rel=0.05)  # the person is not scaled by the echo path


@pytest.mark.audio
def test_room_events_report_far_end_bursts(room: Room) -> None:
    before = len(room.events)
    with Player(SAMPLE_RATE) as player:
        started = time.monotonic()
        player.play(0.3 * np.ones(SAMPLE_RATE // 2, np.float32))
        player.finish()
        assert player.wait(5)
        ended = time.monotonic()
    onset = room.wait_event("far_onset", after=before)
    end = room.wait_event("far_end", after=before, timeout_s=3)
    assert started <= onset["at_s"] < started + 0.3
    assert 0.4 < end["at_s"] - onset["at_s"] < 0.6
    assert end["at_s"] <= ended + 0.05
