"""Files in the state directory that several vocal processes share: the conch, sockets, history.

Mutual exclusion is an `flock` on a lock file held for a few microseconds; everything else is
written whole to a temporary file and renamed over the old one, so a reader (or a process killed
mid-write) never leaves or sees half a record. Liveness of a process is checked by pid and, on
Linux, by the process's start time, so a recycled pid is not mistaken for the old process.

Every record is read through `read_record`: a file that is not JSON, is too deep or too large,
or whose fields have the wrong types or ranges (`record_from`) is quarantined: renamed aside to
`NAME.bad-<unix s>` (out of every listing, trimmed after `QUARANTINE_KEEP_S`), logged to
`logs/statefiles.log`, and treated as absent, so a corrupt file never locks vocal up and the
command that writes it anew (unmute, volume, bump, ...) always works (issue 17). `quarantined`
lists what was set aside, for `vocal doctor`.

Standard library only: the conch and control commands are on the fast-start path.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import json
import math
import os
import socket
import stat
import struct
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, TypeGuard, TypeVar

from vocal.files.bounded import BoundedReadError, loads_json, read_up_to
from vocal.floor.statedir import ensure_private_dir

#: Longest AF_UNIX path we bind directly (sun_path is 104 bytes on macOS, 108 on Linux).
MAX_SOCKET_PATH_BYTES = 100
HOST = socket.gethostname()
#: A quarantined file is NAME + this + its unix time; no listing of records matches it.
QUARANTINE_MARK = ".bad-"
#: Quarantined files are kept this long for a post-mortem (`vocal doctor` lists them), and at
#: most `QUARANTINE_KEEP_COUNT` per directory, so a corrupting loop cannot fill the disk.
QUARANTINE_KEEP_S = 7 * 86400.0
QUARANTINE_KEEP_COUNT = 16
#: No record vocal writes comes near this; a larger file is not ours, and parsing it costs.
MAX_RECORD_BYTES = 1 << 20
#: The quarantine log is cut back to its newer half past this size.
MAX_LOG_BYTES = 64 * 1024
LOG_NAME = "statefiles.log"

T = TypeVar("T")


class BadRecord(ValueError):
    """A state file that is not what vocal writes there (the message says what is wrong)."""


@contextlib.contextmanager
def locked(path: Path) -> Iterator[int]:
    """Hold an exclusive `flock` on `path` (created if missing) for the `with` body, which gets
    the descriptor (a counter can live in the lock file: see `next_counter`).

    Each call opens its own file description, so two threads of one process exclude each other
    as two processes do. The kernel drops the lock when the holder dies, even on SIGKILL.
    """
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield fd
    finally:
        os.close(fd)  # closing the last descriptor releases the lock


def next_counter(lock_fd: int, *, above: int = 0, ceiling: int | None = None) -> int:
    """Increment and return the counter kept in a lock file we hold (`locked`), never less than
    `above` + 1 (a lock file emptied or garbled must not hand out numbers still in use), and
    never over `ceiling` (a counter garbled to a huge number starts again above `above`: the
    records it would number must stay within their validated range).

    Kept in place rather than in its own renamed file: replacing an existing file costs a data
    flush on ext4 (auto_da_alloc, ~0.2-0.7 ms here), and under the lock a 21-byte pwrite is
    never seen half done.
    """
    raw = os.pread(lock_fd, 32, 0).split(b"\n")[0].strip()
    current = int(raw) if raw.isdigit() and len(raw) <= 20 else 0
    value = max(current, above) + 1
    if ceiling is not None and value > ceiling:
        value = above + 1
    os.pwrite(lock_fd, f"{value:020d}\n".encode(), 0)
    if os.fstat(lock_fd).st_size > 21:  # garbage after the counter (issue 17)
        os.ftruncate(lock_fd, 21)
    return value


def write_json(path: Path, data: object) -> None:
    """Write `data` as JSON to `path` atomically (temporary file in the same directory, rename)."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump(data, out, separators=(",", ":"))
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def read_json(path: Path) -> object:
    """The JSON in `path`, or None if it is missing or not valid JSON (a foreign or torn file,
    nested too deep, or larger than `MAX_RECORD_BYTES`). Nothing is quarantined: see
    `read_record` for records."""
    try:
        return load_json(path)[0]
    except BadRecord:
        return None


