"""Run `vocal` as a user would: a separate process, the installed entry point's code."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Mapping


def run_vocal(
    *args: str,
    input: bytes | str | None = None,
    env: Mapping[str, str] | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess:
    """`python -m vocal ARGS` with the test's environment (VOCAL_HOME, PULSE_SINK, ...)."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    return subprocess.run(
        [sys.executable, "-m", "vocal", *args],
        input=input.encode() if isinstance(input, str) else input,
        capture_output=True,
        env=full_env,
        timeout=timeout,
    )


def start_vocal(*args: str, env: Mapping[str, str] | None = None) -> subprocess.Popen:
    """Start `vocal ARGS` in the background (stdout and stderr piped)."""
    full_env = dict(os.environ)
    if env:
        full_env.update(env)
    return subprocess.Popen(
        [sys.executable, "-m", "vocal", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=full_env,
    )


def compile_vocal() -> None:
    """Write bytecode for vocal's modules, as a wheel install has (scripts/setup does too).

    The editable install leaves bytecode to the first import, and where PYTHONDONTWRITEBYTECODE
    is set (this workplace sets it) every `vocal` process compiled its modules anew: ~60 ms of
    each start, which a benchmark of start-up must not count.
    """
    import compileall
    from pathlib import Path

    import vocal

    compileall.compile_dir(Path(vocal.__file__).parent, quiet=1)
