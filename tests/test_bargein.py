"""Barge-in (vocal.duplex.bargein.detector): the detector's state machine driven by a deterministic
speech probability, then Silero VAD on the room harness: echo alone never barges in, a person
talking over the reply stops it and their first word survives."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from harness.room import loaded_machine, play_turn, running_room, without_room_stall
from harness.sounds import espeak
from harness.words import word_error_rate
from vocal.audio.wav import Audio, write_wav
from vocal.duplex.bargein.detector import BargeInDetector, BargeInOptions
from vocal.duplex.canceller.aec_frames import RenderActivity

SAMPLE_RATE = 16_000


@pytest.fixture(scope="module")
def room(pulse):
    """The room harness with docs/design.md's echo path; the microphone records its output."""
    with running_room(pulse) as started:
        yield started


CHUNK = 512
CHUNK_S = CHUNK / SAMPLE_RATE


def loud(chunk: np.ndarray) -> float:
    """A deterministic 'speech probability': 0.9 for a loud chunk, 0.1 for a quiet one."""
    return 0.9 if float(np.sqrt(np.mean(chunk**2))) > 0.05 else 0.1


class Clock:
    def __init__(self, now_s: float = 100.0) -> None:
        self.now_s = now_s

    def __call__(self) -> float:
        return self.now_s


def chunks(pattern: str) -> list[np.ndarray]:
    """'s' a speech chunk, '.' a quiet one; each chunk's samples carry its index, so pre-roll
    contents can be checked."""
    out = []
    for i, c in enumerate(pattern):
        level = 0.5 if c == "s" else 0.0
        out.append(np.full(CHUNK, level, np.float32) + np.float32(i * 1e-4))
    return out


def feed_all(detector: BargeInDetector, pattern: str, clock: Clock, start_s: float = 0.0):
    """Feed chunks captured one after another from `start_s` on (the clock follows)."""
    fired_at = None
    for i, chunk in enumerate(chunks(pattern)):
        clock.now_s = start_s + (i + 1) * CHUNK_S
        if detector.feed(chunk, captured_at_s=clock.now_s) is not None and fired_at is None:
            fired_at = i
    return fired_at


def test_fires_after_n_consecutive_speech_chunks_and_stops_once() -> None:
    stops = []
    clock = Clock()
    detector = BargeInDetector(loud, lambda: stops.append(clock()),
                               BargeInOptions(consecutive_chunks=3), clock=clock)  # fmt: skip
    fired_at = feed_all(detector, "....ss.s.sss.sss", clock, start_s=10.0)
    assert fired_at == 11  # runs of 2 and 1 were reset; the third chunk of "sss" decides
    assert len(stops) == 1
    barge_in = detector.fired
    assert barge_in.at_s == pytest.approx(10.0 + 12 * CHUNK_S)
    assert barge_in.speech_start_s == pytest.approx(10.0 + 9 * CHUNK_S)
    assert barge_in.probabilities == [0.9, 0.9, 0.9]
    # Later audio changes nothing and stops nothing more.
    assert detector.feed(np.full(CHUNK, 0.5, np.float32), captured_at_s=20.0) is barge_in
    assert len(stops) == 1


def test_pre_roll_keeps_the_run_and_what_came_before_it() -> None:
    clock = Clock()
    options = BargeInOptions(consecutive_chunks=3, pre_roll_ms=100)  # 100 ms: 4 chunks
    detector = BargeInDetector(loud, lambda: None, options, clock=clock)
    feed_all(detector, "........sss", clock)
    pre_roll = detector.fired.pre_roll
    assert pre_roll.shape[0] == (4 + 3) * CHUNK
    # Chunk indices 4..10: four quiet ones before the run, then the run.
    first_index = round(float(pre_roll[0]) / 1e-4)
    assert first_index == 4
    assert np.all(pre_roll[-3 * CHUNK :] > 0.4)


