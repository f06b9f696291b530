"""Fixed-size chunks out of a sample stream that arrives in arrays of any length.

Silero VAD takes exactly 512 samples at a time (vocal.audio.vad), while capture blocks and the
echo canceller's output come in other sizes. The endpointer, the barge-in detector and the
backchannel judge each cut what they are fed into whole chunks with a `Chunker`, which keeps
the samples short of a chunk for the next call and tells when each chunk's last sample was
captured.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


class Chunker:
    """Cuts mono samples fed in arrays of any length into chunks of `chunk_frames` samples,
    keeping the leftover (fewer than `chunk_frames` samples) from one `feed` to the next.

    Args:
        chunk_frames: samples per chunk.
        sample_rate: of the samples, for each chunk's end time.
    """

    def __init__(self, chunk_frames: int, sample_rate: int) -> None:
        import numpy as np

        self._np = np
        self.chunk_frames = chunk_frames
        self.sample_rate = sample_rate
        self._pending = np.zeros(chunk_frames, np.float32)
        self._fill = 0

    def feed(self, samples: np.ndarray, end_s: float = 0.0) -> Iterator[tuple[np.ndarray, float]]:
        """Yield (chunk, chunk_end_s) for each chunk that `samples` completes, in order.

        `samples` is flattened to float32; `end_s` is when its last sample was captured, and
        `chunk_end_s` when the chunk's last one was (`end_s` minus the samples after it; with
        the default 0, relative to the end of `samples`). Each chunk is a copy the caller may
        keep. Samples are taken only as chunks are asked for: a caller that stops iterating
        early (a detector that has decided) leaves the rest of `samples` untaken, and the
        leftover empty.
        """
        np = self._np
        samples = np.asarray(samples, np.float32).reshape(-1)
        n, pos = samples.shape[0], 0
        while pos < n:
            take = min(self.chunk_frames - self._fill, n - pos)
            self._pending[self._fill : self._fill + take] = samples[pos : pos + take]
            self._fill += take
            pos += take
            if self._fill == self.chunk_frames:
                self._fill = 0
                yield self._pending.copy(), end_s - (n - pos) / self.sample_rate

    def clear(self) -> None:
        """Drop the leftover: the next `feed` starts a new chunk."""
        self._fill = 0


__all__ = ["Chunker"]