def load_json(
    path: Path, *, max_bytes: int = MAX_RECORD_BYTES
) -> tuple[object, os.stat_result | None]:
    """The JSON in `path` and the file's identity (stat) as read; (None, None) if it is missing.

    Raises:
        BadRecord: not UTF-8 JSON, nested too deep (vocal.files.bounded.loads_json), or too large.
    """
    # No link is followed (the state directory holds none of ours) and a FIFO or device
    # cannot block or flood the reader: only a regular file's first max_bytes are read.
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags)
    except (FileNotFoundError, NotADirectoryError):
        return None, None
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.EISDIR, errno.ENXIO):
            raise BadRecord(f"not a regular file ({exc.strerror})") from None
        raise
    try:
        identity = os.fstat(fd)
        if not stat.S_ISREG(identity.st_mode):
            raise BadRecord("not a regular file")
        raw = read_up_to(fd, max_bytes + 1)
    finally:
        os.close(fd)
    if len(raw) > max_bytes:
        raise BadRecord(f"larger than {max_bytes} bytes")
    try:
        return loads_json(raw.decode("utf-8")), identity
    except BoundedReadError as exc:  # nested too deep: refused before the parser recursed
        raise BadRecord(str(exc)) from None
    except (ValueError, UnicodeDecodeError) as exc:  # JSONDecodeError is a ValueError
        raise BadRecord(f"not JSON: {str(exc)[:120]}") from None


def read_record(
    path: Path,
    parse: Callable[[object], T],
    *,
    log_dir: Path | None = None,
    quarantine_bad: bool = True,
    max_bytes: int = MAX_RECORD_BYTES,
    on_bad: Callable[[str], None] | None = None,
) -> T | None:
    """The record in `path` as `parse` makes it, or None if the file is missing or malformed.

    `parse` takes the decoded JSON and raises `BadRecord` (or any ValueError, TypeError,
    KeyError, OverflowError) when it is not a valid record. A malformed file is quarantined
    (`quarantine`) unless `quarantine_bad` is False: readers that do not hold the lock its
    writers take pass False and leave it to the next one who does. `on_bad(reason)` is called
    after a malformed file was quarantined.
    """
    identity = None
    try:
        data, identity = load_json(path, max_bytes=max_bytes)
        if identity is None:
            return None
        return parse(data)
    except (ValueError, TypeError, KeyError, OverflowError, RecursionError) as exc:
        if quarantine_bad:  # BadRecord is a ValueError
            reason = str(exc) or type(exc).__name__
            if quarantine(path, reason, log_dir=log_dir, identity=identity) and on_bad:
                on_bad(reason)
        return None


