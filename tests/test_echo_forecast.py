"""What `vocal doctor --echo` forecasts a spoken reply gets (issue 20): the echo path and the
delay's moves read off its probe, and real AEC3 run offline on hibari's replies through them.

The reading is checked against rooms built from the harness's impulse responses with a known
drift and underrun; the forecast against the replies through the harness's own echo path; and
live, the doctor in the drifting room reads its clock and its underrun through real streams.
"""

from __future__ import annotations

import json
import time

import numpy as np
import pytest

from harness.room import running_room
from harness.room_effects import ROOM_CONDITIONS, EchoPath, impulse_response, room_noise
from harness.runner import run_vocal
from vocal.duplex.measure.delay_track import DelayTrack, follow_delay
from vocal.duplex.measure.erle import erle_db
from vocal.duplex.measure.forecast import (
    PASSES,
    REPLIES,
    feed,
    forecast,
    fresh_canceller,
    measure_room,
    spoken_replies,
)
from vocal.duplex.measure.probe import probe_signal

SAMPLE_RATE = 16_000
#: The output's latency in these offline rooms (samples): 70 ms, as the harness measures it.
LATENCY = 1120


def probe_through(config, track: DelayTrack | None = None, noise_dbfs: float | None = None):
    """The doctor's probe (and 1 s after it) through `config`'s path, played as `track`
    says, with white noise at `noise_dbfs`: (reference, mic, the direct sound's delay)."""
    reference = np.concatenate([probe_signal(SAMPLE_RATE), np.zeros(SAMPLE_RATE, np.float32)])
    ir = impulse_response(config)
    played = np.concatenate(
        [np.zeros(LATENCY, np.float32), (track or DelayTrack()).warp(reference)]
    )
    mic = np.convolve(played, ir)[: reference.shape[0]].astype(np.float32)
    if noise_dbfs is not None:
        rng = np.random.default_rng(7)
        mic += (rng.standard_normal(mic.shape[0]) * 10 ** (noise_dbfs / 20)).astype(np.float32)
    return reference, mic, LATENCY + int(np.argmax(np.abs(ir)))


@pytest.mark.parametrize("truth", [DelayTrack(), DelayTrack(-100.0),
                                   DelayTrack(100.0, ((32_000, 320),)),
                                   DelayTrack(50.0, ((16_000, -160),))])  # fmt: skip
def test_the_delay_track_reads_a_clocks_drift_and_an_underrun(truth: DelayTrack) -> None:
    reference, mic, delay = probe_through(ROOM_CONDITIONS["linear"], truth, noise_dbfs=-45.0)
    read = follow_delay(reference, mic, slice(0, 3 * SAMPLE_RATE), delay)
    assert read.drift_ppm == pytest.approx(truth.drift_ppm, abs=5.0)
    assert len(read.steps) == len(truth.steps)
    for (at, size), (true_at, true_size) in zip(read.steps, truth.steps, strict=True):
        assert abs(at - true_at) <= SAMPLE_RATE // 4 and abs(size - true_size) <= 2


def test_a_step_plays_later_after_a_gap_and_drift_stretches() -> None:
    clicks = np.zeros(SAMPLE_RATE, np.float32)
    clicks[[1000, 4000, 12000]] = 1.0
    played = DelayTrack(0.0, ((2000, 320),)).warp(clicks)
    # From the first click (the sound's first sample) on: the second and third 320 later.
    assert [int(i) for i in np.flatnonzero(np.abs(played) > 0.5)] == [1000, 4320, 12320]
    # An output clock 0.1 % slow: 11 samples later 11000 samples in.
    stretched = DelayTrack(-1000.0).warp(clicks)
    assert int(np.argmax(np.abs(stretched[11000:13000]))) + 11000 == 12011


@pytest.mark.parametrize("room", ["linear", "reverberant"])
def test_the_path_is_read_off_the_probe(room: str) -> None:
    config = ROOM_CONDITIONS[room]
    reference, mic, delay = probe_through(config, noise_dbfs=-60.0)
    measured = measure_room(reference, mic, slice(0, 3 * SAMPLE_RATE), delay, np.zeros(0))
    true = np.concatenate([np.zeros(LATENCY), impulse_response(config)])
    read = np.zeros_like(true)
    part = measured.ir[: true.shape[0] - measured.lag]
    read[measured.lag : measured.lag + part.shape[0]] = part
    # In the probe's band (150-6000 Hz), where replies' echo is: within -20 dB of the path.
    band = np.fft.rfftfreq(8192, 1 / SAMPLE_RATE)
    inside = (band > 200) & (band < 5500)
    error = np.abs(np.fft.rfft(read - true, 8192))[inside] ** 2
    assert 10 * np.log10(error.sum() / (np.abs(np.fft.rfft(true, 8192))[inside] ** 2).sum()) < -20
    # Past the room's tail the estimate's noise is cut, not kept as reverberation.
    tail_end = LATENCY + impulse_response(config).shape[0] + SAMPLE_RATE // 20
    assert not measured.ir[tail_end - measured.lag :].any()