def test_any_block_size_is_cut_into_512_sample_chunks() -> None:
    clock = Clock()
    detector = BargeInDetector(loud, lambda: None, clock=clock)
    audio = np.concatenate(chunks("......sss"))
    for start in range(0, audio.shape[0], 300):
        clock.now_s = 5.0 + min(start + 300, audio.shape[0]) / SAMPLE_RATE
        detector.feed(audio[start : start + 300], captured_at_s=clock.now_s)
    assert detector.fired is not None
    assert detector.chunks == 9
    assert detector.fired.speech_start_s == pytest.approx(5.0 + 6 * CHUNK_S)


def test_delay_frames_shift_chunk_times_back_to_capture_time() -> None:
    clock = Clock()
    detector = BargeInDetector(loud, lambda: None, clock=clock, delay_frames=128)
    feed_all(detector, "sss", clock, start_s=1.0)
    assert detector.fired.speech_start_s == pytest.approx(1.0 - 128 / SAMPLE_RATE)


def test_no_barge_in_while_the_canceller_converges() -> None:
    clock = Clock()
    activity = RenderActivity()
    activity.update(np.full(256, 0.3, np.float32), 10.0)  # playback starts at 10 s
    options = BargeInOptions(consecutive_chunks=3, convergence_inhibit_ms=500)
    detector = BargeInDetector(loud, lambda: None, options, activity=activity, clock=clock)
    # Speech-like residual from 10.0 to 10.48 s: inside the window, never counts.
    assert feed_all(detector, "s" * 15, clock, start_s=10.0) is None
    assert detector.inhibited_chunks == 15
    # A person speaking after it does.
    assert feed_all(detector, "sss", clock, start_s=10.6) == 2


def test_the_room_tail_after_the_far_end_stops_is_blanked() -> None:
    clock = Clock()
    activity = RenderActivity()
    activity.update(np.full(256, 0.3, np.float32), 0.0)
    options = BargeInOptions(consecutive_chunks=3, convergence_inhibit_ms=0, tail_inhibit_ms=200)
    detector = BargeInDetector(loud, lambda: None, options, activity=activity, clock=clock)
    activity.update(np.zeros(256, np.float32), 5.0)  # the sentence ends at 5 s
    # Echo tail from 5.0 to 5.19 s: blanked, and the run it started does not carry over.
    assert feed_all(detector, "ssssss", clock, start_s=5.0) is None
    assert feed_all(detector, "ss.", clock, start_s=5.2) is None  # counted from 5.2 s on
    assert detector.fired is None
    # While the far end plays, speech counts at once.
    activity.update(np.full(256, 0.3, np.float32), 6.0)
    assert feed_all(detector, "sss", clock, start_s=6.0) == 2


def test_a_glitch_inhibits_while_the_canceller_reconverges() -> None:
    clock = Clock()
    glitches = [0]
    options = BargeInOptions(consecutive_chunks=3, glitch_inhibit_ms=300)
    detector = BargeInDetector(loud, lambda: None, options, glitches=lambda: glitches[0],
                               clock=clock)  # fmt: skip
    assert feed_all(detector, "ss", clock, start_s=1.0) is None
    glitches[0] = 1  # an output underflow
    assert feed_all(detector, "sssssssss", clock, start_s=1.064) is None  # to 1.35 s
    assert feed_all(detector, "sss", clock, start_s=1.4) == 2


def test_an_onset_chunk_may_open_the_run_when_allowed() -> None:
    """Silero rises through ~0.3 at an onset: with `onset_threshold` that chunk counts as the
    run's first, so the detector fires a chunk earlier; without it, it never counts."""
    fired = {}
    for onset in (None, 0.3):
        clock = Clock()
        values = iter([0.1, 0.35, 0.9, 0.9, 0.9, 0.1])
        detector = BargeInDetector(lambda _chunk, v=values: next(v), lambda: None,
                                   BargeInOptions(onset_threshold=onset), clock=clock)  # fmt: skip
        fired[onset] = feed_all(detector, "." * 6, clock)
    assert fired == {None: 4, 0.3: 3}
    # An onset chunk alone, or two onset chunks in a row, never fire.
    clock = Clock()
    values = iter([0.35, 0.9, 0.4, 0.35, 0.9, 0.2, 0.9, 0.9, 0.1])
    detector = BargeInDetector(lambda _chunk: next(values), lambda: None,
                               BargeInOptions(onset_threshold=0.3), clock=clock)  # fmt: skip
    assert feed_all(detector, "." * 9, clock) is None


