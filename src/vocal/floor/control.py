"""The control channel: a Unix socket into a running turn, and the client `vocal control` uses.

While a `speak`/`converse` (or `play`, `replay`) process waits for the floor, plays or listens,
it listens on `Settings.run_dir/<pid>.sock` (the directory is 0700), next to `<pid>.json` that
says whose turn it is (pid, session, agent, kind). A client sends newline-delimited JSON,
`{"cmd": "pause"}`, and gets one JSON line back per command: `{"ok": true, "cmd": "pause", ...}`
or `{"ok": false, "error": "..."}`.

Only peers with our UID are served: SO_PEERCRED on Linux, LOCAL_PEERCRED on macOS and the BSDs;
where the check cannot be made the peer is refused. Malformed JSON, unknown commands, lines over
`MAX_LINE_BYTES`, clients that stall (`IDLE_TIMEOUT_S`) and floods (`MAX_CLIENTS` at once) get an
error line or are cut off; none of it can stop the server or the turn. A socket file left by a
killed process (no listener) is removed before binding.

Standard library only: `vocal control` is on the fast-start path.
"""

from __future__ import annotations

import contextlib
import json
import os
import select
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass
from functools import partial
from pathlib import Path

from vocal.errors import UsageError, VocalError
from vocal.floor.statefiles import (
    BadRecord,
    SocketPath,
    check_field,
    connect_refused,
    peer_uid,
    pid_alive,
    private_dir,
    process_start,
    read_record,
    unlink,
    write_json,
)

COMMANDS = ("stop", "pause", "resume", "skip_forward", "skip_back", "status")
#: A command is a few dozen bytes; anything this long is garbage or an attack.
MAX_LINE_BYTES = 4096
#: A connected client must complete a line within this, or it is answered "timeout" and dropped.
IDLE_TIMEOUT_S = 2.0
#: Connections served at once (a thread each); more are answered "busy" and closed.
MAX_CLIENTS = 32
#: How long a hang-up waits for the client to stop sending (see `_close`).
_DRAIN_S = 0.2
#: How long `close` waits for answers being sent (a skip ends the turn at once: issue 38).
REPLY_GRACE_S = 1.0

Handler = Callable[[str, dict], dict]


class ControlError(VocalError):
    """No turn to control, or it refused or failed a command (exit 1)."""


@dataclass
class Endpoint:
    """A running turn's control socket, as its `<pid>.json` describes it."""

    pid: int
    socket_path: Path
    session: str | None = None
    agent: str | None = None
    kind: str | None = None
    started_at: float = 0.0
    pid_start: int | None = None

    def to_dict(self) -> dict[str, object]:
        data = asdict(self)
        data["socket_path"] = str(self.socket_path)
        return data


def parse_endpoint(data: object, run_dir: Path, pid: int) -> Endpoint:
    """The `Endpoint` that run/<pid>.json describes, field by field; raises BadRecord (the file
    names its own pid, which must be the one in its name)."""
    if not isinstance(data, dict):
        raise BadRecord(f"run record: a JSON {type(data).__name__}, not an object")
    if check_field("pid", data.get("pid", pid), "int") != pid:
        raise BadRecord(f"run record: pid {data.get('pid')} in the file of {pid}")
    return Endpoint(
        pid=pid,
        socket_path=run_dir / f"{pid}.sock",
        session=check_field("session", data.get("session"), "str | None"),
        agent=check_field("agent", data.get("agent"), "str | None"),
        kind=check_field("kind", data.get("kind"), "str | None"),
        started_at=check_field("started_at", data.get("started_at") or 0.0, "float"),
        pid_start=check_field("pid_start", data.get("pid_start"), "int | None", (0, 2**63 - 1)),
    )


