"""The conch: which agent on this machine may speak now, and who waits, in FIFO order.

Everything is files in one 0700 directory (`Settings.conch_dir`), so no daemon is needed:

    lock            flock'ed around every read-modify-write; holds the last sequence number
                    handed out (arrival order)
    holder.json     the holder: token, session, agent, voice, pid, acquired_at, expires_at
    grant.json      the floor offered to the head of the queue, with a claim deadline
    quiet.json      after a bump: when the bumped holder is surely silent
    queue/N.json    one file per waiter (N = its sequence number), ordered by (order, seq)
    queue/N.wake    the waiter's datagram socket: the granter sends one byte to wake it

Release (or the discovery that the holder died) writes a grant for the head of the queue and
wakes only that waiter, so waiters do not stampede for the lock; a grant not claimed within its
deadline moves that waiter to the back and passes the floor on. A holder is alive while its
process runs (pid and start time, a zombie counts as dead) and its record has not expired; its
`Turn` renews the expiry while it runs, so a crashed, killed or frozen holder never blocks the
others past `VOCAL_CONCH_LOCK_EXPIRY`.

A waiter is either a local process (pid, and liveness by pid) or a session with no pid: an
agent that called in callback mode, or a remote agent (in a container, over SSH, a tool server
sharing the state directory) that called `vocal conch wait --session ID`. That one keeps its
place as long as it calls again (`heartbeat`, or another `wait`) within `VOCAL_CONCH_REMOTE_TTL`;
a `wait` that is blocked refreshes the place itself. Remote agents (`wait_remote`):

    vocal conch wait --session S       join (or keep) the place; block at most
                                       VOCAL_CONCH_WAIT_CAP s; exit 0 granted, 3 not yet (the
                                       place is kept and the position printed)
    vocal conch heartbeat --session S  every ~30 s: keeps the place, or renews the hold
    vocal conch release --session S    gives the floor up (`leave` gives up a place)

A floor granted to a remote session is held with no process behind it: it lasts
`VOCAL_CONCH_LOCK_EXPIRY` from the grant and from each heartbeat (or `wait`) of that session,
and the session's own `vocal speak`/`converse` commands speak without queueing meanwhile, one
process at a time (the holder record names the one speaking; a second one waits for it).

Every record is validated field by field as it is read (`vocal.floor.statefiles.read_record`): a
malformed one is quarantined and treated as absent, so a corrupt file frees the floor instead of
locking it, and times are clamped to the configured limits (a heartbeat or grant dated a year
ahead counts as now; a hold lasts at most its expiry from now), with the clamped record written
back (issue 17).

Standard library only: `vocal conch status` is on the fast-start path.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import socket
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vocal.errors import ConchTimeout, Interrupted, UsageError
from vocal.floor.statefiles import (
    HOST,
    QUARANTINE_MARK,
    BadRecord,
    SocketPath,
    finite,
    locked,
    next_counter,
    pid_alive,
    private_dir,
    process_start,
    read_record,
    record_from,
    unlink,
    write_json,
)

if TYPE_CHECKING:
    from vocal.config import Settings

MODES = ("wait", "callback")
#: How long a woken local waiter has to take its grant. It is woken at once and needs a few
#: milliseconds; seconds leave room for a machine under load.
LOCAL_CLAIM_S = 5.0
#: How long a waiter with no process (callback mode) has to call back and take its grant.
REMOTE_CLAIM_S = 30.0
#: How often the head of the queue re-checks the holder's liveness (a SIGKILLed holder frees
#: the floor within this) and how often the others check theirs (cheap: a few file reads).
HEAD_TICK_S = 0.1
TICK_S = 0.5
#: After a bump the next speaker waits this long before it returns with the floor: the bumped
#: holder is still talking until its watcher looks (every 50 ms) and its device buffer
#: (~30 ms) drains. A SIGKILLed holder falls silent at once and needs no such pause.
BUMP_SETTLE_S = 0.25
#: The longest hold a record may claim (its `expiry_s`): a forged record cannot pin the floor
#: for longer than this past its last renewal, whatever VOCAL_CONCH_LOCK_EXPIRY says.
MAX_LOCK_EXPIRY_S = 86400.0
#: Ranges of the integer fields of the records: pids and clock-tick start times as the kernel
#: gives them (os.kill raises OverflowError past a C int), sequence numbers as we hand them out.
_PID_RANGE = (1, 2**31 - 1)
_TICKS_RANGE = (0, 2**63 - 1)
_SEQ_RANGE = (0, 10**18)


class ConchBusy(ConchTimeout):
    """The floor was not granted: timeout in wait mode, or callback mode found it taken.

    `position` is where the caller stands in the queue (1 = next), or None if it keeps no place;
    `holder` who holds the floor then (None while it is being handed over).
    """

    def __init__(self, message: str, *, position: int | None, hint: str | None = None,
                 holder: Holder | None = None) -> None:  # fmt: skip
        super().__init__(message, hint=hint)
        self.position = position
        self.holder = holder


class ConchLost(ConchTimeout):
    """The holder lost the floor while speaking: `vocal conch bump`, or its record expired."""


class ConchCancelled(Exception):
    """A wait for the floor was cancelled by the caller (e.g. `vocal control stop`)."""


@dataclass
class Holder:
    """Who has the floor. `pid` is None for a session that holds it between commands
    (`vocal conch wait`); such a floor ends by release, bump or expiry."""

    token: str
    seq: int
    session: str
    agent: str | None = None
    voice: str | None = None
    pid: int | None = None
    pid_start: int | None = None
    host: str = HOST
    acquired_at: float = 0.0
    expires_at: float = 0.0
    #: The hold's length from each renewal (the VOCAL_CONCH_LOCK_EXPIRY of whoever renewed it):
    #: the limit its `expires_at` is clamped to. 0: unknown (an older record).
    expiry_s: float = 0.0
    #: For a hold with no process (pid None): the session's process speaking under it now.
    speaker_pid: int | None = None
    speaker_start: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_holder(data: Any) -> Holder:
    """A `Holder` from the JSON of holder.json; raises BadRecord if any field is wrong."""
    holder = record_from(Holder, data, {"seq": _SEQ_RANGE, "pid": _PID_RANGE,
                                        "pid_start": _TICKS_RANGE, "speaker_pid": _PID_RANGE,
                                        "speaker_start": _TICKS_RANGE,
                                        "expiry_s": (0.0, MAX_LOCK_EXPIRY_S)})  # fmt: skip
    if not holder.token:
        raise BadRecord("holder: empty token")
    return holder


@dataclass
class Waiter:
    """One place in the queue. `pid` None: a session kept alive by `heartbeat_at`."""

    seq: int
    session: str
    agent: str | None = None
    voice: str | None = None
    pid: int | None = None
    pid_start: int | None = None
    host: str = HOST
    joined_at: float = 0.0
    heartbeat_at: float = 0.0
    order: float = 0.0

    @property
    def local(self) -> bool:
        return self.pid is not None and self.host == HOST

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_waiter(data: Any, seq: int | None = None) -> Waiter:
    """A `Waiter` from the JSON of queue/N.json (N = `seq`, which the record must repeat: the
    file is removed by that number); raises BadRecord if any field is wrong."""
    waiter = record_from(Waiter, data, {"seq": _SEQ_RANGE, "pid": _PID_RANGE,
                                        "pid_start": _TICKS_RANGE})  # fmt: skip
    if seq is not None and waiter.seq != seq:
        raise BadRecord(f"waiter: seq {waiter.seq} in the file of waiter {seq}")
    return waiter


@dataclass
class Grant:
    """The floor offered to waiter `seq` until `claim_by`."""

    seq: int
    session: str
    granted_at: float
    claim_by: float

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def parse_grant(data: Any) -> Grant:
    """A `Grant` from the JSON of grant.json; raises BadRecord if any field is wrong."""
    return record_from(Grant, data, {"seq": _SEQ_RANGE})


def parse_quiet(data: Any) -> float:
    """The time in quiet.json (when a bumped holder is surely silent)."""
    if not finite(data):
        raise BadRecord(f"quiet: {str(data)[:40]!r} is not a time")
    return float(data)


@dataclass
class Held:
    """What `acquire` returns: the caller holds the floor under `token` until it releases."""

    token: str
    seq: int
    session: str
    waited_s: float
    #: The caller's session already held the floor (`vocal conch wait`): nothing to release.
    reentrant: bool = False
    #: Where the caller stood on arrival (0: the floor was free).
    position_on_arrival: int = 0
    #: Wall-clock time the hold expires unless renewed (`Conch.renew`).
    expires_at: float = float("inf")


@dataclass
class RemoteWait:
    """What `Conch.wait_remote` returns: granted (`held`), or the place kept in the queue."""

    session: str
    granted: bool
    waited_s: float
    #: 0 when granted, else the place in the queue (1 = next); None: no place (it was removed).
    position: int | None
    queue_length: int
    holder: Holder | None
    held: Held | None = None
    message: str = ""

    def to_dict(self, now: float | None = None) -> dict[str, Any]:
        now = time.time() if now is None else now
        data: dict[str, Any] = {
            "session": self.session,
            "granted": self.granted,
            "waited_s": round(self.waited_s, 3),
            "position": self.position,
            "queue_length": self.queue_length,
            "holder": self.holder.to_dict() if self.holder else None,
        }
        if self.held is not None:
            data["seq"] = self.held.seq
            data["expires_in_s"] = round(self.held.expires_at - now, 3)
        return data


@dataclass
class ConchState:
    """A snapshot for `vocal conch status`."""

    holder: Holder | None
    grant: Grant | None
    waiters: list[Waiter] = field(default_factory=list)
    now: float = 0.0

    def to_dict(self) -> dict[str, Any]:
        holder = None
        if self.holder is not None:
            holder = self.holder.to_dict()
            holder["held_s"] = round(self.now - self.holder.acquired_at, 3)
            holder["expires_in_s"] = round(self.holder.expires_at - self.now, 3)
        queue = []
        for position, waiter in enumerate(self.waiters, 1):
            entry = {"position": position, **waiter.to_dict()}
            entry["waited_s"] = round(self.now - waiter.joined_at, 3)
            entry["granted"] = self.grant is not None and self.grant.seq == waiter.seq
            queue.append(entry)
        return {
            "holder": holder,
            "grant": self.grant.to_dict() if self.grant else None,
            "queue": queue,
        }


def default_session(pid: int | None = None) -> str:
    """The session of a process that was given none: unique to it."""
    return f"pid-{pid or os.getpid()}"


class Conch:
    """The floor, in files under `directory`. Safe across processes and threads."""

    def __init__(
        self,
        directory: Path,
        *,
        lock_expiry_s: float = 120.0,
        remote_ttl_s: float = 90.0,
        local_claim_s: float = LOCAL_CLAIM_S,
        remote_claim_s: float = REMOTE_CLAIM_S,
        wake: bool = True,
        log_dir: Path | None = None,
    ) -> None:
        self.directory = Path(directory)
        #: Where quarantined records are logged (the state directory's logs/ by default).
        self.log_dir = Path(log_dir) if log_dir is not None else self.directory.parent / "logs"
        self.lock_expiry_s = lock_expiry_s
        self.remote_ttl_s = remote_ttl_s
        self.local_claim_s = local_claim_s
        self.remote_claim_s = remote_claim_s
        #: Wake the granted waiter through its socket (False: waiters poll; benchmarks/conch
        #: measures the difference).
        self.wake = wake
        self.queue_dir = self.directory / "queue"
        self._lock_path = self.directory / "lock"
        self._holder_path = self.directory / "holder.json"
        self._grant_path = self.directory / "grant.json"
        self._quiet_path = self.directory / "quiet.json"
        self._ready = False

    @classmethod
    def from_settings(cls, settings: Settings) -> Conch:
        return cls(
            settings.conch_dir,
            lock_expiry_s=settings.conch_lock_expiry_s,
            remote_ttl_s=settings.conch_remote_ttl_s,
            log_dir=settings.log_dir,
        )

    # -- files ------------------------------------------------------------------------------
    def _lock(self) -> contextlib.AbstractContextManager[int]:
        if not self._ready:
            private_dir(self.directory)
            private_dir(self.queue_dir)
            self._ready = True
        return locked(self._lock_path)

    def _waiter_path(self, seq: int) -> Path:
        return self.queue_dir / f"{seq:010d}.json"

    def _wake_path(self, seq: int) -> Path:
        return self.queue_dir / f"{seq:010d}.wake"

    def _read_holder(self, *, locked: bool = True) -> Holder | None:
        """The holder record; a malformed one is quarantined if we hold the lock (`locked`).

        A holder whose record was garbled may still be talking until its watcher notices (it
        reads no token there): the next speaker pauses as after a bump, so the two never
        overlap."""
        return read_record(self._holder_path, parse_holder, log_dir=self.log_dir,
                           quarantine_bad=locked, on_bad=self._settle)  # fmt: skip

    def _settle(self, _reason: str = "") -> None:
        """Under the lock: make the next speaker wait BUMP_SETTLE_S (see `acquire`)."""
        write_json(self._quiet_path, time.time() + BUMP_SETTLE_S)

    def _read_grant(self) -> Grant | None:
        return read_record(self._grant_path, parse_grant, log_dir=self.log_dir)

    def _read_waiters(self) -> list[Waiter]:
        waiters = []
        try:
            names = os.listdir(self.queue_dir)
        except (FileNotFoundError, NotADirectoryError):
            return []
        for name in names:
            if name.endswith(".json") and not name.startswith("."):
                seq = int(name[:-5]) if name[:-5].isdigit() else -1  # -1: never a valid seq
                waiter = read_record(self.queue_dir / name, lambda d, s=seq: parse_waiter(d, s),
                                     log_dir=self.log_dir)  # fmt: skip
                if waiter is not None:
                    waiters.append(waiter)
        waiters.sort(key=lambda w: (w.order, w.seq))
        return waiters

    # -- clamping times to the configured limits (issue 17) ------------------------------------
    def _clamp_holder(self, holder: Holder, now: float) -> bool:
        """Bring `holder`'s times within limits: acquired no later than now, expiring at most
        its expiry from now. True if anything changed (the caller writes it back, so the
        clamped expiry then runs out instead of moving on with the clock)."""
        limit_s = max(self.lock_expiry_s, holder.expiry_s)
        before = (holder.acquired_at, holder.expires_at)
        holder.acquired_at = min(holder.acquired_at, now)
        holder.expires_at = min(holder.expires_at, now + limit_s)
        return (holder.acquired_at, holder.expires_at) != before

    def _clamp_waiter(self, waiter: Waiter, now: float) -> bool:
        """A waiter joined and last heard from no later than now; True if it changed."""
        before = (waiter.joined_at, waiter.heartbeat_at)
        waiter.joined_at = min(waiter.joined_at, now)
        waiter.heartbeat_at = min(waiter.heartbeat_at, now)
        return (waiter.joined_at, waiter.heartbeat_at) != before

    def _clamp_grant(self, grant: Grant, now: float) -> bool:
        """A grant made no later than now, to be claimed within the longest claim window."""
        before = (grant.granted_at, grant.claim_by)
        grant.granted_at = min(grant.granted_at, now)
        grant.claim_by = min(grant.claim_by, now + max(self.local_claim_s, self.remote_claim_s))
        return (grant.granted_at, grant.claim_by) != before

    def _next_seq(self, lock_fd: int, state: ConchState) -> int:
        """The next sequence number, above every one in use (the lock file may be garbled)."""
        used = [w.seq for w in state.waiters]
        if state.holder is not None:
            used.append(state.holder.seq)
        return next_counter(lock_fd, above=max(used, default=0), ceiling=_SEQ_RANGE[1])

    def _quarantined_waiter(self, seq: int) -> set[str]:
        """The names under which waiter `seq`'s records were set aside as malformed."""
        prefix = f"{self._waiter_path(seq).name}{QUARANTINE_MARK}"
        try:
            return {name for name in os.listdir(self.queue_dir) if name.startswith(prefix)}
        except OSError:
            return set()

    def _write_waiter(self, waiter: Waiter) -> None:
        write_json(self._waiter_path(waiter.seq), waiter.to_dict())

    def _remove_waiter(self, seq: int) -> None:
        unlink(self._waiter_path(seq))
        unlink(self._wake_path(seq))

    # -- liveness -----------------------------------------------------------------------------
    def holder_alive(self, holder: Holder, now: float) -> bool:
        if now >= holder.expires_at:
            return False
        if holder.pid is not None and holder.host == HOST:
            return pid_alive(holder.pid, holder.pid_start)
        return True

    def waiter_alive(self, waiter: Waiter, now: float) -> bool:
        if waiter.local:
            return pid_alive(waiter.pid, waiter.pid_start)  # type: ignore[arg-type]
        return now - waiter.heartbeat_at < self.remote_ttl_s

    def _tidy(self, now: float) -> ConchState:
        """Drop dead holders, waiters and stale grants; offer a free floor to the head.

        Called under the lock by everyone who looks at the state, so whoever looks first after
        a holder dies hands the floor on.
        """
        holder = self._read_holder()
        if holder is not None and self._clamp_holder(holder, now):
            write_json(self._holder_path, holder.to_dict())
        if holder is not None and not self.holder_alive(holder, now):
            unlink(self._holder_path)
            holder = None
        waiters = []
        for waiter in self._read_waiters():
            if self._clamp_waiter(waiter, now):
                self._write_waiter(waiter)
            if self.waiter_alive(waiter, now):
                waiters.append(waiter)
            else:
                self._remove_waiter(waiter.seq)
        grant = self._read_grant()
        if grant is not None and self._clamp_grant(grant, now):
            write_json(self._grant_path, grant.to_dict())
        if grant is not None:
            grantee = next((w for w in waiters if w.seq == grant.seq), None)
            if holder is not None or grantee is None:
                unlink(self._grant_path)
                grant = None
            elif now > grant.claim_by:
                # Not claimed in time: that waiter goes to the back and the floor passes on.
                grantee.order = max(w.order for w in waiters) + 1
                self._write_waiter(grantee)
                waiters.sort(key=lambda w: (w.order, w.seq))
                unlink(self._grant_path)
                grant = None
        if holder is None and grant is None and waiters:
            head = waiters[0]
            claim_s = self.local_claim_s if head.local else self.remote_claim_s
            grant = Grant(head.seq, head.session, now, now + claim_s)
            write_json(self._grant_path, grant.to_dict())
            self._wake(head.seq)
        return ConchState(holder, grant, waiters, now)

    def _wake(self, seq: int) -> None:
        """Send one byte to waiter `seq`'s wake socket; a waiter without one polls instead."""
        path = self._wake_path(seq)
        if not path.exists():
            return
        try:
            with SocketPath(path) as address, socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as s:
                s.setblocking(False)
                s.sendto(b"g", address.address)
        except OSError:
            pass  # the waiter is gone or its buffer is full: its own tick finds the grant

    def _take(self, *, seq: int, session: str, agent: str | None, voice: str | None,
              pid: int | None, now: float) -> Holder:  # fmt: skip
        holder = Holder(
            token=os.urandom(8).hex(),  # not `secrets`: its import (hmac, OpenSSL) costs ~10 ms
            seq=seq,
            session=session,
            agent=agent,
            voice=voice,
            pid=pid,
            pid_start=process_start(pid) if pid is not None else None,
            acquired_at=now,
            expires_at=now + self.lock_expiry_s,
            expiry_s=self.lock_expiry_s,
        )
        write_json(self._holder_path, holder.to_dict())
        unlink(self._grant_path)
        self._remove_waiter(seq)
        return holder

    # -- taking the floor ---------------------------------------------------------------------
    def acquire(
        self,
        *,
        session: str | None = None,
        agent: str | None = None,
        voice: str | None = None,
        mode: str = "wait",
        timeout_s: float | None = None,
        keep_place: bool = False,
        detached: bool = False,
        remote: bool = False,
        cancel: threading.Event | None = None,
        on_wait: Callable[[int, Holder | None], None] | None = None,
    ) -> Held:
        """Take the floor for `session`.

        Args:
            mode: "wait" blocks until granted (at most `timeout_s`, None for ever); "callback"
                returns at once: the floor if it is free, else `ConchBusy` with the position.
            keep_place: in callback mode, leave a place in the queue for `session` (kept while
                it calls again within `remote_ttl_s`); the next call takes it when granted.
            detached: the floor stays with `session` after this process exits (`vocal conch
                wait`), until `release_session`, a bump or the expiry.
            remote: wait as a remote waiter: the place has no process behind it (it is kept
                by heartbeats, refreshed while this call blocks) and it is kept when the wait
                times out; implies `detached`. See `wait_remote`.
            cancel: set from another thread to give up waiting (`ConchCancelled`).
            on_wait: called with (position, holder) whenever the position changes.

        Raises:
            ConchBusy (exit 3): not granted in time, or busy in callback mode.
        """
        held = self._acquire(session=session, agent=agent, voice=voice, mode=mode,
                             timeout_s=timeout_s, keep_place=keep_place,
                             detached=detached or remote, remote=remote, cancel=cancel,
                             on_wait=on_wait)  # fmt: skip
        if not held.reentrant:
            # No lock here: a malformed file is left for the next bump to replace.
            quiet = read_record(self._quiet_path, parse_quiet, quarantine_bad=False)
            if quiet is not None:
                time.sleep(min(BUMP_SETTLE_S, max(0.0, quiet - time.time())))
        return held

    def _acquire(
        self,
        *,
        session: str | None,
        agent: str | None,
        voice: str | None,
        mode: str,
        timeout_s: float | None,
        keep_place: bool,
        detached: bool,
        remote: bool,
        cancel: threading.Event | None,
        on_wait: Callable[[int, Holder | None], None] | None,
    ) -> Held:
        if mode not in MODES:
            raise UsageError(f"conch mode must be one of {', '.join(MODES)}, got {mode!r}")
        pid = os.getpid()
        session = session or default_session(pid)
        holder_pid = None if detached else pid
        started = time.monotonic()
        deadline = None if timeout_s is None else started + timeout_s
        while True:
            with self._lock() as lock_fd:
                now = time.time()
                state = self._tidy(now)
                held = self._reenter(state.holder, session, pid, remote=remote, now=now)
                if held is not None:
                    return held
                if not self._session_speaking(state.holder, session):
                    entered = self._enter(lock_fd, state, now, session=session, agent=agent,
                                          voice=voice, mode=mode, keep_place=keep_place,
                                          remote=remote, pid=pid,
                                          holder_pid=holder_pid)  # fmt: skip
                    if isinstance(entered, Held):
                        return entered
                    mine, wake = entered
                    break
            # Another process of this session speaks under the floor the session holds (`vocal
            # conch wait`): this one waits for it to finish, so they never talk at once.
            self._wait_for_speaker(state.holder, mode=mode, deadline=deadline,
                                   timeout_s=timeout_s, cancel=cancel,
                                   on_wait=on_wait)  # fmt: skip
        try:
            return self._wait(mine, wake, agent=agent, voice=voice, holder_pid=holder_pid,
                              started=started, timeout_s=timeout_s, remote=remote,
                              cancel=cancel, on_wait=on_wait)  # fmt: skip
        finally:
            if wake is not None:
                wake.close()

    def _enter(
        self,
        lock_fd: int,
        state: ConchState,
        now: float,
        *,
        session: str,
        agent: str | None,
        voice: str | None,
        mode: str,
        keep_place: bool,
        remote: bool,
        pid: int,
        holder_pid: int | None,
    ) -> Held | tuple[Waiter, socket.socket | None]:
        """Under the lock: take a free floor (or the grant our kept place has), or join the
        queue. Returns the hold, or our place and its wake socket to wait on; raises ConchBusy
        in callback mode."""
        # A place this session kept in callback mode is adopted, not duplicated.
        mine = next((w for w in state.waiters if w.session == session and w.pid is None), None)
        if mine is not None and state.grant is not None and state.grant.seq == mine.seq:
            holder = self._take(seq=mine.seq, session=session, agent=agent, voice=voice,
                                pid=holder_pid, now=now)  # fmt: skip
            return Held(holder.token, holder.seq, session, 0.0, position_on_arrival=1,
                        expires_at=holder.expires_at)  # fmt: skip
        if state.holder is None and state.grant is None and not state.waiters:
            holder = self._take(seq=self._next_seq(lock_fd, state), session=session,
                                agent=agent, voice=voice, pid=holder_pid, now=now)  # fmt: skip
            return Held(holder.token, holder.seq, session, 0.0, expires_at=holder.expires_at)
        if mode == "callback":
            position = None
            if keep_place:
                if mine is None:
                    mine = Waiter(self._next_seq(lock_fd, state), session, agent, voice, None,
                                  None, HOST, now, now, 0.0)  # fmt: skip
                    mine.order = float(mine.seq)
                    state.waiters.append(mine)
                mine.heartbeat_at = now
                self._write_waiter(mine)
                position = next(i for i, w in enumerate(state.waiters, 1) if w is mine)
            raise _busy(state, position, session, remote=remote)
        # Wait mode: join the queue (or adopt our kept place) with a wake socket. A remote
        # waiter's place stays without a process: it outlives this call.
        if mine is None:
            seq = self._next_seq(lock_fd, state)
            mine = Waiter(seq, session, agent, voice, pid, None, HOST, now, now, float(seq))
        if remote:
            mine.pid, mine.pid_start, mine.heartbeat_at = None, None, now
        else:
            mine.pid, mine.pid_start = pid, process_start(pid)
        mine.agent, mine.voice = agent or mine.agent, voice or mine.voice
        wake = _bind_wake(self._wake_path(mine.seq)) if self.wake else None
        self._write_waiter(mine)
        self._tidy(now)  # a free floor (holder died, queue empty ahead) goes to the head now
        return mine, wake

    def _reenter(self, holder: Holder | None, session: str, pid: int, *, remote: bool,
                 now: float) -> Held | None:  # fmt: skip
        """Under the lock: the hold `session` already has, if this process may speak under it.

        A session holding the floor between commands (pid None) lets its own commands speak,
        one process at a time: the one speaking is written into the record, and another waits
        for it (`_session_speaking`). Another live process of a session whose floor is held by
        a process still queues, so two never talk at once.
        """
        if holder is None or holder.session != session or holder.pid not in (None, pid):
            return None
        if remote:  # a remote holder calling again renews its hold; it does not speak itself
            expires_at = self._renew_holder(holder, now)
        elif holder.pid is None:
            if self._session_speaking(holder, session):
                return None
            holder.speaker_pid, holder.speaker_start = pid, process_start(pid)
            write_json(self._holder_path, holder.to_dict())
            expires_at = holder.expires_at
        else:
            expires_at = holder.expires_at
        return Held(holder.token, holder.seq, session, 0.0, reentrant=True, expires_at=expires_at)

    def _session_speaking(self, holder: Holder | None, session: str) -> bool:
        """Whether `session` holds the floor with no process and another live process of it
        is speaking under that floor now."""
        return (
            holder is not None
            and holder.session == session
            and holder.pid is None
            and holder.speaker_pid is not None
            and holder.speaker_pid != os.getpid()
            and pid_alive(holder.speaker_pid, holder.speaker_start)
        )

    def _wait_for_speaker(
        self,
        speaker: Holder | None,
        *,
        mode: str,
        deadline: float | None,
        timeout_s: float | None,
        cancel: threading.Event | None,
        on_wait: Callable[[int, Holder | None], None] | None,
    ) -> None:
        """One tick of waiting for the session's own speaking process; raises ConchBusy in
        callback mode or past the deadline, ConchCancelled when cancelled."""
        session, speaker_pid = (speaker.session, speaker.speaker_pid) if speaker else ("?", "?")
        where = f"session {session} is speaking in process {speaker_pid}"
        if mode == "callback":
            raise ConchBusy(f"the floor is in use: {where}", position=None, holder=speaker,
                            hint="call again when it has finished")  # fmt: skip
        if deadline is not None and time.monotonic() >= deadline:
            raise ConchBusy(
                f"the floor was not free within {timeout_s:g} s: {where}",
                position=None,
                holder=speaker,
                hint="raise VOCAL_CONCH_TIMEOUT, or see `vocal conch status`",
            )
        if cancel is not None and cancel.is_set():
            raise ConchCancelled()
        if on_wait is not None:
            on_wait(1, speaker)
        remaining = None if deadline is None else deadline - time.monotonic()
        time.sleep(HEAD_TICK_S if remaining is None else max(0.0, min(HEAD_TICK_S, remaining)))

    def _wait(self, mine: Waiter, wake: socket.socket | None, *, agent: str | None,
              voice: str | None, holder_pid: int | None, started: float,
              timeout_s: float | None, remote: bool, cancel: threading.Event | None,
              on_wait: Callable[[int, Holder | None], None] | None) -> Held:  # fmt: skip
        deadline = None if timeout_s is None else started + timeout_s
        last_position = None
        taken = False
        set_aside: set[str] = set()  # our records quarantined so far (each heals once)
        # A blocked remote waiter refreshes its own place, well inside the TTL.
        refresh_s = min(5.0, self.remote_ttl_s / 4)
        try:
            while True:
                with self._lock():
                    now = time.time()
                    state = self._tidy(now)
                    if state.grant is not None and state.grant.seq == mine.seq:
                        holder = self._take(seq=mine.seq, session=mine.session, agent=agent,
                                            voice=voice, pid=holder_pid, now=now)  # fmt: skip
                        taken = True
                        return Held(holder.token, holder.seq, mine.session,
                                    time.monotonic() - started,
                                    position_on_arrival=last_position or 1,
                                    expires_at=holder.expires_at)  # fmt: skip
                    position, me = next(
                        ((i, w) for i, w in enumerate(state.waiters, 1) if w.seq == mine.seq),
                        (None, None),
                    )
                    if me is None and not self._quarantined_waiter(mine.seq) <= set_aside:
                        # Our record was garbled and set aside (again), not removed by `leave`:
                        # we know what it said, so the place is written back (issue 17).
                        set_aside |= self._quarantined_waiter(mine.seq)
                        mine.heartbeat_at = now
                        self._write_waiter(mine)
                        continue
                    if me is None:
                        raise ConchBusy("this waiter was removed from the conch queue "
                                        "(vocal conch leave)", position=None)  # fmt: skip
                    if remote and now - me.heartbeat_at >= refresh_s:
                        me.heartbeat_at = now
                        self._write_waiter(me)
                if position != last_position:
                    if on_wait is not None:
                        on_wait(position, state.holder)
                    last_position = position
                remaining = None if deadline is None else deadline - time.monotonic()
                if remaining is not None and remaining <= 0:
                    taken = remote  # a remote waiter keeps its place for its next call
                    raise _busy(state, position, mine.session, timeout_s=timeout_s,
                                remote=remote)  # fmt: skip
                if cancel is not None and cancel.is_set():
                    raise ConchCancelled()
                tick = HEAD_TICK_S if position == 1 or wake is None else TICK_S
                if cancel is not None:
                    tick = min(tick, 0.05)
                _sleep_on(wake, tick if remaining is None else min(tick, remaining))
        finally:
            if not taken:
                self._withdraw(mine.seq)

    def _withdraw(self, seq: int) -> None:
        """Take waiter `seq` out of the queue, passing on a grant it held."""
        with self._lock():
            self._remove_waiter(seq)
            grant = self._read_grant()
            if grant is not None and grant.seq == seq:
                unlink(self._grant_path)
            self._tidy(time.time())

    # -- holding and giving up ---------------------------------------------------------------
    def holds(self, token: str) -> bool:
        """Whether `token` still holds the floor (no lock: the record is replaced atomically)."""
        holder = self._read_holder(locked=False)
        if holder is None or holder.token != token:
            return False
        now = time.time()
        self._clamp_holder(holder, now)
        return now < holder.expires_at

    def renew(self, token: str) -> float | None:
        """Push the expiry of `token`'s hold to now + lock_expiry_s and return it; None if the
        hold was lost."""
        with self._lock():
            holder = self._read_holder()
            now = time.time()
            if holder is None or holder.token != token or now >= holder.expires_at:
                return None
            holder.expires_at = now + self.lock_expiry_s
            holder.expiry_s = self.lock_expiry_s
            write_json(self._holder_path, holder.to_dict())
            return holder.expires_at

    def release(self, token: str) -> bool:
        """Give the floor up (to the head of the queue); False if `token` no longer held it."""
        with self._lock():
            holder = self._read_holder()
            released = holder is not None and holder.token == token
            if released:
                unlink(self._holder_path)
            self._tidy(time.time())
            return released

    def end_speaking(self, token: str) -> bool:
        """This process has finished speaking under the hold `token` that its session keeps
        with no process (a reentrant `Held`): another process of the session may speak now,
        without waiting for this one to exit. True if this process was the one speaking."""
        with self._lock():
            holder = self._read_holder()
            if holder is None or holder.token != token or holder.speaker_pid != os.getpid():
                return False
            holder.speaker_pid = holder.speaker_start = None
            write_json(self._holder_path, holder.to_dict())
            return True

    def release_session(self, session: str) -> Holder | None:
        """Release the floor if `session` holds it; the released record, else None."""
        with self._lock():
            holder = self._read_holder()
            if holder is None or holder.session != session:
                self._tidy(time.time())
                return None
            unlink(self._holder_path)
            self._tidy(time.time())
            return holder

    def bump(self) -> Holder | None:
        """Take the floor from whoever holds it and pass it on. The holder's `Turn` sees its
        record gone and stops speaking. Returns the bumped record, or None if nobody held it.

        With nobody holding it but the floor offered to a waiter that has not taken it yet,
        that offer is passed on as an unclaimed one is (the waiter goes to the back): a bump
        always moves the floor on.
        """
        with self._lock():
            now = time.time()
            state = self._tidy(now)
            holder = state.holder
            if holder is not None:
                unlink(self._holder_path)
                write_json(self._quiet_path, now + BUMP_SETTLE_S)
            elif state.grant is not None:
                self._pass_grant_on(state)
            self._tidy(now)
            return holder

    def _pass_grant_on(self, state: ConchState) -> None:
        """Under the lock: revoke the outstanding grant; its waiter goes to the back."""
        grantee = next((w for w in state.waiters if w.seq == state.grant.seq), None)  # type: ignore[union-attr]
        if grantee is not None and len(state.waiters) > 1:
            grantee.order = max(w.order for w in state.waiters) + 1
            self._write_waiter(grantee)
        unlink(self._grant_path)

    def give(self, session: str, *, now: bool = False) -> Waiter | None:
        """Make `session`'s waiter the next to speak (with `now`, bump the holder too).

        Returns the waiter moved, or None if `session` holds the floor already.
        Raises UsageError if `session` neither holds the floor nor waits.
        """
        with self._lock():
            state = self._tidy(time.time())
            if state.holder is not None and state.holder.session == session:
                return None
            target = next((w for w in state.waiters if w.session == session), None)
            if target is None:
                raise UsageError(
                    f"no waiter with session {session!r}",
                    hint="`vocal conch status` lists the queue",
                )
            target.order = min(w.order for w in state.waiters) - 1
            self._write_waiter(target)
            if state.grant is not None and state.grant.seq != target.seq:
                unlink(self._grant_path)  # the revoked grantee keeps its place, now second
            if now and state.holder is not None:
                unlink(self._holder_path)
                write_json(self._quiet_path, time.time() + BUMP_SETTLE_S)
            self._tidy(time.time())
            return target

    def leave(self, session: str) -> int:
        """Take every place `session` holds in the queue; how many there were."""
        with self._lock():
            state = self._tidy(time.time())
            gone = [w for w in state.waiters if w.session == session]
            for waiter in gone:
                self._remove_waiter(waiter.seq)
                if state.grant is not None and state.grant.seq == waiter.seq:
                    unlink(self._grant_path)
            self._tidy(time.time())
            return len(gone)

    def heartbeat(self, session: str) -> int | None:
        """Keep `session`'s place (pid-less waiters only), or renew the floor it holds with no
        process (a remote agent after `wait_remote`).

        Returns its position: 0 if it holds the floor, 1 if it is next, ...; None if it has
        neither (never joined, left, or pruned after `remote_ttl_s` without a heartbeat).
        """
        with self._lock():
            now = time.time()
            state = self._tidy(now)
            holder = state.holder
            if holder is not None and holder.session == session:
                if holder.pid is None:  # a holding process (a Turn) renews its own hold
                    self._renew_holder(holder, now)
                return 0
            for position, waiter in enumerate(state.waiters, 1):
                if waiter.session == session and waiter.pid is None:
                    waiter.heartbeat_at = now
                    self._write_waiter(waiter)
                    return position
            return None

    def _renew_holder(self, holder: Holder, now: float) -> float:
        """Push `holder`'s expiry to now + lock_expiry_s (under the lock); the new expiry."""
        holder.expires_at = max(holder.expires_at, now + self.lock_expiry_s)
        holder.expiry_s = self.lock_expiry_s
        write_json(self._holder_path, holder.to_dict())
        return holder.expires_at

    def wait_remote(
        self,
        session: str,
        *,
        agent: str | None = None,
        voice: str | None = None,
        timeout_s: float = 0.0,
        cancel: threading.Event | None = None,
    ) -> RemoteWait:
        """A remote agent's call for the floor (`vocal conch wait --session ID`).

        Joins the queue as a waiter with no process (or finds the place `session` kept), blocks
        at most `timeout_s` (0: look once), and returns either the floor, held by `session`
        with no process until `release_session`, a bump or the expiry (renewed by `heartbeat`
        and by calling again), or the place in the queue, which is kept: it lives as long as
        the session calls `heartbeat` (or this again) within `remote_ttl_s`.
        """
        started = time.monotonic()
        try:
            held = self.acquire(session=session, agent=agent, voice=voice,
                                mode="wait" if timeout_s > 0 else "callback", timeout_s=timeout_s,
                                keep_place=True, remote=True, cancel=cancel)  # fmt: skip
        except ConchBusy as busy:
            state = self.status()
            return RemoteWait(session, False, time.monotonic() - started, busy.position,
                              len(state.waiters), busy.holder, message=str(busy))  # fmt: skip
        except (Interrupted, KeyboardInterrupt):
            # Killed while it waited: the place goes back, also when the signal came before
            # the wait proper had begun (`_wait` withdraws its own).
            self.leave(session)
            raise
        with self._lock():
            holder = self._read_holder()
        return RemoteWait(session, True, time.monotonic() - started, 0, 0, holder, held)

    def status(self) -> ConchState:
        """The holder, the outstanding grant and the queue, after dropping the dead."""
        with self._lock():
            return self._tidy(time.time())


