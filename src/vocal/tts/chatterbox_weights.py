"""Chatterbox's weights: where they are (`weights_dir`, `find_weights`), which are missing, and
fetching them from the hub (`download_weights`, about 1.5 GB, once). See vocal.tts.chatterbox.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

from vocal.config import Settings
from vocal.errors import EngineError
from vocal.floor.statedir import make_private_dirs

DEFAULT_REPO = Settings.chatterbox_repo
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

        from vocal.hub import bound_hub_stalls, rich_progress_class
    except ImportError:
        raise EngineError(
            "downloading the Chatterbox weights needs huggingface_hub",
            hint="pip install 'vocal[chatterbox]'",
        ) from None
    bound_hub_stalls()
    show = sys.stderr.isatty() if progress is None else progress
    (enable_progress_bars if show else disable_progress_bars)()
    make_private_dirs(root)  # 0700 (issue 37); the hub makes its folders inside it
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


__all__ = [
    "ChatterboxWeights",
    "download_weights",
    "find_weights",
    "missing_weights",
    "weights_dir",
]
