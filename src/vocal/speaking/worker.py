"""Synthesis in a second process, begun before the command line is parsed.

`vocal speak` waited ~0.6 s for its first sample on 2 cores, and nearly all of it was Python
holding one GIL: Typer, vocal's CLI, settings and the conch on the main thread, then numpy,
onnxruntime and hibari's G2P on the engine thread, one after the other while the second core
idled. The worker does the engine's part in its own process from the first milliseconds of the
turn: `vocal.launch` forks it (`start`, Linux) for the commands that speak, before Typer is
imported and before any thread exists, once it has loaded the settings and numpy that both
processes need (`_load_shared`: muted, nothing is loaded and nothing forked). It resolves
the voice the way the command will (environment, config.toml, and `--engine` and `--voice`
picked from the command line) and loads the engine and voice the turn will use.

The command then calls `vocal.speaking.remote.adopt(name, voice, settings)` for the engine it
resolved (`claim` here). The worker
names its guess as soon as it has made one, so a turn that wants another engine or voice
(`--engine`, `--voice`) lets the worker go at once and loads its engine in-process as before. A
match gets a `vocal.speaking.remote.RemoteEngine` at once: a `TtsEngine` whose `synthesize` sends
the sentence and receives the samples, so the first sentence waits in the pipe while the engine
finishes loading and is synthesized the moment it has. A worker that fails to load its engine
hands over before the first sentence (loading it in-process raises the engine's own error,
with its exit code), and one that dies mid-reply hands over from that sentence on.

Protocol (pipes, one request at a time): the parent sends JSON lines ({"op": "synthesize",
"text", "speed"} or {"op": "close"}); the worker answers with a JSON line, followed for samples
by `frames` float32 values (the line also says when it began and finished them, on the monotonic
clock both processes share: the first sentence's times go into the turn's timeline). Its first
two lines need no request: its guess ({"engine", "voice"}, or {"engine": null} when it stays
idle) and whether the engine loaded.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import sys
import time
from typing import TYPE_CHECKING, Any, BinaryIO

from vocal.errors import EngineError, VocalError, error_reply

if TYPE_CHECKING:
    import numpy as np

    from vocal.tts import TtsEngine

#: Set to 0 to synthesize in-process (the comparison benchmarks/speak makes, or to debug).
ENV_SWITCH = "VOCAL_SPEECH_WORKER"
#: How long the parent waits at exit for the worker to finish (hibari writes its caches when
#: closed, quick once they exist) before it kills it.
EXIT_WAIT_S = 2.0
#: How long `adopt` waits for the worker's guess (settings only: ~0.1 s) before going on alone.
GUESS_TIMEOUT_S = 5.0
#: The worker's niceness after its first sentence (see `_step_back`).
STEP_BACK_NICENESS = 10
_PR_SET_PDEATHSIG = 1


class Worker:
    """The parent's handle on the forked worker: its pid and the two pipe ends."""

    def __init__(self, pid: int, requests: BinaryIO, replies: BinaryIO) -> None:
        self.pid = pid
        self.requests = requests
        self.replies = replies
        self._reaped = False

    def read_message(self, timeout_s: float | None = None) -> dict[str, Any] | None:
        """The next JSON line (None at end of file, or after `timeout_s` with nothing to read:
        only for a first read, while nothing sits in the reader's buffer)."""
        if timeout_s is not None:
            ready, _, _ = select.select([self.replies], [], [], timeout_s)
            if not ready:
                return None
        line = self.replies.readline()
        return json.loads(line) if line else None

    def send(self, message: dict[str, Any]) -> None:
        self.requests.write(json.dumps(message).encode() + b"\n")
        self.requests.flush()

    def read_samples(self, frames: int) -> bytes:
        data = self.replies.read(frames * 4)
        if len(data) != frames * 4:
            raise EOFError("the speech worker ended mid-reply")
        return data

    def finish(self, wait_s: float = EXIT_WAIT_S) -> None:
        """Close the pipes (the worker exits on end of file) and reap it, killing it if it
        has not ended within `wait_s` (0: at once, for a worker whose work is not wanted).

        The replies pipe is closed last, once the worker is gone: a thread may still be
        blocked reading it (Ctrl-C or SIGTERM mid-sentence), and closing a buffered reader
        waits for that read, which a worker held by a slow server would end only at the
        engine's timeout (issue 37: 20 s after SIGTERM)."""
        try:
            self.requests.close()
        except OSError:
            pass
        self._reap(wait_s)
        try:
            self.replies.close()
        except OSError:
            pass

    def _reap(self, wait_s: float) -> None:
        deadline = time.monotonic() + wait_s
        while not self._reaped:  # once reaped, its pid may belong to another process
            try:
                ended = os.waitpid(self.pid, os.WNOHANG)[0] != 0
                if not ended and time.monotonic() < deadline:
                    time.sleep(0.005)
                    continue
                if not ended:
                    os.kill(self.pid, signal.SIGKILL)
                    os.waitpid(self.pid, 0)
            except (ChildProcessError, ProcessLookupError):
                pass
            self._reaped = True