def test_fewer_chunks_fire_while_the_canceller_is_known_to_cancel_well() -> None:
    """`fast_chunks`: a run opened after chunks the canceller took >= 30 dB out of (echo well
    cancelled) fires after 2 chunks; after poor or unknown cancellation (AEC lost the echo
    path, no canceller), or without the option, after `consecutive_chunks`."""

    def run(attenuation_db, fast_chunks=2):
        clock = Clock()
        options = BargeInOptions(consecutive_chunks=3, fast_chunks=fast_chunks)
        detector = BargeInDetector(loud, lambda: None, options, clock=clock,
                                   attenuation=attenuation_db)  # fmt: skip
        return feed_all(detector, "." * 10 + "ssss", clock), detector

    def attenuation(before_db):
        # The person's chunks (from index 10 on, captured after 10 * CHUNK_S) pass through.
        return lambda at_s: before_db if at_s <= 10 * CHUNK_S + 1e-9 else 5.0

    fired, detector = run(attenuation(60.0))
    assert fired == 11 and detector.fast_runs == 1
    assert detector.fired.probabilities == [0.9, 0.9]
    assert run(attenuation(12.0))[0] == 12  # the canceller is struggling: 3 chunks
    assert run(lambda _at_s: None)[0] == 12  # nothing known
    assert run(None)[0] == 12  # no canceller at all
    assert run(attenuation(60.0), fast_chunks=None)[0] == 12  # the option off
    # One silent chunk (nothing to cancel: the far end paused) among the 8 before: 3 chunks.
    healthy = attenuation(60.0)

    def silent_7th(at_s):
        return None if 6 * CHUNK_S < at_s <= 7 * CHUNK_S + 1e-9 else healthy(at_s)

    assert run(silent_7th)[0] == 12
    # Too few chunks known before the run (the stream just started): 3 chunks.
    clock = Clock()
    detector = BargeInDetector(loud, lambda: None, BargeInOptions(fast_chunks=2), clock=clock,
                               attenuation=lambda _at_s: 60.0)  # fmt: skip
    assert feed_all(detector, "..ssss", clock) == 4


def levels_by_chunk(levels: list) -> object:
    """A fake `EchoCanceller.echo_levels_db` for chunks fed from 0 s by `feed_all`: chunk i
    (captured up to (i + 1) * CHUNK_S) gets levels[i], a (raw dB, played dB or None) pair."""
    return lambda at_s: levels[round(at_s / CHUNK_S) - 1]


def double_talk_run(pattern: str, levels: list, **options):
    clock = Clock()
    opts = BargeInOptions(consecutive_chunks=3, fast_chunks=None, **options)
    detector = BargeInDetector(loud, lambda: None, opts, clock=clock,
                               echo_levels=levels_by_chunk(levels))  # fmt: skip
    return feed_all(detector, pattern, clock), detector


#: The echo path while only echo is captured: the raw microphone 8 dB under the played level.
ECHO = (-28.0, -20.0)


