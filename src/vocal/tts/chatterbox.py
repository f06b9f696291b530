"""Chatterbox on onnxruntime: zero-shot cloning of a voice from a 5–9 s reference clip.

The weights are the community ONNX export of Resemble AI's Chatterbox
(`onnx-community/chatterbox-ONNX` on the Hugging Face hub, MIT), four graphs and a tokenizer:

- `onnx/speech_encoder.onnx`: the reference clip (`audio_values`, 24 kHz) to the voice's
  conditioning: `audio_features` (prepended to the text in the language model), `audio_tokens`
  (the clip's own speech tokens, the decoder's prompt), `speaker_embeddings` (192) and
  `speaker_features` (mel frames, 80 bins). Run once per voice; the result is cached on disk.
- `onnx/embed_tokens.onnx`: token ids (+ `position_ids`, `exaggeration`) to `inputs_embeds`.
- `onnx/language_model[_q4].onnx`: a Llama with a KV cache (`past_key_values.N.key/value` in,
  `present.N.key/value` out) whose `logits` pick the next speech token, greedily with a
  repetition penalty, until the stop token (6562) or a ceiling in proportion to the text.
- `onnx/conditional_decoder.onnx`: the prompt tokens + generated tokens, speaker embeddings and
  features to a 24 kHz `waveform` (the prompt's part is left out by the decoder).
- `tokenizer.json`: its post-processor brackets the text and appends the speech-start tokens.

Sizes (layers, heads, head width, dtypes) are read from the graphs, not assumed, so the q4/fp16
language models and the tests' tiny bundle (tests/fixtures/chatterbox_bundle.py) run unchanged.
Weights come from a local directory (`VOCAL_CHATTERBOX_DIR`) or are downloaded into the cache
directory by `download_weights` (`vocal setup --engine chatterbox`), with a progress bar.

The sessions run on an execution-provider ladder (vocal.providers): GPU providers first, CPU
last; a rung that fails or produces non-speech moves one down and the working rung is
remembered for the next process.
"""

from __future__ import annotations

import hashlib
import math
import os
import re
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from vocal.errors import EngineError, UsageError
from vocal.providers import ProviderFailure, ProviderLadder, default_ladder, parse_ladder
from vocal.tts import TtsEngine
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

DEFAULT_REPO = "onnx-community/chatterbox-ONNX"
DOWNLOAD_SIZE = "about 1.5 GB"
TOKENIZER_FILE = "tokenizer.json"
DEFAULT_VOICE_FILE = "default_voice.wav"
#: Graph files, each followed by the alternatives accepted in its place (first found wins). The
#: q4 language model is the one downloaded: a quarter of the fp32 one's 2 GB, faster on a CPU.
GRAPH_FILES: dict[str, tuple[str, ...]] = {
    "speech_encoder": ("speech_encoder.onnx",),
    "embed_tokens": ("embed_tokens.onnx",),
    "language_model": ("language_model_q4.onnx", "language_model.onnx"),
    "conditional_decoder": ("conditional_decoder.onnx",),
}
#: What `download_weights` fetches: each graph with its `.onnx_data` sidecar, the tokenizer and
#: the export's default voice.
DOWNLOAD_PATTERNS = (
    TOKENIZER_FILE,
    DEFAULT_VOICE_FILE,
    "onnx/speech_encoder.onnx*",
    "onnx/embed_tokens.onnx*",
    "onnx/language_model_q4.onnx*",
    "onnx/conditional_decoder.onnx*",
)

# Non-speech: what a broken provider produces (NaN, digital silence, a rail-to-rail square
# wave), not quiet speech. Chatterbox's quietest output is far above -80 dBFS.
_SILENT_RMS = 1e-4
_SATURATED_FRACTION = 0.2


# -- weights ----------------------------------------------------------------------------------
@dataclass(frozen=True)
class ChatterboxWeights:
    """Where each file of a complete bundle is."""

    root: Path
    speech_encoder: Path
    embed_tokens: Path
    language_model: Path
    conditional_decoder: Path
    tokenizer: Path
    default_voice: Path | None = None

    def graph(self, name: str) -> Path:
        """The file of graph `name` ("speech_encoder", "language_model", ...)."""
        return getattr(self, name)