class ControlServer:
    """Serves `handler(cmd, request) -> reply fields` on `run_dir/<pid>.sock` from a thread.

    The handler runs on a connection's thread; it must be quick and thread-safe. Its dict is
    merged into `{"ok": true, "cmd": cmd}`; an exception becomes an error line.
    """

    def __init__(
        self,
        run_dir: Path,
        handler: Handler,
        *,
        info: Mapping[str, object] | None = None,
        max_line_bytes: int = MAX_LINE_BYTES,
        idle_timeout_s: float = IDLE_TIMEOUT_S,
        max_clients: int = MAX_CLIENTS,
    ) -> None:
        self.run_dir = Path(run_dir)
        self.handler = handler
        self.info = dict(info or {})
        self.max_line_bytes = max_line_bytes
        self.idle_timeout_s = idle_timeout_s
        self.pid = os.getpid()
        self.socket_path = self.run_dir / f"{self.pid}.sock"
        self.info_path = self.run_dir / f"{self.pid}.json"
        self._slots = threading.BoundedSemaphore(max_clients)
        self._listener: socket.socket | None = None
        self._address: SocketPath | None = None
        self._wake_r, self._wake_w = -1, -1
        self._thread: threading.Thread | None = None
        self._closed = threading.Event()
        self._replying = 0  # answers being sent, which `close` waits for
        self._replied = threading.Condition()
        self.served = 0
        self.refused = 0

    # -- lifecycle ---------------------------------------------------------------------------
    def start(self) -> ControlServer:
        private_dir(self.run_dir)
        self._address = SocketPath(self.socket_path)
        remove_stale_socket(self.socket_path)
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            old_umask = os.umask(0o177)  # the socket file itself 0600, belt and braces
            try:
                listener.bind(self._address.address)
            finally:
                os.umask(old_umask)
            listener.listen(64)
        except OSError as exc:
            listener.close()
            raise ControlError(
                f"cannot bind the control socket {self.socket_path}: {exc}"
            ) from None
        listener.setblocking(False)
        self._listener = listener
        self._wake_r, self._wake_w = os.pipe()
        write_json(
            self.info_path,
            {
                "pid": self.pid,
                "pid_start": process_start(self.pid),
                "socket": self.socket_path.name,
                "started_at": time.time(),
                **self.info,
            },
        )
        self._thread = threading.Thread(target=self._accept_loop, name="control", daemon=True)
        self._thread.start()
        return self

    def close(self) -> None:
        """Stop serving and remove the socket and its description."""
        if self._closed.is_set():
            return
        self._closed.set()
        if self._wake_w >= 0:
            with contextlib.suppress(OSError):
                os.write(self._wake_w, b"x")
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(2.0)
        with self._replied:
            self._replied.wait_for(lambda: self._replying == 0, timeout=REPLY_GRACE_S)
        if self._listener is not None:
            self._listener.close()
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        unlink(self.info_path)
        unlink(self.socket_path)
        if self._address is not None:
            self._address.close()

    def __enter__(self) -> ControlServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- serving -----------------------------------------------------------------------------
    def _accept_loop(self) -> None:
        assert self._listener is not None
        while not self._closed.is_set():
            watched: list[socket.socket | int] = [self._listener, self._wake_r]
            try:
                ready, _, _ = select.select(watched, [], [])
            except (OSError, ValueError):
                return
            if self._wake_r in ready:
                return
            try:
                conn, _ = self._listener.accept()
            except (BlockingIOError, InterruptedError):
                continue
            except OSError:
                if self._closed.is_set():
                    return
                time.sleep(0.01)  # EMFILE and friends: back off instead of spinning
                continue
            conn.setblocking(True)
            conn.settimeout(self.idle_timeout_s)
            if not self._slots.acquire(blocking=False):
                _send(conn, {"ok": False, "error": "busy: too many control clients"})
                _close(conn, drain=False)  # no lingering here: this thread must keep accepting
                continue
            threading.Thread(
                target=self._serve, args=(conn,), name="control-conn", daemon=True
            ).start()

    def _serve(self, conn: socket.socket) -> None:
        try:
            try:
                uid = peer_uid(conn)
            except OSError as exc:
                self.refused += 1
                _send(conn, {"ok": False, "error": f"refused: cannot check the peer ({exc})"})
                return
            if uid != os.geteuid():
                self.refused += 1
                _send(conn, {"ok": False, "error": f"refused: peer uid {uid} is not ours"})
                return
            too_long = {"ok": False, "error": f"line longer than {self.max_line_bytes} bytes"}
            buffer = b""
            # Each line must be complete within idle_timeout_s of the previous answer, so a
            # client trickling a byte at a time cannot hold a connection for ever.
            deadline = time.monotonic() + self.idle_timeout_s
            while not self._closed.is_set():
                newline = buffer.find(b"\n")
                if newline < 0:
                    if len(buffer) > self.max_line_bytes:
                        _send(conn, too_long)
                        return
                    try:
                        conn.settimeout(max(0.001, deadline - time.monotonic()))
                        chunk = conn.recv(65536)
                    except TimeoutError:
                        error = f"timeout: no complete command within {self.idle_timeout_s:g} s"
                        _send(conn, {"ok": False, "error": error})
                        return
                    if not chunk:
                        return
                    buffer += chunk
                    continue
                line, buffer = buffer[:newline], buffer[newline + 1 :]
                if len(line) > self.max_line_bytes:
                    _send(conn, too_long)
                    return
                if line.strip() and not self._reply(conn, line):
                    return
                deadline = time.monotonic() + self.idle_timeout_s
        except OSError:
            pass  # the client went away mid-reply
        finally:
            _close(conn)
            self._slots.release()

    def _reply(self, conn: socket.socket, line: bytes) -> bool:
        """Answer one line; `close` waits for it (the command may end the turn)."""
        with self._replied:
            self._replying += 1
        try:
            return _send(conn, self.answer(line))
        finally:
            with self._replied:
                self._replying -= 1
                self._replied.notify_all()

    def answer(self, line: bytes) -> dict[str, object]:
        """The reply to one request line (never raises)."""
        received_at_s = time.monotonic()
        try:
            request = json.loads(line.decode("utf-8"))
        except (UnicodeDecodeError, ValueError, RecursionError) as exc:
            return {"ok": False, "error": f"bad JSON: {str(exc)[:200]}"}
        if isinstance(request, str):
            request = {"cmd": request}
        if not isinstance(request, dict):
            return {"ok": False, "error": 'a command is a JSON object like {"cmd": "status"}'}
        cmd = request.get("cmd")
        if not isinstance(cmd, str):
            return {"ok": False, "error": 'missing "cmd"', "commands": list(COMMANDS)}
        cmd = cmd.replace("-", "_")
        if cmd not in COMMANDS:
            return {
                "ok": False,
                "error": f"unknown command {cmd[:64]!r}",
                "commands": list(COMMANDS),
            }
        try:
            fields = self.handler(cmd, request)
        except Exception as exc:  # a handler bug must not take the turn down
            return {"ok": False, "cmd": cmd, "error": f"{type(exc).__name__}: {exc}"}
        self.served += 1
        return {"ok": True, "cmd": cmd, "received_at_s": received_at_s, **(fields or {})}


