"""The echo profile (issue 20): `vocal doctor --echo` measures a device pair's echo and keeps it;
`converse --aec auto` gives the delay to the canceller and runs half-duplex on a bad verdict.

The measurement's arithmetic is checked offline on a synthetic echo (a known delay and gain);
the rest on the room harness: real streams, real AEC3, real `vocal` processes.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import numpy as np
import pytest

from harness.room import Room, loaded_machine, microphone_on, running_room
from harness.runner import run_vocal, start_vocal
from vocal.audio.endpoints import device_pair
from vocal.duplex.canceller.profile import (
    FULL_DUPLEX,
    HALF_DUPLEX,
    HEADPHONES,
    EchoProfile,
    known_pair,
    learn_delay,
    load_profile,
    profile_path,
    save_profile,
    verdict_for,
)
from vocal.duplex.echo_free.onset import AlignedStreams
from vocal.duplex.measure.probe import Recording, _measured, probe_signal
from vocal.tts import engine_class

SAMPLE_RATE = 16_000
#: ~3 s of hibari speech.
REPLY = "The build finished, and all forty two tests passed in the docs folder."


def profile(verdict: str = FULL_DUPLEX, *, output: str = "sink", input: str = "source",
            delay_ms: float = 120.0, reduction_db: float | None = 40.0) -> EchoProfile:  # fmt: skip
    return EchoProfile(output=output, input=input, delay_ms=delay_ms, echo_dbfs=-30.0,
                       echo_gain_db=-10.0, reduction_db=reduction_db, verdict=verdict,
                       measured_at=time.time())  # fmt: skip


# -- offline ----------------------------------------------------------------------------------
def test_the_verdict_follows_the_reduction_and_the_echo_level() -> None:
    assert verdict_for(-30.0, 40.0) == FULL_DUPLEX
    assert verdict_for(-30.0, 25.0) == FULL_DUPLEX
    assert verdict_for(-30.0, 20.0) == HEADPHONES
    assert verdict_for(-30.0, 10.0) == HALF_DUPLEX
    assert verdict_for(-30.0, None) == HALF_DUPLEX  # echo, but nothing could be measured
    assert verdict_for(-70.0, None) == FULL_DUPLEX  # nothing reaches the microphone


def test_a_profile_is_kept_per_pair_and_a_bad_record_is_set_aside(vocal_home: Path) -> None:
    kept = profile(output="alsa_output.usb-Speaker", input="alsa_input.usb-Mic")
    path = save_profile(vocal_home, kept)
    assert path == profile_path(vocal_home, kept.output, kept.input)
    assert path.parent.stat().st_mode & 0o777 == 0o700
    assert load_profile(vocal_home, kept.output, kept.input) == kept
    assert load_profile(vocal_home, kept.output, "another mic") is None
    # Device names are not file names: any string makes a file inside echo/.
    odd = profile(output="../../etc/passwd", input="a\0b")
    assert save_profile(vocal_home, odd).parent == path.parent
    # A record vocal did not write: set aside, treated as absent, never a crash.
    for bad in ("{", json.dumps({**kept.to_dict(), "verdict": "shout"}),
                json.dumps({**kept.to_dict(), "delay_ms": -5})):  # fmt: skip
        path.write_text(bad)
        assert load_profile(vocal_home, kept.output, kept.input) is None
        assert not path.exists()
    # Nothing ever measured: no pactl call, no directory made.
    assert known_pair(vocal_home / "nowhere", None, None) is None


def test_a_turn_keeps_its_delay_and_nothing_it_did_not_measure(vocal_home: Path) -> None:
    learned = learn_delay(vocal_home, "sink", "source", 131.5, now_s=1000.0)
    assert (learned.delay_ms, learned.source, learned.verdict) == (131.5, "turn", None)
    assert load_profile(vocal_home, "sink", "source") == learned
    # Over a doctor's profile: the delay moves, the verdict and levels stay.
    save_profile(vocal_home, profile(HALF_DUPLEX, output="sink", input="source"))
    learned = learn_delay(vocal_home, "sink", "source", 140.0, now_s=2000.0)
    assert (learned.delay_ms, learned.verdict, learned.reduction_db) == (140.0, HALF_DUPLEX, 40.0)


def test_plain_doctor_says_what_the_pair_has_kept_and_asks_for_a_measurement(
    vocal_home: Path,
) -> None:
    from vocal.config import Settings
    from vocal.ops.echo_check import MEASURE_FIX, check_kept_echo

    # Named devices: the pair is known without asking the sound server.
    settings = Settings(home=vocal_home, aec="on", output_device="sink", input_device="source")
    nothing = check_kept_echo(settings)
    assert (nothing.status, nothing.fix) == ("warn", MEASURE_FIX)
    assert "not measured" in nothing.detail and "vocal doctor --echo" in MEASURE_FIX
    learn_delay(vocal_home, "sink", "source", 131.0, now_s=1000.0)
    learned = check_kept_echo(settings, now_s=1000.0 + 3 * 3600 + 5)
    assert (learned.status, learned.fix) == ("warn", MEASURE_FIX)
    assert "131 ms learnt by a turn 3 h ago, not judged" in learned.detail
    save_profile(vocal_home, profile(HALF_DUPLEX, reduction_db=9.0))
    bad = check_kept_echo(settings)
    assert bad.status == "warn" and "half-duplex" in bad.detail and "9 dB" in bad.detail
    assert bad.fix and "headphones" in bad.fix and "just now" in bad.detail
    save_profile(vocal_home, profile(FULL_DUPLEX, reduction_db=38.0))
    assert "updated 1 day ago" in check_kept_echo(settings, now_s=time.time() + 86400).detail
    good = check_kept_echo(settings, now_s=time.time() + 2 * 86400)
    assert (
        good.status == "ok"
        and "full-duplex (echo delay 120 ms, cancelled 38 dB), updated 2 days ago" in good.detail
    )
    # Where nothing is cancelled there is nothing to measure.
    for quiet in (Settings(home=vocal_home, aec="off"), Settings(home=vocal_home, barge_in=False)):
        unused = check_kept_echo(quiet)
        assert unused.status == "ok" and unused.detail.startswith("not needed")


def synthetic_recording(delay_samples: int, gain: float, residual: float) -> Recording:
    """A probe played from 0.5 s on and its echo `delay_samples` later at `gain`, in the
    blocks their callbacks would have seen (256 played, 512 captured, on one clock); a live
    canceller's output `residual` times the echo."""
    probe = probe_signal(SAMPLE_RATE)
    total = SAMPLE_RATE // 2 + probe.shape[0] + SAMPLE_RATE
    total -= total % 512
    reference = np.zeros(total, np.float32)
    reference[SAMPLE_RATE // 2 : SAMPLE_RATE // 2 + probe.shape[0]] = probe
    mic = np.zeros(total, np.float32)
    mic[delay_samples:] = gain * reference[:-delay_samples]

    def blocks(signal: np.ndarray, size: int) -> list:
        return [(10.0 + (i + size) / SAMPLE_RATE, i, signal[i : i + size])
                for i in range(0, total, size)]  # fmt: skip

    streams = AlignedStreams(mic, reference, 0, blocks(mic, 512), SAMPLE_RATE)
    return Recording(streams, blocks(reference, 256), SAMPLE_RATE, mic,
                     (residual * mic).astype(np.float32), 10.5, 0, 0)  # fmt: skip


def test_the_measurement_finds_a_known_delay_level_and_reduction() -> None:
    measured = _measured("sink", "source", synthetic_recording(1234, 0.25, 0.01))
    assert measured.delay_ms == pytest.approx(1234 / 16, abs=0.1)
    assert measured.echo_gain_db == pytest.approx(20 * np.log10(0.25), abs=0.5)
    assert measured.probe_dbfs == pytest.approx(-20.0, abs=0.5)
    assert measured.cold_reduction_db == pytest.approx(40.0, abs=0.5)
    assert measured.reduction_db >= 30  # AEC3 again, told the delay
    assert measured.linear_db > 40
    assert measured.verdict == FULL_DUPLEX
    # A long room (600 ms) that the live canceller took only 10 dB out of: told the delay,
    # the canceller (reference shifted by most of it) cancels it, and the verdict is kept.
    measured = _measured("sink", "source", synthetic_recording(9600, 0.5, 10 ** (-10 / 20)))
    assert measured.delay_ms == pytest.approx(600.0, abs=0.1)
    assert measured.cold_reduction_db == pytest.approx(10.0, abs=0.5)
    assert measured.reduction_db >= 30 and measured.verdict == FULL_DUPLEX
    kept = measured.profile()
    assert (kept.delay_ms, kept.stream_delay_ms) == (600.0, 600)
    assert verdict_for(measured.echo_dbfs, measured.cold_reduction_db) == HALF_DUPLEX


def test_a_known_delay_places_the_window_the_echo_is_predicted_from() -> None:
    from vocal.duplex.canceller.aec import ECHO_WINDOW_S, echo_window_s

    assert echo_window_s(None) == ECHO_WINDOW_S
    low, high = echo_window_s(130)  # the design room: about the default window
    assert 0.0 < low <= ECHO_WINDOW_S[0] and high == ECHO_WINDOW_S[1]
    low, high = echo_window_s(730)  # a 600 ms room: past where the default window ends
    assert low == pytest.approx(0.61) and high == pytest.approx(1.0)


# -- on the room harness ----------------------------------------------------------------------
@pytest.fixture(scope="module")
def room(pulse):
    with running_room(pulse) as started:
        yield started


#: The most a steady pair of streams spreads the clicks' delays (ms): 0-0.1 seen here.
CLICKS_SPREAD_MS = 2.0


def click_delay_ms(played_rate: int) -> float | None:
    """The echo delay found independently of the probe's fit: clicks played at `played_rate`
    (the output's latency depends on it), each found by its first sample over a threshold in
    the raw capture, in another pair of streams; positions in each stream put on the
    monotonic clock as the taps put them (`stream_clock_s`). Measured again (3 tries) where
    the streams glitched or the clicks' delays spread (one stream reads them all within a
    fraction of a ms): an underflow delays every later click for good (issue 38: under load
    the clicks read 307 ms rising to 1011 ms where the probe read 188). None: never steady."""
    for _ in range(3):
        delays_ms, glitches = _click_delays_ms(played_rate)
        if not glitches and max(delays_ms) - min(delays_ms) <= CLICKS_SPREAD_MS:
            return float(np.median(delays_ms))
    return None


def assert_near_clicks(delay_ms: float, clicked_ms: float | None, context: object) -> None:
    """`delay_ms` within 10 ms of the clicks' delay, where they were measured: not measured
    (the clicks never ran steady, or the room's path moved) only on a loaded machine."""
    if clicked_ms is None:
        assert loaded_machine(), f"no steady clicks on a quiet machine: {context}"
        return
    assert abs(delay_ms - clicked_ms) <= 10, (clicked_ms, context)


def _click_delays_ms(played_rate: int) -> tuple[list[float], int]:
    """Each click's delay (ms), and the streams' underflows and overflows meanwhile."""
    from vocal.audio.devices import Microphone
    from vocal.audio.player import Player
    from vocal.duplex.echo_free.taps import stream_clock_s

    played: list[tuple[float, int]] = []  # (callback time, position at the block's end)
    captured: list[tuple[float, int]] = []
    clicks_at: list[int] = []
    heard_at: list[int] = []
    position = {"played": 0, "captured": 0}

    def render(block: np.ndarray) -> None:
        loud = np.flatnonzero(np.abs(block) > 0.4)
        if loud.size:
            clicks_at.append(position["played"] + int(loud[0]))
        position["played"] += block.shape[0]
        played.append((time.monotonic(), position["played"]))

    def capture(block: np.ndarray) -> np.ndarray:
        for index in np.flatnonzero(np.abs(block) > 0.05):
            at = position["captured"] + int(index)
            if not heard_at or at - heard_at[-1] > SAMPLE_RATE // 5:
                heard_at.append(at)
        position["captured"] += block.shape[0]
        captured.append((time.monotonic(), position["captured"]))
        return block

    click = np.zeros(played_rate // 2, np.float32)
    click[100:104] = 0.5
    with Microphone(SAMPLE_RATE, on_block=capture) as mic:
        assert mic.read(timeout_s=5.0) is not None
        with Player(played_rate, on_block=render) as player:
            for _ in range(6):
                player.play(click)
            player.finish()
            player.wait()
        time.sleep(0.8)
        glitches = player.underflows + mic.overflows

    def clock(blocks: list[tuple[float, int]], rate: int) -> float:
        stamps, ends = (np.array(column, float) for column in zip(*blocks, strict=True))
        return stream_clock_s(stamps, ends, rate)

    sent = [clock(played, played_rate) + at / played_rate for at in clicks_at]
    heard = [clock(captured, SAMPLE_RATE) + at / SAMPLE_RATE for at in heard_at]
    # Each click heard, against the last one sent before it (a stream's first block can be
    # lost while the sink wakes up: a click then goes unheard).
    delays_ms = [(h - max(s for s in sent if s < h)) * 1000 for h in heard if min(sent) < h]
    assert len(delays_ms) >= 4, (sent, heard)
    return delays_ms, glitches


def doctor_echo() -> dict:
    result = run_vocal("doctor", "--echo", "--json", timeout=180)  # 3 probes under load
    assert result.returncode == 0, result.stderr.decode()
    (check,) = json.loads(result.stdout)
    if "glitched in all" in (check.get("fix") or ""):  # vocal.ops.echo_check.PROBE_TRIES
        assert check["status"] == "warn" and "profile" not in check["data"], check
        pytest.skip("the audio glitched in every probe (a loaded machine): nothing was kept")
    assert check["name"] == "echo" and check["status"] == "ok", check
    return check["data"]


def doctor_and_clicks(room: Room) -> tuple[dict, float | None]:
    """`vocal doctor --echo`, then the clicks' delay at the probe's rate; both again where the
    room stalled meanwhile (3 tries): a stall of the room process (a loaded machine) moves
    its path by a block or more for good, which no real room does. None for the clicks where
    the room never held still."""
    for _ in range(3):
        since = len(room.events)
        data = doctor_echo()
        clicked_ms = click_delay_ms(data["probe_sample_rate"])
        time.sleep(0.05)  # the room's events for the last chunks
        if room.stalls(since) == 0:
            return data, clicked_ms
    return data, None


@pytest.mark.audio
def test_doctor_echo_on_the_plain_loopback(pulse, room, vocal_home) -> None:
    """The speaker's monitor as the microphone: the echo is the reply itself (0 dB), late by
    the streams' latency alone."""
    with microphone_on(f"{pulse.speaker}.monitor"):
        data = doctor_echo()
        assert data["verdict"] == FULL_DUPLEX and data["reduction_db"] >= 25, data
        assert -1.5 < data["echo_gain_db"] < 1.5
        assert_near_clicks(data["delay_ms"], click_delay_ms(data["probe_sample_rate"]), data)


@pytest.mark.audio
def test_doctor_echo_measures_the_rooms_delay_and_keeps_the_profile(room, vocal_home) -> None:
    data, clicked_ms = doctor_and_clicks(room)
    assert data["verdict"] == FULL_DUPLEX and data["reduction_db"] >= 25, data
    # The design room: 50 ms, gain 0.5 (-6 dB) with its tail; plus the streams' latency.
    assert 50 < data["delay_ms"] < 400
    assert -12 < data["echo_gain_db"] < 0
    assert_near_clicks(data["delay_ms"], clicked_ms, data)
    # On speech AEC3 takes a quiet linear room's echo to the floor (benchmarks/converse: 69.5
    # dB warm, 1 s into the replies): the forecast from this probe says as much. A loaded
    # machine jitters the probe's capture and the forecast reads it (52 dB beside two busy
    # loops): still a room the canceller takes far below the person.
    assert data["reply_reduction_db"] >= (45 if loaded_machine() else 55), data
    assert data["drift_ppm"] == pytest.approx(0.0, abs=10.0) and data["delay_steps"] == [], data
    kept = load_profile(vocal_home, *device_pair(None, None))
    assert kept is not None and kept.delay_ms == data["delay_ms"]
    assert Path(data["profile"]) == profile_path(vocal_home, kept.output, kept.input)


def converse_turn(*args: str, text: str = "Hello there.") -> tuple[int, dict, str]:
    proc = start_vocal("converse", text, "--json", "--no-speech-timeout", "1", *args)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, json.loads(out) if out.strip() else {}, err.decode()


@pytest.mark.audio
def test_a_bad_echo_verdict_makes_aec_auto_half_duplex_and_a_good_one_keeps_barge_in(
    room, vocal_home
) -> None:
    output, input = device_pair(None, None)
    save_profile(vocal_home, profile(HALF_DUPLEX, output=output, input=input, reduction_db=8.0))
    code, payload, stderr = converse_turn("--aec", "auto")
    assert code == 4, stderr  # nobody answered
    assert payload["mode"] == "half-duplex" and payload["aec"] is False
    assert payload["echo_profile"]["verdict"] == HALF_DUPLEX
    assert stderr.count("half-duplex") == 1, stderr
    # --aec on is the user's word: full duplex, the profile's delay still used.
    code, payload, stderr = converse_turn("--aec", "on")
    assert payload["mode"] == "barge-in" and payload["aec"] is True, stderr
    assert "half-duplex" not in stderr
    # A good verdict: barge-in as before, the canceller given the measured delay.
    save_profile(vocal_home, profile(FULL_DUPLEX, output=output, input=input, delay_ms=130.0))
    code, payload, stderr = converse_turn("--aec", "auto")
    assert code == 4, stderr
    assert payload["mode"] == "barge-in" and payload["aec"] is True
    assert payload["echo_profile"]["delay_ms"] == 130.0
    assert "half-duplex" not in stderr


def learning_turn(vocal_home: Path, tries: int = 5) -> tuple[float, dict]:
    """A turn whose fit of the reply's echo held, so that it learnt the delay. The fit holds
    in most turns (33-38 dB here), not all (24 dB once in CI, under load). A reply whose
    streams glitched keeps nothing (the delay may be its stream's own: issue 38), which each
    such turn checks. An output underflow comes in many turns on a null sink in a VM even
    when the machine is quiet, so up to `tries` turns are played. Where every turn
    glitched the product did as designed and the test is skipped, saying so; a clean turn
    whose fit fell short fails on a quiet machine."""
    kept_before = load_profile(vocal_home, *device_pair(None, None))
    glitched = 0
    for _ in range(tries):
        code, payload, stderr = converse_turn(text=REPLY)
        assert code == 4, stderr
        learned = payload["learned_echo_delay_ms"]
        removed = payload["tail_audio"]["echo_removed_db"]
        counters = payload["counters"]
        if counters["output_underflows"] or counters["input_overflows"]:
            glitched += 1
            assert learned is None, payload
        elif removed is not None and removed >= 30:
            assert learned is not None, payload
            return learned, payload
        assert learned is None and load_profile(vocal_home, *device_pair(None, None)) == kept_before
    if glitched == tries:
        pytest.skip(f"the streams glitched in each of {tries} turns: nothing learnt, as designed")
    if loaded_machine():
        pytest.skip(f"a loaded machine: no turn in {tries} learnt ({glitched} glitched)")
    pytest.fail(f"no clean turn's echo fit removed 30 dB in {tries} ({glitched} glitched)")


@pytest.mark.audio
def test_the_doctor_measures_the_delay_a_turns_stream_sees(room, vocal_home) -> None:
    # The probe plays at the configured voice's rate (hibari's 24 kHz): at 16 kHz it read
    # 15-17 ms more than a turn's stream sees (the output's buffering depends on the rate).
    for _ in range(3):  # again where the room stalled (see `doctor_and_clicks`)
        since = len(room.events)
        data = doctor_echo()
        assert data["probe_sample_rate"] == engine_class("hibari").sample_rate
        learned, _ = learning_turn(vocal_home)
        time.sleep(0.05)
        if room.stalls(since) == 0:
            break
    else:
        assert loaded_machine(), "the room stalled in each of 3 tries on a quiet machine"
        pytest.skip("a loaded machine: the room's path moved in each of 3 tries")
    # Two streams opened apart read within 1-2 ms here, 5.8 and 6.3 ms apart under load.
    assert abs(learned - data["delay_ms"]) <= 8, (learned, data["delay_ms"])


@pytest.mark.audio
def test_a_turn_whose_echo_fit_held_keeps_the_delay_for_the_next(room, vocal_home) -> None:
    # Long enough for the reply's echo to be fitted when it ends (at least a second of it).
    # A turn whose fit did not hold keeps nothing, and the next one is tried.
    since = len(room.events)
    learned, _ = learning_turn(vocal_home)
    kept = load_profile(vocal_home, *device_pair(None, None))
    assert kept is not None and kept.source == "turn" and kept.delay_ms == learned
    clicked_ms = click_delay_ms(engine_class("hibari").sample_rate)
    if room.stalls(since) == 0:  # a stall since would have moved the room's path for good
        assert_near_clicks(learned, clicked_ms, learned)
    # The next turn starts from it.
    code, payload, stderr = converse_turn(text=REPLY)
    assert payload["echo_profile"]["delay_ms"] == learned, stderr
