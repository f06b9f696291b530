"""hibari: the embedded default engine (neural, onnxruntime, 24 kHz; voice "heart" ships in the
wheel, others download once through hibari itself).

Fast start. Used as its README shows, hibari's first sentence in a process costs ~1.3 s on this
machine: `import hibari` pulls in scipy.fft (0.36 s) and urllib.request (0.08 s, for voice
downloads), the ONNX session optimizes its graph (0.29-0.40 s) and the G2P parses 3 MB of
gzipped JSON into dicts (0.38 s; marshal and pickle of the same dicts load no faster). The
engine removes all of it:

- hibari's DSP falls back to numpy's FFT when scipy.fft cannot be imported; measured the same
  speed per sentence (75 ms for 4.8 s of audio either way), so scipy.fft is kept out. The
  package's `__init__` (hibari.tts -> hibari.voices -> urllib) runs only if something reads an
  attribute of the package; vocal imports hibari.dsp and hibari.g2p directly.
- The optimized graph is saved once in ORT format under the cache directory and loaded from
  there with optimization off: 0.076 s instead of 0.29-0.40 s. It loads in a thread, which
  onnxruntime runs without the GIL, while the G2P is set up.
- The G2P's lexicons and tagger tables are written once into an SQLite file and read lazily,
  word by word, so set-up costs a file open instead of building 200 000 dict entries.

The first run in a fresh cache directory pays the old cost once and builds the caches when the
engine closes (after the last sentence is synthesized, while the audio still plays). Every
cached path falls back to hibari's own loading when a cache is missing, stale or unreadable,
and tests check that both G2P paths give identical phonemes.
"""

from __future__ import annotations

import importlib.util
import json
import os
import re
import sqlite3
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, ClassVar, TypedDict

from vocal.config import Settings
from vocal.errors import EngineError
from vocal.floor.statedir import make_private_dirs, record_made
from vocal.tts import TtsEngine, tts_cache_dir, unknown_voice
from vocal.tts._onnx import OrtSession, cached_session, file_stamp

if TYPE_CHECKING:
    import numpy as np

DEFAULT_VOICE = "heart"
SAMPLE_RATE = 24_000
#: Bump when the layout of the G2P cache file changes.
_G2P_CACHE_FORMAT = 1
#: hibari's model input limit (hibari.tts.MAX_PHONEMES): longer chunks are cut at clauses.
MAX_PHONEMES = 400
_CLAUSE = re.compile(r"(?<=[,;:—])\s+")
_G2P_SOURCES = ("lexicon_{acc}_gold.json.gz", "lexicon_{acc}_silver.json.gz", "tagger.json.gz")


def package_dir() -> Path:
    """hibari's package directory, found without importing it (imports cost 0.06-0.6 s)."""
    spec = importlib.util.find_spec("hibari")
    if spec is None or not spec.submodule_search_locations:
        raise EngineError(
            "the hibari speech engine is not installed", hint="pip install hibari-tts"
        )
    return Path(list(spec.submodule_search_locations)[0])


class VoiceEntry(TypedDict, total=False):
    """A voice in hibari's registry, the keys vocal reads (`file`: its model in the assets)."""

    british: bool
    bundled: bool
    file: str


def voice_table() -> dict[str, VoiceEntry]:
    """hibari's voice registry (assets/voices.json): name -> {language, gender, bundled, ...}."""
    with (package_dir() / "assets" / "voices.json").open(encoding="utf-8") as f:
        return json.load(f)


def _lazy_package() -> None:
    """Register the `hibari` package without running its `__init__`, which imports hibari.tts
    and through it hibari.voices and urllib.request (80 ms, for downloads vocal rarely needs).

    The real `__init__` runs the first time anyone reads an attribute of the package
    (`from hibari import Hibari` works as usual), through a module `__getattr__` (PEP 562).
    """
    if "hibari" in sys.modules:
        return
    spec = importlib.util.find_spec("hibari")
    if spec is None or spec.loader is None:
        raise EngineError(
            "the hibari speech engine is not installed", hint="pip install hibari-tts"
        )
    package = importlib.util.module_from_spec(spec)
    lock = threading.Lock()

    def finish_import(name: str) -> object:
        with lock:
            if package.__dict__.get("__getattr__") is finish_import:
                del package.__dict__["__getattr__"]
                spec.loader.exec_module(package)  # type: ignore[union-attr]
        try:
            return package.__dict__[name]
        except KeyError:
            raise AttributeError(f"module 'hibari' has no attribute {name!r}") from None

    package.__dict__["__getattr__"] = finish_import
    sys.modules["hibari"] = package


