"""The speech recognizer, imported and loaded in a background thread (`SttLoader`) while the
recording runs, so the microphone opens at once and the model's cost hides behind the
speaker's own words.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
import time
from typing import TYPE_CHECKING, TypedDict

from vocal.config import Settings
from vocal.stt import SttEngine, load_stt

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from vocal.stt.hints import Hints


class LocalOptions(TypedDict, total=False):
    """What a local engine takes from the settings (`local_options`)."""

    language: str
    beam_size: int


class FallbackSpec(TypedDict):
    """The local engine `FallbackStt` (vocal.stt.fallback) loads when the remote one fails."""

    local: str
    local_model: str
    #: `local_options`, and the turn's vocabulary hints once gathered.
    local_options: Mapping[str, object]


def stt_loader(settings: Settings, *, beside_playback: bool = False) -> SttLoader:
    """Start loading the configured speech recognizer (`SttLoader`) with its settings; in a
    child process (vocal.hearing.stt_process) for a turn that plays audio meanwhile
    (`beside_playback`), unless the `stt_process` setting is off or the engine is remote.

    A remote engine (vocal.stt.openai) is always loaded in this process: it loads no model,
    imports only the standard library and then waits on a socket, so there is no long native
    stretch holding the GIL for a child process to keep away from the reply's audio callbacks,
    and a child would add its own interpreter start-up and a pipe to every turn. Its
    local fallback (`stt_fallback`) loads only if the remote call fails, by then after the
    reply.

    Vocabulary hints (vocal.stt.hints) are gathered in the loading thread too (git may take
    a few tens of ms); a hints file that cannot be read is a usage error here, before anyone
    speaks.

    Raises:
        UsageError: an `stt_fallback` that names no local engine, an unreadable hints file
            (exit 2).
    """
    from vocal.stt import REMOTE_ENGINES, default_engine_name

    hints = hints_source(settings)
    name = settings.stt_engine if settings.stt_engine != "auto" else default_engine_name()
    if name in REMOTE_ENGINES:
        return SttLoader(
            name,
            settings.openai_stt_model,
            warm_up=False,
            hints=hints,
            fallback=fallback_spec(settings),
            **remote_options(settings),
        )
    loader = ProcessSttLoader if beside_playback and settings.stt_process else SttLoader
    return loader(
        settings.stt_engine,
        settings.stt_model,
        warm_up=settings.stt_warm_up,
        hints=hints,
        **local_options(settings, name),
    )


def hints_source(settings: Settings) -> Callable[[], Hints | None] | None:
    """What gathers the turn's vocabulary hints (None: no hints asked for); a hints file is
    read now, so that a bad one is a `UsageError` before the turn starts."""
    from vocal.stt.hints import read_hints, resolve_hints

    if not (settings.stt_hints and settings.stt_hints.strip()) and not settings.stt_hints_git:
        return None
    given = settings.stt_hints.strip() if settings.stt_hints else None
    if given and given.startswith("@"):
        read_hints(given)  # raises now; resolve_hints reads it again in the thread
    from_git, prompt = bool(settings.stt_hints_git), bool(settings.stt_hints_prompt)

    def gather() -> Hints | None:
        hints = resolve_hints(given, from_git=from_git)
        return hints if hints is None or prompt else dataclasses.replace(hints, prompt=False)

    return gather


def local_options(settings: Settings, name: str) -> LocalOptions:
    """The options a local engine `name` takes from the settings."""
    options: LocalOptions = {"language": settings.language}
    if name == "faster-whisper":
        options["beam_size"] = settings.stt_beam_size
    return options


def remote_options(settings: Settings) -> dict[str, object]:
    """The remote engine's options (vocal.stt.openai) from the settings: its base URL falls
    back to `openai_base_url`, the one the OpenAI speech engine uses."""
    return {
        "language": settings.language,
        "base_url": settings.openai_stt_base_url or settings.openai_base_url,
        "timeout_s": settings.openai_stt_timeout_s,
        "prompt": settings.openai_stt_prompt,
    }


def fallback_spec(settings: Settings) -> FallbackSpec | None:
    """What `FallbackStt` (vocal.stt.fallback) loads when the remote engine fails: the local
    engine `stt_fallback` names ("local"/"auto": the platform's own) with `stt_model`; None
    when the setting is unset."""
    from vocal.errors import UsageError
    from vocal.stt import ENGINES, REMOTE_ENGINES, default_engine_name

    wanted = (settings.stt_fallback or "").strip()
    if not wanted:
        return None
    local = default_engine_name() if wanted in ("local", "auto") else wanted
    if local not in ENGINES or local in REMOTE_ENGINES:
        known = ", ".join(n for n in ENGINES if n not in REMOTE_ENGINES)
        raise UsageError(
            f"setting 'stt_fallback' must name a local engine, got {wanted!r}",
            hint=f"local, or one of {known}",
        )
    return {
        "local": local,
        "local_model": settings.stt_model,
        "local_options": local_options(settings, local),
    }


# -- the engine, loaded in the background --------------------------------------------------------
class SttLoader:
    """Imports and loads a speech-to-text engine in a daemon thread, started at construction
    (with `fallback`, a remote engine wrapped in vocal.stt.fallback.FallbackStt).

    `engine()` waits for it and returns it, or raises what loading raised (an `EngineError`
    with its exit code 5). `load_s` is how long loading took; `ready_at_s` when it finished.
    """

    def __init__(
        self,
        name: str = Settings.stt_engine,
        model: str = Settings.stt_model,
        *,
        warm_up: bool = Settings.stt_warm_up,
        fallback: FallbackSpec | None = None,
        hints: Callable[[], Hints | None] | None = None,
        **options: object,
    ) -> None:
        self.name, self.model, self.options = name, model, options
        self.warm_up = warm_up
        #: Gathers the vocabulary hints (`hints_source`), in the loading thread.
        self.hints_source = hints
        #: The hints the engine was given (None: none, or not gathered yet).
        self.used_hints: Hints | None = None
        #: A local engine to stand in when a remote one fails (`fallback_spec`); None: none.
        self.fallback = fallback
        self.started_at_s = time.monotonic()
        self.ready_at_s: float | None = None
        #: When the engine's warm-up run ended (None: none, or not yet).
        self.warmed_at_s: float | None = None
        self._engine: SttEngine | None = None
        self._respelling: SttEngine | None = None
        self._error: BaseException | None = None
        self._thread = threading.Thread(target=self._run, name="vocal-stt-load", daemon=True)
        self._thread.start()

    def _gather_hints(self) -> None:
        """Gather the hints and put them in the engine's options: a local engine's `hints`,
        a remote one's `prompt` (after the `openai_stt_prompt` setting's), and its local
        fallback's `hints`."""
        from vocal.stt import REMOTE_ENGINES

        hints = self.hints_source() if self.hints_source is not None else None
        self.used_hints = hints
        if hints is None or not hints.prompt:
            return  # respelled only (`_served`)
        if self.name in REMOTE_ENGINES:
            prompt = self.options.get("prompt")
            self.options["prompt"] = f"{prompt} {hints.text}" if prompt else hints.text
        else:
            self.options["hints"] = hints.text
        if self.fallback is not None:
            self.fallback["local_options"] = {**self.fallback["local_options"], "hints": hints.text}

    def _run(self) -> None:
        try:
            self._gather_hints()
            if self.fallback is not None:
                from vocal.stt.fallback import FallbackStt

                self._engine = FallbackStt(self.name, self.model, self.options, **self.fallback)
            else:
                self._engine = load_stt(self.name, self.model, **self.options)
        except BaseException as exc:  # re-raised in the caller's thread by engine()
            self._error = exc
        finally:
            self.ready_at_s = time.monotonic()
        # The engine is usable from here; its first call in a process is slower (CTranslate2's
        # set-up), so it runs once now, while the reply plays or the person speaks. A real
        # transcription asked for meanwhile queues behind it, no worse than paying the set-up.
        warm_up = getattr(self._engine, "warm_up", None) if self.warm_up else None
        if warm_up is not None:
            with contextlib.suppress(Exception):  # a warm-up only: the real call will tell
                warm_up()
            self.warmed_at_s = time.monotonic()

    @property
    def load_s(self) -> float | None:
        return None if self.ready_at_s is None else self.ready_at_s - self.started_at_s

    def wait(self, timeout_s: float | None = None) -> bool:
        """Wait for loading to end, successfully or not; True if it has.

        A process must not exit while this thread is inside a native library (CTranslate2
        aborts the process: "terminate called without an active exception"), so commands wait
        here before exiting, even when the engine is no longer needed.
        """
        self._thread.join(timeout_s)
        return not self._thread.is_alive()

    def ready_engine(self) -> SttEngine | None:
        """The engine if it has loaded, else None (never waits)."""
        return self._served() if self.ready_at_s is not None and self._engine else None

    def _served(self) -> SttEngine:
        """The loaded engine, its transcripts respelling the hinted names
        (vocal.stt.respell) when there are any."""
        assert self._engine is not None
        names = self.used_hints.names if self.used_hints is not None else ()
        if not names:
            return self._engine
        if self._respelling is None:
            from vocal.stt.respell import RespellingStt

            self._respelling = RespellingStt(self._engine, names)
        return self._respelling

    def raise_if_failed(self) -> None:
        """Raise at once what loading raised, if it has already failed."""
        if self._error is not None:
            raise self._error

    def close(self) -> None:
        """End what loading started (nothing in-process; `ProcessSttLoader` ends its child)."""

    def engine(self) -> SttEngine:
        self._thread.join()
        if self._error is not None:
            raise self._error
        return self._served()


class ProcessSttLoader(SttLoader):
    """An `SttLoader` whose engine loads and runs in a child process
    (vocal.hearing.stt_process: `ProcessStt`); `ready_at_s` is when it has loaded and warmed
    up. `close()` ends the child."""

    def _run(self) -> None:
        from vocal.hearing.stt_process import spawn

        try:
            self._gather_hints()
            self._engine = spawn(self.name, self.model, warm_up=self.warm_up, options=self.options)
        except BaseException as exc:  # re-raised in the caller's thread by engine()
            self._error = exc
        finally:
            self.ready_at_s = time.monotonic()
            self.warmed_at_s = self.ready_at_s if self.warm_up and self._error is None else None

    def close(self) -> None:
        """End the child process (once loading has ended, which `wait` bounds)."""
        from vocal.hearing.stt_process import CLOSE_WAIT_S, ProcessStt

        self.wait(CLOSE_WAIT_S)
        if isinstance(self._engine, ProcessStt):
            self._engine.close()


__all__ = ["ProcessSttLoader", "SttLoader", "stt_loader"]
