"""What a wake-phrase detector promises, and what it reports when it hears the phrase.

Two detectors keep the promise: `MicroWakeDetector` (vocal.wake.micro), a small model per
bundled phrase, and `WhisperPhraseDetector` (vocal.wake.spotter), which hears any phrase.
The wake loop (vocal.wake.waiting) feeds either the same blocks and reads the same
`Detection`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

if TYPE_CHECKING:
    import numpy as np

#: Detector names, as `--detector` and `--json` say them.
MICRO = "micro"
WHISPER = "whisper"


@dataclass(frozen=True)
class Detection:
    """The phrase heard. Frames count 16 kHz samples from the start of the stream.

    Attributes:
        detector: "micro" or "whisper".
        score: how sure the detector was, 0 to 1 (the model's probability; for Whisper how
            close the words sounded, vocal.wake.soundalike).
        end_frame: where the detector fired: just after the phrase's last sound (micro), or
            the end of the stretch of speech Whisper heard it in.
        start_frame: where the stretch of speech that held the phrase began (its pre-roll
            included); None when the detector does not know (micro).
        heard: what Whisper wrote for that stretch (None: micro); `end_frame` is where the
            audio it covers ends.
    """

    detector: str
    score: float
    end_frame: int
    start_frame: int | None = None
    heard: str | None = None


class PhraseDetector(Protocol):
    """Hears one phrase in a stream of 16 kHz mono float32 samples fed in blocks of any
    length, in order."""

    name: str
    phrase: str

    def feed(self, samples: np.ndarray) -> Detection | None:
        """Take the next samples; the phrase if it was heard in them (or in a stretch of
        speech they end), else None."""
        ...

    def finish(self) -> Detection | None:
        """The input has ended: the phrase if the speech it ended in held it."""
        ...

    def close(self) -> None:
        """Release the model."""
        ...


__all__ = ["MICRO", "WHISPER", "Detection", "PhraseDetector"]
