"""Work held to a deadline whatever it waits on: a name lookup, a connect, a trickling server.

A socket timeout bounds each wait, not their sum: a server that sends one byte every half
second keeps every recv well inside any timeout and the exchange going for ever (issue 37:
killed after 90 s with a 10 s "deadline"), and `getaddrinfo` takes no timeout at all. So the
exchange runs in a worker thread that the caller waits for until the deadline. Past it, the
caller shuts down the sockets the exchange opened, which ends at once any recv or send blocked
on them, and goes on (to its error, or to a local fallback) without waiting for the worker. A
worker stuck in a name lookup is left behind: a daemon thread, gone when the resolver gives up.

Standard library only: vocal.net is on the fast-start path of the remote engines.
"""

from __future__ import annotations

import http.client
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

T = TypeVar("T")


class Sockets:
    """The sockets one exchange opened, shut down together when its deadline passes."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._open: list[socket.socket] = []
        self._aborted = False

    def add(self, sock: socket.socket) -> None:
        """Keep `sock` to shut down at the deadline (at once, if it has passed already)."""
        with self._lock:
            self._open.append(sock)
            if self._aborted:
                _shut(sock)

    def abort(self) -> None:
        """Shut down every socket, now and any opened later: blocked reads and writes end."""
        with self._lock:
            self._aborted = True
            for sock in self._open:
                _shut(sock)

    def connection(self, kind: type[http.client.HTTPConnection]) -> Callable[..., Any]:
        """A factory for `kind` (HTTP or HTTPS) whose sockets are kept here, as urllib's
        `do_open` takes one. The socket is kept the moment it connects, before any TLS
        handshake or proxy tunnel, so a server that trickles those is cut off too
        (`_create_connection` is http.client's own seam for this: its tests replace it)."""

        def make(host: str, **options: Any) -> http.client.HTTPConnection:
            connection = kind(host, **options)
            create = connection._create_connection  # type: ignore[attr-defined]

            def create_kept(*args: Any, **kwargs: Any) -> socket.socket:
                sock = create(*args, **kwargs)
                self.add(sock)
                return sock

            connection._create_connection = create_kept  # type: ignore[attr-defined]
            return connection

        return make


def _shut(sock: socket.socket) -> None:
    # shutdown, not close: it wakes a recv blocked in another thread (close does not), and
    # the worker still owns the descriptor. socket.socket's own method, so that an SSL
    # socket's is not run from this thread.
    try:
        socket.socket.shutdown(sock, socket.SHUT_RDWR)
    except OSError:  # not connected any more, or closed: nothing left to wake
        pass


def run_by(work: Callable[[Sockets], T], deadline: float, late: BaseException) -> T:
    """`work(sockets)`'s result, run in a worker thread; `late` raised if it has not ended
    by `deadline` (time.monotonic()), after the sockets it registered are shut down.

    Whatever `work` raises is raised here, in the caller's thread. An interruption of the wait
    (Ctrl-C) shuts the sockets down too.
    """
    sockets = Sockets()
    outcome: list[tuple[bool, Any]] = []
    done = threading.Event()

    def run() -> None:
        try:
            outcome.append((True, work(sockets)))
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            outcome.append((False, exc))
        finally:
            done.set()

    threading.Thread(target=run, name="vocal-net", daemon=True).start()
    try:
        finished = done.wait(max(0.0, deadline - time.monotonic()))
    finally:
        if not done.is_set():
            sockets.abort()
    if not finished:
        raise late
    succeeded, value = outcome[0]
    if succeeded:
        return value
    raise value


__all__ = ["Sockets", "run_by"]
