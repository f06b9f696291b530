"""Pieces of one message, read in order by the `vocal` processes that carry them (issue 9).

An agent's reply reaches vocal as it is displayed, cut at line breaks into pieces, each handed
to its own short-lived `vocal speak --quotes --message ID --piece N` process; those processes run
concurrently, so piece 3 may arrive before piece 0. There is no daemon: the processes coordinate
through files in the state directory.

    <run_dir>/messages/<scope>/           one scope per session (VOCAL_SESSION / --session)
        lock                              flock'ed around every change of the index
        index.json                        {"latest": ID, "seq": N, "messages": {ID: {seq, done}}}
        <ID>/lock                         the message lock: its holder is the message's reader
        <ID>/piece-N.json                 {text, final, arrived_at}, written once, atomically
        <ID>/cursor.json                  {next, advanced_at, final, results: {N: status}, closed}

Each file is checked as it is read (vocal.floor.message_records): one that is not what vocal
writes is quarantined and read as absent, so it never fails the pieces that come after it.

Every process writes its piece file, then loops: is its own piece settled (read, empty, dropped)?
If not, it tries the message lock; whoever holds it is the reader and reads every piece that is
next in order, its own or another's, advancing the cursor, so nothing is read twice or lost. A
missing piece is waited for at most `timeout_s` (counted from when the reader needed it, or from
when the first later piece arrived, whichever is later), then reading goes on from the earliest
piece that did arrive; the missing piece, if it comes later, is answered "late". Pieces are
numbered from 0; `--final` marks the last, and once the cursor passes it the message is complete
and its directory is removed by the last process to leave.

A message newer by arrival in the same scope supersedes the older one: the older message's
reader stops at the line it has reached (it polls `latest` between lines and while one plays),
its waiting pieces are dropped, and a piece of it that arrives later is answered "superseded".
Both "superseded" and "late" are exit 3 (the floor's code: not granted in time).

Standard library only: a muted `vocal speak` must return before anything heavy loads.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import re
import shutil
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

from vocal.errors import UsageError
from vocal.floor.message_records import (
    CursorRecord,
    IndexRecord,
    PieceRecord,
    parse_cursor,
    parse_index,
    parse_piece,
)
from vocal.floor.statefiles import locked, private_dir, read_record, unlink, write_json

#: Message ids are file names: letters, digits, '.', '_', '-', not starting with a dot.
_SAFE_ID = re.compile(r"[A-Za-z0-9_-][A-Za-z0-9._-]{0,127}")
#: Pieces of one message arrive within seconds; a message directory untouched this long was
#: left by a crashed process.
STALE_S = 3600.0
#: Messages remembered in a scope's index (so a late piece of an old message is recognized).
KEEP_MESSAGES = 256
#: How often the reader looks for the next piece and a newer message.
POLL_S = 0.02
#: How often a waiting process looks at its piece's status and the lock (many may wait).
WAIT_POLL_S = 0.05
#: Statuses of a piece. "read", "empty" (no spoken line) and "skipped" (vocal control
#: skip-forward) are settled normally (exit 0); "superseded" and "late" are exit 3.
EXIT_3_STATUSES = ("superseded", "late")
DEFAULT_SCOPE = "default"
#: How long a waiting piece of a superseded message gives the reader to record what it read.
SUPERSEDE_SETTLE_S = 1.0


def validate_message_id(message: str) -> str:
    """`message` if it is a safe file name, else UsageError (exit 2)."""
    if not _SAFE_ID.fullmatch(message or "") or message in (".", ".."):
        raise UsageError(
            f"bad message id {message!r}",
            hint="use 1-128 letters, digits, '.', '_' or '-', not starting with '.'",
        )
    return message


def validate_piece(piece: int) -> int:
    if isinstance(piece, bool) or not isinstance(piece, int) or not 0 <= piece < 100_000:
        raise UsageError(f"piece must be a number from 0 (the first piece), got {piece!r}")
    return piece


def scope_name(session: str | None) -> str:
    """The directory name for a session's messages: the name itself when it is safe, else a
    digest (two sessions never share a scope); requests with no session share one."""
    if not session:
        return DEFAULT_SCOPE
    if _SAFE_ID.fullmatch(session) and len(session) <= 64:
        return f"s-{session}"
    return "h-" + hashlib.sha256(session.encode()).hexdigest()[:24]


@dataclass
class Step:
    """What the reader does next: "read" piece `piece` (`text`), "wait" (at most `wait_s`,
    None: until something arrives), or stop because the message is "complete", "closed"
    (stopped) or "superseded"."""

    kind: str
    piece: int | None = None
    text: str = ""
    wait_s: float | None = None


@dataclass
class PieceOutcome:
    """How one process's piece ended, and what this process read for the message."""

    status: str
    message: str
    piece: int
    final: bool = False
    #: The pieces this process read (as the message's reader), with their statuses.
    read: list[tuple[int, str]] = field(default_factory=list)
    arrived_at_s: float = 0.0  # time.monotonic() when the piece was registered
    finished_at_s: float = 0.0
    superseded_by: str | None = None
    #: Whatever the reading callback returned per piece (speech results), for --json.
    details: list[object] = field(default_factory=list)

    @property
    def exit_code(self) -> int:
        return 3 if self.status in EXIT_3_STATUSES else 0

    def to_dict(self) -> dict[str, object]:
        return {
            "status": self.status,
            "message": self.message,
            "piece": self.piece,
            "final": self.final,
            "read_by_me": [{"piece": n, "status": s} for n, s in self.read],
            "arrived_at_s": self.arrived_at_s,
            "finished_at_s": self.finished_at_s,
            "superseded_by": self.superseded_by,
            "exit_code": self.exit_code,
        }