def import_hibari_modules() -> tuple[ModuleType, ModuleType]:
    """`hibari.dsp` and `hibari.g2p`, imported the fast way (see the module docstring):
    without the package's `__init__` and without scipy.fft (numpy's FFT is as fast here)."""
    _lazy_package()
    blocked = "scipy.fft" not in sys.modules and "hibari.dsp" not in sys.modules
    if blocked:
        sys.modules["scipy.fft"] = None  # type: ignore[assignment]
    try:
        import hibari.dsp as dsp
    finally:
        if blocked and sys.modules.get("scipy.fft", 0) is None:
            del sys.modules["scipy.fft"]
    import hibari.g2p as g2p

    return dsp, g2p


# -- the G2P cache --------------------------------------------------------------------------------
class _LazyTable:
    """A read-only mapping backed by one SQLite table: `get` and `in`, memoized per key."""

    def __init__(self, connection: sqlite3.Connection, table: str) -> None:
        self._query = f"SELECT v FROM {table} WHERE k = ?"  # noqa: S608 - fixed table names
        self._connection = connection
        self._memo: dict[str, object] = {}

    def get(self, key: str, default: object = None) -> object:
        try:
            value = self._memo[key]
        except KeyError:
            row = self._connection.execute(self._query, (key,)).fetchone()
            value = self._memo[key] = json.loads(row[0]) if row else None
        return default if value is None else value

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and self.get(key) is not None


def g2p_cache_path(cache_dir: Path, british: bool) -> Path:
    """The cache file for hibari's installed G2P data (its name changes when the data does)."""
    assets = package_dir() / "assets"
    acc = "gb" if british else "us"
    stamps = "-".join(file_stamp(assets / name.format(acc=acc)) for name in _G2P_SOURCES)
    import hashlib

    digest = hashlib.sha1(f"{_G2P_CACHE_FORMAT}:{stamps}".encode()).hexdigest()[:12]
    return cache_dir / f"g2p-{acc}-{digest}.sqlite"


def build_g2p_cache(path: Path, british: bool) -> Path:
    """Write hibari's lexicons and tagger tables into an SQLite file at `path`, atomically."""
    import_hibari_modules()
    import tempfile

    from hibari.g2p import _load_json

    acc = "gb" if british else "us"
    make_private_dirs(path.parent)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        connection = sqlite3.connect(tmp)
        with connection:
            connection.execute("PRAGMA journal_mode = OFF")
            tables = {
                "gold": _load_json(f"lexicon_{acc}_gold.json.gz"),
                "silver": _load_json(f"lexicon_{acc}_silver.json.gz"),
            }
            tagger = _load_json("tagger.json.gz")
            tables["tagdict"] = tagger["tagdict"]
            tables["weights"] = tagger["weights"]
            tables["vocab"] = dict.fromkeys(tagger["vocab"], 1)
            tables["meta"] = {"tags": tagger["tags"], "format": _G2P_CACHE_FORMAT}
            for table, values in tables.items():
                connection.execute(
                    f"CREATE TABLE {table} (k TEXT PRIMARY KEY, v TEXT) WITHOUT ROWID"
                )
                connection.executemany(
                    f"INSERT INTO {table} VALUES (?, ?)",  # noqa: S608 - fixed table names
                    ((k, json.dumps(v, ensure_ascii=False)) for k, v in values.items()),
                )
        connection.close()
        os.replace(tmp, path)
        record_made(path)  # teardown's proof, in a cache folder shared with others
    finally:
        Path(tmp).unlink(missing_ok=True)
    return path


