"""Where speech goes (a `Player` on the sound device, or a `WavSink` for `--output FILE`) and
where each sentence starts in it.

Boundaries: every played sentence records the frame of the output's reference buffer where its
first sample went out (`SentenceRecord.start_frame`), measured in the audio callback by
`FrameTracker`, so history, skip and barge-in can line up text, reference and microphone exactly.
"""

from __future__ import annotations

import collections
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import numpy as np


# -- the output and its boundaries -------------------------------------------------------------
def _consumed_frames(player: Any) -> int:
    """Frames of queued audio the player has sent to the device (not counting silence)."""
    return int(player.consumed_frames)


class FrameTracker:
    """Maps positions in an output's queue to frames of its reference buffer.

    Runs in the audio callback as the Player's `on_block` hook (after the block was written to
    the reference): a mark at queue frame q resolves to the reference frame where that sample
    went out, and to the time of that callback. Allocation-free apart from the resolved entries;
    no locks (deque appends and pops are atomic).
    """

    def __init__(self, chained: Callable[[np.ndarray], None] | None = None) -> None:
        self.player: Any = None
        self._chained = chained
        self._marks: collections.deque[tuple[object, int]] = collections.deque()
        self.resolved: dict[object, tuple[int, float]] = {}
        self._last_consumed = 0

    def mark(self, key: object, queue_frame: int) -> None:
        """Resolve `key` when the sample at `queue_frame` of the queue is played (again, for a
        key marked before: a sentence queued anew after a skip)."""
        self.resolved.pop(key, None)
        self._marks.append((key, queue_frame))

    def forget(self) -> None:
        """Drop unresolved marks (their audio was flushed) and resynchronize with the player."""
        self._marks.clear()
        if self.player is not None:
            self._last_consumed = _consumed_frames(self.player)

    def on_block(self, block: np.ndarray) -> None:
        player = self.player
        if player is not None:
            consumed = _consumed_frames(player)
            if consumed > self._last_consumed and self._marks:
                block_start = player.reference.total_frames - block.shape[0]
                now = time.monotonic()
                while self._marks and self._marks[0][1] < consumed:
                    key, queue_frame = self._marks.popleft()
                    offset = max(0, queue_frame - self._last_consumed)
                    self.resolved[key] = (block_start + offset, now)
            self._last_consumed = consumed
        if self._chained is not None:
            self._chained(block)


def open_speech_output(
    sample_rate: int,
    *,
    output: str | Path | None = None,
    device: str | int | None = None,
    volume: float = 1.0,
    on_block: Callable[[np.ndarray], None] | None = None,
) -> Any:
    """An opened output for `Speech`: a WAV file (`output`) or a Player with a FrameTracker.

    `on_block` (AEC's reverse stream in `converse`) still sees every block the Player plays.
    """
    from vocal.audio.file_devices import WavSink
    from vocal.audio.player import Player

    if output is not None:
        return WavSink(output, sample_rate, volume=volume).open()
    tracker = FrameTracker(on_block)
    player = Player(sample_rate, device=device, volume=volume, on_block=tracker.on_block)
    tracker.player = player
    player.frame_tracker = tracker
    return player.open()


def flush_output(output: Any, *, resume: bool = True) -> int:
    """Drop what the output has queued but not played, keeping its stream (and reference)
    running; returns the frames dropped. With `resume=False` a Player is left paused, so the
    caller can queue new audio before it plays on (a finishing Player would otherwise end).
    """
    if not hasattr(output, "flush"):  # a WavSink: everything is "played" at once
        return 0
    was_paused = output.paused
    output.pause()
    dropped = int(output.flush())  # the dropped frames count as consumed (Player.flush)
    if resume and not was_paused:
        output.resume()
    return dropped


__all__ = ["FrameTracker", "flush_output", "open_speech_output"]
