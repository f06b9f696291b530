"""The engine a turn adopted from the speech worker (vocal.speaking.worker): its synthesis runs
in the worker process, and in this one from the sentence where the worker failed.

The worker's module holds the process and the pipes (and documents the messages); this one is
the turn's side, kept apart so that forking the worker at launch imports no engine registry
(a muted turn never loads vocal.tts).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from vocal.errors import error_from_reply
from vocal.speaking.worker import Worker, claim
from vocal.tts import TtsEngine, engine_class, load_tts

if TYPE_CHECKING:
    import numpy as np


def adopt(name: str, voice: str | None, settings: Any) -> RemoteEngine | None:
    """The worker as the engine for (`name`, `voice`), or None when there is no worker or it
    guessed another engine or voice (it is then let go, and the caller loads in-process).
    Called once per process: later calls get None. The worker may still be loading: the
    engine's first `synthesize` waits for it (and hands over if its load failed)."""
    worker = claim(name, voice)
    return RemoteEngine(worker, name, voice, settings) if worker is not None else None


class RemoteEngine(TtsEngine):
    """A `TtsEngine` whose synthesis runs in the worker; in-process if the worker fails.

    It is handed out while the worker may still be loading its engine: the first `synthesize`
    sends its sentence, then waits for the worker's word that the engine loaded (its voice,
    sample rate and time: `ready_at_s`), then for the samples.
    """

    def __init__(self, worker: Worker, name: str, voice: str | None, settings: Any) -> None:
        self._worker: Worker | None = worker
        self._settings = settings
        self.name = name  # type: ignore[misc]
        self.voice = voice
        self._class = engine_class(name)
        self.sample_rate = self._class.sample_rate
        self.multilingual = self._class.multilingual  # type: ignore[misc]
        self._loaded = False
        self._local: TtsEngine | None = None
        #: time.monotonic() when the engine was ready (in the worker, or here).
        self.ready_at_s: float | None = None
        #: Sentences the worker synthesized (the rest, if it failed, were synthesized here).
        self.remote_sentences = 0

    def synthesize(self, sentence: str, *, speed: float = 1.0) -> np.ndarray:
        import numpy as np

        worker = self._worker
        if worker is not None:
            try:
                worker.send({"op": "synthesize", "text": sentence, "speed": speed})
                if not self._loaded:
                    self._loaded = self._take_loaded(worker.read_message())
                if self._loaded:
                    reply = worker.read_message()
                    if reply is not None and "frames" in reply:
                        data = worker.read_samples(int(reply["frames"]))
                        if not self.remote_sentences:
                            from vocal.timeline import mark

                            # The worker's clock is this one (CLOCK_MONOTONIC, one machine).
                            mark("worker_synth_started", reply.get("started_at_s"))
                            mark("worker_synthesized", reply.get("at_s"))
                        self.remote_sentences += 1
                        return np.frombuffer(data, np.float32).copy()
                    if reply is not None and reply.get("exit_code"):
                        raise error_from_reply(reply)
            except (OSError, EOFError, ValueError):
                pass
            self._hand_over()  # its load failed, or it died: the rest is synthesized here
        return self._local_engine().synthesize(sentence, speed=speed)

    def _take_loaded(self, message: dict[str, Any] | None) -> bool:
        if not message or not message.get("loaded"):
            return False  # loading the engine here raises the real error
        from vocal.timeline import mark

        self.voice = message.get("voice", self.voice)
        self.sample_rate = int(message["sample_rate"])
        self.ready_at_s = message.get("at_s")
        mark("worker_loaded", self.ready_at_s)
        return True

    def close(self) -> None:
        if self._local is not None:
            self._local.close()
        worker, self._worker = self._worker, None
        if worker is not None:
            try:
                worker.send({"op": "close"})  # it writes its caches, then exits
            except OSError:
                pass

    def _hand_over(self) -> None:
        worker, self._worker = self._worker, None
        if worker is not None:
            worker.finish(wait_s=0)

    def _local_engine(self) -> TtsEngine:
        if self._local is None:
            import time

            self._local = load_tts(self.name, self.voice, settings=self._settings)
            self.sample_rate = self._local.sample_rate
            self.voice = self._local.voice
            self.ready_at_s = self.ready_at_s or time.monotonic()
        return self._local


__all__ = ["RemoteEngine", "adopt"]
