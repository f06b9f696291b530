"""The bundled phrases, heard by microWakeWord models (`pymicro-wakeword`, vocal[wake]).

pymicro-wakeword 2.5.0 (Apache-2.0, Open Home Foundation) ships a TensorFlow Lite C library
and four models: "alexa", "hey jarvis", "hey mycroft" and "okay nabu". Its features take
16-bit 16 kHz mono bytes and give one 40-bin spectrum per 10 ms; the model runs once per three
of them (30 ms) and its probability, averaged over the last five runs, fires above the
model's own cutoff (0.97 for hey jarvis, 0.95 hey mycroft, 0.90 alexa, 0.85 okay nabu).

Measured here on hibari and piper's joe saying "Hey Jarvis, run the tests.": it fires 0.05-0.09 s
after the phrase's last sound, and the averaged probability stays above the cutoff for 0.5 s
after, and after hibari's "Hey Mycroft." for over a second: the detector fires again only once
the probability has fallen under `REARM_BELOW`. Cost: 0.27 % of one core per second of audio,
speech or not. espeak-ng's "hey jarvis" is not heard (0.09 at best over 45 voice and speed
variants, but for one female variant) and its "hey mycroft" only now and then (0.89-0.99
over a quiet room's noise, around the 0.95 cutoff): the models were trained on other voices.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from vocal.errors import EngineError, UsageError
from vocal.wake.detection import MICRO, Detection
from vocal.wake.soundalike import words

if TYPE_CHECKING:
    import numpy as np
    from pymicro_wakeword import MicroWakeWord, MicroWakeWordFeatures

#: A phrase (its words, lower case) -> the pymicro-wakeword model that hears it.
BUNDLED_MODELS = {
    "alexa": "alexa",
    "hey jarvis": "hey_jarvis",
    "hey mycroft": "hey_mycroft",
    "okay nabu": "okay_nabu",
    "ok nabu": "okay_nabu",
}
#: The phrases as `--help` lists them.
BUNDLED_PHRASES = ("alexa", "hey jarvis", "hey mycroft", "okay nabu")
#: After firing, the detector fires again only once the probability has fallen below this
#: (module docstring).
REARM_BELOW = 0.5
SAMPLE_RATE = 16_000
#: The features' window and step (pymicro-features: 30 ms windows every 10 ms).
WINDOW_FRAMES = 480
STEP_FRAMES = 160
INSTALL_HINT = "pip install 'vocal[wake]' (pymicro-wakeword)"


def bundled_model(phrase: str) -> str | None:
    """The model that hears `phrase` ("Hey Jarvis!", "hey_jarvis"), or None for any other."""
    return BUNDLED_MODELS.get(" ".join(words(phrase.replace("_", " "))))


class MicroWakeDetector:
    """A bundled phrase heard by its microWakeWord model (a `PhraseDetector`).

    Args:
        phrase: one of `BUNDLED_MODELS` (UsageError otherwise).
        cutoff: fire above this averaged probability; None: the model's own.
    """

    name = MICRO

    def __init__(self, phrase: str, *, cutoff: float | None = None) -> None:
        model = bundled_model(phrase)
        if model is None:
            known = ", ".join(BUNDLED_PHRASES)
            raise UsageError(f"no bundled model hears {phrase!r}", hint=f"one of {known}")
        try:
            from pymicro_wakeword import MicroWakeWord, MicroWakeWordFeatures, Model
        except ImportError as exc:
            raise EngineError(
                f"microWakeWord is not installed ({exc})", hint=INSTALL_HINT
            ) from None
        self.phrase = phrase
        self.model = model
        try:
            self._model: MicroWakeWord = MicroWakeWord.from_builtin(Model(model))
        except (OSError, ValueError, RuntimeError) as exc:
            raise EngineError(f"cannot load the {model} wake model: {exc}") from None
        self._features: MicroWakeWordFeatures = MicroWakeWordFeatures()
        self.cutoff = self._model.probability_cutoff if cutoff is None else cutoff
        self._fed = 0
        self._steps = 0  # feature steps so far
        self._armed = True
        #: The highest averaged probability seen so far (diagnostics, benchmarks).
        self.best_score = 0.0

    def feed(self, samples: np.ndarray) -> Detection | None:
        """The phrase if the model's probability passed the cutoff in `samples`."""
        import numpy as np

        samples = np.asarray(samples, np.float32).reshape(-1)
        pcm = (np.clip(samples, -1.0, 1.0) * 32767.0).astype("<i2").tobytes()
        self._fed += samples.shape[0]
        found: Detection | None = None
        for features in self._features.process_streaming(pcm):
            self._steps += 1
            probability = self._model.process_streaming_prob(features)
            # The model runs once per `stride` features; between runs it says 0.0.
            if probability is None or self._steps % self._model.stride:
                continue
            self.best_score = max(self.best_score, probability)
            # Feature n covers a 30 ms window ending at sample 320 + 160 n (10 ms steps).
            frame = min(self._fed, WINDOW_FRAMES + (self._steps - 1) * STEP_FRAMES)
            if not self._armed:
                self._armed = probability < REARM_BELOW
            elif found is None and probability > self.cutoff:
                found = Detection(MICRO, round(float(probability), 4), frame)
                self._armed = False
        return found

    def finish(self) -> Detection | None:
        """Nothing is pending: the model hears the phrase as it ends."""
        return None

    def close(self) -> None:
        self._model.close()


__all__ = [
    "BUNDLED_MODELS",
    "BUNDLED_PHRASES",
    "MicroWakeDetector",
    "bundled_model",
]
