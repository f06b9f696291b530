"""The parts of Chatterbox's model around the engine: text normalisation and the token ceiling,
the non-speech check, the voice's conditioning (cached per reference clip) and the ONNX
sessions. See vocal.tts.chatterbox.
"""

from __future__ import annotations

import math
import os
import re
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import numpy as np
import numpy.typing as npt

from vocal.floor.statedir import make_private_dirs
from vocal.providers import ProviderFailure
from vocal.tts._onnx import OrtSession
from vocal.tts.chatterbox_weights import ChatterboxWeights
from vocal.tts.clips import CLONE_SAMPLE_RATE

if TYPE_CHECKING:
    from vocal.config import Settings

SAMPLE_RATE = CLONE_SAMPLE_RATE  # the rate stored clips are converted to
#: Speech tokens run at 25 a second: one token is 960 samples of output.
TOKENS_PER_SECOND = 25
START_SPEECH_TOKEN = 6561
STOP_SPEECH_TOKEN = 6562
#: Chatterbox's own defaults (resemble-ai/chatterbox, and the ONNX export's model card).
DEFAULT_EXAGGERATION = 0.5
REPETITION_PENALTY = 1.2
#: The language model was trained on at most 1000 speech tokens (40 s) per utterance.
MAX_NEW_TOKENS = 1000


#: The ceiling on generated tokens: 1 s plus the text read at 4 characters a second. Speech runs
#: at 12–15 characters a second, so this is ~3x a slow reading, and a model that misses its stop
#: token (it happens on short inputs) babbles for at most that long instead of 40 s.
CEILING_BASE_S = 1.0
CEILING_CHARS_PER_S = 4.0


# Non-speech: what a broken provider produces (NaN, digital silence, a rail-to-rail square
# wave), not quiet speech. Chatterbox's quietest output is far above -80 dBFS.
_SILENT_RMS = 1e-4
_SATURATED_FRACTION = 0.2


# -- speech checks and text -------------------------------------------------------------------
def check_speech(samples: np.ndarray, sample_rate: int = SAMPLE_RATE) -> str | None:
    """Why `samples` cannot be speech (None when they may be): what a broken execution provider
    produces. Quiet or odd speech passes; this guards the ladder, not quality."""
    samples = np.asarray(samples)
    if samples.size == 0:
        return "no samples"
    if not np.all(np.isfinite(samples)):
        return "NaN or infinite samples"
    rms = float(np.sqrt(np.mean(np.square(samples, dtype=np.float64))))
    if rms < _SILENT_RMS:
        return f"silence (RMS {20 * math.log10(max(rms, 1e-12)):.0f} dBFS)"
    if float(np.mean(np.abs(samples) >= 0.999)) > _SATURATED_FRACTION:
        return "samples pinned at full scale"
    return None


def max_new_tokens(text: str) -> int:
    """The most speech tokens one sentence may generate: in proportion to the text."""
    seconds = CEILING_BASE_S + len(text) / CEILING_CHARS_PER_S
    return min(MAX_NEW_TOKENS, math.ceil(seconds * TOKENS_PER_SECOND))


_SPACES = re.compile(r"\s+")


def normalize_text(text: str) -> str:
    """What Chatterbox reads best (after resemble-ai/chatterbox's `punc_norm`): single spaces,
    a capital first letter, plain punctuation and a full stop at the end."""
    text = _SPACES.sub(" ", text).strip()
    if not text:
        return ""
    for before, after in (
        ("…", ", "),
        (":", ","),
        (" - ", ", "),
        (";", ", "),
        ("—", "-"),
        ("–", "-"),
        (" ,", ","),
        ("“", '"'),
        ("”", '"'),
        ("‘", "'"),
        ("’", "'"),
    ):
        text = text.replace(before, after)
    text = _SPACES.sub(" ", text).strip()
    text = text[0].upper() + text[1:]
    if text[-1] not in ".!?-,'\"":
        text += "."
    return text


# -- the voice's conditioning ---------------------------------------------------------------------
@dataclass
class Conditioning:
    """The speech encoder's output for one reference clip: what makes the voice."""

    audio_features: np.ndarray
    audio_tokens: np.ndarray
    speaker_embeddings: np.ndarray
    speaker_features: np.ndarray

    FIELDS: ClassVar[tuple[str, ...]] = (
        "audio_features",
        "audio_tokens",
        "speaker_embeddings",
        "speaker_features",
    )

    def problem(self) -> str | None:
        """Why this conditioning is unusable (NaN from a broken provider), or None."""
        for name in ("audio_features", "speaker_embeddings", "speaker_features"):
            if not np.all(np.isfinite(getattr(self, name))):
                return f"NaN in the voice's {name}"
        if self.audio_tokens.size == 0:
            return "no prompt tokens for the voice"
        return None

    def save(self, path: Path) -> None:
        """Write atomically: concurrent turns may encode the same voice."""
        make_private_dirs(path.parent)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.stem}.", suffix=".npz", dir=path.parent)
        try:
            with os.fdopen(fd, "wb") as out:
                np.savez(out, **{name: getattr(self, name) for name in self.FIELDS})
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    @classmethod
    def load(cls, path: Path) -> Conditioning | None:
        """The cached conditioning, or None when the file is missing or unreadable."""
        try:
            with np.load(path, allow_pickle=False) as data:
                return cls(**{name: np.array(data[name]) for name in cls.FIELDS})
        except (OSError, ValueError, KeyError):
            return None


def conditioning_cache_dir(settings: Settings) -> Path:
    """Where encoded voices are cached (`<voice>-<digest>.npz`); safe to delete."""
    return settings.cache_dir / "chatterbox" / "conditioning"


def file_identity(path: Path) -> str:
    stat = path.stat()
    return f"{path.name}:{stat.st_size}:{stat.st_mtime_ns}"


# -- sessions -------------------------------------------------------------------------------------
@dataclass
class Sessions:
    """The graphs opened on one execution provider, and what the engine reads off them."""

    provider: str
    weights: ChatterboxWeights
    options: object  # the ort.SessionOptions every graph is opened with
    embed: OrtSession
    language_model: OrtSession
    decoder: OrtSession
    encoder: OrtSession | None = None
    embed_inputs: frozenset[str] = frozenset()
    past_names: tuple[str, ...] = ()
    present_names: tuple[str, ...] = ()
    kv_shape: tuple[int, int] = (16, 64)
    kv_dtype: npt.DTypeLike = np.float32
    embeds_dtype: npt.DTypeLike = np.float32
    lm_position_ids: bool = False


ORT_FLOAT = {"tensor(float16)": np.float16, "tensor(float)": np.float32}


def open_session(path: Path, provider: str, options: object) -> OrtSession:
    import onnxruntime as ort

    providers = (
        [provider] if provider == "CPUExecutionProvider" else [provider, "CPUExecutionProvider"]
    )
    try:
        # enable_fallback=0: onnxruntime would otherwise print "EP Error" to *stdout* (our
        # payload) and quietly rerun on the CPU, hiding the failure from the ladder.
        session = ort.InferenceSession(
            str(path), sess_options=options, providers=providers, enable_fallback=0
        )
    except Exception as exc:
        raise ProviderFailure(f"failed to open {path.name}: {one_line(exc)}") from exc
    granted = session.get_providers()
    if not granted or granted[0] != provider:
        raise ProviderFailure(f"was not granted for {path.name} (onnxruntime chose {granted})")
    return session


def one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


__all__ = [
    "SAMPLE_RATE",
    "Conditioning",
    "Sessions",
    "check_speech",
    "conditioning_cache_dir",
    "max_new_tokens",
    "normalize_text",
]
