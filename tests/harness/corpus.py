"""The real-speech corpus (issue 16) for tests and benchmarks: recordings of real people with
reference transcripts, and turns built from them, in a cache directory that `scripts/corpus`
fills (tests/corpus/README.md: sources, licences, what each turn is).

    from harness.corpus import ensure_corpus, load_turns, corpus_wer
    ensure_corpus()                               # builds the cache once (~1 min, network)
    for turn in load_turns("paused", split="tune"):
        ... turn.path, turn.text, turn.cut_s, turn.pause_s, turn.speech_end_s ...
    corpus_wer([(turn.text, hypothesis), ...])    # summed edits / summed reference words

Word error rates use Whisper's own EnglishTextNormalizer (from the openai-whisper sdist, MIT,
fetched into the cache by scripts/corpus; it needs the `regex` and `more-itertools`
packages). Without it, tests/harness/words.py's lower-case word split stands in, with a warning.
Times are seconds in the turn's own WAV (16 kHz mono float32).
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import subprocess
import sys
import warnings
from dataclasses import dataclass
from pathlib import Path

from harness.words import word_edits, words

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "scripts" / "corpus"
KINDS = ("complete", "paused", "abandoned")
SPLITS = ("tune", "heldout")


@dataclass(frozen=True)
class Clip:
    """A sentence-level recording as shipped (Sonnet 1 cut at line pauses)."""

    id: str
    path: Path
    text: str  # reference transcript
    speaker: str
    source: str
    split: str  # "tune" or "heldout" (kept out of all tuning)
    duration_s: float
    speech_start_s: float
    speech_end_s: float


@dataclass(frozen=True)
class Turn:
    """A turn built from a clip: `complete`, `paused` (a pause spliced in mid-sentence) or
    `abandoned` (cut mid-sentence, then room tone).

    text is what a perfect transcript holds: the whole sentence, or for an abandoned turn the
    words up to the cut. cut_s is where the pause or the silence begins (None for complete);
    pause_s the room tone spliced in there (0 for complete, 6 s for abandoned); speech_end_s
    the end of the last word heard."""

    id: str
    kind: str
    path: Path
    text: str
    clip: str
    speaker: str
    source: str
    split: str
    duration_s: float
    speech_start_s: float
    speech_end_s: float
    cut_s: float | None
    pause_s: float
    cut_word: str | None = None  # the word before the cut
    cut_class: str | None = None  # "function" (cannot end a sentence) or "content"


def corpus_dir() -> Path:
    """Where the corpus lives: $VOCAL_CORPUS_DIR, else $XDG_CACHE_HOME/vocal-corpus, else
    ~/.cache/vocal-corpus (the same rule as scripts/corpus)."""
    if os.environ.get("VOCAL_CORPUS_DIR"):
        return Path(os.environ["VOCAL_CORPUS_DIR"]).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache).expanduser() / "vocal-corpus"


def ensure_corpus() -> Path:
    """The corpus directory, built by scripts/corpus first when its manifest is missing
    (raises RuntimeError if the build fails, e.g. offline on a fresh machine)."""
    root = corpus_dir()
    if not (root / "manifest.json").is_file():
        result = subprocess.run(
            [sys.executable, str(SCRIPT), "--quiet"], capture_output=True, text=True
        )
        if result.returncode != 0 or not (root / "manifest.json").is_file():
            raise RuntimeError(f"scripts/corpus failed: {result.stderr.strip()[-500:]}")
    return root


@functools.lru_cache(maxsize=4)
def _manifest(root: Path) -> dict:
    return json.loads((root / "manifest.json").read_text())


def manifest() -> dict:
    """The corpus manifest (built if missing)."""
    return _manifest(ensure_corpus())


def _check(kind: str | None, split: str | None) -> None:
    if kind is not None and kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
    if split is not None and split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, not {split!r}")


def load_clips(split: str | None = None) -> list[Clip]:
    """The corpus's clips, all or one split's."""
    _check(None, split)
    root = ensure_corpus()
    return [
        Clip(
            id=c["id"],
            path=root / c["path"],
            text=c["text"],
            speaker=c["speaker"],
            source=c["source"],
            split=c["split"],
            duration_s=c["duration_s"],
            speech_start_s=c["speech_start_s"],
            speech_end_s=c["speech_end_s"],
        )
        for c in _manifest(root)["clips"]
        if split is None or c["split"] == split
    ]


def load_turns(kind: str | None = None, split: str | None = None) -> list[Turn]:
    """The corpus's turns, filtered by kind ("complete", "paused", "abandoned") and split
    ("tune", "heldout")."""
    _check(kind, split)
    root = ensure_corpus()
    return [
        Turn(
            id=t["id"],
            kind=t["kind"],
            path=root / t["path"],
            text=t["text"],
            clip=t["clip"],
            speaker=t["speaker"],
            source=t["source"],
            split=t["split"],
            duration_s=t["duration_s"],
            speech_start_s=t["speech_start_s"],
            speech_end_s=t["speech_end_s"],
            cut_s=t.get("cut_s"),
            pause_s=t.get("pause_s", 0.0),
            cut_word=t.get("cut_word"),
            cut_class=t.get("cut_class"),
        )
        for t in _manifest(root)["turns"]
        if (kind is None or t["kind"] == kind) and (split is None or t["split"] == split)
    ]


@functools.lru_cache(maxsize=1)
def _whisper_normalizer():
    """Whisper's EnglishTextNormalizer from the cache, or None (with a warning)."""
    package = corpus_dir() / "normalizer" / "whisper_normalizers"
    problem = "it is not in the corpus cache (run scripts/corpus)"
    if (package / "__init__.py").is_file():
        name = "whisper_normalizers"
        spec = importlib.util.spec_from_file_location(
            name, package / "__init__.py", submodule_search_locations=[str(package)]
        )
        module = importlib.util.module_from_spec(spec)
        sys.modules[name] = module  # english.py imports .basic relative to the package
        try:
            spec.loader.exec_module(module)
            return module.EnglishTextNormalizer()
        except ImportError as exc:
            sys.modules.pop(name, None)
            problem = f"it needs the {exc.name} package"
    warnings.warn(
        f"Whisper's text normaliser is unavailable ({problem}): word error rates use "
        "tests/harness/words.py's lower-case words instead",
        stacklevel=3,
    )
    return None


