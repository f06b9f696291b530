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
language models and the tests' tiny bundle (tests/harness/chatterbox_bundle.py) run unchanged.
Weights come from a local directory (`VOCAL_CHATTERBOX_DIR`) or are downloaded into the cache
directory by `download_weights` (`vocal setup --engine chatterbox`), with a progress bar.

The sessions run on an execution-provider ladder (vocal.providers): GPU providers first, CPU
last; a rung that fails or produces non-speech moves one down and the working rung is
remembered for the next process.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

import numpy as np

from vocal.errors import EngineError, UsageError
from vocal.providers import ProviderLadder, default_ladder, parse_ladder
from vocal.tts import TtsEngine
from vocal.tts.chatterbox_model import (
    DEFAULT_EXAGGERATION,
    ORT_FLOAT,
    REPETITION_PENALTY,
    SAMPLE_RATE,
    START_SPEECH_TOKEN,
    STOP_SPEECH_TOKEN,
    Conditioning,
    Sessions,
    check_speech,
    conditioning_cache_dir,
    file_identity,
    max_new_tokens,
    normalize_text,
    one_line,
    open_session,
)
from vocal.tts.chatterbox_weights import find_weights

if TYPE_CHECKING:
    from vocal.config import Settings


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
    voice: str  # always named: the stored voice, the clip's name, or "default"

    def __init__(
        self,
        voice: str | None = None,
        *,
        settings: Settings | None = None,
        exaggeration: float = DEFAULT_EXAGGERATION,
        report: Callable[[str], None] | None = None,
        **_options: object,  # options meant for other engines (load_tts passes one set to all)
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
                f"cannot read {self.weights.tokenizer}: {one_line(exc)}",
                hint="download the weights again: `vocal setup --engine chatterbox`",
            ) from None
        import onnxruntime as ort

        available = tuple(ort.get_available_providers())
        if self.settings.chatterbox_providers:
            rungs = parse_ladder(self.settings.chatterbox_providers)
        else:
            rungs = default_ladder(available)
        from vocal.floor.statedir import make_private_dirs

        self.ladder = ProviderLadder(
            "chatterbox",
            rungs,
            self.settings.home / "providers",
            available=available,
            make_dir=make_private_dirs,
        )
        if report is not None:  # else the ladder's own default (stderr)
            self.ladder.report = report
        self._conditioning: Conditioning | None = None
        self._unsaved = False
        #: "cache" or "encoded" once the voice's conditioning is loaded.
        self.conditioning_source: str | None = None
        #: Speech tokens generated for the last sentence, and whether it ended on the stop token.
        self.last_token_count = 0
        self.last_stopped = False
        self._sessions: Sessions | None = self.ladder.start(self._open)

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
    def voice_names(cls, *, settings: Settings | None = None, **_options: object) -> list[str]:
        """The stored voices (the engine speaks any of them)."""
        from vocal.config import load_settings
        from vocal.tts.voices import VoiceStore

        settings = settings or load_settings()
        return [v.name for v in VoiceStore.from_settings(settings).voices() if v.problem is None]

    @property
    def provider(self) -> str:
        """The execution provider the engine runs on now."""
        return self.ladder.current

    # -- sessions -----------------------------------------------------------------------
    def _open(self, provider: str) -> Sessions:
        import onnxruntime as ort

        options = ort.SessionOptions()
        options.log_severity_level = 3  # errors only: warnings would litter stderr every turn
        embed = open_session(self.weights.embed_tokens, provider, options)
        language_model = open_session(self.weights.language_model, provider, options)
        decoder = open_session(self.weights.conditional_decoder, provider, options)
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
        return Sessions(
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
            kv_dtype=ORT_FLOAT.get(lm_inputs[past_names[0]].type, np.float32)
            if past_names
            else np.float32,
            embeds_dtype=ORT_FLOAT.get(lm_inputs["inputs_embeds"].type, np.float32),
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
        digest.update(file_identity(self.weights.speech_encoder).encode())
        label = re.sub(r"[^\w.-]", "_", self.voice)[:64] or "voice"
        return conditioning_cache_dir(self.settings) / f"{label}-{digest.hexdigest()[:16]}.npz"

    def _load_conditioning(self, sessions: Sessions) -> Conditioning:
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

    def _encode(self, sessions: Sessions) -> Conditioning:
        from vocal.audio.wav import read_wav

        # The speech encoder (~600 MB) is opened only on a cache miss: once per voice, not per turn.
        if sessions.encoder is None:
            sessions.encoder = open_session(
                self.weights.speech_encoder, sessions.provider, sessions.options
            )
        clip = read_wav(self.reference).to_mono().resample(SAMPLE_RATE)
        audio_values = clip.mono_samples[np.newaxis, :].astype(np.float32)
        input_name = sessions.encoder.get_inputs()[0].name
        outputs = sessions.encoder.run(None, {input_name: audio_values})
        named = dict(zip((o.name for o in sessions.encoder.get_outputs()), outputs, strict=True))
        ordered: Sequence[np.ndarray | None] = [named.get(name) for name in Conditioning.FIELDS]
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
                reason = f"failed: {one_line(exc)}"
            # Encode the voice again on the next rung, unless it came from the cache (made by a
            # rung that produced speech).
            if self.conditioning_source != "cache":
                self._conditioning, self.conditioning_source = None, None
            self._sessions = None
            self._sessions = self.ladder.step_down(reason, self._open)

    def _speak(self, sessions: Sessions, text: str) -> np.ndarray:
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

    def _embed(self, sessions: Sessions, ids: np.ndarray, positions: np.ndarray) -> np.ndarray:
        feed: dict[str, np.ndarray] = {"input_ids": ids}
        if "position_ids" in sessions.embed_inputs:
            feed["position_ids"] = positions
        if "exaggeration" in sessions.embed_inputs:
            feed["exaggeration"] = np.array([self.exaggeration], dtype=np.float32)
        return sessions.embed.run(None, feed)[0]

    def _generate(self, sessions: Sessions, conditioning: Conditioning, text: str) -> np.ndarray:
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


__all__ = ["ChatterboxEngine"]
