"""What a converse turn hands its listener when the reply ends by itself (vocal.duplex.handover,
issue 19's hand-over): where someone is first heard over the reply's last second, and where
speech the detector saw before the end began; the echo followed where an underrun moved it
(vocal.duplex.echo_free.echo_follow, issue 36), on speech through a known room and a real recording.
The fit itself is tested on real speech in tests/test_onset.py, the whole hand-over on real
streams in tests/test_converse.py."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from harness.room_effects import small_room
from vocal.audio.devices import Block
from vocal.duplex.bargein.detector import BargeInDetector, BargeInOptions
from vocal.duplex.handover import first_near_end_s, trailing_onset_s

BLOCK = 512
BLOCK_S = BLOCK / 16_000


class Rebuilt:
    """An `EchoFreeOnset` stand-in: each block's raw samples are known, and the echo-free
    signal keeps `left[i]` of block i's amplitude."""

    def __init__(self, blocks: list[Block], left: list[float]) -> None:
        self.raw = {b.captured_at_s: b.samples for b in blocks}
        self.left = {b.captured_at_s: share for b, share in zip(blocks, left, strict=True)}

    def raw_for(self, block: Block):
        return 0, self.raw[block.captured_at_s]

    def samples_for(self, block: Block):
        return self.raw[block.captured_at_s] * self.left[block.captured_at_s]

    def near_end_s(self, blocks: list[Block], from_s: float = 0.0) -> float | None:
        clean = [dataclasses.replace(b, samples=self.samples_for(b)) for b in blocks]
        return first_near_end_s(blocks, clean, self, from_s)


def blocks_of(levels: list[float]) -> list[Block]:
    rng = np.random.default_rng(1)
    return [Block((rng.standard_normal(BLOCK) * level).astype(np.float32), (i + 1) * BLOCK_S)
            for i, level in enumerate(levels)]  # fmt: skip


def test_someone_is_heard_from_the_first_of_three_blocks_the_echo_does_not_explain() -> None:
    blocks = blocks_of([0.05] * 10)
    # Echo alone leaves 1 % (-40 dB); one stray block at -3 dB; then a person from block 6.
    left = [0.01] * 3 + [0.7] + [0.01] * 2 + [0.7] * 4
    assert Rebuilt(blocks, left).near_end_s(blocks) == pytest.approx(6 * BLOCK_S)


def test_a_fitted_echo_alone_is_nobody() -> None:
    blocks = blocks_of([0.05] * 10)
    # 0.2 is -14 dB: more than the 8 dB a person leaves.
    assert Rebuilt(blocks, [0.2] * 10).near_end_s(blocks) is None


def test_sound_below_the_floor_is_nobody() -> None:
    blocks = blocks_of([1e-4] * 10)  # -80 dBFS: whatever share is left, it is not a person
    assert Rebuilt(blocks, [1.0] * 10).near_end_s(blocks) is None


def detector_fed(pattern: str) -> BargeInDetector:
    """A detector fed one chunk per character ('s' speech, '.' quiet), never firing (the
    double-talk test holds every run back), as during a reply that ends with someone talking."""
    detector = BargeInDetector(lambda c: 0.9 if float(np.max(c)) > 0.1 else 0.05, lambda: None,
                               BargeInOptions(consecutive_chunks=50))  # fmt: skip
    for i, c in enumerate(pattern):
        level = 0.5 if c == "s" else 0.0
        detector.feed(np.full(BLOCK, level, np.float32), captured_at_s=(i + 1) * BLOCK_S)
    return detector


def test_speech_before_the_end_is_traced_back_through_short_gaps() -> None:
    detector = detector_fed("." * 40 + "sss..ssss")
    ended_s = 49 * BLOCK_S
    assert trailing_onset_s(detector, ended_s) == pytest.approx(40 * BLOCK_S)


def test_speech_long_before_the_end_is_not_an_answer() -> None:
    detector = detector_fed("." * 10 + "ssss" + "." * 40)
    assert trailing_onset_s(detector, 54 * BLOCK_S) is None
    assert trailing_onset_s(None, 1.0) is None