_worker: Worker | None = None


def enabled() -> bool:
    """Whether this platform and environment allow the worker (Linux: it is forked)."""
    return sys.platform.startswith("linux") and os.environ.get(ENV_SWITCH, "1") != "0"


def start(*, engine: str | None = None, voice: str | None = None) -> None:
    """Fork the worker (call it before any thread starts: `vocal.launch` does). `engine` and
    `voice` are what the command line names, if anything: the guess resolves them as the
    command will."""
    global _worker
    if _worker is not None or not enabled() or not _load_shared():
        return
    request_read, request_write = os.pipe()
    reply_read, reply_write = os.pipe()
    parent_pid = os.getpid()
    try:
        pid = os.fork()
    except OSError:  # no processes left: the command synthesizes in-process
        for fd in (request_read, request_write, reply_read, reply_write):
            os.close(fd)
        return
    if pid == 0:  # the worker: never returns into the caller
        code = 1
        try:
            os.close(request_write)
            os.close(reply_read)
            _detach(parent_pid, keep=(request_read, reply_write))
            with os.fdopen(request_read, "rb") as requests, os.fdopen(reply_write, "wb") as replies:
                _serve(requests, replies, engine, voice)
            code = 0
        finally:
            os._exit(code)
    os.close(request_read)
    os.close(reply_write)
    _worker = Worker(pid, os.fdopen(request_write, "wb"), os.fdopen(reply_read, "rb"))
    atexit.register(_release)


def _load_shared() -> bool:
    """Load, once and before the fork, what both processes need; False when no worker is
    wanted after all (muted, or the process would not be single-threaded at the fork).

    Both need the settings and numpy (the worker for its engine, the command for its output).
    Loaded here they cost the 2 cores ~0.15 s less than loaded in each process, and the
    command starts synthesizing as soon as it knows the text (vocal.speaking.speech imports numpy
    before it starts its threads). The gates come first: a muted turn loads neither. numpy's
    OpenBLAS starts a thread pool on import unless told to use one thread, which is all a turn
    needs (no large linear algebra), and a process forks safely only single-threaded.
    """
    try:
        from vocal.config import load_settings
        from vocal.floor.gates import read_gates

        if read_gates(load_settings().home).silent:
            return False
    except Exception:  # a broken config.toml: the command itself reports it
        return False
    os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
    import numpy  # noqa: F401

    return len(os.listdir("/proc/self/task")) == 1


def claim(name: str, voice: str | None) -> Worker | None:
    """The worker, if it guessed (`name`, `voice`); None when there is no worker or it guessed
    another engine or voice (it is then let go, and the caller loads in-process). Called once
    per process: later calls get None. `vocal.speaking.remote.adopt` wraps it in an engine."""
    global _worker
    worker, _worker = _worker, None
    if worker is None:
        return None
    try:
        guess = worker.read_message(timeout_s=GUESS_TIMEOUT_S)
    except (OSError, ValueError):
        guess = None
    if not guess or guess.get("engine") != name or guess.get("voice") != voice:
        worker.finish(wait_s=0)
        return None
    from vocal.timeline import mark

    mark("worker_guessed", guess.get("at_s"))
    atexit.register(worker.finish)
    return worker