def weights_dir(settings: Settings) -> Path:
    """The weights directory: `chatterbox_dir` if set, else the download location in the cache."""
    if settings.chatterbox_dir is not None:
        return Path(settings.chatterbox_dir).expanduser()
    return settings.cache_dir / "chatterbox" / settings.chatterbox_repo.replace("/", "--")


def _find(root: Path, name: str) -> Path | None:
    """`root/onnx/name` (the hub's layout) or `root/name` (a flat directory)."""
    for candidate in (root / "onnx" / name, root / name):
        if candidate.is_file():
            return candidate
    return None


def missing_weights(settings: Settings) -> tuple[Path, list[str]]:
    """The weights directory and the files missing from it ([] when it is complete).

    In the download location every graph's `.onnx_data` sidecar must be there too (an
    interrupted download leaves a graph without it); a local directory may hold graphs with
    their weights inside.
    """
    root = weights_dir(settings)
    downloaded = settings.chatterbox_dir is None
    missing = []
    for choices in GRAPH_FILES.values():
        found = next((p for p in map(lambda n: _find(root, n), choices) if p), None)
        if found is None:
            alternatives = "".join(f" (or onnx/{other})" for other in choices[1:])
            missing.append(f"onnx/{choices[0]}{alternatives}")
            if downloaded:
                missing.append(f"onnx/{choices[0]}_data")
        elif downloaded and not found.with_name(found.name + "_data").is_file():
            missing.append(f"onnx/{found.name}_data")
    if not (root / TOKENIZER_FILE).is_file():
        missing.append(TOKENIZER_FILE)
    return root, missing


def find_weights(settings: Settings, *, voice: str | None = None) -> ChatterboxWeights:
    """The bundle's files, or an `EngineError` (exit 5) that names every missing file and how
    to get them. `voice` only words the message ("cloned voice 'x' needs ...")."""
    root, missing = missing_weights(settings)
    if missing:
        who = f"the cloned voice {voice!r}" if voice else "the chatterbox engine"
        where = f"{root}" if root.is_dir() else f"{root} (the directory does not exist)"
        if settings.chatterbox_dir is None:
            how = (
                f"run `vocal setup --engine chatterbox` to download them, {DOWNLOAD_SIZE} from "
                f"huggingface.co/{settings.chatterbox_repo}; or set VOCAL_CHATTERBOX_DIR to a "
                "directory that holds them"
            )
        else:
            how = (
                f"put them there, from huggingface.co/{settings.chatterbox_repo}; or unset "
                "VOCAL_CHATTERBOX_DIR and run `vocal setup --engine chatterbox` to download them"
            )
        raise EngineError(
            f"{who} needs the Chatterbox ONNX weights, and {len(missing)} file(s) are missing "
            f"from {where}: {', '.join(missing)}",
            hint=how,
        )
    graphs = {
        name: next(p for p in map(lambda n: _find(root, n), choices) if p)
        for name, choices in GRAPH_FILES.items()
    }
    default_voice = root / DEFAULT_VOICE_FILE
    return ChatterboxWeights(
        root=root,
        tokenizer=root / TOKENIZER_FILE,
        default_voice=default_voice if default_voice.is_file() else None,
        **graphs,
    )


