"""A barge-in heard out over the paused reply: a backchannel lets the reply go on.

With backchannels on (`barge_in_backchannels`), a converse turn pauses its reply when the
barge-in detector fires and `hear_out` listens on, reads the words of a short utterance
(vocal.duplex.handover.short_words) and asks vocal.duplex.bargein.backchannel whether they only
meant "go on"; then the reply resumes and the detector watches again.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import collections
    from collections.abc import Iterator

    from vocal.audio.devices import Block
    from vocal.duplex.bargein.detector import BargeInDetector
    from vocal.duplex.echo_free.onset import OnsetFit
    from vocal.duplex.outcome import TurnParts
    from vocal.floor.turn import Turn

#: A backchannel's length counts from this long before the deciding run's first chunk (Silero
#: is sure of a word 1-2 chunks after it starts).
JUDGE_ONSET_LEAD_S = 0.1


def hear_out(
    parts: TurnParts,
    turn: Turn,
    detector: BargeInDetector,
    blocks: Iterator[Block],
    recent: collections.deque[Block],
    fit: OnsetFit,
) -> bool:
    """With the reply paused by a barge-in: listen on until the speech is too long for a
    backchannel or has ended, and read its words (vocal.duplex.bargein.backchannel). True if it
    was a backchannel and the reply has resumed (the detector watches again)."""
    from vocal.duplex.bargein.backchannel import (
        BackchannelJudge,
        BackchannelOptions,
        Verdict,
        is_backchannel,
        reply_left_s,
    )
    from vocal.duplex.handover import short_words

    options = BackchannelOptions()
    speech, player, fired = parts.speech, parts.player, detector.fired
    assert speech is not None and player is not None and fired is not None
    assert parts.onset_s is not None
    left_s = reply_left_s(
        speech.result.sentences,
        player.played_frames,
        player.sample_rate,
        all_synthesized=speech.all_synthesized,
    )
    asks = parts.text.rstrip().rstrip("\"')*_ ").endswith("?")
    if asks and left_s is not None and left_s < options.answer_within_ms / 1000:
        return False  # the reply's closing question is being answered
    # The detector's Silero follows on: it is recurrent and has heard the stream so far.
    judge = BackchannelJudge(
        detector.speech_probability,
        parts.onset_s,
        options,
        counted_from_s=max(parts.onset_s, fired.speech_start_s - JUDGE_ONSET_LEAD_S),
    )
    delay_s = detector.delay_frames / detector.options.sample_rate
    paused_at_s = time.monotonic()
    for block in blocks:
        recent.append(block)
        if turn.stopped.is_set() or parts.skip_requested.is_set():
            return False
        if judge.feed(block.samples, block.captured_at_s - delay_s) is not None:
            break
        if time.monotonic() - paused_at_s > options.max_pause_ms / 1000:
            return False
    if judge.verdict is not Verdict.ENDED:
        return False
    # From just before the deciding run: the traced-back onset can hold the reply's residual
    # echo ("he's in the dark" for "uh huh" over "in the docs folder").
    text = short_words(parts.loader, recent, judge.counted_from_s, judge.speech_end_s, delay_s, fit)
    if text is None or not is_backchannel(text, max_words=options.max_words):
        return False
    first_audio = speech.result.first_audio_at_s
    parts.backchannels.append(
        {
            "text": text.strip(),
            # From the reply's first sample to the person's onset, as `interrupted_at_s`.
            "at_s": None if first_audio is None else round(judge.onset_s - first_audio, 3),
            "speech_s": round(judge.speech_end_s - judge.onset_s, 3),
            "paused_s": round(time.monotonic() - fired.at_s, 3),
        }
    )
    parts.onset_s = None
    parts.clock.pop("barge_in", None)
    detector.rearm()
    # Not the control socket's 2.5 s hold (`resume_inhibit_ms`, measured after 2 s pauses):
    # this pause is under a second, and "yeah... no, wait" must still be heard.
    detector.hold(options.resume_hold_ms / 1000)
    speech.resume()
    return True


__all__ = ["JUDGE_ONSET_LEAD_S", "hear_out"]
