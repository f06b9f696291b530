"""What a converse turn hands its listener when the reply ends by itself (vocal.duplex.handoff,
issue 19's hand-over): where someone is first heard over the reply's last second, and where
speech the detector saw before the end began. The fit itself is tested on real speech in
tests/test_onset.py, the whole hand-over on real streams in tests/test_converse.py."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from vocal.audio.devices import Block
from vocal.duplex.bargein import BargeInDetector, BargeInOptions
from vocal.duplex.handoff import first_near_end_s, trailing_onset_s

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
    left = [0.01] * 3 + [0.7] * 3 + [0.01] + [0.7] * 3
    assert Rebuilt(blocks, left).near_end_s(blocks) == pytest.approx(3 * BLOCK_S)
    later = Rebuilt(blocks, left).near_end_s(blocks, from_s=5 * BLOCK_S)
    assert later == pytest.approx(7 * BLOCK_S)


def test_a_glitch_near_the_end_blanks_the_hand_over() -> None:
    """An underflow moves the echo path under the fit: a fit that still removes 32 dB over
    the stretch left "in the Docs folder." for a near-end run once. With a glitch in or just
    before the stretch, nothing from before the end is handed over (the tail is blanked)."""
    from types import SimpleNamespace

    from vocal.duplex.handoff import HANDOVER_LOOKBACK_S, handover_blocks

    levels = [0.1] * 40
    blocks = blocks_of(levels)
    ended_s = blocks[-1].captured_at_s
    fit = Rebuilt(blocks, [0.003] * 30 + [1.0] * 10)  # 50 dB, then the last 10 blocks not
    fit.removed_db, fit.delay_ms = 40.0, 120.0
    detector = BargeInDetector(lambda _chunk: 0.0, lambda: None, BargeInOptions())
    guard = SimpleNamespace(detector=detector, echo_free_onset=lambda _to_s: fit)

    handed, _, report = handover_blocks(guard, blocks, ended_s)
    assert report["source"] == "raw" and handed, report  # the near-end run, as before
    detector.glitch_at_s.append(ended_s - HANDOVER_LOOKBACK_S - 1.0)
    handed, echo_free, report = handover_blocks(guard, blocks, ended_s)
    assert handed is None and echo_free is None
    assert report["source"] == "blanked" and report["glitch"] is True


def test_after_a_barge_in_the_fit_starts_after_the_last_glitch_and_none_may_follow() -> None:
    """A glitch moves the echo path: the fit starts `GLITCH_SETTLE_S` after the last one
    noticed before the onset, and one noticed after the onset rules the raw capture out (it
    left the reply's "forty" and "I also" in two interruptions)."""
    from vocal.duplex.handoff import GLITCH_SETTLE_S, fit_after_s, kept_after_barge_in

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
    from vocal.duplex.handoff import NEAR_END_PRE_ROLL_S, kept_after_barge_in

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