def test_a_near_end_run_counts_only_where_the_fit_held_on_the_reply_before_it() -> None:
    """The reply's own last words, where the echo path moved after the fit's stretch, leave a
    fit's residual within 8 dB of the raw level ("lease notes" for "release notes"): unless
    the fit removed 20 dB from the reply alone before the run, that is nobody."""
    blocks = blocks_of([0.05] * 10)
    # The fit removes only 14 dB from the reply before the run.
    assert Rebuilt(blocks, [0.2] * 4 + [0.7] * 6).near_end_s(blocks) is None
    # Too little reply before the run to tell.
    assert Rebuilt(blocks, [0.01] * 2 + [0.7] * 8).near_end_s(blocks) is None
    # Searched from a time on: a run that starts earlier is passed over, not a later one.
    blocks = blocks_of([0.05] * 14)
    left = [0.01] * 5 + [0.7] * 3 + [0.01] * 3 + [0.7] * 3
    assert Rebuilt(blocks, left).near_end_s(blocks) == pytest.approx(5 * BLOCK_S)
    later = Rebuilt(blocks, left).near_end_s(blocks, from_s=7 * BLOCK_S)
    assert later == pytest.approx(11 * BLOCK_S)
    # A person's first sound rising just before the run (12 dB under the raw level, not yet
    # near) is not the reply the fit failed on.
    left = [0.01] * 5 + [0.25] * 2 + [0.7] * 7
    assert Rebuilt(blocks, left).near_end_s(blocks) == pytest.approx(7 * BLOCK_S)


RATE = 16_000
REPLY = "The build finished. All forty two tests passed, and the report is in the docs folder."


@pytest.fixture(scope="module")
def reply() -> np.ndarray:
    """The reply (espeak-ng), and 0.6 s of silence after it: the room's tail, the answer."""
    from harness.sounds import espeak

    spoken = espeak(REPLY).mono_samples
    return np.concatenate([spoken, np.zeros(round(0.6 * RATE), np.float32)])


