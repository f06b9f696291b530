"""File stand-ins for the devices: `WavSource` for `--input FILE` and `WavSink` for
`--output FILE`, so every command is scriptable and testable without a sound card.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from vocal.audio.devices import Block
from vocal.audio.player import ReferenceBuffer

if TYPE_CHECKING:
    import numpy as np


# -- file stand-ins -----------------------------------------------------------------------------
class WavSource:
    """`--input FILE`: a WAV read as if captured, in blocks at `sample_rate` mono, as fast as
    the consumer takes them."""

    #: Not a live source: `vocal.hearing.listening.listen` endpoints it on the file's own clock.
    live = False

    def __init__(self, path: str | Path, sample_rate: int = 16_000, *, block_frames: int = 512):
        self.path = Path(path)
        self.sample_rate = sample_rate
        self.block_frames = block_frames
        self.overflows = 0
        from vocal.audio.wav import read_wav

        self.audio = read_wav(self.path).to_mono().resample(sample_rate)
        self.opened_at_s: float | None = None

    def open(self) -> WavSource:
        self.opened_at_s = time.monotonic()
        return self

    def close(self) -> None:
        pass

    def __enter__(self) -> WavSource:
        return self.open()

    def __exit__(self, *exc: object) -> None:
        self.close()

    def blocks(self, timeout_s: float = 2.0) -> Iterator[Block]:
        import numpy as np

        samples = self.audio.mono_samples
        n = self.block_frames
        for start in range(0, samples.shape[0], n):
            block = samples[start : start + n]
            if block.shape[0] < n:
                block = np.concatenate([block, np.zeros(n - block.shape[0], np.float32)])
            yield Block(block, time.monotonic())


class WavSink:
    """`--output FILE`: an `Output` (vocal.audio.output) that writes a WAV instead of playing.

    Nothing plays in real time: `finish()` writes the whole file at once, through
    `vocal.audio.wav.write_wav` (a temporary file renamed over the old one). A turn that is
    stopped, fails or is interrupted before `finish()` writes nothing, so an existing file
    is left byte for byte as it was (issue 17). With `write_on_finish=False` (`vocal speak`)
    `finish()` only ends the output, and the caller writes with `commit()` once it has judged
    the result: a speech whose every sentence failed its check, or that had nothing
    speakable, used to end in an empty 44-byte WAV over the user's file (issue 37). `open()`
    refuses a destination that cannot be written (a directory, a missing parent) before any
    synthesis cost is paid.
    """

    def __init__(
        self,
        path: str | Path,
        sample_rate: int,
        *,
        volume: float = 1.0,
        write_on_finish: bool = True,
    ) -> None:
        self.path = Path(path)
        self.sample_rate = sample_rate
        self.volume = volume
        self.write_on_finish = write_on_finish
        self._written = False
        self.reference = ReferenceBuffer(1)
        self._parts: list[np.ndarray] = []
        self._done = threading.Event()
        self._stopped = False
        self.paused = False

    def open(self) -> WavSink:
        """Check the destination can take a file; raises `UsageError` (exit 2) if not."""
        self._check_destination()
        return self

    def close(self) -> None:
        """Release the sink; unless `finish()` wrote it, the file is not touched."""
        self._done.set()

    def __enter__(self) -> WavSink:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def play(self, samples: np.ndarray) -> None:
        import numpy as np

        if not self._stopped:
            self._parts.append(np.asarray(samples, np.float32).reshape(-1) * self.volume)

    def finish(self) -> None:
        """No more audio: write everything played so far as the file (once), unless the
        sink was made with `write_on_finish=False` (then `commit()` writes it)."""
        if self._done.is_set():
            return
        try:
            if self.write_on_finish:
                self.commit()
        finally:
            self._done.set()  # a failed write is not retried: the error went to the caller

    def commit(self) -> Path:
        """Write everything played as the file, whole, once (never after `stop()`: a caller's
        bug). A write that fails leaves the old file as it was (vocal.audio.wav.write_wav)."""
        if self._stopped:
            raise RuntimeError("a stopped WavSink writes nothing")
        if not self._written:
            self._written = True  # a failed write is not retried: the error went to the caller
            self._write()
        return self.path

    def stop(self) -> None:
        """End without writing: the file stays as it was."""
        self._stopped = True
        self._done.set()

    def wait(self, timeout_s: float | None = None) -> bool:
        return self._done.wait(timeout_s)

    @property
    def done(self) -> bool:
        return self._done.is_set()

    def flush(self, timeout_s: float = 0.5) -> int:
        """Nothing is queued: everything is "played" at once."""
        return 0

    def pause(self) -> None:
        pass

    def resume(self) -> None:
        pass

    @property
    def played_frames(self) -> int:
        return sum(p.shape[0] for p in self._parts)

    @property
    def consumed_frames(self) -> int:
        return self.played_frames

    def _write(self) -> None:
        import numpy as np

        from vocal.audio.wav import Audio, write_wav

        samples = np.concatenate(self._parts) if self._parts else np.zeros(0, np.float32)
        write_wav(self.path, Audio(samples, self.sample_rate))

    def _check_destination(self) -> None:
        """A `UsageError` unless a WAV can be written at the path: not a directory, and in a
        directory that exists. Checked before the work, so the error comes first and alone
        (`speak -o DIR` printed a traceback from the feeder thread, then the error)."""
        from vocal.errors import UsageError

        if self.path.is_dir():
            raise UsageError(f"{self.path} is a directory", hint="give a file name")
        if not self.path.parent.is_dir():
            raise UsageError(f"{self.path}: the directory {self.path.parent} does not exist")