def download_weights(settings: Settings, *, progress: bool | None = None) -> ChatterboxWeights:
    """Download the bundle from the hub into `weights_dir(settings)` and return it.

    A progress bar goes to stderr when it is a terminal (`progress=None`), never into a pipe
    or a cron log. Files already there are not fetched again.
    """
    root = weights_dir(settings)
    try:
        from huggingface_hub import snapshot_download
        from huggingface_hub.utils import disable_progress_bars, enable_progress_bars

        from vocal.hub import rich_progress_class
    except ImportError:
        raise EngineError(
            "downloading the Chatterbox weights needs huggingface_hub",
            hint="pip install 'vocal[chatterbox]'",
        ) from None
    show = sys.stderr.isatty() if progress is None else progress
    (enable_progress_bars if show else disable_progress_bars)()
    root.mkdir(parents=True, exist_ok=True)
    if show:
        print(
            f"vocal: downloading Chatterbox ({DOWNLOAD_SIZE}) from "
            f"huggingface.co/{settings.chatterbox_repo} into {root}",
            file=sys.stderr,
        )
    try:
        snapshot_download(
            repo_id=settings.chatterbox_repo,
            allow_patterns=list(DOWNLOAD_PATTERNS),
            local_dir=root,
            tqdm_class=rich_progress_class() if show else None,
        )
    except KeyboardInterrupt:
        raise
    except Exception as exc:
        reason = " ".join(str(exc).split()) or type(exc).__name__
        raise EngineError(
            f"could not download the Chatterbox weights from huggingface.co/"
            f"{settings.chatterbox_repo}: {reason}",
            hint="check the network and run it again (finished files are kept), or put the "
            "files in a directory and set VOCAL_CHATTERBOX_DIR",
        ) from None
    return find_weights(settings)


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
        path.parent.mkdir(parents=True, exist_ok=True)
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


def _file_identity(path: Path) -> str:
    stat = path.stat()
    return f"{path.name}:{stat.st_size}:{stat.st_mtime_ns}"


# -- sessions -------------------------------------------------------------------------------------
@dataclass
class _Sessions:
    """The graphs opened on one execution provider, and what the engine reads off them."""

    provider: str
    weights: ChatterboxWeights
    options: Any
    embed: Any
    language_model: Any
    decoder: Any
    encoder: Any = None
    embed_inputs: frozenset[str] = frozenset()
    past_names: tuple[str, ...] = ()
    present_names: tuple[str, ...] = ()
    kv_shape: tuple[int, int] = (16, 64)
    kv_dtype: Any = np.float32
    embeds_dtype: Any = np.float32
    lm_position_ids: bool = False


_ORT_FLOAT = {"tensor(float16)": np.float16, "tensor(float)": np.float32}


def _open_session(path: Path, provider: str, options: Any) -> Any:
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
        raise ProviderFailure(f"failed to open {path.name}: {_one_line(exc)}") from exc
    granted = session.get_providers()
    if not granted or granted[0] != provider:
        raise ProviderFailure(f"was not granted for {path.name} (onnxruntime chose {granted})")
    return session


def _one_line(exc: BaseException) -> str:
    text = " ".join(str(exc).split()) or type(exc).__name__
    return text if len(text) <= 300 else text[:297] + "..."


