"""Smart Turn v3: the audio's verdict on a pause, P(complete) (issue 16; used by
`vocal.hearing.endofturn`).

pipecat's BSD-2 model is a Whisper-tiny encoder with a classification head (ONNX, ~8.7 MB)
that hears prosody: a falling, final intonation against a held, continuing one. It takes
Whisper-style log-mel features of the last 8 s at 16 kHz (left-padded with zeros).
`log_mel_features` computes them in numpy (no transformers; a test holds them to
faster-whisper's feature extractor within 1e-5), and `SmartTurn` runs the model on one
onnxruntime thread.

The model file: `$VOCAL_TURN_MODEL_PATH`, else the copy vocal's own package ships
(`models/smart-turn-v3.2-cpu.onnx` beside this module, taken unchanged from the `pipecat-ai`
1.14.0 wheel; its BSD-2 licence and provenance sit beside it), so every install has it with
no download and no pipecat. `TurnModelLoader` loads it in a background thread, like Whisper,
so it never delays the microphone.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from vocal.errors import EngineError
from vocal.hearing.background import BackgroundLoader

if TYPE_CHECKING:
    import numpy as np

SMART_TURN_SAMPLE_RATE = 16_000
#: Smart Turn v3 hears the last 8 s: 800 frames of 10 ms, 80 mel bands.
SMART_TURN_WINDOW_S = 8
N_FFT = 400
HOP_FRAMES = 160
N_MELS = 80

MODEL_FILE = "smart-turn-v3.2-cpu.onnx"
#: The packaged copy (hatch's wheel takes src/vocal whole; tests/test_install.py checks it).
PACKAGED_MODEL = Path(__file__).parent / "models" / MODEL_FILE
MODEL_ENV = "VOCAL_TURN_MODEL_PATH"


def _mel_filters(sample_rate: int = SMART_TURN_SAMPLE_RATE) -> np.ndarray:
    """Slaney-scale triangular mel filters, (N_MELS, N_FFT // 2 + 1), area-normalized: the
    filterbank Whisper's feature extractor uses."""
    import numpy as np

    def hz_to_mel(hz: float | np.ndarray) -> np.ndarray:
        hz = np.asarray(hz, dtype=np.float64)
        linear = hz / (200.0 / 3)
        log = 15.0 + np.log(np.maximum(hz, 1e-10) / 1000.0) / (np.log(6.4) / 27.0)
        return np.where(hz >= 1000.0, log, linear)

    def mel_to_hz(mel: np.ndarray) -> np.ndarray:
        linear = mel * (200.0 / 3)
        log = 1000.0 * np.exp((np.log(6.4) / 27.0) * (mel - 15.0))
        return np.where(mel >= 15.0, log, linear)

    fft_hz = np.linspace(0, sample_rate / 2, N_FFT // 2 + 1)
    edges_hz = mel_to_hz(np.linspace(hz_to_mel(0.0), hz_to_mel(sample_rate / 2), N_MELS + 2))
    lower, center, upper = edges_hz[:-2, None], edges_hz[1:-1, None], edges_hz[2:, None]
    rising = (fft_hz[None, :] - lower) / (center - lower)
    falling = (upper - fft_hz[None, :]) / (upper - center)
    weights = np.maximum(0.0, np.minimum(rising, falling))
    return weights * (2.0 / (upper - lower))


_MEL_FILTERS: np.ndarray | None = None


def log_mel_features(samples: np.ndarray) -> np.ndarray:
    """Whisper-style log-mel features of the last 8 s of `samples` (16 kHz mono float):
    (80, 800) float32, left-padded with silence, the waveform normalized to zero mean and unit
    variance first (as Smart Turn v3 was trained)."""
    import numpy as np

    global _MEL_FILTERS
    if _MEL_FILTERS is None:
        _MEL_FILTERS = _mel_filters()
    window = SMART_TURN_WINDOW_S * SMART_TURN_SAMPLE_RATE
    x = np.asarray(samples, dtype=np.float64).reshape(-1)[-window:]
    x = np.pad(x, (window - x.shape[0], 0))
    x = (x - x.mean()) / np.sqrt(x.var() + 1e-7)
    padded = np.pad(x, (N_FFT // 2, N_FFT // 2), mode="reflect")
    frames = np.lib.stride_tricks.sliding_window_view(padded, N_FFT)[::HOP_FRAMES]
    hann = 0.5 - 0.5 * np.cos(2 * np.pi * np.arange(N_FFT) / N_FFT)  # periodic
    power = np.abs(np.fft.rfft(frames * hann, axis=-1)) ** 2  # (801, 201)
    mel = _MEL_FILTERS @ power[:-1].T  # Whisper drops the last frame: (80, 800)
    log_spec = np.log10(np.maximum(mel, 1e-10))
    log_spec = np.maximum(log_spec, log_spec.max() - 8.0)
    return ((log_spec + 4.0) / 4.0).astype(np.float32)


def find_turn_model() -> Path:
    """The Smart Turn ONNX file: $VOCAL_TURN_MODEL_PATH, else the copy in vocal's package
    (EngineError when the variable names no file or the packaged copy is missing)."""
    from vocal.audio.vad import packaged_model

    path = packaged_model(MODEL_ENV, ())
    if path is not None:
        return path
    if not PACKAGED_MODEL.is_file():
        raise EngineError(f"the Smart Turn model is missing: {PACKAGED_MODEL}", hint=INSTALL_HINT)
    return PACKAGED_MODEL


INSTALL_HINT = f"reinstall vocal (its package ships the model), or set {MODEL_ENV} to a copy"


class SmartTurn:
    """Smart Turn v3 on onnxruntime: `model.probability(samples)` -> P(the turn is complete).

    One thread, one session: a call costs ~60 ms on one core here (benchmarks/turns).
    """

    def __init__(self, model_path: str | os.PathLike | None = None) -> None:
        import onnxruntime

        self.model_path = Path(model_path) if model_path is not None else find_turn_model()
        options = onnxruntime.SessionOptions()
        options.inter_op_num_threads = 1
        options.intra_op_num_threads = 1
        options.log_severity_level = 4
        try:
            self._session = onnxruntime.InferenceSession(
                str(self.model_path), sess_options=options, providers=["CPUExecutionProvider"]
            )
        except Exception as exc:  # onnxruntime raises its own Fail/InvalidProtobuf types
            raise EngineError(f"cannot load the turn model {self.model_path}: {exc}") from None
        inputs = self._session.get_inputs()
        if [i.name for i in inputs] != ["input_features"]:
            raise EngineError(f"{self.model_path} is not a Smart Turn v3 model")

    def probability(self, samples: np.ndarray) -> float:
        """P(complete) for the turn whose audio so far is `samples` (16 kHz mono)."""
        features = log_mel_features(samples)[None]
        (output,) = self._session.run(None, {"input_features": features})
        return float(output.reshape(-1)[0])


class TurnModelLoader(BackgroundLoader[SmartTurn]):
    """Loads `SmartTurn` in a daemon thread and runs it once (its first call in a process is
    ~2x slower); the turn goes on with the text alone until it is ready, or if it fails."""

    def __init__(self, model_path: str | os.PathLike | None = None) -> None:
        super().__init__(lambda: _warmed(SmartTurn(model_path)), name="vocal-turn-load")


def _warmed(model: SmartTurn) -> SmartTurn:
    import numpy as np

    model.probability(np.zeros(SMART_TURN_SAMPLE_RATE, np.float32))
    return model