def test_a_speech_run_of_echo_alone_does_not_fire_the_double_talk_test() -> None:
    """Residual echo Silero takes for speech (AEC3 lost the echo path) is still only echo at
    the raw microphone: no louder than the played level predicts. A person adds to it."""
    # 20 echo-only chunks teach the echo path's gain (-8 dB), then 6 speech-like chunks whose
    # raw level is what the echo predicts (or less: a dip of the reply): never fires.
    levels = [ECHO] * 20 + [(-28.0, -20.0), (-45.0, -20.0), (-50.0, -20.0)] * 2 + [ECHO] * 4
    fired, detector = double_talk_run("." * 20 + "ssssss" + "....", levels)
    assert fired is None
    assert detector.double_talk_vetoes == 1  # the run, once
    assert [row[4] for row in detector.trace[20:23]] == pytest.approx([0.0, -17.0, -22.0])
    # The same run with the person in it: their chunks come 3-9 dB over the echo: fires at
    # the usual third chunk.
    levels = [ECHO] * 20 + [(-25.0, -20.0), (-23.0, -20.0), (-21.0, -20.0)] + [ECHO] * 3
    fired, detector = double_talk_run("." * 20 + "ssssss", levels)
    assert fired == 22 and detector.double_talk_vetoes == 0 and detector.strong_chunks == 0
    # Without the test (double_talk_db=None), the echo-only run fires.
    levels = [ECHO] * 20 + [(-28.0, -20.0)] * 6
    assert double_talk_run("." * 20 + "ssssss", levels)[0] is None
    assert double_talk_run("." * 20 + "ssssss", levels, double_talk_db=None)[0] == 22


def test_one_chunk_far_above_the_predicted_echo_decides_alone() -> None:
    """A speech chunk >= `strong_chunk_db` (6 dB) over the echo the played level predicts is
    a person, not residual echo (which stays within ~1 dB): it needs no second chunk. Not while
    nothing plays, where every chunk is "above" the (absent) echo."""
    levels = [ECHO] * 20 + [(-21.0, -20.0)] + [(-25.0, -20.0)] * 5
    fired, detector = double_talk_run("." * 20 + "ssssss", levels)
    assert fired == 20 and detector.strong_chunks == 1
    # Off: the usual run of three.
    assert double_talk_run("." * 20 + "ssssss", levels, strong_chunk_db=None)[0] == 22
    # 5 dB over: not enough alone.
    levels = [ECHO] * 20 + [(-23.0, -20.0)] + [(-25.0, -20.0)] * 5
    assert double_talk_run("." * 20 + "ssssss", levels)[0] == 22
    # Nothing playing (no played level): the run of three (the room's level aside: see
    # test_with_nothing_heard_before_the_reply_the_room_is_learnt_in_its_pause).
    levels = [ECHO] * 20 + [(-21.0, None)] * 6
    assert double_talk_run("." * 20 + "ssssss", levels, ambient_margin_db=None)[0] == 22


def test_a_person_far_above_the_predicted_echo_counts_inside_the_tail_window() -> None:
    """The tail window blanks the room's tail after a sentence; a person who starts there is
    10-16 dB above the echo the played level predicts (live, an "okay" 7 s into a reply), the
    tail's residual echo no more than 2.7 dB: such chunks count (`tail_override_db`)."""

    def run(levels: list, **options) -> int | None:
        clock = Clock(0.0)
        activity = RenderActivity()
        activity.update(np.full(256, 0.3, np.float32), -1.0)
        opts = BargeInOptions(consecutive_chunks=3, fast_chunks=None, convergence_inhibit_ms=0,
                              tail_inhibit_ms=1000, **options)  # fmt: skip
        detector = BargeInDetector(loud, lambda: None, opts, activity=activity, clock=clock,
                                   echo_levels=levels_by_chunk(levels))  # fmt: skip
        assert feed_all(detector, "." * 20, clock) is None  # the echo path's gain, learnt
        activity.update(np.zeros(256, np.float32), 20 * CHUNK_S)  # the sentence ends
        return feed_all(detector, "sssss", clock, start_s=20 * CHUNK_S)

    echo = [ECHO] * 20
    # 12 dB over: counted, fires at the 3rd; or at the 1st, which is far enough over to
    # decide alone (strong_chunk_db).
    assert run(echo + [(-16.0, -20.0)] * 5, strong_chunk_db=None) == 2
    assert run(echo + [(-16.0, -20.0)] * 5) == 0
    assert run(echo + [(-26.0, -20.0)] * 5) is None  # 2 dB over: the tail, blanked
    assert run(echo + [(-16.0, -20.0)] * 5, tail_override_db=None) is None  # the option off


