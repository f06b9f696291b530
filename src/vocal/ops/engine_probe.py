"""The engines `vocal doctor` checks, each in a child process of its own, started before the
microphone records so that loading them costs the doctor no time of its own (vocal.ops.doctor).

The synthesis engine is built through its registry (`vocal.tts.load_tts`, its default voice),
as a turn builds it, which proves the package, binary, model or key it needs. The recognizer's
library is imported and the configured Whisper model found on disk; loading the model itself
would cost seconds. Offline: HF_HUB_OFFLINE=1, so nothing is downloaded.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from typing import TypedDict

from vocal.errors import VocalError

#: A child process importing an engine: ~1 s here; this only catches a hang.
PROBE_TIMEOUT_S = 20.0
#: speech-to-text engine name -> the module whose import proves it is installed (the engines'
#: modules import their libraries only when a model loads, which a check cannot afford).
STT_MODULES: dict[str, str] = {
    "faster-whisper": "faster_whisper",
    "mlx-whisper": "mlx_whisper",
    "openai": "vocal.stt.openai",  # remote: the standard library only
}


class ProbeResult(TypedDict, total=False):
    """What a probe found: the import's error (None: it imported) and the engine's hint, how
    long the import took, and for faster-whisper the model's directory or why it is missing."""

    import_error: str | None
    hint: str | None
    import_s: float
    model_dir: str | None
    model_error: str | None


class EngineProbe:
    """A child process that checks one engine offline: a speech-to-text engine imports (and
    finds its Whisper model), a synthesis engine is built (`kind` "stt" or "tts")."""

    def __init__(self, kind: str, engine: str, model: str | None = None) -> None:
        self.kind = kind
        self.engine = engine
        self.model = model
        env = dict(os.environ, HF_HUB_OFFLINE="1")
        args = [kind, engine] + ([model] if model is not None else [])
        code = "import sys; from vocal.ops.engine_probe import probe_main; probe_main(sys.argv[1:])"
        self._process = subprocess.Popen(
            [sys.executable, "-c", code, *args],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env=env,
            text=True,
        )

    def result(self) -> ProbeResult:
        """{"import_error": str | None, "hint": str | None, "import_s": float,
        "model_dir": str | None, "model_error": str | None}."""
        try:
            out, _ = self._process.communicate(timeout=PROBE_TIMEOUT_S)
        except subprocess.TimeoutExpired:
            self._process.kill()
            self._process.communicate()
            return {"import_error": f"importing took more than {PROBE_TIMEOUT_S:.0f} s"}
        try:
            return json.loads(out.strip().splitlines()[-1])
        except (IndexError, ValueError):
            return {"import_error": f"the probe process exited with {self._process.returncode}"}


def probe_main(args: list[str]) -> None:
    """The child's side of `EngineProbe`: print one JSON line about `kind engine [model]`."""
    import importlib

    from vocal.hub import first_line

    kind, engine, model = args[0], args[1], (args[2] if len(args) > 2 else None)
    report: ProbeResult = {
        "import_error": None,
        "hint": None,
        "model_dir": None,
        "model_error": None,
    }
    started = time.perf_counter()
    try:
        if kind == "tts":
            _build_tts(engine)
        elif engine not in STT_MODULES:
            raise ImportError(f"unknown engine {engine!r}")
        else:
            importlib.import_module(STT_MODULES[engine])
    except VocalError as exc:  # the engine's own message and fix (EngineError, UsageError)
        report["import_error"] = first_line(exc.args[0] if exc.args else exc)
        report["hint"] = exc.hint
    except Exception as exc:  # ImportError, or a broken native library (OSError)
        report["import_error"] = first_line(exc)
    report["import_s"] = round(time.perf_counter() - started, 3)
    if model is not None and engine == "faster-whisper" and report["import_error"] is None:
        from vocal.stt.faster_whisper import resolve_model_dir

        try:
            report["model_dir"] = str(resolve_model_dir(model))
        except VocalError as exc:
            report["model_error"] = str(exc)
    print(json.dumps(report), flush=True)


def _build_tts(engine: str) -> None:
    """Build synthesis engine `engine` through the registry, with its default voice and the
    user's settings, as a turn does: it proves the package, binary, model or key it needs."""
    from vocal.config import Settings, load_settings
    from vocal.tts import load_tts

    try:
        settings = load_settings()
    except VocalError:  # the config check reports it; the engine is checked on the defaults
        settings = Settings()
    load_tts(engine, settings=settings)


__all__ = ["EngineProbe", "ProbeResult", "STT_MODULES", "probe_main"]
