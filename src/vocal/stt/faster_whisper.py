"""The faster-whisper engine: Whisper on CTranslate2, int8, beam 5, on the CPU.

Chosen for short turns on a few cores (docs/design.md has the measurements): int8 weights;
beam 5, chosen on real human speech; `without_timestamps` and no conditioning on previous
text, since a turn is one short utterance; no VAD filter, since vocal endpointed the audio
already. Loaded models are kept per process (`_MODELS`).

A shorter encoder window for short turns: faster-whisper pads every clip to Whisper's 30 s
window, and encoding those 3000 frames is most of a short turn's cost. CTranslate2's encoder
takes fewer frames, so an utterance of up to `SHORT_WINDOW_MAX_S` is encoded in a window of
its own length plus a second, at least `SHORT_WINDOW_MIN_S` (as whisper.cpp's `audio_ctx`
does): shorter still, Whisper loops on one-word clips.

Loops and repeats: a decode that looks like a loop (compression ratio over 2.4, or as many
tokens as the cap allows) or says a phrase twice (vocal.stt.repeats: "Run the tests. Run the
tests."; issue 36) is decoded again from the same encoded audio with a repetition penalty
(`RETRY_REPETITION_PENALTY`: one more decode, no encoding). A loop the retry keeps goes to the
30 s window; a phrase of three words or more the retry still repeats is cut to one copy, a
two-word one kept as said (vocal.stt.repeats.mend). The segment records a retry or a cut
(`repaired`, and what was `heard`). Every decode is capped in proportion to the audio's length
(`token_cap`), so a loop cannot run long. Nothing samples: the same audio gives the same
words, so an early transcript and the final one of the same utterance agree.
"""

from __future__ import annotations

import os
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vocal.config import Settings
from vocal.errors import EngineError
from vocal.hub import first_line, hub_snapshot
from vocal.stt import Transcript, repeats
from vocal.stt.models import (
    EMBEDDED_MODEL,
    choose_language,
    embedded_model_path,
    local_model_dir,
    looks_like_path,
)
from vocal.stt.repeats import find_repeat, mend

if TYPE_CHECKING:
    import numpy as np

    from vocal.audio.wav import Audio

#: CTranslate2's OpenMP threads wait for each other asleep, not spinning: spinning, they lost
#: their cores to any busy process beside them (a build, an agent), and a 4 s utterance took
#: 2-16 s to transcribe instead of 0.3 s (docs/design.md). Read when libgomp loads, so set
#: before faster-whisper is imported; a value the person set wins.
WAIT_POLICY = ("OMP_WAIT_POLICY", "PASSIVE")
os.environ.setdefault(*WAIT_POLICY)

#: Whisper keeps at most this many tokens of text before the utterance (half its 448-token
#: context, less the start-of-previous token).
MAX_PROMPT_TOKENS = 223
#: Utterances up to this long get a short encoder window (see the module docstring).
SHORT_WINDOW_MAX_S = 20.0
#: The shortest encoder window: 8 s was the least with no loop on the test phrases; 10 s
#: leaves a margin.
SHORT_WINDOW_MIN_S = 10
#: Whisper's own limits: compression ratio of a looping decode, log-probability and
#: no-speech probability of silence (openai/whisper transcribe.py defaults).
COMPRESSION_RATIO_MAX = 2.4
NO_SPEECH_PROB = 0.6
LOG_PROB_MIN = -1.0
#: The retry of a decode that repeats a phrase (module docstring): 1.1 and 1.3 both gave the
#: words said on every loop found; the milder one changes least of what was heard.
RETRY_REPETITION_PENALTY = 1.1
#: Whisper's text context, and the most new tokens that fit in it after the longest prompt
#: (hints, the start-of-previous token, the start sequence and no-timestamps).
MAX_LENGTH = 448
MAX_NEW_TOKENS = MAX_LENGTH - (MAX_PROMPT_TOKENS + 1) - 4

#: (model directory, compute type, threads) -> loaded WhisperModel, for this process.
_MODELS: dict[tuple[str, str, int], Any] = {}
_MODELS_LOCK = threading.Lock()
#: What a CTranslate2 Whisper directory must hold to load offline (faster-whisper fetches the
#: tokenizer from the hub when tokenizer.json is missing).
REQUIRED_FILES = ("model.bin", "tokenizer.json")
HUB_FILES = [
    "config.json",
    "preprocessor_config.json",
    "model.bin",
    "tokenizer.json",
    "vocabulary.*",
]


def token_cap(duration_s: float) -> int:
    """The most tokens a decode of `duration_s` of audio may take (vocal.stt.repeats), at most
    `MAX_NEW_TOKENS` so that the longest prompt still fits."""
    return min(MAX_NEW_TOKENS, repeats.token_cap(duration_s))