def test_a_held_back_run_fires_when_the_person_rises_above_the_echo() -> None:
    """A run the test held back at its third chunk keeps counting; the first chunk that rises
    above the echo fires it, and the barge-in starts at the run's first chunk (the onset)."""
    levels = [ECHO] * 20 + [ECHO, ECHO, ECHO, ECHO, (-18.0, -20.0), ECHO]
    fired, detector = double_talk_run("." * 20 + "ssssss", levels)
    assert fired == 24 and detector.double_talk_vetoes == 1
    assert len(detector.fired.probabilities) == 5
    assert detector.fired.speech_start_s == pytest.approx(20 * CHUNK_S)


def test_the_double_talk_test_follows_the_echo_paths_gain() -> None:
    """The gain is learnt, not fixed: a quieter echo path (-30 dB) makes a person 6 dB over
    it stand out, and a louder one (+0 dB) hides a chunk a quieter path would have passed."""
    quiet_path = [(-50.0, -20.0)] * 20 + [(-44.0, -20.0)] * 3
    assert double_talk_run("." * 20 + "sss", quiet_path, strong_chunk_db=None)[0] == 22
    loud_path = [(-20.0, -20.0)] * 20 + [(-19.0, -20.0)] * 3
    assert double_talk_run("." * 20 + "sss", loud_path)[0] is None


def test_a_person_inside_an_inhibit_window_does_not_teach_the_echo_gain() -> None:
    """Speech-like chunks inside an inhibit window (a glitch here) teach the echo path's gain
    only while they fit the echo known so far: a person talking through the window at +5 dB
    must not raise the gain by their own level and then be held back as echo once it ends."""

    def run(person_db: float) -> tuple[int | None, BargeInDetector]:
        clock = Clock()
        glitches = [0]
        opts = BargeInOptions(consecutive_chunks=3, fast_chunks=None, strong_chunk_db=None,
                              glitch_inhibit_ms=1500)  # fmt: skip
        person = (ECHO[0] + person_db, ECHO[1])
        levels = [ECHO] * 20 + [person] * 60
        detector = BargeInDetector(loud, lambda: None, opts, clock=clock,
                                   glitches=lambda: glitches[0],
                                   echo_levels=levels_by_chunk(levels))  # fmt: skip
        assert feed_all(detector, "." * 20, clock) is None
        glitches[0] = 1  # an underflow: 1.5 s blind, the person talking all through it
        return feed_all(detector, "s" * 60, clock, start_s=20 * CHUNK_S), detector

    fired, detector = run(5.0)
    # Heard at the third chunk after the window (1.5 s of 32 ms chunks), not held back.
    assert detector.inhibited_chunks >= 46
    assert fired == detector.inhibited_chunks + 2 and detector.double_talk_vetoes == 0
    assert detector.trace[-1][4] == pytest.approx(5.0)  # the gain still the echo's
    # Speech-like chunks that do fit the echo (residual echo) still teach it.
    fired, detector = run(1.0)
    assert fired is None and len(detector._echo_gains) == 20 + detector.inhibited_chunks


def test_a_person_far_above_the_predicted_echo_counts_inside_a_glitch_window() -> None:
    """A glitch blanks 1.5 s while the canceller re-converges; the raw level does not depend
    on it. A person 10 dB above the echo the played level predicts counts there (0 dB
    interruptions were lost whole in such windows), residual echo 2 dB above it does not."""

    def run(person_db: float, **options) -> tuple[int | None, BargeInDetector]:
        clock = Clock()
        glitches = [0]
        opts = BargeInOptions(consecutive_chunks=3, fast_chunks=None, strong_chunk_db=None,
                              glitch_inhibit_ms=1500, **options)  # fmt: skip
        levels = [ECHO] * 20 + [(ECHO[0] + person_db, ECHO[1])] * 10
        detector = BargeInDetector(loud, lambda: None, opts, clock=clock,
                                   glitches=lambda: glitches[0],
                                   echo_levels=levels_by_chunk(levels))  # fmt: skip
        assert feed_all(detector, "." * 20, clock) is None
        glitches[0] = 1
        return feed_all(detector, "s" * 10, clock, start_s=20 * CHUNK_S), detector

    fired, detector = run(10.0)
    assert fired == 2 and detector.glitch_overrides == 3 and detector.tail_overrides == 0
    assert run(2.0)[0] is None  # residual echo: blanked
    assert run(10.0, tail_override_db=None)[0] is None  # the override off