def _send(conn: socket.socket, reply: Mapping[str, object]) -> bool:
    try:
        # A client that never reads fills its buffer: give up on it after the idle timeout.
        conn.settimeout(IDLE_TIMEOUT_S)
        conn.sendall(json.dumps(reply, default=str).encode() + b"\n")
        return True
    except OSError:
        return False


def _close(conn: socket.socket, *, drain: bool = True) -> None:
    """Hang up after our last line. Closing with unread input would reset the connection and
    could destroy that line before the client reads it, so the input is drained first (for a
    bounded time: a client streaming garbage does not keep us)."""
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_WR)
        deadline = time.monotonic() + (_DRAIN_S if drain else 0.0)
        while (left := deadline - time.monotonic()) > 0:
            conn.settimeout(left)
            if not conn.recv(65536):
                break
    conn.close()


def remove_stale_socket(path: Path) -> bool:
    """Remove the socket file at `path` if nothing listens there; True if one was removed.

    Raises ControlError if a live process is listening (it is not ours to take over).
    """
    if not os.path.lexists(path):
        return False
    probe = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    probe.settimeout(1.0)
    try:
        with SocketPath(path) as address:
            probe.connect(address.address)
    except OSError as exc:
        if connect_refused(exc) or not path.is_socket():
            unlink(path)
            return True
        raise ControlError(f"cannot check the old socket {path}: {exc}") from None
    finally:
        probe.close()
    raise ControlError(f"another process is listening at {path}")