def normalize(text: str) -> list[str]:
    """`text` as words for a word error rate: Whisper's EnglishTextNormalizer ("Mr." ->
    "mister", "ten" -> "10", no punctuation or case; adjacent numbers joined), else
    lower-case words."""
    normalizer = _whisper_normalizer()
    if normalizer is None:
        return words(text)
    return _digits_joined(normalizer(text).split())


def _digits_joined(tokens: list[str]) -> list[str]:
    """Runs of digit-only tokens as one: the normaliser makes "five five" "55" but keeps
    Whisper's "5 5" as two words, which would count two errors for a right answer."""
    out: list[str] = []
    for token in tokens:
        if token.isdigit() and out and out[-1].isdigit():
            out[-1] += token
        else:
            out.append(token)
    return out


def word_error_rate(reference: str, hypothesis: str) -> float:
    """Word edits (substitutions, insertions, deletions) over the reference's word count,
    after normalize(); 0 or 1 for an empty reference."""
    ref, hyp = normalize(reference), normalize(hypothesis)
    if not ref:
        return float(bool(hyp))
    return word_edits(ref, hyp) / len(ref)


def corpus_wer(pairs) -> float:
    """Corpus word error rate of (reference, hypothesis) pairs: summed edits over summed
    reference words (not the mean of per-clip rates, which short clips would dominate)."""
    edits = words = 0
    for reference, hypothesis in pairs:
        ref = normalize(reference)
        edits += word_edits(ref, normalize(hypothesis))
        words += len(ref)
    return edits / words if words else 0.0