def resolve_model_dir(model: str) -> Path:
    """The CTranslate2 directory for `model`: embedded, local, or downloaded (EngineError)."""
    if model == EMBEDDED_MODEL:
        embedded = embedded_model_path()
        if embedded is not None:
            return embedded
    if looks_like_path(model):
        return local_model_dir(model, required=REQUIRED_FILES)
    from faster_whisper.utils import _MODELS as KNOWN  # name -> hub repository

    if "/" in model:
        repo_id = model
    elif model in KNOWN:
        repo_id = KNOWN[model]
    else:
        raise EngineError(
            f"unknown Whisper model {model!r}",
            hint=f"a path to a CTranslate2 model directory, a hub id, or one of {', '.join(KNOWN)}",
        )
    return local_model_dir(
        str(hub_snapshot(repo_id, allow_patterns=HUB_FILES, what=f"the Whisper model {model}")),
        required=REQUIRED_FILES,
    )


def _load(model_dir: Path, compute_type: str, cpu_threads: int) -> Any:
    key = (str(model_dir), compute_type, cpu_threads)
    with _MODELS_LOCK:
        if key not in _MODELS:
            from faster_whisper import WhisperModel

            try:
                _MODELS[key] = WhisperModel(
                    str(model_dir), device="cpu", compute_type=compute_type, cpu_threads=cpu_threads
                )
            except Exception as exc:  # ctranslate2 raises RuntimeError/ValueError for bad files
                raise EngineError(
                    f"cannot load the Whisper model in {model_dir}: {first_line(exc)}",
                    hint="the directory may be corrupt: download it again or point --model "
                    "elsewhere",
                ) from None
        return _MODELS[key]


