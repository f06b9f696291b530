"""The room harness (tests/harness/room.py): what the speaker plays arrives at the microphone
through the configured echo path, and near-end speech is mixed in when asked."""

from __future__ import annotations

import time

import numpy as np
import pytest

from harness.loopback import captured
from harness.room import (
    Convolver,
    Room,
    RoomConfig,
    impulse_response,
    microphone_on,
    running_room,
    without_room_stall,
)
from harness.sounds import espeak
from vocal.audio.devices import Microphone
from vocal.audio.player import Player
from vocal.audio.wav import write_wav

pytestmark = [pytest.mark.audio, pytest.mark.usefixtures("pulse")]

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
