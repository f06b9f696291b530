"""The room's own level as a gate on the endpointer.

Silero calls other people's talk speech, so in a room of talkers (a café, an open-plan office)
an endpointer never hears the pause that ends the person's turn, and listens to its cap. The
person vocal talks with is nearer the microphone than the room's other talkers: on the room
harness their level stood 15-23 dB above the babble. So a chunk that does not stand
`margin_db` above the room's floor is silence to the endpointer (`RoomGate.wrap`).

Levels are dB of a chunk's mean square, as the echo canceller's raw levels. Two turns use the
gate: converse's, whose floor the barge-in detector learnt while the reply was silent
(vocal.duplex.bargein.ambient), and `vocal wake`'s request, whose floor is the stream heard
before the phrase (vocal.wake.request).
"""

from __future__ import annotations

import math
import statistics
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np

    from vocal.audio.vad import Confidence

#: How far above the room's floor a person stands: a 32 ms chunk of six-voice babble rose at
#: most 8 dB above its median on the room harness.
ROOM_MARGIN_DB = 10.0
#: Mean squares below this (-120 dB) count as silence, so exact zeros stay finite.
SILENCE_MEAN_SQUARE = 1e-12


def mean_square_db(mean_square: float) -> float:
    """A mean square in dB, floored at `SILENCE_MEAN_SQUARE`."""
    return 10 * math.log10(max(mean_square, SILENCE_MEAN_SQUARE))


def level_db(chunk: np.ndarray) -> float:
    """A chunk's level: dB of its mean square (float32 samples; no numpy import here)."""
    return mean_square_db(float(chunk.dot(chunk)) / max(1, chunk.shape[0]))


def chunk_levels_db(samples: np.ndarray, chunk_frames: int) -> list[float]:
    """The level of each whole `chunk_frames` chunk of `samples`."""
    whole = samples.shape[0] // chunk_frames
    return [level_db(samples[i * chunk_frames : (i + 1) * chunk_frames]) for i in range(whole)]


def floor_db(levels: list[float]) -> float:
    """The room's floor: the median level, not a low percentile (a floor set by the quietest
    moments of babble lets its louder ones through)."""
    return statistics.median(levels)


class RoomGate:
    """Gates the endpointer's speech probability (`wrap`) by the room's level: a chunk that
    does not stand `margin_db` above `floor_db` is silence. `gated` counts the chunks Silero
    called speech (at or above `SPEECH_PROBABILITY`) that the gate made silence."""

    SPEECH_PROBABILITY = 0.5

    def __init__(self, floor_db: float, margin_db: float) -> None:
        self.floor_db = floor_db
        self.gate_db = floor_db + margin_db
        self.gated = 0

    def wrap(self, confidence: Confidence) -> Confidence:
        """`confidence`, gated. It still hears every chunk: Silero is recurrent."""

        def gated(chunk: np.ndarray) -> float:
            probability = float(confidence(chunk))
            if level_db(chunk) >= self.gate_db:
                return probability
            self.gated += probability >= self.SPEECH_PROBABILITY
            return 0.0

        return gated


__all__ = [
    "ROOM_MARGIN_DB",
    "RoomGate",
    "chunk_levels_db",
    "floor_db",
    "level_db",
    "mean_square_db",
]
