"""What a turn shows on a terminal while it runs: one status line on stderr, redrawn in place.

- While a reply plays (`vocal converse`): the sentence being spoken (`StatusLine.speaking`).
- While listening (`listen`, `converse`): the input level, whether speech is heard, and the
  words so far (`LevelMeter`, fed the partial transcripts `listen` makes: vocal.hearing.listening).

Nothing is drawn when stderr is not a terminal (`status_line` returns None), so scripts and
agents reading stderr see only vocal's messages. The line is cut to the terminal's width and
cleared when the turn ends, so the transcript on stdout starts on a clean line.
"""

from __future__ import annotations

import math
import shutil
import sys
import time
from collections.abc import Callable
from typing import IO, TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

    from vocal.audio.vad import VadState

#: The line is redrawn at most this often (s).
REDRAW_S = 0.05
#: Fewer columns than this left after the meter: the words are not shown.
MIN_WORDS_WIDTH = 12


class StatusLine:
    """One line on `stream` (a terminal), rewritten in place."""

    def __init__(self, stream: IO[str]) -> None:
        self._stream = stream
        self._shown = ""

    def show(self, text: str) -> None:
        """Replace the line with `text`, cut to the terminal's width."""
        width = shutil.get_terminal_size((80, 24)).columns - 1
        line = text if len(text) <= width else text[: max(0, width - 1)] + "…"
        if line == self._shown:
            return
        self._stream.write(f"\r\x1b[K{line}")
        self._stream.flush()
        self._shown = line

    def speaking(self, sentence: str) -> None:
        """The reply's sentence now playing."""
        self.show(f"speaking: {' '.join(sentence.split())}")

    def clear(self) -> None:
        if self._shown:
            self._stream.write("\r\x1b[K")
            self._stream.flush()
            self._shown = ""


def status_line(stream: IO[str] | None = None) -> StatusLine | None:
    """A `StatusLine` on stderr when it is a terminal, else None (nothing is drawn)."""
    stream = stream or sys.stderr
    return StatusLine(stream) if stream.isatty() else None


class LevelMeter:
    """The listening line: input level (peak since the last redraw), whether speech is heard,
    and the partial transcript (`words`), redrawn at most every `REDRAW_S`."""

    WIDTH = 30
    FLOOR_DB = -60.0

    def __init__(self, line: StatusLine) -> None:
        self._line = line
        self._clock = time.monotonic
        self._last = 0.0
        self._peak_db = self.FLOOR_DB
        self._words = ""

    def words(self, text: str) -> None:
        """The words heard so far (a partial transcript); shown at the next redraw."""
        self._words = " ".join(text.split())

    def __call__(self, samples: np.ndarray, state: VadState) -> None:
        rms = math.sqrt(float((samples * samples).mean())) if samples.size else 0.0
        db = max(self.FLOOR_DB, 20 * math.log10(rms) if rms > 0 else self.FLOOR_DB)
        self._peak_db = max(self._peak_db, db)
        now = self._clock()
        if now - self._last < REDRAW_S:
            return
        self._last = now
        filled = round((self._peak_db - self.FLOOR_DB) / -self.FLOOR_DB * self.WIDTH)
        bar = "#" * filled + "-" * (self.WIDTH - filled)
        label = "speaking" if state.value in ("starting", "speaking") else "listening"
        head = f"[{bar}] {self._peak_db:6.1f} dBFS  {label:<9}"
        room = shutil.get_terminal_size((80, 24)).columns - 1 - len(head) - 2
        words = self._words
        if len(words) > room:  # the latest words, as they are being said
            words = "…" + words[len(words) - room + 1 :] if room >= MIN_WORDS_WIDTH else ""
        self._line.show(f"{head}  {words}" if words else head)
        self._peak_db = self.FLOOR_DB

    def clear(self) -> None:
        self._line.clear()


def meter_hooks(
    line: StatusLine | None, check: Callable[[], object]
) -> tuple[Callable[[np.ndarray, VadState], None], Callable[[str], None] | None]:
    """`listen`'s `on_block` and `on_words` for a turn that runs `check` on every block and
    shows the level meter with the words on `line` (None: no line, no words asked for)."""
    meter = LevelMeter(line) if line is not None else None

    def on_block(samples: np.ndarray, state: VadState) -> None:
        check()
        if meter is not None:
            meter(samples, state)

    return on_block, (meter.words if meter is not None else None)


__all__ = ["LevelMeter", "StatusLine", "meter_hooks", "status_line"]
