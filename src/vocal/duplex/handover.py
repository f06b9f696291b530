"""What a converse turn hands its listener of the time its reply played.

Three moments, one tool: the raw microphone minus the reply's fitted echo
(`vocal.duplex.echo_free.onset.EchoFreeOnset`), which keeps the words AEC3's suppressor clips as the
reply stops, where the fit removes enough echo:

- after a barge-in (`kept_after_barge_in`): the blocks from the pre-roll before the person's
  onset on, or from where the echo-free capture shows they began, if that was earlier;
- after the reply ended by itself (`handover_blocks`): its last `HANDOVER_LOOKBACK_S`, so an
  answer begun as the question ended keeps its first words (the room's tail is otherwise
  blanked), with the echo followed where a glitch moved it (vocal.duplex.echo_free.echo_follow);
- over a paused reply (`short_words`): the words of a short utterance, to tell a backchannel
  (vocal.duplex.bargein.backchannel).
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vocal.audio.devices import Block
    from vocal.duplex.bargein.detector import BargeInDetector
    from vocal.duplex.echo_free.onset import EchoFreeOnset, OnsetFit
    from vocal.duplex.options import HandoverReport
    from vocal.duplex.outcome import TurnParts
    from vocal.duplex.wiring import EchoGuard
    from vocal.hearing.stt_loading import SttLoader

#: The capture's sample rate (the Microphone's, vocal.duplex.echo_free.onset's).
SAMPLE_RATE = 16_000

#: When the reply ends by itself, this much capture before its end is heard again from the raw
#: microphone minus the fitted echo (an answer begun 0.3-0.6 s before the question's end is
#: common: issue 19), where the fit removes at least `HANDOVER_MIN_REMOVED_DB`; a fit that
#: good leaves the reply ~-50 dBFS at the microphone, under what the endpointer hears.
HANDOVER_LOOKBACK_S = 1.0
HANDOVER_MIN_REMOVED_DB = 30.0
#: A glitch (an output underflow, an input overflow, a late callback) may move the echo path
#: under the fit, which then leaves the reply's last words in the "echo-free" capture; but
#: blanking after every glitch lost answers' first words on a busy machine (issue 36). So the
#: echo is followed through the stretch (vocal.duplex.echo_free.echo_follow, from
#: `FOLLOW_LEAD_S` before it), and after a glitch only what the following cannot vouch for
#: (windows within `FOLLOWED_WORDS_DB` of its loudest) is blanked, over the span the glitch
#: may have moved: from `GLITCH_NOTICED_S` before it was noticed (a glitch is noticed at the
#: next block, late by its backlog) to when it was, each one echo delay later in the capture.
HANDOVER_GLITCH_BEFORE_S = 1.5
FOLLOW_LEAD_S = 0.5
FOLLOWED_WORDS_DB = 20.0
GLITCH_NOTICED_S = 1.0
#: After a barge-in the same holds: the fit starts this long after the last glitch noticed
#: before the person's onset (the echo of what played before it still arrives), and one
#: noticed after the onset rules the raw capture out (docs/design.md has what was seen).
GLITCH_SETTLE_S = 0.3
#: Blocks (3 in a row) whose echo-free level is within this of the raw microphone's hold more
#: than the reply's echo, if above the floor (dBFS of mean square); kept from this long before.
NEAR_END_ECHO_DB = 8.0
NEAR_END_FLOOR_DBFS = -60.0
NEAR_END_BLOCKS = 3
NEAR_END_PRE_ROLL_S = 0.3
NEAR_END_RATIO = 10 ** (NEAR_END_ECHO_DB / 10)
#: What the fit must remove from the reply alone before such a run for it to count, leaving
#: out the `NEAR_END_RAMP_BLOCKS` just before it: a person's first sound rises over them, under
#: 8 dB of the raw level yet far over the fit's residual (a soft "seven" 12 dB under it made a
#: 25 dB fit read 18 dB, and the answer was not heard: tests/test_handover.py).
NEAR_END_FIT_DB = 20.0
NEAR_END_FIT_RATIO = 10 ** (NEAR_END_FIT_DB / 10)
NEAR_END_RAMP_BLOCKS = 2
#: After a barge-in, the person's start is traced back this far before the detector's onset,
#: through near-end runs this far apart at most (a word's gap, a breath).
NEAR_END_LOOKBACK_S = 2.0
NEAR_END_GAP_S = 0.3
#: Quiet chunks allowed inside speech traced back to its onset (a word's gap, a stop).
ONSET_GAP_CHUNKS = 3
#: Audio kept around a short utterance over the paused reply when it is transcribed to tell a
#: backchannel: before its onset, after its end.
JUDGED_LEAD_S, JUDGED_TAIL_S = 0.1, 0.15
#: How long a backchannel's transcription waits for the recognizer to finish loading, and
#: for the echo fit (0.15-0.6 s from the barge-in; the reply is paused meanwhile).
JUDGE_STT_WAIT_S = 2.0
JUDGE_FIT_WAIT_S = 0.3


def rebuilt(blocks: Iterable[Block], echo_free: EchoFreeOnset) -> list[Block] | None:
    """`blocks` with their samples rebuilt from the raw capture minus the fitted echo; None if
    the raw tap no longer holds one of them (then all should come from the canceller)."""
    out = []
    for block in blocks:
        samples = echo_free.samples_for(block)
        if samples is None:
            return None
        out.append(dataclasses.replace(block, samples=samples))
    return out


def fit_after_s(detector: BargeInDetector, onset_s: float) -> float | None:
    """Where the echo fit for a barge-in at `onset_s` may start: `GLITCH_SETTLE_S` after the
    last glitch noticed before it (None: none was)."""
    before = [at_s for at_s in detector.glitch_at_s if at_s < onset_s]
    return before[-1] + GLITCH_SETTLE_S if before else None


def kept_after_barge_in(
    detector: BargeInDetector,
    onset_s: float,
    recent: Iterable[Block],
    echo_free: EchoFreeOnset | None,
) -> tuple[list[Block], bool, float]:
    """The blocks from `pre_roll_ms` before the person's onset to the last one read, rebuilt
    where the fit is usable and no glitch came after the onset; whether they were; and how
    much earlier than the pre-roll they start (s), where the echo-free capture shows the
    person began before it (`near_end_onset_s`)."""
    o = detector.options
    delay_s = detector.delay_frames / o.sample_rate
    recent = list(recent)
    pre_roll_s = onset_s - o.pre_roll_ms / 1000

    def since(from_s: float) -> list[Block]:
        return [b for b in recent if _block_start_s(b, delay_s) >= from_s - o.chunk_s]

    kept = since(pre_roll_s)
    if echo_free is None or not echo_free.usable or glitch_after(detector, onset_s):
        return kept, False, 0.0
    looked = since(onset_s - NEAR_END_LOOKBACK_S - NEAR_END_PRE_ROLL_S)
    clean = rebuilt(looked, echo_free)
    if clean is None:
        return kept, False, 0.0
    began_s = near_end_onset_s(looked, clean, echo_free, onset_s, delay_s)
    from_s = pre_roll_s if began_s is None else min(pre_roll_s, began_s - NEAR_END_PRE_ROLL_S)
    clean = [
        c
        for b, c in zip(looked, clean, strict=True)
        if _block_start_s(b, delay_s) >= from_s - o.chunk_s
    ]
    return clean, True, pre_roll_s - from_s


def glitch_after(detector: BargeInDetector, since_s: float) -> bool:
    """Whether a glitch was noticed at or after `since_s` (a barge-in's onset, the start of
    the hand-over's window): the echo path moved under the fit (see `GLITCH_SETTLE_S`)."""
    return any(at_s >= since_s for at_s in detector.glitch_at_s)


def trailing_onset_s(detector: BargeInDetector | None, ended_s: float) -> float | None:
    """Where speech the detector saw in the reply's last `HANDOVER_LOOKBACK_S` began, if any
    (a chunk at or above its threshold, traced back through the chunks at or above
    `ONSET_PROBABILITY` before it, gaps of up to `ONSET_GAP_CHUNKS` included): the person
    began answering before the question ended, and must not be in the echo fit's stretch."""
    from vocal.duplex.bargein.detector import ONSET_PROBABILITY

    if detector is None:
        return None
    trace, threshold = detector.trace, detector.options.threshold
    last = next(
        (
            i
            for i in range(len(trace) - 1, -1, -1)
            if trace[i][0] > ended_s - HANDOVER_LOOKBACK_S and trace[i][1] >= threshold
        ),
        None,
    )
    if last is None:
        return None
    start, gap = last, 0
    for i in range(last - 1, -1, -1):
        if trace[i][1] >= ONSET_PROBABILITY:
            start, gap = i, 0
        else:
            gap += 1
            if gap > ONSET_GAP_CHUNKS:
                break
    return trace[start][0] - detector.options.chunk_s


#: A block, its raw and echo-free power, and whether it holds a near end (`_near_end_blocks`).
_Powers = tuple["Block", float, float, bool]


def _near_end_blocks(
    blocks: list[Block], clean: list[Block], echo_free: EchoFreeOnset
) -> list[_Powers]:
    """Each block with its raw and echo-free power (mean square; raw 0 where the tap no longer
    holds it) and whether it holds more than the reply's fitted echo: an echo-free level above
    `NEAR_END_FLOOR_DBFS` and within `NEAR_END_ECHO_DB` of the raw microphone's."""
    import numpy as np

    floor = 10 ** (NEAR_END_FLOOR_DBFS / 10)
    out = []
    for block, cleaned in zip(blocks, clean, strict=True):
        found = echo_free.raw_for(block)
        raw_power = float(np.mean(np.square(found[1], dtype=np.float64))) if found else 0.0
        left_power = float(np.mean(np.square(cleaned.samples, dtype=np.float64)))
        near = (
            found is not None and left_power >= floor and left_power * NEAR_END_RATIO >= raw_power
        )
        out.append((block, raw_power, left_power, near))
    return out


def _fit_held(powers: Iterable[_Powers]) -> bool:
    """Whether the fit removed `NEAR_END_FIT_DB` from the reply alone over these blocks (at
    least `NEAR_END_BLOCKS` above the floor that hold no near end)."""
    floor = 10 ** (NEAR_END_FLOOR_DBFS / 10)
    echo = [(raw, left) for _b, raw, left, near in powers if not near and raw >= floor]
    return (
        len(echo) >= NEAR_END_BLOCKS
        and sum(r for r, _ in echo) >= sum(left for _, left in echo) * NEAR_END_FIT_RATIO
    )


def _near_end_runs(powers: list[_Powers]) -> list[tuple[int, int]]:
    """(first, last) index of each run of at least `NEAR_END_BLOCKS` near-end blocks."""
    runs, at = [], 0
    for near, group in itertools.groupby(p[3] for p in powers):
        count = len(list(group))
        if near and count >= NEAR_END_BLOCKS:
            runs.append((at, at + count - 1))
        at += count
    return runs


def _block_start_s(block: Block, delay_s: float = 0.0) -> float:
    return block.captured_at_s - delay_s - block.samples.shape[0] / SAMPLE_RATE


def first_near_end_s(
    blocks: list[Block], clean: list[Block], echo_free: EchoFreeOnset, from_s: float = -math.inf
) -> float | None:
    """The start (at or after `from_s`) of the first of `NEAR_END_BLOCKS` blocks in a row whose
    echo-free signal (`clean`, block for block) keeps more than `NEAR_END_ECHO_DB` below the
    raw microphone's level, above `NEAR_END_FLOOR_DBFS`: someone as loud as the echo or nearly
    (a well fitted echo alone leaves 30 dB and more; a person 6 dB under the echo leaves
    ~7 dB). Only where the fit held on the reply alone before the run: at least
    `NEAR_END_BLOCKS` blocks above the floor that are not near, losing `NEAR_END_FIT_DB`
    together; else the run may be the reply's own words, where the echo path moved after the
    fit's stretch."""
    powers = _near_end_blocks(blocks, clean, echo_free)
    for first, _last in _near_end_runs(powers):
        start_s = _block_start_s(powers[first][0])
        if start_s >= from_s and _fit_held(powers[: max(0, first - NEAR_END_RAMP_BLOCKS)]):
            return start_s
    return None


def near_end_onset_s(
    blocks: list[Block],
    clean: list[Block],
    echo_free: EchoFreeOnset,
    onset_s: float,
    delay_s: float,
) -> float | None:
    """Where the person the detector heard at `onset_s` began, traced back through the
    echo-free capture (`clean`, block for block; the blocks are `delay_s` ahead of the
    detector's clock): the first of the runs of `NEAR_END_BLOCKS` near-end blocks (see
    `first_near_end_s`) that reach the onset with gaps of at most `NEAR_END_GAP_S`, no more
    than `NEAR_END_LOOKBACK_S` before it; None if none starts before the onset, or the fit
    did not hold on the reply alone before the first.

    A person starting as loud as the echo or under it is held down by AEC3's suppressor: Silero
    on the canceller's output heard nothing of "he was not" (0 dB, 1.5 s into the reply) and
    fired 1.4 s later on "an ill disposed...", past the pre-roll."""
    powers = [
        p
        for p in _near_end_blocks(blocks, clean, echo_free)
        if _block_start_s(p[0], delay_s) >= onset_s - NEAR_END_LOOKBACK_S
    ]
    reached_s, reached = onset_s, None
    for first, last in reversed(_near_end_runs(powers)):
        start_s = _block_start_s(powers[first][0], delay_s)
        end_s = powers[last][0].captured_at_s - delay_s
        if start_s >= reached_s:
            continue  # after the onset: the words the pre-roll keeps anyway
        if end_s < reached_s - NEAR_END_GAP_S:
            break
        reached_s, reached = start_s, first
    if reached is None or not _fit_held(powers[: max(0, reached - NEAR_END_RAMP_BLOCKS)]):
        return None
    return reached_s


def kept_blocks(
    parts: TurnParts,
    detector: BargeInDetector,
    recent: Iterable[Block],
    fit: OnsetFit,
    learn: Callable[[float | None, float | None], None],
) -> list[Block]:
    """After a barge-in: the blocks from the pre-roll before the person's onset, rebuilt from
    the raw capture where the echo fit is good (`kept_after_barge_in`), with what the fit
    found noted in `parts` and its delay handed to `learn` (removed dB, delay ms)."""
    assert parts.onset_s is not None  # set when the detector fired
    echo_free = fit.result()
    parts.onset_fit_s = fit.fit_s
    parts.onset_removed_db = echo_free.removed_db if echo_free is not None else None
    if echo_free is not None:
        learn(echo_free.removed_db, echo_free.delay_ms)
    kept, clean, parts.onset_traced_back_s = kept_after_barge_in(
        detector, parts.onset_s, recent, echo_free
    )
    parts.echo_free = echo_free if clean else None
    parts.onset_glitch = glitch_after(detector, parts.onset_s)
    return kept


def handover_blocks(
    guard: EchoGuard, recent: Iterable[Block], ended_s: float
) -> tuple[list[Block] | None, EchoFreeOnset | None, HandoverReport]:
    """The reply ended by itself at `ended_s`: the capture from its end, or from just before
    someone was heard over its last `HANDOVER_LOOKBACK_S`, rebuilt, with the fit to rebuild
    what follows, and what `tail_audio` reports; (None, None, report) where no fit removes
    `HANDOVER_MIN_REMOVED_DB`, or a glitch may have moved the echo where it cannot be followed
    (blank as before). Speech the detector saw begin before the end is kept out of the fit's
    stretch (`_handover_fit`)."""
    started_s = time.monotonic()
    detector = guard.detector
    onset_s = trailing_onset_s(detector, ended_s)
    report: HandoverReport = {
        "source": "blanked",
        "speech_before_end_s": None if onset_s is None else round(ended_s - onset_s, 3),
    }
    echo_free = _handover_fit(guard, ended_s, onset_s, report)
    report["echo_removed_db"] = echo_free.removed_db if echo_free is not None else None
    report["delay_ms"] = echo_free.delay_ms if echo_free is not None else None
    since_s = ended_s - HANDOVER_LOOKBACK_S - HANDOVER_GLITCH_BEFORE_S
    glitches = [] if detector is None else [t for t in detector.glitch_at_s if t >= since_s]
    followed = _followed(echo_free, ended_s, glitches, report)
    report["fit_s"] = round(time.monotonic() - started_s, 3)
    if followed is None:
        return None, None, report
    kept = [
        b for b in recent if b.captured_at_s > ended_s - HANDOVER_LOOKBACK_S - NEAR_END_PRE_ROLL_S
    ]
    clean = rebuilt(kept, followed)
    if clean is None:
        return None, None, report
    # Only from where someone other than the reply is heard: the reply's own last words, a
    # fit's residual 30-40 dB down, were still transcribed once in four echo-only turns, with
    # a 15 dB, one-block test twice in 20 turns ("least notes" for "release notes"), and with
    # the 8 dB, three-block test once in ~150 ("lease notes", after a backchannel's resume,
    # where the fit failed on the reply's last second) until the fit had to hold before it.
    near_s = first_near_end_s(kept, clean, followed, from_s=ended_s - HANDOVER_LOOKBACK_S)
    report["near_end_before_end_s"] = None if near_s is None else round(ended_s - near_s, 3)
    from_s = ended_s if near_s is None else near_s - NEAR_END_PRE_ROLL_S
    report["source"] = "raw"
    report["echo_removed_db"], report["delay_ms"] = followed.removed_db, followed.delay_ms
    return [b for b in clean if b.captured_at_s > from_s], followed, report


def _handover_fit(
    guard: EchoGuard, ended_s: float, onset_s: float | None, report: HandoverReport
) -> EchoFreeOnset | None:
    """The reply's echo fitted up to its end, or up to `onset_s` (speech the detector saw
    begin before the end), whichever removes more where the latter falls short; fitted again
    across a move of the echo where neither removes `HANDOVER_MIN_REMOVED_DB`. Which one, and
    the moves fitted across, go into `report`."""
    fitted_to_s = ended_s if onset_s is None else min(onset_s, ended_s)
    echo_free = guard.echo_free_onset(fitted_to_s)
    report["fit"] = "to_end" if onset_s is None else "to_onset"
    if fitted_to_s < ended_s and (
        echo_free is None or echo_free.removed_db < HANDOVER_MIN_REMOVED_DB
    ):
        # The reply's residual echo, which Silero can take for speech, can cut the stretch
        # short of the reply a short question needs (fits of 3-16 dB); a person really
        # speaking inside the whole reply's stretch fails this fit too.
        whole = guard.echo_free_onset(ended_s)
        if whole is not None and (echo_free is None or whole.removed_db > echo_free.removed_db):
            echo_free, fitted_to_s, report["fit"] = whole, ended_s, "to_end"
    if echo_free is not None and echo_free.removed_db < HANDOVER_MIN_REMOVED_DB:
        # The stretch may hold a move of the echo: fit again across it (`refitted`).
        refitted = echo_free.refitted(fitted_to_s)
        if refitted is not None and refitted.removed_db > echo_free.removed_db:
            echo_free, report["fit"] = refitted, "across_moves"
            report["moves"] = _before_end(refitted.moves, refitted.index_at(ended_s))
    return echo_free


def _before_end(steps: Iterable[tuple[int, int]], end: int) -> list[list[float]]:
    """Moves of the echo as reported: (s before the end, ms later than the fit's delay)."""
    return [
        [round((end - at) / SAMPLE_RATE, 2), round(1000 * shift / SAMPLE_RATE, 1)]
        for at, shift in steps
    ]


def _followed(
    echo_free: EchoFreeOnset | None, ended_s: float, glitches: list[float], report: HandoverReport
) -> EchoFreeOnset | None:
    """`echo_free` followed through the hand-over's stretch (vocal.duplex.echo_free.echo_follow), or
    None where its fit removes less than `HANDOVER_MIN_REMOVED_DB`, or `glitches` (times
    noticed) may have moved the echo where the following cannot vouch for it (see
    `HANDOVER_GLITCH_BEFORE_S`); what it found goes into `report`."""
    if echo_free is None or echo_free.removed_db < HANDOVER_MIN_REMOVED_DB:
        return None
    stretch_s = ended_s - HANDOVER_LOOKBACK_S - NEAR_END_PRE_ROLL_S
    steps = echo_free.follow(echo_free.index_at(stretch_s - FOLLOW_LEAD_S))
    report["steps"] = _before_end(steps.steps, echo_free.index_at(ended_s))
    if glitches:
        # Where the glitches may have moved the echo, within what is handed over.
        delay = echo_free.path.delay_samples
        earliest = max(
            echo_free.index_at(glitches[0] - GLITCH_NOTICED_S) + delay,
            echo_free.index_at(stretch_s),
        )
        latest = echo_free.index_at(glitches[-1]) + delay
        held = steps.holds_over(earliest, latest, FOLLOWED_WORDS_DB)
        report["glitch"] = "followed" if held else "blanked"
        if not held:
            return None
    return echo_free.followed(steps)


def short_words(
    loader: SttLoader | None,
    recent: Iterable[Block],
    from_s: float,
    to_s: float,
    delay_s: float,
    fit: OnsetFit,
) -> str | None:
    """The words captured between `from_s` and `to_s` (capture times of the cleaned stream,
    `delay_s` late), from the raw capture minus the reply's echo when the fit is ready and
    usable, else the canceller's output; None when the recognizer cannot say.

    A remote recognizer is not asked (None: the barge-in stops the reply, as with
    `barge_in_backchannels` off): the reply is paused while this waits, and a server's round
    trip, or its deadline when it hangs, would hold the pause far past the second a
    backchannel is given; it is also a request outside the once per turn of vocal.hearing.early.
    """
    import numpy as np

    from vocal.audio.wav import Audio
    from vocal.stt import is_remote

    if loader is None or not loader.wait(JUDGE_STT_WAIT_S):
        return None
    engine = loader.ready_engine()
    if engine is None or is_remote(engine):
        return None
    from_s, to_s = from_s - JUDGED_LEAD_S, to_s + JUDGED_TAIL_S
    # The fit (started when the detector fired) is usually done by now; a little wait for it
    # is worth it: the raw capture minus the echo has no reply in it and keeps the "s" of
    # "stop" that AEC3's suppressor clips.
    echo_free = fit.result(JUDGE_FIT_WAIT_S)
    pieces = []
    for block in recent:
        end_s = block.captured_at_s - delay_s
        if end_s <= from_s or end_s - block.samples.shape[0] / SAMPLE_RATE >= to_s:
            continue
        clean = echo_free.samples_for(block) if echo_free and echo_free.usable else None
        pieces.append(block.samples if clean is None else clean)
    if not pieces:
        return ""
    try:
        return engine.transcribe(Audio(np.concatenate(pieces), SAMPLE_RATE)).text
    except Exception:  # the listen turn reports the engine's failure, if it is one
        return None


__all__ = [
    "HANDOVER_LOOKBACK_S",
    "HANDOVER_MIN_REMOVED_DB",
    "handover_blocks",
    "kept_after_barge_in",
    "rebuilt",
    "short_words",
]