# -- client ----------------------------------------------------------------------------------
def endpoints(run_dir: Path) -> list[Endpoint]:
    """The running turns with a control socket, oldest first. Descriptions left by dead
    processes are removed (with their socket files, which nothing listens on)."""
    found = []
    try:
        names = os.listdir(run_dir)
    except (FileNotFoundError, PermissionError):
        return []
    log_dir = Path(run_dir).parent / "logs"
    for name in names:
        if not name.endswith(".json") or not name[:-5].isdigit() or len(name) > 25:
            continue
        pid = int(name[:-5])
        if not 0 < pid < 2**31:  # no process has it (and os.kill would overflow)
            continue
        try:
            # A malformed record is quarantined (issue 17); its socket, if any, is left to
            # `remove_stale_socket`: a live process may still be listening on it.
            parse = partial(parse_endpoint, run_dir=run_dir, pid=pid)
            endpoint = read_record(run_dir / name, parse, log_dir=log_dir)
        except PermissionError:
            continue  # not ours to read, so not ours to control
        if endpoint is None:
            continue
        if not pid_alive(pid, endpoint.pid_start):
            with contextlib.suppress(OSError):
                unlink(run_dir / name)
                unlink(run_dir / f"{pid}.sock")
            continue
        found.append(endpoint)
    found.sort(key=lambda e: e.started_at)
    return found


def find_endpoint(
    run_dir: Path,
    *,
    pid: int | None = None,
    session: str | None = None,
    holder_pid: int | None = None,
) -> Endpoint | None:
    """The turn to talk to: by `pid`, else by `session`, else the conch holder (`holder_pid`),
    else the most recently started one. None if there is none."""
    live = endpoints(run_dir)
    if pid is not None:
        return next((e for e in live if e.pid == pid), None)
    if session is not None:
        matches = [e for e in live if e.session == session]
        return matches[-1] if matches else None
    if holder_pid is not None:
        for endpoint in live:
            if endpoint.pid == holder_pid:
                return endpoint
    return live[-1] if live else None


def send_command(
    endpoint: Endpoint | Path, cmd: str, *, timeout_s: float = 2.0, **fields: object
) -> dict[str, object]:
    """Send one command and return the reply (with `sent_at_s`, `replied_at_s` monotonic).

    Raises ControlError when nothing answers or the reply is not JSON.
    """
    path = endpoint.socket_path if isinstance(endpoint, Endpoint) else Path(endpoint)
    conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    conn.settimeout(timeout_s)
    try:
        with SocketPath(path) as address:
            _connect(conn, address.address, path, timeout_s)
        sent_at_s = time.monotonic()
        conn.sendall(json.dumps({"cmd": cmd, **fields}).encode() + b"\n")
        data = b""
        while not data.endswith(b"\n"):
            chunk = conn.recv(65536)
            if not chunk:
                break
            data += chunk
        replied_at_s = time.monotonic()
    except TimeoutError:
        raise ControlError(f"no answer from {path} within {timeout_s:g} s") from None
    except OSError as exc:
        raise ControlError(f"the control connection failed: {exc}") from None
    finally:
        conn.close()
    try:
        reply = json.loads(data.decode("utf-8").splitlines()[0]) if data else None
    except (UnicodeDecodeError, ValueError, IndexError):
        reply = None
    if not isinstance(reply, dict):
        raise ControlError(
            f"not a control reply: {data[:200]!r}" if data else "the turn ended unanswered"
        )
    reply.setdefault("sent_at_s", sent_at_s)
    reply["replied_at_s"] = replied_at_s
    return reply


def _connect(conn: socket.socket, address: str, path: Path, timeout_s: float) -> None:
    # A socket with a timeout connects non-blocking, and AF_UNIX then fails with EAGAIN while
    # the listener's backlog is full (a burst of clients) instead of waiting: retry briefly.
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            conn.connect(address)
            return
        except PermissionError:
            raise ControlError(f"permission denied on {path}: not our turn to control") from None
        except BlockingIOError:
            if time.monotonic() > deadline:
                raise ControlError(f"{path} is too busy to answer") from None
            time.sleep(0.005)
        except OSError as exc:
            raise ControlError(f"nothing answers at {path}: {exc.strerror or exc}") from None


def check_command(cmd: str) -> str:
    """`cmd` as the protocol spells it (skip-back -> skip_back), or UsageError."""
    name = cmd.replace("-", "_")
    if name not in COMMANDS:
        raise UsageError(f"unknown control command {cmd!r}", hint=", ".join(COMMANDS))
    return name


__all__ = [
    "COMMANDS",
    "ControlError",
    "ControlServer",
    "Endpoint",
    "IDLE_TIMEOUT_S",
    "MAX_CLIENTS",
    "MAX_LINE_BYTES",
    "endpoints",
    "parse_endpoint",
    "find_endpoint",
    "peer_uid",
    "remove_stale_socket",
    "send_command",
]
