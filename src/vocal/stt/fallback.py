"""A remote recognizer with a local one standing in when it fails (the `stt_fallback` setting).

When the remote engine cannot be used (no key, offline, 5xx after its retries, past its
deadline: an `EngineError`), the same utterance is transcribed by a local engine, and the
`Transcript` says so: `engine` names the local engine, `fallback_reason` the remote failure.
Without this wrapper the failure is the turn's error (exit 5).

The local engine loads only when it is first needed, in the caller's thread: a turn whose
remote call succeeds (the usual case) pays nothing for it, neither memory nor the CPU a load
takes beside playback; a failed one pays the load once (tiny.en here: ~0.5 s, cached for the
process) on top of the failure. A bad setting (`UsageError`) is not a failure to stand in for,
and neither is an interruption. Each call tries the remote engine first, so one failure does
not send the rest of a long-running process's turns to the local engine.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Mapping
from typing import TYPE_CHECKING

from vocal.errors import EngineError
from vocal.stt import SttEngine, Transcript, load_stt

if TYPE_CHECKING:
    from vocal.audio.wav import Audio


class FallbackStt:
    """Engine `name` (remote), and engine `local` loaded on its first failure.

    Args:
        name, model, options: the remote engine, as `load_stt` takes them; failing to load it
            (no key) counts as a failure to stand in for.
        local, local_model, local_options: the local engine, loaded on the first failure.
    """

    #: Still called once per turn (vocal.hearing.early): the remote engine is tried first.
    remote = True

    def __init__(
        self,
        name: str,
        model: str,
        options: dict[str, object],
        *,
        local: str,
        local_model: str,
        local_options: Mapping[str, object],
    ) -> None:
        self.name = name
        self.local_spec = (local, local_model, local_options)
        self.primary: SttEngine | None = None
        self.load_error: EngineError | None = None
        try:
            self.primary = load_stt(name, model, **options)
        except EngineError as exc:
            self.load_error = exc
        self._local: SttEngine | None = None
        self._lock = threading.Lock()

    def transcribe(self, audio: Audio) -> Transcript:
        """The remote engine's transcript, or the local engine's when the remote one fails."""
        if self.primary is not None:
            try:
                return self.primary.transcribe(audio)
            except EngineError as exc:
                reason = exc
        else:
            assert self.load_error is not None
            reason = self.load_error
        local = self.local_engine(reason)
        transcript = local.transcribe(audio)
        # The failure without its hint: what to do about the remote engine is not this turn's.
        why = str(reason.args[0]) if reason.args else str(reason)
        return dataclasses.replace(transcript, engine=local.name, fallback_reason=why)

    def local_engine(self, reason: EngineError) -> SttEngine:
        """The local engine, loaded on first use; an EngineError naming both failures when it
        cannot load either."""
        with self._lock:
            if self._local is None:
                name, model, options = self.local_spec
                try:
                    self._local = load_stt(name, model, **options)
                except EngineError as exc:
                    raise EngineError(
                        f"{reason}; the local fallback ({name}) failed too: {exc}"
                    ) from None
            return self._local


__all__ = ["FallbackStt"]