def test_no_run_is_held_back_when_the_echo_cannot_be_predicted() -> None:
    # Nothing played that can echo in these chunks (the far end quiet): no echo to mistake
    # (the room's level is another test's: ambient_margin_db off here).
    levels = [ECHO] * 20 + [(-30.0, None)] * 3
    assert double_talk_run("." * 20 + "sss", levels, ambient_margin_db=None)[0] == 22
    levels = [ECHO] * 20 + [(-30.0, -90.0)] * 3  # below double_talk_min_render_db
    assert double_talk_run("." * 20 + "sss", levels, ambient_margin_db=None)[0] == 22
    # The gain not learnt yet (fewer than double_talk_min_chunks echo chunks seen).
    levels = [ECHO] * 5 + [ECHO] * 3
    assert double_talk_run(".....sss", levels)[0] == 7
    # The block's levels unknown.
    assert double_talk_run("." * 20 + "sss", [ECHO] * 20 + [None] * 3)[0] == 22


@dataclass
class Activity:
    """A fake far end (`FarEndActivity`): it has not sounded until `first_loud_s` is set."""

    first_loud_s: float | None = None
    quiet_since_s: float | None = None


#: Six people talking in the room at -40 dBFS: their chunks rise and fall around it.
BABBLE_DB = (-42.0, -38.0, -40.0, -37.0, -43.0)


def babble_turn(person: tuple[str, float] | None = None, *, room_level_db: float | None = None,
                before: int = 10, **options) -> BargeInDetector:  # fmt: skip
    """A reply through a room full of other talkers (every chunk speech to Silero): 10 chunks
    before the far end's first sound, 20 while the canceller converges, then 40 of the reply
    (its echo 8 dB under the played level, ECHO) and a 20-chunk pause in it. `person`: a person
    at that raw level (dB) "over the reply" or "in the pause". `before`: how many of the 10
    chunks before the far end's first sound the detector sees (it may see none: the stream
    often starts with the reply); `room_level_db`: a level kept by an earlier turn."""
    clock, activity = Clock(), Activity()
    opts = BargeInOptions(consecutive_chunks=3, fast_chunks=None, strong_chunk_db=None,
                          convergence_inhibit_ms=round(20 * CHUNK_S * 1000), tail_inhibit_ms=0,
                          **options)  # fmt: skip

    def power_sum(*levels_db: float) -> float:
        return 10 * np.log10(sum(10 ** (level / 10) for level in levels_db))

    levels: list = []
    for i in range(90):
        room_db = BABBLE_DB[i % len(BABBLE_DB)]
        playing = 10 <= i < 70
        said = person is not None and (
            (person[0] == "over the reply" and 50 <= i < 56)
            or (person[0] == "in the pause" and 80 <= i < 86)
        )
        sources = [room_db] + ([ECHO[0]] if playing else []) + ([person[1]] if said else [])
        levels.append((power_sum(*sources), ECHO[1] if playing else None))
    detector = BargeInDetector(loud, lambda: None, opts, clock=clock, activity=activity,
                               echo_levels=levels_by_chunk(levels),
                               room_level_db=room_level_db)  # fmt: skip
    if feed_all(detector, "s" * before, clock, start_s=(10 - before) * CHUNK_S) is not None:
        return detector
    activity.first_loud_s = 10 * CHUNK_S
    if feed_all(detector, "s" * 60, clock, start_s=10 * CHUNK_S) is not None:
        return detector
    activity.quiet_since_s = 70 * CHUNK_S
    feed_all(detector, "." + "s" * 19, clock, start_s=70 * CHUNK_S)  # a new run in the pause
    return detector


