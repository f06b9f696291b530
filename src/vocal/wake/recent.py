"""The last seconds of a stream, kept to go back to: the stretch of speech a phrase was heard
in, and the phrase itself once the request after it is to be transcribed."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


class RecentAudio:
    """The last `keep_s` seconds (at least) of mono samples fed, addressed by stream frame:
    frame 0 is the first sample ever added."""

    def __init__(self, keep_s: float, sample_rate: int = 16_000) -> None:
        self.keep_frames = round(keep_s * sample_rate)
        self.sample_rate = sample_rate
        self._parts: deque[tuple[int, np.ndarray]] = deque()
        #: Frames added so far: the stream frame just after the last sample.
        self.end_frame = 0

    @property
    def start_frame(self) -> int:
        """The first frame still kept."""
        return self._parts[0][0] if self._parts else self.end_frame

    def add(self, samples: np.ndarray) -> None:
        """Keep `samples` (a copy is not made: do not change them after)."""
        self._parts.append((self.end_frame, samples))
        self.end_frame += samples.shape[0]
        while self._parts and self.end_frame - self._parts[0][0] - len(self._parts[0][1]) >= (
            self.keep_frames
        ):
            self._parts.popleft()

    def span(self, start: int, end: int | None = None) -> np.ndarray:
        """Frames `start` to `end` (default: the last), as far as they are still kept."""
        import numpy as np

        end = self.end_frame if end is None else min(end, self.end_frame)
        start = max(start, self.start_frame)
        pieces = [
            part[max(0, start - first) : max(0, end - first)]
            for first, part in self._parts
            if first < end and first + part.shape[0] > start
        ]
        return np.concatenate(pieces) if pieces else np.zeros(0, np.float32)


__all__ = ["RecentAudio"]