class _LazyOov:
    """hibari's out-of-vocabulary word net, loaded on the first unknown word (from the ORT
    cache) rather than at set-up."""

    def __init__(self, british: bool, cache_dir: Path | None) -> None:
        self._british = british
        self._cache_dir = cache_dir
        self._oov: Callable[[str], str | None] | None = None

    def __call__(self, word: str) -> str | None:
        if self._oov is None:
            from hibari.g2p.oov import OOV

            model = package_dir() / "assets" / ("oov_gb.onnx" if self._british else "oov.onnx")
            self._oov = OOV(str(model), session=cached_session(model, self._cache_dir))
        return self._oov(word)


def cached_g2p(cache_dir: Path, british: bool) -> Callable[[str], str] | None:
    """hibari's G2P reading its tables lazily from the SQLite cache; None when there is none.

    Builds the same objects as `hibari.g2p.G2P.__init__` (lexicon, tokenizer, tagger, oov) with
    table-backed mappings in place of the loaded dicts: they answer `get` and `in`, the only
    operations hibari uses on them (tests compare phonemes with the eager G2P).
    """
    path = g2p_cache_path(cache_dir, british)
    if not path.exists():
        return None
    import_hibari_modules()
    from hibari.g2p import G2P, _load_json
    from hibari.g2p.lexicon import Lexicon
    from hibari.g2p.tagger import Tagger
    from hibari.g2p.tokenize import Tokenizer

    connection = sqlite3.connect(
        f"file:{path}?mode=ro&immutable=1", uri=True, check_same_thread=False
    )
    meta = _LazyTable(connection, "meta")
    if meta.get("format") != _G2P_CACHE_FORMAT:
        connection.close()
        return None
    g2p = G2P.__new__(G2P)
    g2p.lexicon = Lexicon(_LazyTable(connection, "gold"), _LazyTable(connection, "silver"), british)
    g2p.tokenizer = Tokenizer(_load_json("tokenizer_exceptions.json"))
    tagger = Tagger(
        {
            "tagdict": _LazyTable(connection, "tagdict"),
            "tags": meta.get("tags"),
            "weights": _LazyTable(connection, "weights"),
        }
    )
    tagger.vocab = _LazyTable(connection, "vocab")
    g2p.tagger = tagger
    g2p._oov = _LazyOov(british, cache_dir)
    g2p.unk = ""
    g2p.british = british
    g2p._vocal_connection = connection  # keeps it open as long as the G2P lives
    return g2p