# -- validating records ------------------------------------------------------------------------
def finite(value: object) -> TypeGuard[float]:
    """Whether `value` is a real number (not bool, NaN or infinite)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def check_field(name: str, value: Any, kind: str, bounds: tuple[float, float] | None = None) -> Any:
    """`value` checked against the annotation `kind` ("int", "float", "str", "bool", each
    optionally "| None") and inclusive `bounds`; floats come back as float. Raises BadRecord."""
    base, _, optional = kind.partition(" | ")
    if value is None:
        if optional == "None":
            return None
        raise BadRecord(f"{name}: null")
    if base == "bool":
        ok = isinstance(value, bool)
    elif base == "int":
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif base == "float":
        ok = finite(value)
        value = float(value) if ok else value
    elif base == "str":
        ok = isinstance(value, str)
    else:
        raise TypeError(f"check_field: cannot check {kind!r}")
    if not ok:
        raise BadRecord(f"{name}: {type(value).__name__} {str(value)[:40]!r} is not {kind}")
    if bounds is not None and not bounds[0] <= value <= bounds[1]:
        raise BadRecord(f"{name}: {str(value)[:40]} is outside {bounds[0]:g}..{bounds[1]:g}")
    return value


def record_from(
    cls: type[T], data: object, bounds: dict[str, tuple[float, float]] | None = None
) -> T:
    """An instance of dataclass `cls` from a JSON object, field by field: each present field
    must match its annotation (and `bounds`), each field without a default must be present;
    unknown keys are ignored (a newer vocal may add some). Raises BadRecord."""
    if not isinstance(data, dict):
        raise BadRecord(f"{cls.__name__}: a JSON {type(data).__name__}, not an object")
    values = {}
    for f in dataclasses.fields(cls):  # type: ignore[arg-type]
        if f.name not in data:
            if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
                raise BadRecord(f"{cls.__name__}: {f.name} is missing")
            continue
        limits = (bounds or {}).get(f.name)
        values[f.name] = check_field(f.name, data[f.name], str(f.type), limits)
    return cls(**values)


# -- quarantine ------------------------------------------------------------------------------
def quarantine(
    path: Path, reason: str, *, log_dir: Path | None = None, identity: os.stat_result | None = None
) -> Path | None:
    """Rename the malformed file `path` aside (`NAME.bad-<unix s>`), log why, trim old ones.

    `identity` is the file as it was read: if a writer has replaced it since, the new file is
    left alone (and put back, should the rename have taken it). Returns the new name, or None
    if nothing was set aside. Never raises: a file that cannot be moved is still treated as
    absent by the reader.
    """
    path = Path(path)
    stamp = int(time.time())
    aside = path.with_name(f"{path.name}{QUARANTINE_MARK}{stamp}")
    for n in range(1, 100):
        if not os.path.lexists(aside):
            break
        aside = path.with_name(f"{path.name}{QUARANTINE_MARK}{stamp}-{n}")
    try:
        if identity is not None and not _same_file(os.lstat(path), identity):
            return None  # replaced since it was read: the new one is not known to be bad
        os.rename(path, aside)
        if identity is not None and not _same_file(os.lstat(aside), identity):
            # A writer replaced it between our check and the rename: restore theirs, unless
            # an even newer one is already in place (link never overwrites).
            with contextlib.suppress(OSError):
                os.link(aside, path)
            os.unlink(aside)
            return None
    except OSError:
        return None
    trim_quarantine(path.parent)
    log_quarantine(log_dir, path, aside, reason)
    return aside


def _same_file(a: os.stat_result, b: os.stat_result) -> bool:
    return (a.st_dev, a.st_ino) == (b.st_dev, b.st_ino)


def trim_quarantine(directory: Path, *, now: float | None = None) -> int:
    """Remove quarantined files in `directory` older than QUARANTINE_KEEP_S, and the oldest
    beyond QUARANTINE_KEEP_COUNT; how many were removed."""
    now = time.time() if now is None else now
    try:
        names = [n for n in os.listdir(directory) if QUARANTINE_MARK in n]
    except OSError:
        return 0
    aged = sorted(((_quarantine_time(directory / n), n) for n in names), reverse=True)
    removed = 0
    for index, (stamp, name) in enumerate(aged):
        if index >= QUARANTINE_KEEP_COUNT or now - stamp > QUARANTINE_KEEP_S:
            with contextlib.suppress(OSError):
                os.unlink(directory / name)
                removed += 1
    return removed


def _quarantine_time(path: Path) -> float:
    stamp = path.name.rpartition(QUARANTINE_MARK)[2].partition("-")[0]
    if stamp.isdigit():
        return float(stamp)
    try:
        return os.lstat(path).st_mtime
    except OSError:
        return 0.0


def log_quarantine(log_dir: Path | None, path: Path, aside: Path, reason: str) -> None:
    """Append one line about a quarantined file to `log_dir/statefiles.log` (0600)."""
    if log_dir is None:
        return
    line = f"{time.strftime('%Y-%m-%dT%H:%M:%S')} quarantined {path} as {aside.name}: {reason}\n"
    log = Path(log_dir) / LOG_NAME
    try:
        private_dir(Path(log_dir))
        if log.exists() and log.stat().st_size > MAX_LOG_BYTES:
            kept = log.read_bytes()[-MAX_LOG_BYTES // 2 :]
            write_bytes_atomic(log, kept[kept.find(b"\n") + 1 :])
        fd = os.open(log, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o600)
        with os.fdopen(fd, "a", encoding="utf-8", errors="replace") as out:
            out.write(line)
    except OSError:
        pass  # logging is a courtesy: the file is set aside either way


def write_bytes_atomic(path: Path, data: bytes) -> None:
    """Replace `path` with `data` (temporary file, rename), 0600."""
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def quarantined(home: Path, *, depth: int = 2) -> list[Path]:
    """Every quarantined state file under the state directory `home` (to `depth` levels of
    subdirectories; links are not followed), oldest first: what `vocal doctor` reports."""
    found: list[Path] = []
    _collect_quarantined(Path(home), depth, found)
    return sorted(found, key=_quarantine_time)


def _collect_quarantined(directory: Path, depth: int, found: list[Path]) -> None:
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        if QUARANTINE_MARK in entry.name:
            found.append(Path(entry.path))
        elif depth > 0 and entry.is_dir(follow_symlinks=False):
            _collect_quarantined(Path(entry.path), depth - 1, found)


def unlink(path: Path) -> bool:
    """Remove `path` if it exists; True if it did."""
    try:
        os.unlink(path)
        return True
    except FileNotFoundError:
        return False


def private_dir(path: Path) -> Path:
    """`path` created and made 0700 (only our user may reach the sockets and records in it)."""
    return ensure_private_dir(path)


# -- processes ---------------------------------------------------------------------------------
def process_start(pid: int) -> int | None:
    """A number that changes when `pid` is reused: the start time in clock ticks since boot
    (Linux `/proc/PID/stat` field 22), or None where it cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as stat:
            data = stat.read()
    except OSError:
        return None
    # The command name (field 2) is in parentheses and may itself hold spaces or ')'.
    fields = data[data.rindex(b")") + 2 :].split()
    return int(fields[19])


