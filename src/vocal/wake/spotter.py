"""Any phrase the person chooses, heard by Whisper on each short stretch of speech.

Silero VAD (vocal.audio.vad) runs on every 32 ms chunk and finds stretches of speech: a stretch
starts after `min_speech_ms` of speech and ends after `gap_ms` of silence. Whisper (vocal's STT
engine, the phrase as its prompt) transcribes each stretch once, as it ends, or its first
`window_s` when it runs on longer (a phrase said in one breath with the request), and the
transcript is matched to the phrase by sound (vocal.wake.soundalike). Whisper runs only when
someone speaks: in a quiet room the cost is Silero's.

The phrase is looked for where people say it, at the start of a stretch: one said in the
middle of a long run of speech with no pause before it is not heard (its window is spent).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from vocal.audio.vad import EndpointOptions
from vocal.wake.detection import WHISPER, Detection
from vocal.wake.recent import RecentAudio
from vocal.wake.soundalike import find_phrase, words

if TYPE_CHECKING:
    import numpy as np

    from vocal.audio.vad import Confidence
    from vocal.hearing.stt_loading import SttLoader
    from vocal.stt import SttEngine

SAMPLE_RATE = 16_000
CHUNK_FRAMES = 512
#: The window's length: this much per word of the phrase, plus a second, within the bounds
#: (hibari and piper say "hey jarvis" in 0.7 s; a stretch is checked once its window is heard).
WINDOW_PER_WORD_S = 0.5
WINDOW_BOUNDS_S = (1.5, 4.0)


def phrase_window_s(phrase: str) -> float:
    """How much of a stretch of speech Whisper is given to find `phrase` in."""
    low, high = WINDOW_BOUNDS_S
    return min(high, max(low, 1.0 + WINDOW_PER_WORD_S * len(words(phrase))))


@dataclass(frozen=True)
class SpotOptions:
    """How stretches of speech are found and checked.

    The thresholds, `min_speech_ms` and the rolls are the endpointer's (`EndpointOptions`);
    `gap_ms` is shorter than its silence, since a stretch only needs to hold the phrase, and
    the sooner it ends the sooner Whisper hears it: the comma after "hey jarvis" is 0.1-0.2 s
    in hibari's and piper's voices, so a phrase followed by a request in one breath is heard
    by its window instead. `window_s` None: `phrase_window_s(phrase)`.
    """

    start_threshold: float = EndpointOptions.start_threshold
    stop_threshold: float = EndpointOptions.stop_threshold
    min_speech_ms: int = EndpointOptions.min_speech_ms
    gap_ms: int = 300
    pre_roll_ms: int = EndpointOptions.pre_roll_ms
    post_roll_ms: int = EndpointOptions.post_roll_ms
    window_s: float | None = None

    def __post_init__(self) -> None:
        if not 0.0 < self.stop_threshold <= self.start_threshold < 1.0:
            raise ValueError("need 0 < stop_threshold <= start_threshold < 1")
        for name in ("min_speech_ms", "gap_ms", "pre_roll_ms", "post_roll_ms"):
            if not 0 <= getattr(self, name) <= 10_000:
                raise ValueError(f"{name} must be 0 to 10000 ms")
        if self.window_s is not None and not 0.5 <= self.window_s <= 30.0:
            raise ValueError("window_s must be 0.5 to 30 s")


class WhisperPhraseDetector:
    """Any phrase, heard by Whisper on the stretches of speech Silero finds (a
    `PhraseDetector`; see the module docstring).

    Args:
        phrase: the words to hear.
        stt: the engine, or its loader still loading (waited for at the first stretch).
        confidence: speech probability of one 512-sample chunk; None loads a `SileroVad`.
        options: see `SpotOptions`.
    """

    name = WHISPER

    def __init__(
        self,
        phrase: str,
        stt: SttLoader | SttEngine,
        *,
        confidence: Confidence | None = None,
        options: SpotOptions | None = None,
    ) -> None:
        from vocal.audio.chunks import Chunker

        if confidence is None:
            from vocal.audio.vad import SileroVad

            confidence = SileroVad()
        self.phrase = phrase
        self.options = options or SpotOptions()
        self.window_s = self.options.window_s or phrase_window_s(phrase)
        self._stt = stt
        self._confidence = confidence
        self._chunker = Chunker(CHUNK_FRAMES, SAMPLE_RATE)
        opts = self.options
        keep_s = self.window_s + (opts.pre_roll_ms + opts.gap_ms + opts.post_roll_ms) / 1000
        self._recent = RecentAudio(keep_s + 1.0, SAMPLE_RATE)
        self._fed = 0  # frames through the VAD (whole chunks)
        self._speaking = False
        self._run = 0  # frames: speech so far while starting, silence so far while speaking
        self._candidate = 0
        self._stretch_start = 0
        self._speech_end = 0
        self._checked = False
        #: Every check: (stream seconds at its end, what Whisper wrote, seconds it took).
        self.checks: list[tuple[float, str, float]] = []

    def _frames(self, ms: float) -> int:
        return round(ms * SAMPLE_RATE / 1000)

    def feed(self, samples: np.ndarray) -> Detection | None:
        """The phrase if a stretch of speech that `samples` ends (or fills its window) held
        it."""
        found = None
        for chunk, _ in self._chunker.feed(samples):
            self._recent.add(chunk)
            detection = self._step(chunk)
            found = found or detection
        return found

    def _step(self, chunk: np.ndarray) -> Detection | None:
        opts = self.options
        prob = float(self._confidence(chunk))
        start = self._fed
        self._fed += chunk.shape[0]
        if not self._speaking:
            if prob >= opts.start_threshold or (self._run and prob >= opts.stop_threshold):
                if not self._run:
                    self._candidate = start
                self._run += chunk.shape[0]
                if self._run >= self._frames(opts.min_speech_ms):
                    self._speaking, self._run, self._checked = True, 0, False
                    self._stretch_start, self._speech_end = self._candidate, self._fed
            else:
                self._run = 0
            return None
        if prob >= opts.stop_threshold:
            self._speech_end, self._run = self._fed, 0
        else:
            self._run += chunk.shape[0]
        window_end = self._stretch_start + round(self.window_s * SAMPLE_RATE)
        if self._run >= self._frames(opts.gap_ms):
            self._speaking, self._run = False, 0
            if not self._checked:
                return self._check(min(self._speech_end, window_end))
        elif not self._checked and self._fed >= window_end:
            self._checked = True
            return self._check(window_end)
        return None

    def _check(self, end: int) -> Detection | None:
        """Transcribe the stretch up to `end` and look for the phrase in it."""
        from vocal.audio.wav import Audio
        from vocal.hearing.stt_loading import SttLoader

        opts = self.options
        first = max(0, self._stretch_start - self._frames(opts.pre_roll_ms))
        last = min(self._fed, end + self._frames(opts.post_roll_ms))
        engine = self._stt.engine() if isinstance(self._stt, SttLoader) else self._stt
        started = time.perf_counter()
        text = engine.transcribe(Audio(self._recent.span(first, last), SAMPLE_RATE)).text
        self.checks.append((round(last / SAMPLE_RATE, 3), text, time.perf_counter() - started))
        match = find_phrase(text, self.phrase)
        if match is None:
            return None
        return Detection(WHISPER, round(match.score, 4), last, first, text)

    def finish(self) -> Detection | None:
        """The input has ended: check the stretch it ended in, if it was not checked."""
        if not self._speaking or self._checked:
            return None
        self._speaking, self._checked = False, True
        window_end = self._stretch_start + round(self.window_s * SAMPLE_RATE)
        return self._check(min(self._speech_end, window_end))

    def close(self) -> None:
        """Nothing to release: the engine belongs to whoever loaded it."""


__all__ = ["SpotOptions", "WhisperPhraseDetector", "phrase_window_s"]
