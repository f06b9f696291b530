"""A model loaded in a daemon thread while the person speaks, never delaying the microphone:
the end of turn's models (`vocal.hearing.smart_turn`, `vocal.hearing.words_model`)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Generic, TypeVar

Model = TypeVar("Model")


class BackgroundLoader(Generic[Model]):
    """Runs `load` (which loads the model and asks it once: a first call is slower) in a
    daemon thread started at construction. `model()` never waits: None until ready, or for
    good when loading failed (`error` says why; the turn goes on without this signal)."""

    def __init__(self, load: Callable[[], Model], *, name: str) -> None:
        self.started_at_s = time.monotonic()
        self.ready_at_s: float | None = None
        self.error: BaseException | None = None
        self._model: Model | None = None
        self._load = load
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._model = self._load()
        except BaseException as exc:  # reported through `error`, never raised in a turn
            self.error = exc
        finally:
            self.ready_at_s = time.monotonic()

    def model(self) -> Model | None:
        return self._model

    def wait(self, timeout_s: float | None = None) -> Model | None:
        """Wait for loading to end; the model, or None when it failed."""
        self._thread.join(timeout_s)
        return self._model

    @property
    def load_s(self) -> float | None:
        return None if self.ready_at_s is None else self.ready_at_s - self.started_at_s


__all__ = ["BackgroundLoader"]