def pid_alive(pid: int, start: int | None = None) -> bool:
    """Whether process `pid` runs (a zombie counts as dead) and, if `start` is given and this
    system can tell, is the same process that had that start time."""
    if pid <= 0:
        return False
    if sys.platform.startswith("linux"):
        try:
            with open(f"/proc/{pid}/stat", "rb") as stat:
                data = stat.read()
        except FileNotFoundError:
            return False
        except OSError:
            pass  # /proc unreadable (hidepid): fall back to kill(0)
        else:
            fields = data[data.rindex(b")") + 2 :].split()
            if fields[0] in (b"Z", b"X"):  # killed but not yet reaped: it will never release
                return False
            return start is None or int(fields[19]) == start
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else
    return True


# -- Unix socket paths ------------------------------------------------------------------------
class SocketPath:
    """An address for an AF_UNIX socket at `path`, usable even when `path` is too long.

    sun_path holds about 100 bytes, and a VOCAL_HOME deep in a home directory can be longer. On
    Linux the directory is then reached through `/proc/self/fd/N/`, a short path that resolves
    to it; the descriptor stays open for as long as this object lives.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._dir_fd: int | None = None
        if len(os.fsencode(path)) <= MAX_SOCKET_PATH_BYTES:
            self.address = str(path)
            return
        if not sys.platform.startswith("linux"):
            from vocal.errors import UsageError

            raise UsageError(
                f"socket path {path} is too long for a Unix socket",
                hint="set VOCAL_HOME to a shorter directory",
            )
        self._dir_fd = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        self.address = f"/proc/self/fd/{self._dir_fd}/{path.name}"

    def close(self) -> None:
        if self._dir_fd is not None:
            os.close(self._dir_fd)
            self._dir_fd = None

    def __enter__(self) -> SocketPath:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __del__(self) -> None:
        self.close()


def connect_refused(exc: OSError) -> bool:
    """An error that means nothing listens at a socket path (stale file or none)."""
    return exc.errno in (errno.ECONNREFUSED, errno.ENOENT, errno.ENOTSOCK)


class PeerCheckError(OSError):
    """The peer's credentials could not be read on this platform."""


def peer_uid(conn: socket.socket) -> int:
    """The effective UID of the process at the other end of a connected AF_UNIX socket."""
    if hasattr(socket, "SO_PEERCRED"):  # Linux: struct ucred {pid_t pid; uid_t uid; gid_t gid}
        data = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
        _pid, uid, _gid = struct.unpack("3i", data)
        return uid
    if sys.platform == "darwin" or "bsd" in sys.platform:
        # struct xucred {u_int cr_version; uid_t cr_uid; short cr_ngroups; gid_t cr_groups[16]}
        # at level SOL_LOCAL (0), option LOCAL_PEERCRED (1): what getpeereid() reads.
        sol_local = getattr(socket, "SOL_LOCAL", 0)
        local_peercred = getattr(socket, "LOCAL_PEERCRED", 1)
        data = conn.getsockopt(sol_local, local_peercred, 4 + 4 + 4 + 16 * 4)
        version, uid = struct.unpack_from("=Ii", data)
        if version != 0:  # XUCRED_VERSION
            raise PeerCheckError(f"unknown xucred version {version}")
        return uid
    raise PeerCheckError(f"peer credentials cannot be checked on {sys.platform}")


__all__ = [
    "HOST",
    "BadRecord",
    "QUARANTINE_MARK",
    "check_field",
    "finite",
    "load_json",
    "quarantine",
    "quarantined",
    "read_record",
    "record_from",
    "trim_quarantine",
    "PeerCheckError",
    "SocketPath",
    "connect_refused",
    "peer_uid",
    "locked",
    "next_counter",
    "pid_alive",
    "private_dir",
    "process_start",
    "read_json",
    "unlink",
    "write_json",
]