# -- the engine -----------------------------------------------------------------------------------
class HibariEngine(TtsEngine):
    """hibari through its ONNX model and G2P, with the fast-start caches described above.

    Args:
        voice: a hibari voice ("heart", the default, ships in the package; the others are
            downloaded once by hibari into its own cache).
        cache_dir: where the ORT model and the G2P tables are cached (default: from
            `settings`, see `vocal.tts.tts_cache_dir`); None with no settings disables caching.
        threads: onnxruntime threads (one is enough: ~130x real time on one core).
    """

    name: ClassVar[str] = "hibari"
    sample_rate = SAMPLE_RATE
    # In a process of its own, onnxruntime imported before the engine is built lets the
    # session load (GIL-free) while hibari's modules and G2P import, instead of after them:
    # construction + first clause 198 ms against 248 (medians of 5, load ~0.2). In a command's
    # own process, where other imports compete for the GIL, the order did not pay (see
    # benchmarks/RESULTS.md), so only the speech worker does it.
    preload_modules: ClassVar[tuple[str, ...]] = ("onnxruntime",)
    multilingual: ClassVar[bool] = False

    def __init__(
        self,
        voice: str | None = None,
        *,
        cache_dir: str | Path | None = None,
        settings: Settings | None = None,
        threads: int = 1,
        **_options: object,
    ) -> None:
        if cache_dir is None and settings is not None:
            cache_dir = tts_cache_dir(settings)
        table = voice_table()
        voice = voice or DEFAULT_VOICE
        if voice not in table:
            raise unknown_voice(self.name, voice, list(table))
        self.voice = voice
        self.british = bool(table[voice].get("british"))
        self.cache_dir = Path(cache_dir) / "hibari" if cache_dir is not None else None
        self._threads = threads
        self._session: OrtSession  # set by the loader thread (or `_error` is)
        self._error: BaseException | None = None
        self._rng: np.random.Generator | None = None
        self._built_cache = False
        # The session loads in a thread (onnxruntime releases the GIL) while hibari's Python
        # modules and the G2P load here. The thread imports nothing of hibari's: two threads
        # importing one package deadlock on its module locks.
        # numpy is imported here, before the thread (which imports onnxruntime, which imports
        # numpy): numpy imported by two threads at once can fail half-initialized.
        import numpy  # noqa: F401

        entry = table[voice]
        if entry.get("bundled"):
            model = package_dir() / "assets" / entry["file"]
        else:
            model = self._download_model()
        # Not a daemon: onnxruntime still building a session when the interpreter exits aborts
        # the process ("terminate called without an active exception").
        self._loader = threading.Thread(
            target=self._load_session, args=(model,), name="hibari-session"
        )
        self._loader.start()
        self._dsp, _g2p_module = import_hibari_modules()
        self.g2p_cached = False
        g2p = None
        if self.cache_dir is not None:
            try:
                g2p = cached_g2p(self.cache_dir, self.british)
            except (sqlite3.Error, OSError, ValueError, KeyError):
                g2p = None  # a corrupt cache: hibari's own loading below, rebuilt at close()
        self.g2p_cached = g2p is not None
        if g2p is None:
            from hibari.g2p import G2P

            g2p = G2P(british=self.british)
        self._g2p = g2p
        with (package_dir() / "assets" / "vocab.json").open(encoding="utf-8") as f:
            self._vocab = json.load(f)
        self._warm_up_dsp()

    def _warm_up_dsp(self) -> None:
        """Run hibari's DSP once on a few silent frames while the session is still loading:
        its first call pays numpy.fft's import and plan set-up (~30 ms) otherwise paid by the
        first sentence."""
        import numpy as np

        bins, frames = 601, 4  # hibari's spectrum: n_fft 1200 -> 601 bins
        zeros = np.zeros((bins, frames), np.float32)
        try:
            f0 = np.zeros(frames, np.float32)
            self._dsp.synth(
                zeros, zeros, zeros - 10, zeros - 10, zeros, f0, np.random.default_rng(0)
            )
        except Exception:  # a warm-up only: a changed hibari must not stop speech here
            pass

    def _download_model(self) -> Path:
        try:
            from hibari.voices import voice_path  # downloads once into hibari's cache

            return Path(voice_path(self.voice))
        except (RuntimeError, OSError) as exc:
            raise EngineError(
                f"hibari voice {self.voice!r} is not available ({exc})",
                hint="use the built-in voice 'heart', or connect once so hibari can fetch it",
            ) from None

    def _load_session(self, model: Path) -> None:
        try:
            self._session = cached_session(model, self.cache_dir, threads=self._threads)
        except BaseException as exc:  # re-raised in the synthesizing thread
            self._error = exc

    def _ready_session(self) -> OrtSession:
        self._loader.join()
        if self._error is not None:
            error, self._error = self._error, None
            if isinstance(error, EngineError):
                raise error
            raise EngineError(f"hibari could not load its model: {error}") from None
        return self._session

    @classmethod
    def voice_names(cls, **_options: object) -> list[str]:
        try:
            names = list(voice_table())
        except (EngineError, OSError, ValueError):
            return []
        return sorted(names, key=lambda n: n != DEFAULT_VOICE)

    def phonemes(self, sentence: str) -> list[str]:
        """The phoneme strings hibari reads for `sentence`, each at most MAX_PHONEMES long
        (cut at clause punctuation, as hibari's own `phonemize` does)."""
        chunks = []
        for line in sentence.splitlines():
            ps = self._g2p(line) if line.strip() else ""
            if not ps:
                continue
            if len(ps) <= MAX_PHONEMES:
                chunks.append(ps)
                continue
            current = ""
            for clause in _CLAUSE.split(ps):
                if current and len(current) + len(clause) + 1 > MAX_PHONEMES:
                    chunks.append(current)
                    current = clause
                else:
                    current = f"{current} {clause}" if current else clause
            if current:
                chunks.append(current)
        return chunks

    def synthesize(self, sentence: str, *, speed: float = 1.0) -> np.ndarray:
        import numpy as np

        session = self._ready_session()
        if self._rng is None:
            self._rng = np.random.default_rng()
        dsp = self._dsp
        parts = []
        for ps in self.phonemes(sentence):
            ids = [0, *[self._vocab[c] for c in ps if c in self._vocab], 0]
            if len(ids) < 3:
                continue
            out = session.run(
                None, {"ids": np.asarray([ids], np.int64), "speed": np.asarray([speed], np.float32)}
            )
            lh, th, ln, lr, phi, f0 = (o[0] for o in out)
            parts.append(dsp.synth(lh, th, ln, lr, phi, f0, self._rng))
        if not parts:
            return np.zeros(0, np.float32)
        return np.concatenate(parts).astype(np.float32, copy=False)

    def prepare_cache(self) -> bool:
        """Write the G2P cache if it is missing; True if it was written now."""
        if self.cache_dir is None or self.g2p_cached or self._built_cache:
            return False
        self._built_cache = True
        try:
            build_g2p_cache(g2p_cache_path(self.cache_dir, self.british), self.british)
        except (OSError, sqlite3.Error):
            return False  # a read-only cache directory: the next run loads the slow way again
        return True

    def close(self) -> None:
        """Build the G2P cache on the first run (while the last sentences play)."""
        self._loader.join()
        self.prepare_cache()