@pytest.fixture(scope="module")
def answer() -> np.ndarray:
    """A real recording ("seven of clubs", the corpus's cards-003), from its first sound."""
    from harness.corpus import load_clips
    from vocal.audio.wav import read_wav, resample

    audio = read_wav(next(c for c in load_clips() if c.id == "cards-003").path)
    person = resample(audio.mono_samples, audio.sample_rate, RATE)
    frames = person[: person.shape[0] // 160 * 160].reshape(-1, 160).astype(np.float64)
    energy = np.mean(frames**2, axis=1)
    return person[int(np.argmax(energy > 1e-3 * energy.max())) * 160 :]


def moved_room(reply: np.ndarray, moved_at: int, later_s: float = 0.04) -> np.ndarray:
    """The reply's echo, `later_s` later from sample `moved_at` on (an output that ran dry)."""
    raw = small_room(reply)
    raw[moved_at:] = small_room(reply, delay_s=0.12 + later_s)[moved_at:]
    return raw


def db(signal: np.ndarray) -> float:
    return 10 * float(np.log10(np.mean(np.square(signal, dtype=np.float64)) + 1e-20))


def test_following_finds_where_an_underrun_moved_the_echo(reply) -> None:
    """The echo 40 ms later from 0.6 s before the reply's end on: the fit made before the move
    leaves the words after it at their full level; followed, the step is found where it is,
    and they are gone."""
    from vocal.duplex.echo_free.echo_follow import follow_path
    from vocal.duplex.echo_free.echo_path import EchoPath, best_echo_path, echo_estimate

    end = reply.shape[0] - round(0.6 * RATE)
    moved_at = end - round(0.6 * RATE)
    raw = moved_room(reply, moved_at)
    path = best_echo_path(reply, raw, moved_at)
    assert path is not None and path.removed_db >= 25.0

    def estimate(start: int, stop: int) -> np.ndarray:
        return echo_estimate(reply, path, start, stop)

    steps = follow_path(raw, estimate, moved_at - RATE, raw.shape[0])
    (at, shift), *more = steps.steps
    assert not more and shift == round(0.04 * RATE), steps.steps
    assert abs(at - moved_at) <= 160, at - moved_at
    after = slice(at + 160, end)
    moved = EchoPath(path.lag + shift, path.h, path.removed_db)
    assert db(raw[after]) - db(raw[after] - estimate(after.start, after.stop)) < 6.0
    assert (
        db(raw[after]) - db(raw[after] - echo_estimate(reply, moved, after.start, after.stop))
        >= 20.0
    )


def test_a_person_over_the_echo_is_not_read_as_a_move(reply, answer) -> None:
    """A real answer at the echo's level over the reply's last 0.5 s: no shift explains it, so
    no step is taken there, and the span it covers cannot be vouched for after a glitch."""
    from vocal.duplex.echo_free.echo_follow import WINDOW_S, follow_path
    from vocal.duplex.echo_free.echo_path import best_echo_path, echo_estimate

    end = reply.shape[0] - round(0.6 * RATE)
    began = end - round(0.5 * RATE)
    raw = small_room(reply)
    level = np.sqrt(np.mean(raw[began - RATE : began] ** 2) / np.mean(answer[:RATE] ** 2))
    person = (answer * level)[: raw.shape[0] - began]
    raw[began : began + person.shape[0]] += person
    path = best_echo_path(reply, raw, began)
    assert path is not None

    steps = follow_path(
        raw, lambda a, b: echo_estimate(reply, path, a, b), began - RATE, raw.shape[0]
    )
    assert steps.steps == ()
    window = round(WINDOW_S * RATE)
    over = [r for r in steps.readings if r.start + window > began + window // 2]
    assert over and not any(r.firm for r in over)
    before = began - window
    assert steps.holds_over(began - RATE, before, 20.0)
    assert not steps.holds_over(began - RATE, end, 20.0)


def hand_over(
    reply: np.ndarray, raw: np.ndarray, glitch_at: int | None, ended_at: int | None = None
):
    """`handover_blocks` on taps that heard `raw` while `reply` played (one clock, 512-sample
    blocks), the reply ending at raw sample `ended_at` (default: 0.25 s after its last word,
    as a turn sees it once the output has drained), a glitch noticed at raw sample
    `glitch_at` if given; and the clock's start."""
    from types import SimpleNamespace

    from vocal.duplex.echo_free.onset import OnsetTaps
    from vocal.duplex.handover import handover_blocks

    taps = OnsetTaps(RATE, RATE)
    t0 = 1000.0
    blocks = []
    for i in range(0, raw.shape[0] - 511, 512):
        stamp = t0 + (i + 512) / RATE
        taps.played.add(reply[i : i + 512], stamp)
        taps.raw.add(raw[i : i + 512], stamp + 0.002)
        blocks.append(Block(raw[i : i + 512].copy(), stamp + 0.0025))
    detector = BargeInDetector(lambda _chunk: 0.0, lambda: None, BargeInOptions())
    if glitch_at is not None:
        detector.glitch_at_s.append(t0 + glitch_at / RATE)
    guard = SimpleNamespace(
        detector=detector,
        echo_free_onset=lambda onset_s, after_s=None: taps.rebuild(onset_s, t0, after_s),
    )
    if ended_at is None:
        ended_at = reply.shape[0] - round(0.35 * RATE)
    ended_s = t0 + ended_at / RATE
    recent = [b for b in blocks if b.captured_at_s <= ended_s + 0.1]
    return handover_blocks(guard, recent, ended_s), t0


def moved_by(report: dict) -> list[tuple[float, int]]:
    """The echo's moves a hand-over reports, however it found them: (s before the end, ms
    later than just before), over the last 1.5 s."""
    found = sorted(report.get("moves", []) + report.get("steps", []), key=lambda m: -m[0])
    moves, shift = [], 0.0
    for before_end_s, shift_ms in found:
        if round(shift_ms - shift) and before_end_s <= 1.5:
            moves.append((round(before_end_s, 2), round(shift_ms - shift)))
        shift = shift_ms
    return moves


def test_a_glitch_whose_move_is_followed_still_hands_over(reply, answer) -> None:
    """An underrun 0.6 s before the reply's end (noticed 0.1 s later) moved the echo 40 ms, and
    the answer starts as the reply ends. The hand-over used to be blanked after any glitch (the
    answer lost its first word); now the move is followed, the reply's words are gone from what
    is handed over, and the answer's first sound is in it."""
    end = reply.shape[0] - round(0.6 * RATE)
    moved_at = end - round(0.6 * RATE)
    raw = moved_room(reply, moved_at)
    began = end + round(0.12 * RATE)  # the answer starts as the echo ends
    raw[began:] += answer[: raw.shape[0] - began] * 0.25
    (handed, echo_free, report), t0 = hand_over(reply, raw, moved_at + round(0.1 * RATE))
    assert report["source"] == "raw" and report["glitch"] == "followed", report
    # Followed past the fit, or fitted across it (the fit up to the end holds the move): the
    # echo 40 ms later from 0.85 s before the end on, in either case.
    assert moved_by(report) == [(0.85, 40)], report
    assert handed and echo_free is not None
    first_s = handed[0].captured_at_s - handed[0].samples.shape[0] / RATE
    assert first_s <= t0 + began / RATE, first_s - t0 - began / RATE
    # From the move to the answer the echo-free capture holds no reply (its echo is -15 dBFS).
    heard = [b for b in handed if b.captured_at_s <= t0 + began / RATE]
    reply_left = np.concatenate([echo_free.samples_for(b) for b in heard]) if heard else None
    assert reply_left is None or db(reply_left) < -55.0, reply_left is not None and db(reply_left)


def test_a_move_under_the_answer_blanks_the_hand_over(reply, answer) -> None:
    """The answer over the reply's last 0.5 s, and the echo moving under it (a glitch noticed
    0.2 s before the end): no window there can show where the echo went, and a fit of the path
    before would hand the reply's last words over with the answer. Blanked, as before."""
    end = reply.shape[0] - round(0.6 * RATE)
    moved_at = end - round(0.3 * RATE)
    raw = moved_room(reply, moved_at)
    began = end - round(0.5 * RATE)
    level = np.sqrt(np.mean(raw[began - RATE : began] ** 2) / np.mean(answer[:RATE] ** 2))
    raw[began:] += (answer * level)[: raw.shape[0] - began]
    (handed, echo_free, report), _ = hand_over(reply, raw, end - round(0.2 * RATE))
    assert handed is None and echo_free is None
    assert report["source"] == "blanked" and report["glitch"] == "blanked", report
    # The same turn with the glitch 1.5 s earlier, the echo still: handed over.
    still = small_room(reply)
    still[began:] += (answer * level)[: still.shape[0] - began]
    (handed, _, report), _ = hand_over(reply, still, began - round(1.5 * RATE))
    assert report["source"] == "raw" and report["glitch"] == "followed", report


def test_after_a_barge_in_the_fit_starts_after_the_last_glitch_and_none_may_follow() -> None:
    """A glitch moves the echo path: the fit starts `GLITCH_SETTLE_S` after the last one
    noticed before the onset, and one noticed after the onset rules the raw capture out (it
    left the reply's "forty" and "I also" in two interruptions)."""
    from vocal.duplex.handover import GLITCH_SETTLE_S, fit_after_s, kept_after_barge_in

    blocks = blocks_of([0.1] * 40)
    fit = Rebuilt(blocks, [0.01] * 40)
    fit.usable = True
    detector = BargeInDetector(lambda _chunk: 0.0, lambda: None, BargeInOptions())
    onset_s = blocks[20].captured_at_s
    assert fit_after_s(detector, onset_s) is None
    detector.glitch_at_s.extend([0.1, 0.3])
    assert fit_after_s(detector, onset_s) == pytest.approx(0.3 + GLITCH_SETTLE_S)
    kept, clean, traced_back_s = kept_after_barge_in(detector, onset_s, blocks, fit)
    assert clean and np.allclose(kept[-1].samples, blocks[-1].samples * 0.01)
    assert traced_back_s == 0.0  # the echo alone before the onset: nobody began earlier
    detector.glitch_at_s.append(onset_s + 0.2)
    kept, clean, _ = kept_after_barge_in(detector, onset_s, blocks, fit)
    assert not clean and kept[-1].samples is blocks[-1].samples


def test_a_person_who_began_under_the_echo_is_kept_from_where_the_echo_free_capture_shows() -> None:
    """AEC3's suppressor held "he was not" down (0 dB, 1.5 s into the reply) and the detector
    fired on "an ill disposed" 1.4 s later, past the pre-roll: the echo-free capture shows the
    person from their first word, and the kept audio starts there (less its pre-roll)."""
    from vocal.duplex.handover import NEAR_END_PRE_ROLL_S, kept_after_barge_in

    blocks = blocks_of([0.1] * 80)
    # Echo alone (40 dB removed) to block 30, then a person, a 0.2 s gap in their words
    # (6 blocks) at 44-49, and on.
    left = [0.01] * 30 + [0.7] * 14 + [0.01] * 6 + [0.7] * 30
    fit = Rebuilt(blocks, left)
    fit.usable = True
    detector = BargeInDetector(lambda _chunk: 0.0, lambda: None, BargeInOptions())
    onset_s = blocks[65].captured_at_s  # the detector's onset, 1 s after the person began
    kept, clean, traced_back_s = kept_after_barge_in(detector, onset_s, blocks, fit)
    began_s = blocks[29].captured_at_s  # block 30's start
    assert clean and kept[0].captured_at_s >= began_s - NEAR_END_PRE_ROLL_S - BLOCK_S
    assert kept[0].captured_at_s <= began_s - NEAR_END_PRE_ROLL_S + 2 * BLOCK_S
    pre_roll_s = detector.options.pre_roll_ms / 1000
    assert traced_back_s == pytest.approx(onset_s - pre_roll_s - began_s + NEAR_END_PRE_ROLL_S)
    # A gap longer than a word's (0.3 s) ends the trace: the earlier run is someone else's.
    left = [0.01] * 30 + [0.7] * 10 + [0.01] * 12 + [0.7] * 28
    gapped = Rebuilt(blocks, left)
    gapped.usable = True
    _, _, traced_back_s = kept_after_barge_in(detector, onset_s, blocks, gapped)
    began_s = blocks[51].captured_at_s  # block 52's start
    assert traced_back_s == pytest.approx(onset_s - pre_roll_s - began_s + NEAR_END_PRE_ROLL_S)
    # Where the fit did not hold on the reply before the run (14 dB), nothing is traced back.
    weak = Rebuilt(blocks, [0.2] * 30 + [0.7] * 50)
    weak.usable = True
    assert kept_after_barge_in(detector, onset_s, blocks, weak)[2] == 0.0


def test_a_move_between_the_questions_sentences_is_fitted_across(answer) -> None:
    """ "Turn one. What should I do next?" with the echo 20 samples later from the pause between
    its sentences (an output's latency moving in its first second), answered 0.6 s before its
    last word: every stretch the fit tries holds the move or the answer (14 dB removed, and
    the answer's first word was blanked); the fit on the reply as the output played it (the
    move followed, then fitted across) removes 30 dB and more, and the answer is handed over
    from before its first sound."""
    from harness.sounds import espeak

    question = espeak("Turn one. What should I do next?").mono_samples
    reply = np.concatenate([question, np.zeros(RATE, np.float32)])
    words = np.flatnonzero(np.abs(question) > 0.01)
    last_word = int(words[-1])
    moved_at = round(0.8 * RATE)  # in the pause after "Turn one."
    raw = moved_room(reply, moved_at, later_s=20 / RATE)
    began = last_word + round(0.12 * RATE) - round(0.6 * RATE)  # as heard, through the room
    level = np.sqrt(np.mean(raw[began - RATE // 2 : began] ** 2) / np.mean(answer[:RATE] ** 2))
    person = (answer * level)[: raw.shape[0] - began]
    raw[began : began + person.shape[0]] += person
    ended_at = last_word + round(0.35 * RATE)
    (handed, echo_free, report), t0 = hand_over(reply, raw, None, ended_at)
    assert report["source"] == "raw" and report["echo_removed_db"] >= 30.0, report
    assert handed and echo_free is not None
    first_s = handed[0].captured_at_s - handed[0].samples.shape[0] / RATE
    assert first_s <= t0 + began / RATE, (first_s - t0 - began / RATE, report)
    # The question's words before the answer are gone from what is handed over.
    before = [b for b in handed if b.captured_at_s <= t0 + began / RATE]
    if before:
        left = np.concatenate([b.samples for b in before])  # rebuilt: the echo taken out
        heard = np.concatenate([echo_free.raw_for(b)[1] for b in before])  # type: ignore[index]
        assert db(heard) - db(left) >= 20.0, (db(heard), db(left))
