"""Backchannels over a paused reply (vocal.duplex.bargein.backchannel, issue 19): the words that
leave the floor to the reply, the judge's two verdicts on a deterministic speech probability, how
much reply is left, and the barge-in detector watching again after a resume. End to end on real
streams: tests/test_converse.py."""

from __future__ import annotations

import numpy as np
import pytest

from vocal.duplex.bargein.backchannel import (
    BackchannelJudge,
    BackchannelOptions,
    Verdict,
    is_backchannel,
    reply_left_s,
    words_of,
)
from vocal.duplex.bargein.detector import BargeInDetector, BargeInOptions
from vocal.speaking.results import SentenceRecord

CHUNK = 512
CHUNK_S = CHUNK / 16_000


@pytest.mark.parametrize(
    "text",
    ["Yeah.", "Okay.", "Right. Right.", "Mm-hmm.", "mm mm mm", "Uh-huh.", "Got it.", "All right.",
     "Yes, I see.", "", "  ", "Thank you.", "Sounds good.", "Mmm.", "M. M.", "Hmm?"],
)  # fmt: skip
def test_acknowledgements_and_hums_leave_the_floor_to_the_reply(text: str) -> None:
    assert is_backchannel(text)


@pytest.mark.parametrize(
    "text",
    ["Stop.", "Wait...", "No.", "No wait.", "Hold on.", "Top.", "Yeah, but the tests.",
     "Okay stop.", "Actually", "Why?", "open the settings file", "Sorry?", "of clubs",
     "Ten.", "and anthem.", "5 5.", "10 of clubs"],
)  # fmt: skip
def test_stop_words_and_any_other_word_take_the_floor(text: str) -> None:
    # "of clubs": a short answer ("ten of clubs") whose first word was clipped must not be
    # taken for a backchannel and lost; "and anthem." (Whisper's hearing of espeak-ng's "mm
    # hmm") stops the reply too: losing an answer is worse than stopping for a hum. Whisper
    # writes numbers as digits: "5 5." ("five five") is two words, not nothing.
    assert not is_backchannel(text)


def test_a_few_other_words_may_be_allowed() -> None:
    assert is_backchannel("and anthem.", max_words=2)
    assert not is_backchannel("stop it", max_words=2)


def test_words_of_drops_punctuation_case_and_hyphens() -> None:
    assert words_of("Mm-hmm. OK, don't!") == ["mm", "hmm", "ok", "dont"]
    assert words_of("5, 5.") == ["5", "5"]


def probability_of(pattern: str):
    """A speech probability that reads the next character of `pattern` per chunk: 's' speech
    (0.9), '.' quiet (0.05), then quiet for ever."""
    values = iter(pattern)

    def probability(_chunk: np.ndarray) -> float:
        return 0.9 if next(values, ".") == "s" else 0.05

    return probability


Judged = tuple[Verdict | None, float, BackchannelJudge]


def judge_on(pattern: str, onset_s: float = 10.0, **options: int) -> Judged:
    """Feed the judge one chunk per character from `onset_s` on; (verdict, its time, judge)."""
    judge = BackchannelJudge(probability_of(pattern), onset_s, BackchannelOptions(**options))
    for i in range(len(pattern) + 40):
        end_s = onset_s + (i + 1) * CHUNK_S
        verdict = judge.feed(np.zeros(CHUNK, np.float32), end_s)
        if verdict is not None:
            return verdict, end_s, judge
    return None, 0.0, judge


def test_speech_that_ends_soon_is_judged_ended_after_the_quiet() -> None:
    # 0.32 s of speech, then quiet: ended once 300 ms of quiet followed its last chunk.
    verdict, at_s, judge = judge_on("s" * 10, end_silence_ms=300, max_speech_ms=1000)
    assert verdict is Verdict.ENDED
    assert judge.speech_end_s == pytest.approx(10.0 + 10 * CHUNK_S)
    assert at_s - judge.speech_end_s == pytest.approx(10 * CHUNK_S)  # the first chunk >= 0.3 s


def test_speech_going_on_past_the_limit_is_long_without_waiting_for_its_end() -> None:
    verdict, at_s, _ = judge_on("s" * 60, max_speech_ms=1000)
    assert verdict is Verdict.LONG
    assert at_s == pytest.approx(10.0 + 32 * CHUNK_S)  # the first speech chunk past 1.0 s


def test_a_short_gap_inside_speech_does_not_end_it() -> None:
    # "mm ... hmm": 0.13 s apart, under the 0.3 s that ends speech.
    verdict, _, judge = judge_on("ssssss....sssss", end_silence_ms=300)
    assert verdict is Verdict.ENDED
    assert judge.speech_end_s == pytest.approx(10.0 + 15 * CHUNK_S)


def test_options_are_checked() -> None:
    with pytest.raises(ValueError):
        BackchannelOptions(end_silence_ms=-1)
    with pytest.raises(ValueError):
        BackchannelOptions(quiet_probability=1.5)


def record(index: int, frames: int, start: int | None, failed: str | None = None):
    r = SentenceRecord(index=index, utterance=0, text="x", frames=frames, start_frame=start)
    r.failed_check = failed
    return r


def test_reply_left_counts_the_playing_and_the_queued_sentences() -> None:
    records = [record(0, 24_000, 0), record(1, 48_000, 24_000), record(2, 12_000, None),
               record(3, 90_000, None, failed="silent")]  # fmt: skip
    # 1.5 s into sentence 1 (of 2 s): 0.5 s of it, and sentence 2 (0.5 s) is queued.
    assert reply_left_s(records, 60_000, 24_000, all_synthesized=True) == pytest.approx(1.0)
    assert reply_left_s(records, 60_000, 24_000, all_synthesized=False) is None


def loud(_chunk: np.ndarray) -> float:
    return 0.9 if float(np.max(_chunk)) > 0.1 else 0.05


def test_the_detector_watches_again_after_a_rearm_and_finds_each_onset() -> None:
    pauses = []
    detector = BargeInDetector(loud, lambda: pauses.append(1), BargeInOptions(consecutive_chunks=3))
    now = 0.0
    for i, c in enumerate("....sss" + "...." + "......sss"):
        now = (i + 1) * CHUNK_S
        level = 0.5 if c == "s" else 0.0
        if detector.feed(np.full(CHUNK, level, np.float32), captured_at_s=now) and i == 6:
            assert detector.onset_s() == pytest.approx(4 * CHUNK_S)
            detector.rearm()
    assert pauses == [1, 1]
    assert detector.fired is not None
    assert detector.onset_s() == pytest.approx(17 * CHUNK_S)


def test_the_length_counts_from_the_deciding_run_not_from_an_early_traced_onset() -> None:
    # The onset traced back 0.6 s (residual echo before the word), the word itself 0.5 s:
    # counted from the onset it would be "long"; from the run, it ends and is judged.
    judge = BackchannelJudge(probability_of("s" * 35), 10.0, BackchannelOptions(),
                             counted_from_s=10.6)  # fmt: skip
    verdicts = {judge.feed(np.zeros(CHUNK, np.float32), 10.0 + (i + 1) * CHUNK_S)
                for i in range(60)}  # fmt: skip
    assert judge.verdict is Verdict.ENDED, verdicts