def test_other_people_talking_in_the_room_do_not_barge_in() -> None:
    """Babble is speech to Silero. Learnt before the reply's first sound, the room's level
    holds it back where nothing plays, and the echo prediction (with the room's share) where
    the reply plays; the person, nearer the microphone, still stops the reply."""
    detector = babble_turn()
    assert detector.fired is None, detector.trace
    assert detector.ambient.floor_db == pytest.approx(-40.0)
    # The run over the reply was held back by the echo test, the one in the pause by the room's.
    assert detector.double_talk_vetoes == 1 and detector.room_vetoes == 1
    # Nothing was counted before the far end sounded (no reply to interrupt yet).
    assert all(row[2] for row in detector.trace[:10])
    # The person, at -25 dBFS, over the reply and in its pause.
    assert babble_turn(("over the reply", -25.0)).fired is not None
    assert babble_turn(("in the pause", -25.0)).fired is not None
    # Without the room's level (the detector before it), the babble stops the reply.
    assert babble_turn(ambient_margin_db=None).fired is not None


def test_with_nothing_heard_before_the_reply_the_room_is_learnt_in_its_pause() -> None:
    """The microphone often opens with the reply: no chunk of the room alone before it. In a
    pause, speech cannot be told from the room's own talk while no floor is known: it neither
    counts nor teaches (a person's voice must not become the floor), so babble that was never
    heard alone cuts nothing, and a person is heard over the playing reply (the echo test)
    but not in a pause. A level an earlier turn kept (vocal.duplex.bargein.room_level) is known from
    the start, and in a quiet room the pause's quiet chunks teach it."""
    detector = babble_turn(before=0)
    assert detector.fired is None and detector.ambient.floor_db is None
    assert babble_turn(("over the reply", -25.0), before=0).fired is not None
    assert babble_turn(("in the pause", -25.0), before=0).fired is None  # the cost
    kept = babble_turn(("in the pause", -25.0), before=0, room_level_db=-40.0)
    assert kept.fired is not None and kept.ambient.floor_db == pytest.approx(-40.0, abs=2.0)


@pytest.mark.parametrize(
    "bad",
    [
        {"onset_threshold": 0.6},
        {"threshold": 1.5},
        {"consecutive_chunks": 0},
        {"tail_inhibit_ms": -1},
        {"consecutive_chunks": 3, "fast_chunks": 4},
        {"fast_chunks": 0},
        {"double_talk_percentile": 101.0},
        {"double_talk_history": 0},
    ],
)
def test_options_are_checked(bad: dict) -> None:
    with pytest.raises(ValueError):
        BargeInOptions(**bad)


# -- Silero VAD on the room harness ------------------------------------------------------------
REPLY = (
    "Here is what I found. The function reads the configuration file, then it opens the audio "
    "device. If the device is missing, it raises an error with a hint. Shall I fix it now?"
)
#: Long enough that most of it comes after playback stopped (single talk).
INTERRUPTION = "wait, I need to change the plan for the second test file"


def undisturbed(turn) -> bool:
    """No glitch of ours in the turn. A stalled callback moves the echo path and AEC3 converges
    again; the detector then holds off for a while, but the room's tail of that (and machine
    load in general) is benchmarks/aec's subject. These tests judge an undisturbed path and
    measure again (up to 3 times) when the machine disturbed it."""
    return turn.glitches == 0 and turn.underflows == 0 and turn.overflows == 0


@pytest.fixture(scope="module")
def vad():
    from vocal.audio.vad import SileroVad

    return SileroVad()


@pytest.mark.audio
def test_echo_alone_never_barges_in(room, vad) -> None:
    reply = espeak(REPLY).mono_samples

    def echo_only():
        vad.reset()
        return play_turn(reply, speech_probability=vad, after_s=0.5)

    for _ in range(3):
        turn = without_room_stall(room, echo_only, clean=undisturbed)
        assert turn.barge_in is None, (
            f"false barge-in (glitches {turn.glitches}, xruns {turn.underflows}): "
            f"{turn.detector.trace[-5:]}"
        )
        assert turn.played_s >= reply.shape[0] / SAMPLE_RATE  # played to the end
        assert turn.detector.chunks > 100
        # Most of the reply was watched, not blanked: on an undisturbed path. Glitches in every
        # try (a loaded machine) blank their windows, 277 of 406 chunks once at load 5.
        if undisturbed(turn) or not loaded_machine():
            assert turn.detector.inhibited_chunks < turn.detector.chunks / 2