def test_the_forecast_follows_the_room_not_the_probe() -> None:
    """Real AEC3 (livekit), offline: the forecast over two of hibari's replies through the
    path read off the probe, against the same replies through the harness's echo path."""
    replies, rate = spoken_replies()
    replies = replies[1:3]
    figures = {}
    for name in ("linear", "noisy"):
        config = ROOM_CONDITIONS[name]
        noise = room_noise(config, SAMPLE_RATE)
        reference, echo, delay = probe_through(config)
        hum = (
            np.zeros(2 * SAMPLE_RATE, np.float32) if noise is None else noise.next(2 * SAMPLE_RATE)
        )
        mic = echo + (0 if noise is None else noise.next(echo.shape[0]).astype(np.float32))
        room = measure_room(reference, mic, slice(0, 3 * SAMPLE_RATE), delay, hum)
        predicted = forecast(room, replies, rate, round(delay / 16)).median_db
        truth = []
        for reply in replies:
            from vocal.audio.wav import resample

            far16 = resample(reply, rate, SAMPLE_RATE)
            path = EchoPath(config)
            delayed = np.concatenate([np.zeros(LATENCY, np.float32), far16])[: far16.shape[0]]
            heard = np.concatenate([path.process(delayed[i : i + 160])
                                    for i in range(0, delayed.shape[0] - 159, 160)])  # fmt: skip
            captured = heard + (0 if noise is None else noise.next(heard.shape[0]))
            cleaned = feed(fresh_canceller(rate, round(delay / 16)), reply, rate,
                           captured.astype(np.float32))  # fmt: skip
            first = int(np.argmax(np.abs(heard) > 0.01))
            n = min(captured.shape[0], cleaned.shape[0])
            truth.append(erle_db(captured[first:n], cleaned[first:n], skip_s=1.0,
                                 active_dbfs=room.active_dbfs()))  # fmt: skip
        figures[name] = (predicted, float(np.median(truth)))
    linear, noisy = figures["linear"], figures["noisy"]
    assert linear[0] > 55 and linear[1] > 55, figures  # AEC3 gates a clean room's echo
    assert 25 < noisy[0] < 48 and abs(noisy[0] - noisy[1]) < 8, figures  # the fan is left
    assert noisy[0] < linear[0] - 15, figures


@pytest.mark.audio
def test_doctor_echo_reads_the_drifting_rooms_clock_and_underrun(pulse, vocal_home) -> None:
    """The drift room: its output runs 100 ppm fast and gains 20 ms of latency 2 s into each
    sound; the doctor hears both through real streams and forecasts replies played so."""
    with running_room(pulse, ROOM_CONDITIONS["drift"]) as room:
        # Up to 3 probes where the streams glitch (vocal.ops.echo_check.PROBE_TRIES).
        result = run_vocal("doctor", "--echo", "--json", timeout=180)
        time.sleep(0.05)  # the room's events for the last chunks
        stalls = room.stalls()
    assert result.returncode == 0, result.stderr.decode()
    (check,) = json.loads(result.stdout)
    data = check["data"]
    assert data["drift_ppm"] == pytest.approx(100.0, abs=30.0), data
    # The room's own step, read once; a stall of the room process, or a glitch of the probe's
    # own streams (a loaded machine), moves the path again, which the doctor rightly reads as
    # one more step.
    steps = data["delay_steps"]
    designed = [
        s
        for s in steps
        if s[0] == pytest.approx(2.0, abs=0.4) and s[1] == pytest.approx(20.0, abs=2.0)
    ]
    moved = stalls > 0 or data["underflows"] > 0 or data["overflows"] > 0
    assert len(designed) == 1 and (len(steps) == 1 or moved), (stalls, data)
    assert len(data["reply_reductions_db"]) == len(REPLIES) * len(PASSES), data
    assert data["reply_reduction_db"] is not None, data
    assert f"drifts {data['drift_ppm']:+.0f} ppm" in check["detail"], check  # +98 or +101
    assert "moved +20 ms" in check["detail"], check
