"""onnxruntime sessions that load fast: the optimized graph is saved once in ORT format.

Creating a session optimizes the graph every time (0.29-0.40 s for hibari's 8 MB model on this
machine); loading the saved optimized graph with optimization off takes 0.076 s. The cache file's
name carries the model's size and mtime and onnxruntime's version, so a changed model or an
upgraded runtime writes a new one.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

from vocal.floor.statedir import make_private_dirs, record_made

if TYPE_CHECKING:
    import numpy as np


class OrtNode(Protocol):
    """One input or output of an onnxruntime graph, as the engines read it."""

    name: str
    #: The element type, e.g. "tensor(float)".
    type: str
    #: Each dimension's size, or its symbolic name (a str) when the graph leaves it open.
    shape: Sequence[int | str | None]


class OrtSession(Protocol):
    """The part of `onnxruntime.InferenceSession` the engines use (onnxruntime ships no types)."""

    def run(
        self, output_names: Sequence[str] | None, input_feed: Mapping[str, np.ndarray]
    ) -> list[np.ndarray]: ...

    def get_inputs(self) -> list[OrtNode]: ...

    def get_outputs(self) -> list[OrtNode]: ...

    def get_providers(self) -> list[str]: ...


def file_stamp(path: Path) -> str:
    """Size and mtime of `path`: enough to notice a reinstalled file."""
    st = path.stat()
    return f"{st.st_size}-{st.st_mtime_ns}"


def cached_model_path(model: Path, cache_dir: Path, ort_version: str) -> Path:
    """Where the optimized ORT-format copy of `model` lives in `cache_dir`."""
    return Path(cache_dir) / f"{model.stem}-{file_stamp(model)}-ort{ort_version}.ort"


def cached_session(model: Path, cache_dir: Path | None, *, threads: int = 1) -> OrtSession:
    """An onnxruntime CPU session for `model`, from its optimized ORT-format copy in `cache_dir`
    when there is one (written by the first load). `cache_dir=None` never caches."""
    import onnxruntime as ort

    def options(optimize: bool) -> ort.SessionOptions:
        so = ort.SessionOptions()
        so.intra_op_num_threads = so.inter_op_num_threads = threads
        so.log_severity_level = 3
        if not optimize:  # the ORT file is already optimized
            so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        return so

    providers = ["CPUExecutionProvider"]
    model = Path(model)
    if cache_dir is None:
        return ort.InferenceSession(str(model), options(True), providers=providers)
    cached = cached_model_path(model, cache_dir, ort.__version__)
    if cached.exists():
        try:
            return ort.InferenceSession(str(cached), options(False), providers=providers)
        except Exception:  # a stale or truncated cache: rebuild it below
            cached.unlink(missing_ok=True)
    so = options(True)
    # EXTENDED, not ALL: the layout optimizations of ALL are specific to the CPU they ran on.
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_EXTENDED
    tmp: str | None = None
    import tempfile

    try:
        make_private_dirs(cached.parent)
        fd, tmp = tempfile.mkstemp(prefix=f".{cached.name}.", suffix=".ort", dir=cached.parent)
        os.close(fd)
        so.optimized_model_filepath = tmp
        so.add_session_config_entry("session.save_model_format", "ORT")
    except OSError:  # a read-only cache directory: load without saving
        tmp = None
    try:
        session = ort.InferenceSession(str(model), so, providers=providers)
        if tmp is not None and os.path.getsize(tmp) > 0:
            os.replace(tmp, cached)
            record_made(cached)  # teardown's proof, in a cache folder shared with others
    finally:
        if tmp is not None:
            Path(tmp).unlink(missing_ok=True)
    return session