class ChatterboxEngine(TtsEngine):
    """Speaks in a cloned voice: a stored voice's name, a reference clip's path, or None for
    the bundle's default voice.

    Args:
        voice: a voice in the voice store (`vocal voices add`), a path to a WAV, or None.
        settings: resolved settings (default: `load_settings()`).
        exaggeration: Chatterbox's emotion exaggeration, 0.25–2 (0.5 is neutral).
        report: where provider changes are announced (default: stderr).

    `speed` is accepted and ignored: Chatterbox has no rate control, and resampling would shift
    the cloned voice's pitch.
    """

    name: ClassVar[str] = "chatterbox"
    sample_rate: int = SAMPLE_RATE
    multilingual: ClassVar[bool] = False

    def __init__(
        self,
        voice: str | None = None,
        *,
        settings: Settings | None = None,
        exaggeration: float = DEFAULT_EXAGGERATION,
        report: Any = None,
        **_options: Any,  # options meant for other engines (load_tts passes one set to all)
    ) -> None:
        from vocal.config import load_settings

        self.settings = settings if settings is not None else load_settings()
        self.weights = find_weights(self.settings, voice=voice)
        self.voice, self.reference = self._reference(voice)
        self.exaggeration = float(exaggeration)
        try:
            from tokenizers import Tokenizer
        except ImportError:
            raise EngineError(
                "the chatterbox engine needs the tokenizers package",
                hint="pip install 'vocal[chatterbox]'",
            ) from None
        try:
            self._tokenizer = Tokenizer.from_file(str(self.weights.tokenizer))
        except Exception as exc:
            raise EngineError(
                f"cannot read {self.weights.tokenizer}: {_one_line(exc)}",
                hint="download the weights again: `vocal setup --engine chatterbox`",
            ) from None
        import onnxruntime as ort

        available = tuple(ort.get_available_providers())
        if self.settings.chatterbox_providers:
            rungs = parse_ladder(self.settings.chatterbox_providers)
        else:
            rungs = default_ladder(available)
        ladder_options: dict[str, Any] = {} if report is None else {"report": report}
        self.ladder = ProviderLadder(
            "chatterbox",
            rungs,
            self.settings.home / "providers",
            available=available,
            **ladder_options,
        )
        self._conditioning: Conditioning | None = None
        self._unsaved = False
        #: "cache" or "encoded" once the voice's conditioning is loaded.
        self.conditioning_source: str | None = None
        #: Speech tokens generated for the last sentence, and whether it ended on the stop token.
        self.last_token_count = 0
        self.last_stopped = False
        self._sessions: _Sessions | None = self.ladder.start(self._open)

    # -- voice ---------------------------------------------------------------------------
    def _reference(self, voice: str | None) -> tuple[str, Path]:
        if voice is None:
            if self.weights.default_voice is None:
                raise UsageError(
                    "the chatterbox engine needs a voice: its weights have no default_voice.wav",
                    hint="add one with `vocal voices add NAME CLIP.wav` and use --voice NAME",
                )
            return "default", self.weights.default_voice
        path = Path(voice).expanduser()
        if path.suffix.lower() == ".wav" and path.is_file():
            # A stored voice's reference (what resolve_voice returns) is named by its directory.
            return (path.parent.name if path.name == "default.wav" else path.stem), path
        from vocal.tts.voices import VoiceStore

        store = VoiceStore.from_settings(self.settings)
        return voice, store.get(voice).reference()

    @classmethod
    def voice_names(cls, **options: Any) -> list[str]:
        """The stored voices (the engine speaks any of them)."""
        from vocal.config import load_settings
        from vocal.tts.voices import VoiceStore

        settings = options.get("settings") or load_settings()
        return [v.name for v in VoiceStore.from_settings(settings).voices() if v.problem is None]

    @property
    def provider(self) -> str:
        """The execution provider the engine runs on now."""
        return self.ladder.current

    # -- sessions -----------------------------------------------------------------------
    def _open(self, provider: str) -> _Sessions:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 3  # errors only: warnings would litter stderr every turn
        embed = _open_session(self.weights.embed_tokens, provider, options)
        language_model = _open_session(self.weights.language_model, provider, options)
        decoder = _open_session(self.weights.conditional_decoder, provider, options)
        lm_inputs = {i.name: i for i in language_model.get_inputs()}
        past_names = tuple(n for n in lm_inputs if n.startswith("past_key_values."))
        lm_outputs = [o.name for o in language_model.get_outputs()]
        present_names = tuple(n.replace("past_key_values.", "present.", 1) for n in past_names)
        if "logits" not in lm_outputs or not set(present_names) <= set(lm_outputs):
            raise EngineError(
                f"{self.weights.language_model} is not a Chatterbox language model "
                f"(outputs {lm_outputs[:4]}...)"
            )
        shape = lm_inputs[past_names[0]].shape if past_names else [1, 16, 0, 64]
        heads = shape[1] if isinstance(shape[1], int) else 16
        head_dim = shape[3] if isinstance(shape[3], int) else 64
        return _Sessions(
            provider=provider,
            weights=self.weights,
            options=options,
            embed=embed,
            language_model=language_model,
            decoder=decoder,
            embed_inputs=frozenset(i.name for i in embed.get_inputs()),
            past_names=past_names,
            present_names=present_names,
            kv_shape=(heads, head_dim),
            kv_dtype=_ORT_FLOAT.get(lm_inputs[past_names[0]].type, np.float32)
            if past_names
            else np.float32,
            embeds_dtype=_ORT_FLOAT.get(lm_inputs["inputs_embeds"].type, np.float32),
            lm_position_ids="position_ids" in lm_inputs,
        )

    def close(self) -> None:
        """Drop the sessions (and the memory they hold)."""
        self._sessions = None

    # -- conditioning ------------------------------------------------------------------------
    def conditioning_path(self) -> Path:
        """Where this voice's conditioning is cached: keyed by the clip's bytes and the speech
        encoder, so a re-recorded voice or new weights are encoded afresh."""
        digest = hashlib.sha256(self.reference.read_bytes())
        digest.update(_file_identity(self.weights.speech_encoder).encode())
        label = re.sub(r"[^\w.-]", "_", self.voice)[:64] or "voice"
        return conditioning_cache_dir(self.settings) / f"{label}-{digest.hexdigest()[:16]}.npz"

    def _load_conditioning(self, sessions: _Sessions) -> Conditioning:
        if self._conditioning is not None:
            return self._conditioning
        path = self.conditioning_path()
        cached = Conditioning.load(path)
        if cached is not None and cached.problem() is None:
            self._conditioning, self.conditioning_source = cached, "cache"
            return cached
        conditioning = self._encode(sessions)
        problem = conditioning.problem()
        if problem:
            raise _NonSpeech(problem)
        # Saved once it has produced speech (see synthesize): a provider that encodes garbage
        # must not leave it in the cache for the next rung and the next process.
        self._conditioning, self.conditioning_source = conditioning, "encoded"
        self._unsaved = True
        return conditioning

    def _encode(self, sessions: _Sessions) -> Conditioning:
        from vocal.audio.wav import read_wav

        # The speech encoder (~600 MB) is opened only on a cache miss: once per voice, not per turn.
        if sessions.encoder is None:
            sessions.encoder = _open_session(
                self.weights.speech_encoder, sessions.provider, sessions.options
            )
        clip = read_wav(self.reference).to_mono().resample(SAMPLE_RATE)
        audio_values = clip.mono_samples[np.newaxis, :].astype(np.float32)
        input_name = sessions.encoder.get_inputs()[0].name
        outputs = sessions.encoder.run(None, {input_name: audio_values})
        named = dict(zip((o.name for o in sessions.encoder.get_outputs()), outputs, strict=True))
        ordered = [named.get(name) for name in Conditioning.FIELDS]
        if any(value is None for value in ordered):
            ordered = outputs[:4]  # an export that names its outputs differently: same order
        features, tokens, embeddings, speaker_features = ordered
        return Conditioning(
            audio_features=np.asarray(features),
            audio_tokens=np.asarray(tokens, dtype=np.int64).reshape(1, -1),
            speaker_embeddings=np.asarray(embeddings),
            speaker_features=np.asarray(speaker_features),
        )

    # -- synthesis ----------------------------------------------------------------------------
    def synthesize(self, sentence: str, *, speed: float = 1.0) -> np.ndarray:
        """Mono float32 samples at 24 kHz for one sentence in the engine's voice.

        A provider that raises or produces non-speech moves the engine one rung down the
        ladder and the sentence is synthesized again there; the rung that produced speech is
        remembered for the next process.
        """
        text = normalize_text(sentence)
        if not text:
            return np.zeros(0, np.float32)
        while True:
            sessions = self._sessions
            if sessions is None:
                raise RuntimeError("the chatterbox engine is closed")
            try:
                samples = self._speak(sessions, text)
                problem = check_speech(samples)
                if problem is None:
                    if self._unsaved and self._conditioning is not None:
                        self._conditioning.save(self.conditioning_path())
                        self._unsaved = False
                    self.ladder.remember()
                    return samples
                reason = f"produced non-speech ({problem})"
            except _NonSpeech as exc:
                reason = f"produced non-speech ({exc})"
            except (KeyboardInterrupt, EngineError):
                raise
            except Exception as exc:
                reason = f"failed: {_one_line(exc)}"
            # Encode the voice again on the next rung, unless it came from the cache (made by a
            # rung that produced speech).
            if self.conditioning_source != "cache":
                self._conditioning, self.conditioning_source = None, None
            self._sessions = None
            self._sessions = self.ladder.step_down(reason, self._open)

    def _speak(self, sessions: _Sessions, text: str) -> np.ndarray:
        conditioning = self._load_conditioning(sessions)
        tokens = self._generate(sessions, conditioning, text)
        speech_tokens = np.concatenate(
            [conditioning.audio_tokens.astype(np.int64), tokens[np.newaxis, :]], axis=1
        )
        waveform = sessions.decoder.run(
            None,
            {
                "speech_tokens": speech_tokens,
                "speaker_embeddings": conditioning.speaker_embeddings,
                "speaker_features": conditioning.speaker_features,
            },
        )[0]
        return np.asarray(waveform, dtype=np.float32).reshape(-1)

    def _embed(self, sessions: _Sessions, ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
        feed: dict[str, np.ndarray] = {"input_ids": ids}
        if "position_ids" in sessions.embed_inputs:
            feed["position_ids"] = positions
        if "exaggeration" in sessions.embed_inputs:
            feed["exaggeration"] = np.array([self.exaggeration], dtype=np.float32)
        return sessions.embed.run(None, feed)[0]

    def _generate(self, sessions: _Sessions, conditioning: Conditioning, text: str) -> np.ndarray:
        """Speech tokens for `text`: greedy, with a repetition penalty, until the stop token or
        the ceiling."""
        ids = np.array([self._tokenizer.encode(text).ids], dtype=np.int64)
        # The export's convention: text tokens count from -1 (the first is a marker), the
        # trailing speech-start tokens sit at 0.
        positions = np.where(
            ids >= START_SPEECH_TOKEN, 0, np.arange(ids.shape[1])[np.newaxis, :] - 1
        ).astype(np.int64)
        embeds = self._embed(sessions, ids, positions)
        embeds = np.concatenate(
            [conditioning.audio_features.astype(embeds.dtype), embeds], axis=1
        ).astype(sessions.embeds_dtype)
        heads, head_dim = sessions.kv_shape
        past = {
            name: np.zeros((1, heads, 0, head_dim), dtype=sessions.kv_dtype)
            for name in sessions.past_names
        }
        output_names = ["logits", *sessions.present_names]
        length = 0
        generated: list[int] = []
        seen = np.zeros(0, dtype=np.int64)
        ceiling = max_new_tokens(text)
        self.last_stopped = False
        for step in range(ceiling):
            new = embeds.shape[1]
            length += new
            feed = {"inputs_embeds": embeds, "attention_mask": np.ones((1, length), np.int64)}
            if sessions.lm_position_ids:
                feed["position_ids"] = np.arange(length - new, length, dtype=np.int64)[np.newaxis]
            feed.update(past)
            logits, *present = sessions.language_model.run(output_names, feed)
            scores = np.asarray(logits[0, -1], dtype=np.float32).copy()
            if seen.size:
                # Chatterbox's repetition penalty over every token said so far: shrink positive
                # scores, push negative ones further down.
                picked = scores[seen]
                scores[seen] = np.where(
                    picked < 0, picked * REPETITION_PENALTY, picked / REPETITION_PENALTY
                )
            if not np.all(np.isfinite(scores)):
                raise _NonSpeech("NaN logits from the language model")
            token = int(np.argmax(scores))
            if token == STOP_SPEECH_TOKEN:
                self.last_stopped = True
                break
            generated.append(token)
            if token not in seen:
                seen = np.append(seen, token)
            past = dict(zip(sessions.past_names, present, strict=True))
            embeds = self._embed(
                sessions, np.array([[token]], np.int64), np.array([[step + 1]], np.int64)
            ).astype(sessions.embeds_dtype)
        self.last_token_count = len(generated)
        # Only real speech codes reach the decoder (start/stop and padding ids are not sounds).
        tokens = np.array([t for t in generated if t < START_SPEECH_TOKEN], dtype=np.int64)
        if tokens.size == 0:
            raise _NonSpeech("no speech tokens generated")
        return tokens


class _NonSpeech(Exception):
    """A rung's output cannot be speech (NaN, silence): try the next rung."""


__all__ = [
    "SAMPLE_RATE",
    "ChatterboxEngine",
    "ChatterboxWeights",
    "Conditioning",
    "check_speech",
    "download_weights",
    "find_weights",
    "max_new_tokens",
    "missing_weights",
    "normalize_text",
    "weights_dir",
]
