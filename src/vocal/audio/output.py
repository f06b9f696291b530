"""What an output promises (`Output`: a `Player` on the sound device, a `WavSink` for
`--output FILE`), and what a turn's control handler acts on (`PlaybackControl`).

The block-observer chain. A `Player` calls its block observers in its output callback, in the
order they were added, with each block as it goes to the device (after volume, and after the
block was written to the player's reference buffer, so `reference.total_frames` already
counts it). A speech output (vocal.speaking.output.open_speech_player) adds them in this order:

1. the output tracker (`FrameTracker.on_block`): resolves where each sentence started;
2. the floor guard (`Turn.guard_block`): silences the block once the floor is lost. The only
   observer that may change the block, and only by writing zeros into it;
3. the echo canceller's reverse stream (`EchoGuard.render`, converse): after the guard, so it
   sees what is really played.

An observer follows the audio-callback rules (no allocation beyond numpy views, no import, no
lock, no log) and never raises. A `WavSink` has no device, no callback and no observers.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np

#: Called in the output callback with each block played (see the module docstring).
BlockObserver = Callable[["np.ndarray"], None]


class PlaybackControl(Protocol):
    """What `Turn`'s control handler acts on from the socket's thread (stop, pause, resume,
    status): an `Output`, or converse's reply (`vocal.duplex.adapters.SpeechOutput`)."""

    @property
    def sample_rate(self) -> int: ...

    def stop(self) -> None:
        """The kill handle: silence from the next block; `wait` returns."""

    def pause(self) -> None: ...

    def resume(self) -> None: ...

    @property
    def paused(self) -> bool: ...

    @property
    def played_frames(self) -> int:
        """Frames sent so far, silence included."""

    @property
    def consumed_frames(self) -> int:
        """Frames of the audio given to `play` sent so far (what `status` reports as played)."""


class Output(PlaybackControl, Protocol):
    """Where speech and sound files go. See the module docstring for the observer chain."""

    def play(self, samples: np.ndarray) -> None:
        """Queue mono float32 samples at `sample_rate`."""

    def finish(self) -> None:
        """Nothing more is coming: end once what is queued has played."""

    def wait(self, timeout_s: float | None = None) -> bool:
        """Block until everything has played (after `finish`) or `stop`; True if so."""

    @property
    def done(self) -> bool: ...

    def flush(self, timeout_s: float = 0.5) -> int:
        """Drop what is queued but not yet played, keep running; the frames dropped."""

    def close(self) -> None: ...


__all__ = ["BlockObserver", "Output", "PlaybackControl"]
