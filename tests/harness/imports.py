"""Which modules a `vocal` process loads, each run in a fresh interpreter: a turn is a process,
so what it imports is what it costs to start (the start-up, discovery, history and speak tests).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile

#: Libraries that `vocal --help`, `vocal CMD --help` and completion must never load.
HEAVY = {
    "numpy", "onnxruntime", "sounddevice", "soundfile", "soxr", "faster_whisper", "ctranslate2",
    "livekit", "hibari", "mlx", "mlx_whisper", "rich", "pydantic", "huggingface_hub", "llama_cpp",
}  # fmt: skip

#: What `vocal replay` must not load: it plays stored PCM, with no speech engine.
HEAVY_FOR_REPLAY = {"vocal.stt", "vocal.tts", "faster_whisper", "ctranslate2", "hibari",
                    "onnxruntime", "mlx_whisper", "vocal.audio.vad"}  # fmt: skip


def imported_by(*args: str) -> set[str]:
    """Every module `vocal ARGS` (which must exit 0) imported, as `-X importtime` reports them,
    with their top-level packages."""
    result = subprocess.run([sys.executable, "-X", "importtime", "-m", "vocal", *args],
                            capture_output=True, text=True, timeout=60)  # fmt: skip
    assert result.returncode == 0, result.stderr[-2000:]
    names = set()
    for line in result.stderr.splitlines():
        if line.startswith("import time:") and "|" in line:
            name = line.rsplit("|", 1)[1].strip()
            names.update({name, name.split(".")[0]})
    return names


#: Runs the CLI in-process and writes the names in `sys.modules` at exit to a file: command
#: modules are imported with importlib.import_module, which `-X importtime` does not report.
PROBE = """
import json, os, sys
from vocal.cli import main
try:
    main(sys.argv[1:])
finally:
    with open(os.environ["VOCAL_TEST_MODULES_FILE"], "w") as out:
        json.dump(sorted(sys.modules), out)
"""


def loaded_modules(args: list[str], env: dict[str, str] | None = None) -> set[str]:
    """Every module loaded by `vocal ARGS` (which must exit 0) in a fresh interpreter."""
    with tempfile.TemporaryDirectory() as directory:
        listing = os.path.join(directory, "modules.json")
        result = subprocess.run(
            [sys.executable, "-c", PROBE, *args],
            capture_output=True,
            text=True,
            env={**os.environ, **(env or {}), "VOCAL_TEST_MODULES_FILE": listing},
            timeout=60,
        )
        assert result.returncode == 0, result.stderr[-2000:]
        with open(listing) as source:
            return set(json.load(source))