def _release() -> None:
    if _worker is not None:  # never adopted (an error, muted, or no speech after all)
        _worker.finish(wait_s=0)


# -- the worker's side ----------------------------------------------------------------------------
def _detach(parent_pid: int, keep: tuple[int, int]) -> None:
    """Die with the parent, and hold none of its files: a reader of the parent's stdout (or of
    any pipe it inherited) must see end of file when the parent ends, not when the worker
    does. Only the worker's own two pipe ends (`keep`) stay open."""
    try:
        import ctypes

        ctypes.CDLL(None).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent_pid:  # the parent is already gone
        os._exit(0)
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)
    low, high = sorted(keep)
    os.closerange(3, low)
    os.closerange(low + 1, high)
    os.closerange(high + 1, 65536)
    # Ctrl-C reaches the whole process group: the parent decides what it means.
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _serve(
    requests: BinaryIO, replies: BinaryIO, engine_name: str | None, voice_name: str | None
) -> None:
    def reply(message: dict[str, Any], payload: bytes = b"") -> None:
        replies.write(json.dumps(message).encode() + b"\n" + payload)
        replies.flush()

    engine = _guess_engine(reply, engine_name, voice_name)
    if engine is None:
        return
    stepped_back = False
    for line in requests:
        request = json.loads(line)
        if request.get("op") == "close":
            engine.close()
            return
        started_at_s = time.monotonic()
        try:
            samples = _as_float32(engine.synthesize(request["text"], speed=request["speed"]))
        except VocalError as exc:
            reply(error_reply(exc))
            continue
        except Exception as exc:  # the in-process engine's thread reports these the same way
            message = f"{engine.name} failed: {type(exc).__name__}: {exc}"
            reply({"message": message, "exit_code": EngineError.exit_code})
            continue
        header = {
            "frames": int(samples.shape[0]),
            "started_at_s": started_at_s,
            "at_s": time.monotonic(),
        }
        reply(header, samples.tobytes())
        if not stepped_back:
            stepped_back = _step_back()


def _step_back() -> bool:
    """Lower the worker's priority once its first sentence is out.

    The first sentence is what a person waits for; the rest is synthesized far ahead of
    playback (real-time factor ~0.02) and can wait for a core, so it should not compete with
    the turn's audio threads and PulseAudio while a converse turn also loads Whisper. (Its
    effect on output underflows was within the noise of the room harness.)
    """
    try:
        os.nice(STEP_BACK_NICENESS)
    except OSError:
        pass
    return True


def _guess_engine(reply: Any, engine_name: str | None, voice_name: str | None) -> TtsEngine | None:
    """Load the engine the command will most likely ask for; None (and say so) when the
    guess cannot be made."""
    try:
        from vocal.config import load_settings
        from vocal.tts.resolve import resolve_voice

        settings = load_settings()
        name, voice = resolve_voice(voice_name or settings.voice, engine_name, settings)
    except Exception:
        reply({"engine": None})
        return None
    reply({"engine": name, "voice": voice, "at_s": time.monotonic()})
    try:
        import importlib

        from vocal.tts import engine_class, load_tts

        for module in engine_class(name).preload_modules:
            importlib.import_module(module)
        engine = load_tts(name, voice, settings=settings)
    except Exception:
        reply({"loaded": False})
        return None
    reply(
        {
            "loaded": True,
            "sample_rate": engine.sample_rate,
            "voice": engine.voice,
            "at_s": time.monotonic(),
        }
    )
    return engine


def _as_float32(samples: Any) -> np.ndarray:
    import numpy as np

    return np.ascontiguousarray(np.asarray(samples, np.float32).reshape(-1))


__all__ = ["ENV_SWITCH", "Worker", "claim", "enabled", "start"]