class MessageBoard:
    """The files of one scope (session) of messages. See the module docstring."""

    def __init__(self, run_dir: Path, session: str | None, *, log_dir: Path | None = None) -> None:
        self.root = Path(run_dir) / "messages" / scope_name(session)
        #: Where a quarantined (corrupt) index, cursor or piece file is logged.
        self.log_dir = log_dir

    # -- paths and small files -----------------------------------------------------------------
    def _dir(self, message: str) -> Path:
        return self.root / message

    def _piece_path(self, message: str, piece: int) -> Path:
        return self._dir(message) / f"piece-{piece}.json"

    def _cursor(self, message: str) -> CursorRecord | None:
        path = self._dir(message) / "cursor.json"
        return read_record(path, parse_cursor, log_dir=self.log_dir)

    def _write_cursor(self, message: str, cursor: CursorRecord) -> None:
        write_json(self._dir(message) / "cursor.json", cursor)

    def _index(self) -> IndexRecord:
        data = read_record(self.root / "index.json", parse_index, log_dir=self.log_dir)
        return data if data is not None else {"latest": None, "seq": 0, "messages": {}}

    def latest(self) -> str | None:
        """The newest message of this scope (by arrival of its first piece)."""
        return self._index().get("latest")

    def superseded(self, message: str) -> bool:
        latest = self.latest()
        return latest is not None and latest != message

    # -- a process's piece ---------------------------------------------------------------------
    def register(self, message: str, piece: int, text: str, final: bool) -> str | None:
        """Record piece `piece` of `message`; a status when it is answered at once
        ("superseded": a newer message arrived first; "late": the message is complete)."""
        private_dir(self.root)
        with locked(self.root / "lock"):
            index = self._index()
            now = time.time()
            self._prune(index, now)
            known = index["messages"].get(message)
            if known is None:
                index["seq"] = int(index.get("seq", 0)) + 1
                known = {"seq": index["seq"], "at": now, "done": False}
                index["messages"][message] = known
                index["latest"] = message
                private_dir(self._dir(message))  # 0700, as every state directory (issue 37)
                self._write_cursor(
                    message,
                    {"next": 0, "advanced_at": now, "final": None, "results": {}, "closed": None},
                )
                write_json(self.root / "index.json", index)
            elif index.get("latest") != message:
                return "superseded"
            elif known.get("done") or not self._dir(message).is_dir():
                return "late"
            path = self._piece_path(message, piece)
            cursor: CursorRecord = self._cursor(message) or {"results": {}}
            if path.exists() or str(piece) in cursor.get("results", {}):
                raise UsageError(f"piece {piece} of message {message!r} was already sent")
            write_json(path, {"text": text, "final": final, "arrived_at": now})
        return None

    def status_of(self, message: str, piece: int) -> str | None:
        """The settled status of a piece, or None while it waits (or is being read)."""
        cursor = self._cursor(message)
        if cursor is None:  # the directory is gone: the message ended
            return "late" if not self.superseded(message) else "superseded"
        found = cursor.get("results", {}).get(str(piece))
        if found is not None:
            return found
        if cursor.get("closed"):
            return cursor["closed"]
        final = cursor.get("final")
        if cursor.get("next", 0) > piece or (final is not None and piece > final):
            return "late"
        return None

    def leave(self, message: str, piece: int) -> None:
        """This process is done with its piece: remove its file, and the message's directory
        when it was the last one of a finished message."""
        unlink(self._piece_path(message, piece))
        # Two processes leaving at once must not each leave the tidying to the other: retry
        # the lock briefly, but only for a finished message (else a reader holds it, reading).
        for _ in range(10):
            if not self._dir(message).is_dir() or not self.finished(message):
                return
            with self.try_lock(message) as got:
                if got:
                    self._tidy(message)
                    return
            time.sleep(POLL_S)

    @contextlib.contextmanager
    def try_lock(self, message: str, *, wait: bool = False) -> Iterator[bool]:
        """The message lock, if free (or, `wait`, once it is): True when held."""
        try:
            fd = os.open(self._dir(message) / "lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except (FileNotFoundError, NotADirectoryError):
            yield False
            return
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if wait else fcntl.LOCK_NB))
            except BlockingIOError:
                yield False
                return
            yield True
        finally:
            os.close(fd)

    # -- the reader (holds the message lock) -----------------------------------------------------
    def _arrived(self, message: str) -> dict[int, PieceRecord]:
        pieces = {}
        with contextlib.suppress(FileNotFoundError):
            for name in os.listdir(self._dir(message)):
                if name.startswith("piece-") and name.endswith(".json"):
                    number = name[6:-5]
                    path = self._dir(message) / name
                    data = read_record(path, parse_piece, log_dir=self.log_dir)
                    if number.isdigit() and isinstance(data, dict):
                        pieces[int(number)] = data
        return pieces

    def next_step(self, message: str, timeout_s: float) -> Step:
        """What the reader does next (skipping a missing piece once its wait is over)."""
        cursor = self._cursor(message)
        if cursor is None or cursor.get("closed"):
            return Step("closed")
        if self.superseded(message):
            return Step("superseded")
        arrived = self._arrived(message)
        next_piece = int(cursor.get("next", 0))
        for number, data in arrived.items():
            if data.get("final") and cursor.get("final") is None:
                cursor["final"] = number
                self._write_cursor(message, cursor)
        final = cursor.get("final")
        if final is not None and next_piece > final:
            return Step("complete")
        if next_piece in arrived:
            return Step("read", next_piece, str(arrived[next_piece].get("text", "")))
        later = sorted(n for n in arrived if n > next_piece and str(n) not in cursor["results"])
        if not later:
            return Step("wait")
        first_later = min(float(arrived[n].get("arrived_at", 0.0)) for n in later)
        deadline = max(float(cursor.get("advanced_at", 0.0)), first_later) + timeout_s
        now = time.time()
        if now < deadline:
            return Step("wait", wait_s=deadline - now)
        # The missing pieces' wait is over: go on from the earliest piece that arrived.
        cursor["next"], cursor["advanced_at"] = later[0], now
        self._write_cursor(message, cursor)
        return Step("read", later[0], str(arrived[later[0]].get("text", "")))

    def settle(self, message: str, piece: int, status: str) -> None:
        """Record how piece `piece` went and move the cursor past it."""
        cursor = self._cursor(message)
        if cursor is None:
            return
        cursor["results"][str(piece)] = status
        if cursor.get("next", 0) <= piece:
            cursor["next"] = piece + 1
        cursor["advanced_at"] = time.time()
        self._write_cursor(message, cursor)

    def close(self, message: str, status: str) -> None:
        """End the message: every piece not read yet gets `status` (superseded, stopped)."""
        cursor = self._cursor(message)
        if cursor is not None and not cursor.get("closed"):
            cursor["closed"] = status
            self._write_cursor(message, cursor)

    def finished(self, message: str) -> bool:
        cursor = self._cursor(message)
        if cursor is None or cursor.get("closed"):
            return True
        final = cursor.get("final")
        return final is not None and int(cursor.get("next", 0)) > final

    def _tidy(self, message: str) -> None:
        """Remove a finished message's directory once no process's piece file is left in it
        (each process removes its own when it leaves). Called with the message lock held."""
        if not self.finished(message) or self._arrived(message):
            return
        with locked(self.root / "lock"):
            index = self._index()
            if message in index["messages"]:
                index["messages"][message]["done"] = True
                write_json(self.root / "index.json", index)
            shutil.rmtree(self._dir(message), ignore_errors=True)

    def _prune(self, index: IndexRecord, now: float) -> None:
        """Drop stale message directories and old index entries (session lock held)."""
        with contextlib.suppress(FileNotFoundError):
            for entry in os.scandir(self.root):
                if entry.is_dir(follow_symlinks=False):
                    try:
                        age = now - os.stat(Path(entry.path) / "cursor.json").st_mtime
                    except OSError:
                        age = now - entry.stat(follow_symlinks=False).st_mtime
                    if age > STALE_S:
                        shutil.rmtree(entry.path, ignore_errors=True)
        messages = index["messages"]
        if len(messages) > KEEP_MESSAGES:
            for old in sorted(messages, key=lambda m: messages[m]["seq"])[:-KEEP_MESSAGES]:
                if old != index.get("latest"):
                    del messages[old]


