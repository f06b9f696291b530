"""The execution-provider ladder: GPU providers first, CPU last, the working rung remembered.

An onnxruntime model can run on several execution providers. A GPU provider can be listed by
onnxruntime and still fail when the session opens (missing CUDA libraries), fail mid-run, or run
and produce garbage (NaN, silence). vocal tries the rungs in order; a rung that fails or
produces non-speech moves the model one rung down. The rung that produced speech is written to
`<state dir>/providers/<model>.json`, and the next process (a turn is a process) starts there
instead of paying for the failures again. The memory is tied to the ladder it was found on: a
different ladder (a GPU build of onnxruntime installed, `VOCAL_CHATTERBOX_PROVIDERS` changed)
starts again from the top.

Standard library only: the engine passes in onnxruntime's list of available providers.
"""

from __future__ import annotations

import json
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

if TYPE_CHECKING:
    from vocal.config import Settings

from vocal.errors import EngineError, UsageError

CPU = "CPUExecutionProvider"
#: GPU providers, best first. TensorRT is left out of the default ladder: it compiles engines for
#: minutes on first use, which a one-process-per-turn tool cannot hide; name it explicitly in
#: VOCAL_CHATTERBOX_PROVIDERS to use it.
GPU_PROVIDERS = (
    "CUDAExecutionProvider",
    "ROCMExecutionProvider",
    "MIGraphXExecutionProvider",
    "DmlExecutionProvider",
    "CoreMLExecutionProvider",
)

T = TypeVar("T")


class ProviderFailure(Exception):
    """A rung could not run the model: it failed to open, crashed, or produced non-speech."""


def default_ladder(available: Sequence[str]) -> tuple[str, ...]:
    """The GPU providers this onnxruntime build offers, best first, then the CPU."""
    return tuple(p for p in GPU_PROVIDERS if p in available) + (CPU,)


def parse_ladder(text: str) -> tuple[str, ...]:
    """A ladder from a comma-separated list of provider names (`VOCAL_CHATTERBOX_PROVIDERS`)."""
    rungs = tuple(part.strip() for part in text.split(",") if part.strip())
    if not rungs:
        raise UsageError(
            "VOCAL_CHATTERBOX_PROVIDERS lists no execution provider",
            hint=f"for example {GPU_PROVIDERS[0]},{CPU}",
        )
    if len(set(rungs)) != len(rungs):
        raise UsageError(f"execution provider listed twice in {text!r}")
    return rungs


def _stderr(message: str) -> None:
    print(f"vocal: {message}", file=sys.stderr, flush=True)


@dataclass
class ProviderLadder:
    """The rungs one model climbs down, and where this process stands on them.

    Args:
        model: names the state file (`providers/<model>.json`) and messages.
        rungs: provider names, best first.
        state_dir: where the working rung is remembered (`settings.home / "providers"`).
        available: what this onnxruntime build offers (`onnxruntime.get_available_providers()`);
            a rung not in it fails at once, without opening a session.
        report: where a rung change is announced (stderr by default): it costs time and
            quality, so the user hears of it.
        make_dir: makes `state_dir` (vocal.floor.statedir.make_private_dirs from the engine;
            this layer is below the state directory's): 0700 either way (issue 37).
    """

    model: str
    rungs: tuple[str, ...]
    state_dir: Path
    available: tuple[str, ...] = ()
    report: Callable[[str], None] = _stderr
    make_dir: Callable[[Path], object] = lambda path: os.makedirs(path, 0o700, exist_ok=True)
    #: (provider, why it failed), in the order this process tried them.
    failures: list[tuple[str, str]] = field(default_factory=list)
    #: Every rung this process tried, in order (the failures and the current one).
    tried: list[str] = field(default_factory=list)
    position: int = -1

    def __post_init__(self) -> None:
        self.rungs = tuple(self.rungs)
        self.available = tuple(self.available)
        if not self.rungs:
            raise ValueError("a ladder needs at least one rung")

    # -- memory ----------------------------------------------------------------------------
    @property
    def state_path(self) -> Path:
        return self.state_dir / f"{self.model}.json"

    def remembered(self) -> str | None:
        """The rung a previous process found working on this same ladder, if any."""
        from vocal.files.bounded import loads_json, read_regular

        try:  # a few names: a FIFO, a huge or deep file is not ours (issue 37)
            state = loads_json(read_regular(self.state_path, max_bytes=64 * 1024))
        except (OSError, ValueError):  # BoundedReadError is a ValueError
            return None
        if not isinstance(state, dict) or state.get("ladder") != list(self.rungs):
            return None
        provider = state.get("provider")
        return provider if provider in self.rungs else None

    def remember(self) -> None:
        """Write the current rung as the one that works (a no-op when it is already written)."""
        provider = self.current
        if self.remembered() == provider:
            return
        state = {
            "ladder": list(self.rungs),
            "provider": provider,
            "failed": {name: reason for name, reason in self.failures},
            "updated": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        }
        self.make_dir(self.state_dir)
        fd, tmp = tempfile.mkstemp(prefix=f".{self.model}.", suffix=".tmp", dir=self.state_dir)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as out:
                json.dump(state, out, indent=2)
                out.write("\n")
            os.replace(tmp, self.state_path)  # concurrent turns never read half a file
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    def forget(self) -> None:
        """Drop the memory: the next process starts from the top rung again."""
        self.state_path.unlink(missing_ok=True)

    # -- climbing down ---------------------------------------------------------------------
    @property
    def current(self) -> str:
        if self.position < 0:
            raise RuntimeError("the ladder has not been started")
        return self.rungs[self.position]

    def start(self, opener: Callable[[str], T]) -> T:
        """Open the model on the remembered rung (or the top one) and return what `opener`
        returned; rungs that fail move one down. Raises `EngineError` when none is left."""
        remembered = self.remembered()
        self.position = self.rungs.index(remembered) if remembered else 0
        return self._open_from_here(opener)

    def step_down(self, reason: str, opener: Callable[[str], T]) -> T:
        """The current rung failed (after opening: a crash or non-speech); open the next one."""
        self._fail(self.current, reason)
        self.position += 1
        return self._open_from_here(opener)

    def _fail(self, provider: str, reason: str) -> None:
        self.failures.append((provider, reason))
        following = self.rungs[self.position + 1] if self.position + 1 < len(self.rungs) else None
        then = f"; trying {following}" if following else ""
        self.report(f"{self.model}: {provider} {reason}{then}")

    def _open_from_here(self, opener: Callable[[str], T]) -> T:
        while self.position < len(self.rungs):
            provider = self.rungs[self.position]
            self.tried.append(provider)
            if self.available and provider not in self.available:
                self._fail(provider, "is not in this onnxruntime build")
                self.position += 1
                continue
            try:
                return opener(provider)
            except ProviderFailure as exc:
                self._fail(provider, str(exc))
                self.position += 1
        tried = "; ".join(f"{name} {reason}" for name, reason in self.failures)
        raise EngineError(
            f"no execution provider could run {self.model} ({tried})",
            hint="VOCAL_DEBUG=1 shows the traceback; VOCAL_CHATTERBOX_PROVIDERS sets the ladder",
        )


__all__ = [
    "CPU",
    "GPU_PROVIDERS",
    "ProviderFailure",
    "ProviderLadder",
    "default_ladder",
    "parse_ladder",
]


def forget_rung(settings: Settings, model: str) -> None:
    """Drop what previous processes learnt about `model`'s providers (after new weights or
    drivers, a rung that failed may work): the next process starts from the top."""
    (settings.home / "providers" / f"{model}.json").unlink(missing_ok=True)
