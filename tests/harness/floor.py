"""The floor as the conch tests see it: who holds it, who waits, and real `vocal` processes
waited for (the settings of this test's VOCAL_HOME)."""

from __future__ import annotations

import subprocess

from vocal.config import load_settings
from vocal.floor.conch.queue import Conch


def floor() -> Conch:
    return Conch.from_settings(load_settings())


def queue_sessions() -> list[str]:
    return [w.session for w in floor().status().waiters]


def holder_session() -> str | None:
    holder = floor().status().holder
    return holder.session if holder else None


def finish(procs: list[subprocess.Popen], timeout_s: float = 60) -> list[tuple[int, bytes, bytes]]:
    results = []
    for proc in procs:
        try:
            out, err = proc.communicate(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            for other in procs:
                other.kill()
            raise AssertionError("a vocal play process hung") from None
        results.append((proc.returncode, out, err))
    return results