def _busy(state: ConchState, position: int | None, session: str,
          timeout_s: float | None = None, remote: bool = False) -> ConchBusy:  # fmt: skip
    holder = state.holder
    who = "nobody (handing over)"
    if holder is not None:
        who = holder.agent or holder.session
    where = f"position {position} in the queue" if position else "no place kept in the queue"
    if timeout_s is not None:
        message = f"the floor was not granted within {timeout_s:g} s ({who} holds it; {where})"
        hint = "raise VOCAL_CONCH_TIMEOUT, or see `vocal conch status`"
    else:
        message = f"the floor is taken by {who} ({where})"
        hint = "call again later; see `vocal conch status`"
    if remote and position:
        hint = (
            f"the place is kept while `vocal conch heartbeat --session {session}` runs about "
            "every 30 s (or `vocal conch wait` again); `vocal conch leave` gives it up"
        )
    return ConchBusy(message, position=position, hint=hint, holder=holder)


@contextlib.contextmanager
def interrupt_on_signals() -> Iterator[None]:
    """Turn SIGTERM and SIGHUP into `Interrupted` (exit 130) for the `with` body, so its
    `finally` clauses run: a `vocal conch wait` killed while it waits gives its place back
    (issue 17). Only in the main thread (elsewhere signals cannot be handled): a no-op there."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def _raise(signum: int, _frame: Any) -> None:
        for other in old:  # a second signal must not cut the clean-up short
            signal.signal(other, signal.SIG_IGN)
        raise Interrupted(f"terminated by {signal.Signals(signum).name}")

    old: dict[int, Any] = {}
    for signum in (signal.SIGTERM, signal.SIGHUP):
        old[signum] = signal.signal(signum, _raise)
    try:
        yield
    finally:
        for signum, handler in old.items():
            signal.signal(signum, handler)


def _bind_wake(path: Path) -> socket.socket | None:
    """A datagram socket at `path` the granter pokes; None if it cannot be made (then poll)."""
    unlink(path)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    try:
        with SocketPath(path) as address:
            sock.bind(address.address)
    except (OSError, UsageError):
        sock.close()
        return None
    sock.setblocking(False)
    return sock


def _sleep_on(wake: socket.socket | None, timeout_s: float) -> None:
    """Sleep up to `timeout_s`, returning early when a byte arrives on `wake`."""
    if wake is None:
        time.sleep(max(0.0, timeout_s))
        return
    ready, _, _ = select.select([wake], [], [], max(0.0, timeout_s))
    if ready:
        with contextlib.suppress(OSError):
            while wake.recv(64):
                pass


class HoldWatcher:
    """A thread that keeps a hold alive and notices when it is lost.

    Every `poll_s` it reads the holder record; if the token is gone (bumped, or expired and
    handed on) it calls `on_lost` once and stops. Every `renew_s` it renews the expiry.
    `valid_until` is the expiry last written: past it the hold is not ours, even if this
    process was frozen (SIGSTOP) and has not yet looked.
    """

    def __init__(self, conch: Conch, held: Held, on_lost: Callable[[], None], *,
                 poll_s: float = 0.05, renew_s: float | None = None) -> None:  # fmt: skip
        self.conch = conch
        self.token = held.token
        self.reentrant = held.reentrant
        self.valid_until = held.expires_at
        self.on_lost = on_lost
        self.poll_s = poll_s
        self.renew_s = renew_s if renew_s is not None else min(5.0, conch.lock_expiry_s / 4)
        self.lost = threading.Event()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="conch-watch", daemon=True)

    def start(self) -> HoldWatcher:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop watching. A turn speaking under its session's hold (reentrant) is done with it
        then: another process of the session may speak (`Conch.end_speaking`)."""
        self._stop.set()
        if self._thread.is_alive() and self._thread is not threading.current_thread():
            self._thread.join(2.0)
        if self.reentrant:
            with contextlib.suppress(OSError):
                self.conch.end_speaking(self.token)

    def _run(self) -> None:
        next_renew = time.monotonic() + self.renew_s
        while not self._stop.wait(self.poll_s):
            held = self.conch.holds(self.token)
            if held and time.monotonic() >= next_renew:
                expires_at = self.conch.renew(self.token)
                held = expires_at is not None
                if held:
                    self.valid_until = expires_at  # type: ignore[assignment]
                next_renew = time.monotonic() + self.renew_s
            if not held and not self._stop.is_set():
                self.lost.set()
                self.on_lost()
                return


__all__ = [
    "MODES",
    "Conch",
    "ConchBusy",
    "ConchCancelled",
    "ConchLost",
    "ConchState",
    "Grant",
    "Held",
    "Holder",
    "HoldWatcher",
    "RemoteWait",
    "Waiter",
    "default_session",
    "interrupt_on_signals",
    "parse_grant",
    "parse_holder",
    "parse_quiet",
    "parse_waiter",
]