@pytest.mark.audio
def test_talking_over_the_reply_stops_it_and_keeps_the_words(room, vad, tmp_path) -> None:
    from vocal.stt import load_stt

    person = espeak(INTERRUPTION, voice="en-us+m3", words_per_minute=150)
    path = write_wav(tmp_path / "person.wav", person)
    reply = espeak(REPLY).mono_samples
    starts = {}

    def interrupted():
        vad.reset()
        near_id = room.say(path, delay_s=2.5, after="far")
        turn = play_turn(reply, speech_probability=vad,
                         listen_after_barge_in_s=person.duration_s)  # fmt: skip
        starts[id(turn)] = room.wait_event("near_start", id=near_id)["at_s"]
        room.wait_event("near_end", id=near_id)
        return turn

    turn = without_room_stall(room, interrupted, clean=undisturbed)
    barge_in = turn.barge_in
    person_starts_s = starts[id(turn)]
    # What the detector saw from the person's start: (s after it, probability, inhibited,
    # attenuation dB, raw level above the predicted echo dB) per chunk, and the runs the
    # double-talk test held back.
    seen = f"held back {turn.detector.double_talk_vetoes} times: " + " ".join(
        f"{t - person_starts_s:.3f}/{p:.2f}/{i:d}/{a}/{x}"
        for t, p, i, a, x in turn.detector.trace
        if -0.1 < t - person_starts_s < 1.5
    )
    assert barge_in is not None, f"no barge-in; {seen}"
    # The target is 300 ms (benchmarks/aec measures it); generous here.
    assert 0.0 < turn.stopped_at_s - person_starts_s < 0.8, seen
    assert turn.played_s < 4.5  # the reply did not play on
    # The deciding run began after the person's first sound, and the pre-roll reaches back
    # before it: the first word's onset is in what the endpointer gets.
    assert person_starts_s < barge_in.speech_start_s
    run_end_s = barge_in.speech_start_s + len(barge_in.probabilities) * CHUNK_S
    pre_roll_start_s = run_end_s - barge_in.pre_roll.shape[0] / SAMPLE_RATE
    assert pre_roll_start_s < person_starts_s
    # Pre-roll + what followed, transcribed, holds the interruption: cleaned while the reply's
    # echo may be there, raw once it has died away (EchoCanceller's raw_when_quiet_s). (The
    # first word itself can be clipped by AEC3's double-talk suppression: a figure of
    # benchmarks/aec, not a test.)
    after = turn.cleaned[turn.index(run_end_s) :]
    heard = np.concatenate([barge_in.pre_roll, after])
    text = load_stt("auto", "tiny.en").transcribe(Audio(heard, SAMPLE_RATE)).text
    assert word_error_rate(INTERRUPTION, text) <= 0.3, (text, turn.glitches, turn.underflows)


def test_barge_in_options_are_built_once_from_the_settings(monkeypatch: pytest.MonkeyPatch) -> None:
    from vocal.config import load_settings
    from vocal.duplex.bargein.detector import barge_in_options
    from vocal.errors import UsageError

    monkeypatch.setenv("VOCAL_BARGE_IN_CHUNKS", "4")
    assert barge_in_options(load_settings()).consecutive_chunks == 4
    monkeypatch.setenv("VOCAL_BARGE_IN_THRESHOLD", "0.2")
    monkeypatch.setenv("VOCAL_BARGE_IN_ONSET_THRESHOLD", "0.3")  # above the threshold
    with pytest.raises(UsageError, match="^bad barge-in setting: ") as caught:
        barge_in_options(load_settings())
    assert caught.value.exit_code == 2