#: read(piece, text) -> (status, detail): speaks a piece; status is "read", "empty",
#: "skipped", "superseded" or "stopped".
ReadPiece = Callable[[int, str], "tuple[str, object]"]


def run_piece(
    board: MessageBoard,
    message: str,
    piece: int,
    text: str,
    *,
    final: bool,
    read: ReadPiece,
    timeout_s: float,
    linger_s: float | None = None,
) -> PieceOutcome:
    """Send piece `piece` of `message` and stay until it is settled, reading whatever is next
    in order whenever this process holds the message lock (see the module docstring).

    After its own piece is settled a reader lingers up to `linger_s` (default `timeout_s`) for
    the next piece, so a reply whose pieces trickle in is read by one process with one engine.
    """
    validate_message_id(message)
    validate_piece(piece)
    outcome = PieceOutcome("waiting", message, piece, final, arrived_at_s=time.monotonic())
    linger_s = timeout_s if linger_s is None else linger_s
    answered = board.register(message, piece, text, final)
    if answered is not None:
        outcome.status = answered
        outcome.superseded_by = board.latest() if answered == "superseded" else None
        outcome.finished_at_s = time.monotonic()
        return outcome
    try:
        while True:
            status = board.status_of(message, piece)
            if status is None and board.superseded(message):
                # The reader stops within a poll: let it record what it read before deciding
                # (not for long: a reader still waiting for the conch notices only later).
                status = _after_supersede(board, message, piece)
            if status is not None:
                outcome.status = status
                break
            with board.try_lock(message) as got:
                if got:
                    _read_in_order(board, message, piece, outcome, read, timeout_s, linger_s)
                    continue
            time.sleep(WAIT_POLL_S)
    finally:
        board.leave(message, piece)
    if outcome.status == "superseded":
        outcome.superseded_by = board.latest()
    outcome.finished_at_s = time.monotonic()
    return outcome