class FasterWhisperEngine:
    """Whisper through faster-whisper (CTranslate2): int8 on the CPU, greedy decoding.

    Args:
        model: "tiny.en" (the embedded default), another model name (downloaded once), a hub
            id "org/repo", or a path to a CTranslate2 Whisper directory.
        language: a language code, or None/"auto" to detect (multilingual models only).
        compute_type: CTranslate2 compute type; int8 is fastest on CPUs.
        beam_size: the stt_beam_size setting by default (the module docstring); 1 is greedy
            decoding, the fastest.
        cpu_threads: 0 lets CTranslate2 choose.
        hints: words to expect (vocal.stt.hints), given to Whisper as the text before the
            utterance (its prompt), in both the short and the 30 s window.
    """

    name = "faster-whisper"

    def __init__(
        self,
        model: str = EMBEDDED_MODEL,
        *,
        language: str | None = Settings.language,
        compute_type: str = "int8",
        beam_size: int = Settings.stt_beam_size,
        cpu_threads: int = 0,
        hints: str | None = None,
    ) -> None:
        started = time.perf_counter()
        self.model_name = model
        self.model_dir = resolve_model_dir(model)
        self._model = _load(self.model_dir, compute_type, cpu_threads)
        self.multilingual = bool(self._model.model.is_multilingual)
        self.language = choose_language(model, self.multilingual, language)
        self.beam_size = beam_size
        self.hints = hints.strip() if hints and hints.strip() else None
        #: Encode short turns in a short window (module docstring); False always uses 30 s.
        self.short_window = True
        self.load_s = time.perf_counter() - started

    def warm_up(self) -> None:
        """Run the model once on a second of near-silence, so the first real turn does not pay
        CTranslate2's first-call set-up (buffers, kernels): measured here, the first
        transcription of a 3 s phrase took 0.48 s median cold and 0.34 s after this warm-up
        (5 interleaved processes each, load ~3), and the warm-up itself 0.32-0.46 s. Callers
        run it in the background (vocal.hearing.stt_loading.SttLoader), while the reply plays."""
        import numpy as np

        noise = np.random.default_rng(0).standard_normal(16_000).astype(np.float32) * 1e-3
        if self.short_window and self.language:
            self._transcribe_short(noise)
        else:
            self._transcribe_full(noise, time.perf_counter())

    def transcribe(self, audio: Audio) -> Transcript:
        """Transcribe `audio` (any rate and channel count; resampled to 16 kHz mono)."""
        samples = audio.for_stt().mono_samples
        started = time.perf_counter()
        duration_s = samples.shape[0] / 16_000
        if self.short_window and self.language and duration_s <= SHORT_WINDOW_MAX_S:
            short = self._transcribe_short(samples)
            if short is not None:
                text, segment = short
                return Transcript(
                    text=text,
                    language=self.language,
                    duration_s=duration_s,
                    transcribe_s=time.perf_counter() - started,
                    segments=[{"start": 0.0, "end": duration_s, "text": text, **segment}]
                    if text
                    else [],
                )
        return self._transcribe_full(samples, started)

    def _transcribe_short(self, samples: np.ndarray) -> tuple[str, dict] | None:
        """(text, the segment's other fields: window, no-speech probability, any repair) from
        a window fitted to the clip, or None when the decode is not to be trusted (a loop)
        and the 30 s window must decide."""
        import ctranslate2
        import numpy as np
        from faster_whisper.tokenizer import Tokenizer
        from faster_whisper.transcribe import get_compression_ratio, get_suppressed_tokens

        model = self._model
        features = model.feature_extractor(samples)  # (80, frames), 100 frames a second
        frames = features.shape[-1]
        window = min(3000, max(SHORT_WINDOW_MIN_S * 100, -(-(frames + 100) // 100) * 100))
        features = np.pad(features, ((0, 0), (0, max(0, window - frames))))[:, :window]
        encoded = model.model.encode(
            ctranslate2.StorageView.from_array(np.ascontiguousarray(features[None])),
            to_cpu=False,
        )
        tokenizer = Tokenizer(
            model.hf_tokenizer, self.multilingual, task="transcribe", language=self.language
        )
        before: list[int] = []
        if self.hints:  # as faster-whisper builds an initial prompt: <|startofprev|> text
            before = [tokenizer.sot_prev, *tokenizer.encode(" " + self.hints)[-MAX_PROMPT_TOKENS:]]
        prompt = [*before, *tokenizer.sot_sequence, tokenizer.no_timestamps]
        cap = token_cap(samples.shape[0] / 16_000)

        def decode(**options: float) -> tuple[str, Any, bool]:
            """(text, result, whether it ran away: hit the cap or compresses like a loop)."""
            result = model.model.generate(
                encoded,
                [prompt],
                beam_size=self.beam_size,
                max_length=len(prompt) + cap,
                return_scores=True,
                return_no_speech_prob=True,
                suppress_blank=True,
                suppress_tokens=get_suppressed_tokens(tokenizer, [-1]),
                **options,
            )[0]
            tokens = result.sequences_ids[0]
            text = tokenizer.decode(tokens).strip()
            ran_away = len(tokens) >= cap or get_compression_ratio(text) > COMPRESSION_RATIO_MAX
            return text, result, ran_away

        text, result, ran_away = decode()
        segment: dict[str, Any] = {}
        if ran_away or find_repeat(text) is not None:
            retry_text, retry_result, retry_ran_away = decode(
                repetition_penalty=RETRY_REPETITION_PENALTY
            )
            how: str | None
            if ran_away:  # the retry only if it is clean, else the 30 s window decides
                if retry_ran_away or find_repeat(retry_text) is not None:
                    return None
                mended, how = retry_text, "retried"
            else:
                mended, how = mend(text, None if retry_ran_away else retry_text)
            if how == "retried":
                result = retry_result
            if how is not None:
                segment = {"repaired": how, "heard": text}
                text = mended
        tokens = result.sequences_ids[0]
        avg_logprob = result.scores[0] * len(tokens) / (len(tokens) + 1)
        if result.no_speech_prob > NO_SPEECH_PROB and avg_logprob < LOG_PROB_MIN:
            text = ""  # Whisper's own rule for a window with nobody speaking in it
        if not any(c.isalnum() for c in text):
            text = ""  # "." or "..." for silence or noise is no words
        return text, {
            "no_speech_prob": float(result.no_speech_prob),
            "window_s": window / 100,
            **segment,
        }

    def _transcribe_full(self, samples: np.ndarray, started: float) -> Transcript:
        """faster-whisper's own transcription, 30 s windows, each decode capped; a transcript
        that repeats a phrase is made again with the repetition penalty (module docstring)."""
        duration_s = samples.shape[0] / 16_000
        kept, language = self._decode_full(samples, duration_s)
        text = " ".join(s["text"] for s in kept if s["text"]).strip()
        if find_repeat(text) is not None:
            retry, _ = self._decode_full(
                samples, duration_s, repetition_penalty=RETRY_REPETITION_PENALTY
            )
            retry_text = " ".join(s["text"] for s in retry if s["text"]).strip()
            heard = text
            text, how = mend(heard, retry_text)
            if how == "retried":
                kept = retry
            if how is not None and kept:  # one segment: a repair may span several
                repair = {"text": text, "end": kept[-1]["end"], "repaired": how, "heard": heard}
                kept = [kept[0] | repair]
        if not any(c.isalnum() for c in text):
            text = ""
        return Transcript(
            text=text,
            language=language,
            duration_s=duration_s,
            transcribe_s=time.perf_counter() - started,
            segments=kept,
        )

    def _decode_full(
        self, samples: np.ndarray, duration_s: float, repetition_penalty: float = 1.0
    ) -> tuple[list[dict], str]:
        """faster-whisper's segments (as dicts) and language for `samples`."""
        segments, info = self._model.transcribe(
            samples,
            language=self.language,
            beam_size=self.beam_size,
            temperature=0.0,
            condition_on_previous_text=False,
            without_timestamps=True,
            vad_filter=False,
            initial_prompt=self.hints,
            max_new_tokens=token_cap(duration_s),
            repetition_penalty=repetition_penalty,
        )
        kept = [
            {
                "start": s.start,
                "end": s.end,
                "text": s.text.strip(),
                "no_speech_prob": s.no_speech_prob,
            }
            for s in segments  # a generator: decoding happens here
        ]
        return kept, info.language
