"""Push-to-talk: the person ends the recording with a key instead of a pause.

`--ptt` (listen and converse) records until Enter or Space, and Esc cancels. The keys come from
the controlling terminal (`/dev/tty`), never from stdin, which may carry the text to speak or be
a pipe. The terminal is put in cbreak mode while the keys are read (no echo, no line buffering;
Ctrl-C still sends SIGINT) and restored however the turn ends: SIGINT, SIGTERM, SIGHUP and
SIGQUIT give it back the moment they arrive (issue 37: killed, it once left the person's shell
echoing nothing), and the process then ends as the signal says (`PushToTalk._on_signal`).

An escape sequence (an arrow key sends Esc [ A) is not a cancel: Esc counts only when nothing
follows it within `ESC_ALONE_S`, as terminals and readline decide it.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import select
import signal
import sys
import threading
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING

from vocal.errors import Interrupted, UsageError

if TYPE_CHECKING:
    from types import FrameType

    from vocal.hearing.listening import BlockHook, ListenOptions, ListenResult

    #: What `signal.signal` returns: a handler, SIG_DFL or SIG_IGN, or None (not set from Python).
    SignalHandler = Callable[[int, FrameType | None], object] | int | None

#: The controlling terminal, whatever stdin/stdout are.
TTY_PATH = "/dev/tty"
#: Keys that end the recording.
DONE_KEYS = frozenset(b"\r\n ")
ESC = 0x1B
#: An Esc followed by more bytes within this is an escape sequence (a function key), not Esc.
ESC_ALONE_S = 0.05


#: Signals that give the terminal back the moment they arrive, before the process ends.
RESTORING_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT)

#: Said once on stderr (a terminal) when the recording starts.
PROMPT = "recording: Enter or Space when you are done, Esc cancels"


def push_to_talk_options(options: ListenOptions) -> ListenOptions:
    """`options` for a push-to-talk turn: no pause ends it (the silence window, the end-of-turn
    stage and the no-speech timeout all wait for the key), `max_duration_s` still does. The
    transcript still comes from the speech the VAD found, first word to last, so the silence
    before the person began and while they reached for the key is not sent to Whisper."""
    endpoint = options.endpoint
    forever_ms = int(endpoint.max_duration_s * 1000) + 1000
    return dataclasses.replace(
        options,
        vad=True,
        endpoint=dataclasses.replace(
            endpoint, min_silence_ms=forever_ms, no_speech_timeout_s=endpoint.max_duration_s + 1.0
        ),
        end_of_turn=dataclasses.replace(options.end_of_turn, enabled=False),
    )


def require_terminal(tty_path: str = TTY_PATH) -> None:
    """Raise the `UsageError` `PushToTalk` would, before a turn starts (converse speaks first)."""
    with PushToTalk(tty_path=tty_path, read=False):
        pass


class PushToTalk:
    """Reads Enter/Space (done) and Esc (cancel) from the terminal in a thread.

    Use as a context manager: entering opens the terminal (a `UsageError` when there is none:
    `--ptt` needs a person at a keyboard), discards keys typed before, and starts reading;
    leaving restores the terminal. `on_done` is called once, from the reading thread, when the
    person presses Enter or Space (to end the recording: `listen(stop=...)`). Esc is seen by
    the hook `watching` makes, which raises `Interrupted` in the recording loop, so nothing is
    transcribed.
    """

    def __init__(
        self,
        on_done: Callable[[], object] | None = None,
        tty_path: str = TTY_PATH,
        *,
        read: bool = True,
    ) -> None:
        self.on_done = on_done
        self.tty_path = tty_path
        self.read = read
        #: Set by Enter or Space.
        self.done = threading.Event()
        #: Set by Esc.
        self.cancelled = threading.Event()
        self._fd: int | None = None
        self._saved: list | None = None
        self._wake_r, self._wake_w = -1, -1
        self._thread: threading.Thread | None = None
        self._old_handlers: dict[int, SignalHandler] = {}

    @property
    def pressed(self) -> bool:
        """Whether a key ended or cancelled the recording."""
        return self.done.is_set() or self.cancelled.is_set()

    def __enter__(self) -> PushToTalk:
        import termios
        import tty

        try:
            fd = os.open(self.tty_path, os.O_RDONLY | os.O_NOCTTY)
        except OSError as exc:
            raise UsageError(
                "--ptt needs a terminal to read Enter/Space/Esc from, and there is none "
                f"({self.tty_path}: {exc.strerror})",
                hint="run it from a terminal, or leave out --ptt to end on a pause",
            ) from exc
        try:
            self._saved = termios.tcgetattr(fd)
            self._fd = fd
            self._catch_signals()  # before cbreak: no moment where a signal leaves it set
            tty.setcbreak(fd, termios.TCSANOW)
            termios.tcflush(fd, termios.TCIFLUSH)  # keys typed before the recording do not count
        except termios.error as exc:
            self._release_signals()
            self._fd = None
            os.close(fd)
            raise UsageError(f"--ptt: {self.tty_path} is not a terminal ({exc})") from exc
        self._wake_r, self._wake_w = os.pipe()
        if not self.read:
            return self
        self._thread = threading.Thread(target=self._read, name="vocal-ptt", daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop reading and give the terminal back as it was."""
        import termios

        if self._fd is None:
            return
        os.write(self._wake_w, b"x")
        if self._thread is not None:
            self._thread.join(1.0)
        try:
            if self._saved is not None:
                termios.tcsetattr(self._fd, termios.TCSANOW, self._saved)
        finally:
            self._release_signals()
            for fd in (self._fd, self._wake_r, self._wake_w):
                os.close(fd)
            self._fd = None

    def _catch_signals(self) -> None:
        """Route `RESTORING_SIGNALS` to `_on_signal` (main thread only: elsewhere Python cannot
        set handlers). An ignored signal stays ignored: under nohup a hang-up is no end."""
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in RESTORING_SIGNALS:
            previous = signal.getsignal(signum)
            if previous is not signal.SIG_IGN:
                self._old_handlers[signum] = signal.signal(signum, self._on_signal)

    def _release_signals(self) -> None:
        for signum, handler in self._old_handlers.items():
            signal.signal(signum, handler)
        self._old_handlers.clear()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        """Give the terminal back at once, then end as the signal would have: through the
        previous handler (a turn's releases the floor; Ctrl-C's raises KeyboardInterrupt) or,
        with none, by the signal itself, so the parent sees it (a shell says 128 + signum)."""
        import termios

        if self._fd is not None and self._saved is not None:
            with contextlib.suppress(termios.error, OSError):
                termios.tcsetattr(self._fd, termios.TCSANOW, self._saved)
        previous = self._old_handlers.get(signum)
        if callable(previous):
            previous(signum, frame)
            return
        # Not an exception: raised here it may strike inside an import with the import lock
        # held, and the unwinding then hung joining the recognizer's loader (seen, issue 37).
        signal.signal(signum, signal.SIG_DFL)
        signal.raise_signal(signum)
        os._exit(128 + signum)  # a signal whose default is not to end the process

    def _read(self) -> None:
        fd = self._fd
        assert fd is not None
        while not self.pressed:
            ready, _, _ = select.select([fd, self._wake_r], [], [])
            if self._wake_r in ready:
                return
            data = os.read(fd, 64)
            if not data:
                return  # the terminal went away (hang-up)
            if self._key(fd, data):
                if self.done.is_set() and self.on_done is not None:
                    self.on_done()
                return

    def ended(self, result: ListenResult) -> ListenResult:
        """`result` with the end reason "key" where the key (not Ctrl-C, not the control
        socket) ended the recording."""
        if self.done.is_set() and result.end_reason == "requested":
            return dataclasses.replace(result, end_reason="key")
        return result

    def watching(self, on_block: Callable[..., object] | None) -> Callable[..., None]:
        """A `listen(on_block=...)` hook: raises `Interrupted` (exit 130) once Esc was pressed,
        else calls `on_block` (a level meter, the turn's checks)."""

        def hook(*args: object) -> None:
            if self.cancelled.is_set():
                raise Interrupted("cancelled with Esc")
            if on_block is not None:
                on_block(*args)

        return hook

    def _key(self, fd: int, data: bytes) -> bool:
        """Whether `data` (and what follows an Esc) ended or cancelled the recording."""
        for i, byte in enumerate(data):
            if byte in DONE_KEYS:
                self.done.set()
                return True
            if byte == ESC:
                if i + 1 < len(data):
                    return False  # a sequence in the same read: a function key
                ready, _, _ = select.select([fd], [], [], ESC_ALONE_S)
                if ready:
                    os.read(fd, 64)  # the rest of the sequence
                    return False
                self.cancelled.set()
                return True
        return False


class _NoKeys:
    """`keys_for`'s stand-in when push-to-talk is off: the hook and result pass unchanged."""

    def watching(self, on_block: BlockHook | None) -> BlockHook | None:
        return on_block

    def ended(self, result: ListenResult) -> ListenResult:
        return result


@contextlib.contextmanager
def keys_for(
    enabled: bool, stop: threading.Event, options: ListenOptions
) -> Iterator[tuple[PushToTalk | _NoKeys, ListenOptions]]:
    """Around a listening step: with push-to-talk `enabled`, the keys read (Enter/Space set
    `stop`) and `options` that wait for them, the prompt said on a terminal; otherwise a
    stand-in and `options` as they are."""
    if not enabled:
        yield _NoKeys(), options
        return
    with PushToTalk(on_done=stop.set) as keys:
        if sys.stderr.isatty():
            print(PROMPT, file=sys.stderr, flush=True)
        yield keys, push_to_talk_options(options)


__all__ = ["PROMPT", "PushToTalk", "keys_for", "push_to_talk_options", "require_terminal"]
