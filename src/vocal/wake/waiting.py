"""Waiting for the phrase: blocks from a microphone or a WAV go to a detector until it hears
the phrase while vocal is neither speaking nor muted, the time runs out, or the input ends.

Only the detector and the gate see the audio here, and the last seconds are kept
(`RecentAudio`) for the request after the phrase: nothing grows while the wait lasts, however
long. Time is counted in samples (the stream's clock), so a WAV given with `--input` times out
where the same sound from a microphone would.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vocal.audio.devices import Block
    from vocal.wake.detection import Detection, PhraseDetector
    from vocal.wake.gate import WakeGate
    from vocal.wake.recent import RecentAudio

#: Why a wait ended.
PHRASE = "phrase"
TIMEOUT = "timeout"
END_OF_INPUT = "end_of_input"


@dataclass
class Waited:
    """How a wait ended.

    Attributes:
        end_reason: "phrase", "timeout" or "end_of_input".
        detection: the phrase heard (None unless "phrase").
        frames: samples of the stream taken so far.
        woke_at: `time.monotonic()` when the block the phrase was heard in was captured.
        ignored: each phrase heard while vocal was busy: stream seconds, detector, score, why.
    """

    end_reason: str
    detection: Detection | None = None
    frames: int = 0
    woke_at: float | None = None
    ignored: list[dict[str, object]] = field(default_factory=list)


def wait_for_phrase(
    blocks: Iterator[Block],
    detector: PhraseDetector,
    *,
    gate: WakeGate,
    recent: RecentAudio,
    lookback_s: float,
    timeout_s: float | None = None,
    sample_rate: int = 16_000,
    on_ignored: Callable[[dict[str, object]], object] | None = None,
) -> Waited:
    """Feed `blocks` to `detector` until it hears the phrase and `gate` lets it count.

    Args:
        blocks: the source's blocks; iteration stops right after the one the phrase was
            heard in, so the caller reads on from the next.
        recent: keeps what was fed (the request after the phrase goes back into it).
        lookback_s: where a phrase began, for the gate, when the detector does not say:
            this long before it fired.
        timeout_s: give up after this much of the stream (None: never).
        on_ignored: told of each phrase the gate ignored (the command says it on stderr).
    """
    waited = Waited(TIMEOUT)
    limit = None if timeout_s is None else round(timeout_s * sample_rate)

    def counts(detection: Detection, captured_at_s: float) -> bool:
        """Whether `detection` wakes: the gate lets it, else it is noted as ignored."""
        begun = detection.start_frame
        if begun is None:
            begun = detection.end_frame - round(lookback_s * sample_rate)
        reason = gate.blocked(captured_at_s - (waited.frames - begun) / sample_rate)
        if reason is None:
            waited.end_reason, waited.detection = PHRASE, detection
            waited.woke_at = captured_at_s
            return True
        ignored = {
            "at_s": round(detection.end_frame / sample_rate, 3),
            "detector": detection.detector,
            "score": detection.score,
            "reason": reason,
        }
        waited.ignored.append(ignored)
        if on_ignored is not None:
            on_ignored(ignored)
        return False

    captured_at_s = time.monotonic()
    for block in blocks:
        recent.add(block.samples)
        waited.frames += block.samples.shape[0]
        captured_at_s = block.captured_at_s
        gate.poll()
        detection = detector.feed(block.samples)
        if detection is not None and counts(detection, captured_at_s):
            return waited
        if limit is not None and waited.frames >= limit:
            return waited
    detection = detector.finish()
    if detection is None or not counts(detection, captured_at_s):
        waited.end_reason = END_OF_INPUT
    return waited


__all__ = ["END_OF_INPUT", "PHRASE", "TIMEOUT", "Waited", "wait_for_phrase"]
