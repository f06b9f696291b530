"""Where speech goes (a `Player` on the sound device, or a `WavSink` for `--output FILE`) and
where each sentence starts in it.

Boundaries: every played sentence records the frame of the output's reference buffer where its
first sample went out (`SentenceRecord.start_frame`), measured in the audio callback by
`FrameTracker`, so history, skip and barge-in can line up text, reference and microphone exactly.
"""

from __future__ import annotations

import collections
import contextlib
import threading
import time
import weakref
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from vocal.errors import VocalError

if TYPE_CHECKING:
    import numpy as np

    from vocal.audio.output import BlockObserver, Output
    from vocal.audio.player import Player


# -- the output and its boundaries -------------------------------------------------------------
class FrameTracker:
    """Maps positions in an output's queue to frames of its reference buffer.

    Runs in the audio callback as the Player's first block observer (after the block was
    written to the reference; vocal.audio.output): a mark at queue frame q resolves to the
    reference frame where that sample went out, and to the time of that callback.
    Allocation-free apart from the resolved entries; no locks (deque appends and pops are
    atomic).
    """

    def __init__(self) -> None:
        self.player: Player | None = None
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
            self._last_consumed = self.player.consumed_frames

    def on_block(self, block: np.ndarray) -> None:
        player = self.player
        if player is not None:
            consumed = player.consumed_frames
            if consumed > self._last_consumed and self._marks:
                block_start = player.reference.total_frames - block.shape[0]
                now = time.monotonic()
                while self._marks and self._marks[0][1] < consumed:
                    key, queue_frame = self._marks.popleft()
                    offset = max(0, queue_frame - self._last_consumed)
                    self.resolved[key] = (block_start + offset, now)
            self._last_consumed = consumed


#: The tracker of each Player opened by `open_speech_player` (a WavSink has none: written at
#: once, in order, its boundaries are known when queued).
_TRACKERS: weakref.WeakKeyDictionary[object, FrameTracker] = weakref.WeakKeyDictionary()


def tracker_of(output: Output) -> FrameTracker | None:
    """The `FrameTracker` watching `output`, if it is a Player from `open_speech_player`."""
    return _TRACKERS.get(output)


def open_speech_player(
    sample_rate: int,
    *,
    device: str | int | None = None,
    volume: float = 1.0,
    observers: Sequence[BlockObserver] = (),
) -> Player:
    """An opened Player whose block-observer chain is its `FrameTracker`, then `observers` in
    order (the floor guard, then the echo canceller's reverse stream: vocal.audio.output)."""
    from vocal.audio.player import Player

    tracker = FrameTracker()
    player = Player(sample_rate, device=device, volume=volume, on_block=tracker.on_block)
    for observer in observers:
        player.add_block_observer(observer)
    tracker.player = player
    _TRACKERS[player] = tracker
    return player.open()


def open_speech_output(
    sample_rate: int,
    *,
    output: str | Path | None = None,
    device: str | int | None = None,
    volume: float = 1.0,
    observers: Sequence[BlockObserver] = (),
    write_on_finish: bool = True,
) -> Output:
    """An opened output for `Speech`: a WAV file (`output`; no observers; with
    `write_on_finish=False` written only by its `commit()`, once the caller has judged the
    speech: vocal.speaking.speak), or a Player from `open_speech_player`."""
    from vocal.audio.file_devices import WavSink

    if output is not None:
        return WavSink(output, sample_rate, volume=volume, write_on_finish=write_on_finish).open()
    return open_speech_player(sample_rate, device=device, volume=volume, observers=observers)


def flush_output(output: Output, *, resume: bool = True) -> int:
    """Drop what the output has queued but not played, keeping its stream (and reference)
    running; returns the frames dropped. With `resume=False` a Player is left paused, so the
    caller can queue new audio before it plays on (a finishing Player would otherwise end).
    A WavSink has nothing queued (everything is "played" at once): 0.
    """
    was_paused = output.paused
    output.pause()
    dropped = int(output.flush())  # the dropped frames count as consumed (Player.flush)
    if resume and not was_paused:
        output.resume()
    return dropped


def preload_audio_backend() -> threading.Thread:
    """Start importing sounddevice in a thread, now.

    Its import initializes PortAudio (0.06-0.2 s here; begun earlier still by vocal.launch),
    mostly in C without the GIL and without numpy, so it overlaps the numpy import that
    everything else waits for: measured 0.27 s for both instead of 0.51 s one after the other.
    A failure here is left for the output's opening to report.
    """

    def load() -> None:
        from vocal.audio.devices import sounddevice

        with contextlib.suppress(VocalError):  # no PortAudio: reported when the output opens
            sounddevice()

    thread = threading.Thread(target=load, name="portaudio-preload", daemon=True)
    thread.start()
    return thread


__all__ = [
    "FrameTracker",
    "flush_output",
    "open_speech_output",
    "open_speech_player",
    "preload_audio_backend",
    "tracker_of",
]