def prime(settings: Settings, voice: str | None = None) -> dict[str, object]:
    """Build hibari's fast-start caches now, so the next `vocal speak` starts fast.

    Called by `vocal warmup` (through `getattr(engine_module, "prime", None)`), e.g. from an
    agent's session-start hook. Without it the first `vocal speak` in a fresh cache directory
    pays the cold start (~1.3 s here, benchmarks/speak) and builds the caches after its last
    sentence. Cheap when the caches exist (file checks only: no onnxruntime, no hibari import).

    Args:
        settings: vocal's Settings (where the cache directory is).
        voice: the hibari voice to prime (default: settings.voice when it is a hibari voice,
            else the built-in "heart"); a voice that is not installed is skipped, not fetched.

    Returns:
        {"engine", "voice", "cache_dir", "built": [what was written now], "seconds"}.
    """
    import time
    from importlib.metadata import PackageNotFoundError, version

    from vocal.tts._onnx import cached_model_path

    started_s = time.monotonic()
    table = voice_table()
    wanted = voice or getattr(settings, "voice", None)
    if wanted and ":" in wanted:  # ENGINE:VOICE
        engine_name, _, wanted = wanted.partition(":")
        wanted = wanted if engine_name == "hibari" else None
    voice = wanted if wanted in table else DEFAULT_VOICE
    entry = table[voice]
    cache_dir = tts_cache_dir(settings) / "hibari"
    british = bool(entry.get("british"))
    built: list[str] = []
    g2p_path = g2p_cache_path(cache_dir, british)
    if not g2p_path.exists():
        build_g2p_cache(g2p_path, british)
        built.append(g2p_path.name)
    models = [package_dir() / "assets" / ("oov_gb.onnx" if british else "oov.onnx")]
    if entry.get("bundled"):
        models.insert(0, package_dir() / "assets" / entry["file"])
    try:
        ort_version = version("onnxruntime")
    except PackageNotFoundError:
        ort_version = ""
    for model in models:
        if not model.exists():
            continue
        if ort_version and cached_model_path(model, cache_dir, ort_version).exists():
            continue
        cached_session(model, cache_dir)  # writes the optimized ORT copy
        built.append(model.name)
    return {
        "engine": "hibari",
        "voice": voice,
        "cache_dir": str(cache_dir),
        "built": built,
        "seconds": round(time.monotonic() - started_s, 3),
    }


__all__ = [
    "HibariEngine",
    "DEFAULT_VOICE",
    "build_g2p_cache",
    "cached_g2p",
    "cached_session",
    "prime",
]