def _after_supersede(board: MessageBoard, message: str, piece: int) -> str:
    deadline = time.monotonic() + SUPERSEDE_SETTLE_S
    while True:
        with board.try_lock(message) as got:
            status = board.status_of(message, piece)
            if status is not None:
                return status
            if got:
                board.close(message, "superseded")
                return "superseded"
        if time.monotonic() > deadline:
            return "superseded"
        time.sleep(POLL_S)


def _read_in_order(
    board: MessageBoard,
    message: str,
    mine: int,
    outcome: PieceOutcome,
    read: ReadPiece,
    timeout_s: float,
    linger_s: float,
) -> None:
    """The reader's loop (message lock held): read what is next until the message ends, or
    until our own piece is settled and nothing has come for `linger_s`."""
    idle_since: float | None = None
    while True:
        step = board.next_step(message, timeout_s)
        if step.kind == "superseded":
            board.close(message, "superseded")
            return
        if step.kind in ("complete", "closed"):
            return
        if step.kind == "read":
            assert step.piece is not None
            try:
                status, detail = read(step.piece, step.text)
            except BaseException:
                board.settle(message, step.piece, "failed")
                raise
            board.settle(message, step.piece, status)
            outcome.read.append((step.piece, status))
            outcome.details.append(detail)
            if status in ("superseded", "stopped"):
                board.close(message, status)
                return
            idle_since = None
            continue
        # Nothing to read yet.
        if board.status_of(message, mine) is not None:
            now = time.monotonic()
            idle_since = now if idle_since is None else idle_since
            if now - idle_since >= linger_s:
                return
        time.sleep(POLL_S if step.wait_s is None else min(POLL_S, step.wait_s))


__all__ = [
    "MessageBoard",
    "PieceOutcome",
    "Step",
    "run_piece",
    "scope_name",
    "validate_message_id",
    "validate_piece",
]
