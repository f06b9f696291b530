"""The conch's files: one 0700 directory, a lock around every read-modify-write, the records in
it, times clamped to the configured limits (issue 17), and who is alive. See
vocal.floor.conch.queue.
"""

from __future__ import annotations

import contextlib
import os
import socket
import time
from functools import partial
from pathlib import Path
from typing import TypeVar

from vocal.config import Settings
from vocal.floor.conch.records import (
    _SEQ_RANGE,
    BUMP_SETTLE_S,
    LOCAL_CLAIM_S,
    REMOTE_CLAIM_S,
    ConchState,
    Grant,
    Holder,
    Waiter,
    parse_grant,
    parse_holder,
    parse_waiter,
)
from vocal.floor.statefiles import (
    HOST,
    QUARANTINE_MARK,
    SocketPath,
    locked,
    next_counter,
    pid_alive,
    private_dir,
    process_start,
    read_record,
    unlink,
    write_json,
)

_Conch = TypeVar("_Conch", bound="ConchFiles")


class ConchFiles:
    """The conch's files under `directory`: the lock, the records, clamping and liveness. The
    floor's operations build on it (`ConchHold`, then `Conch`)."""

    def __init__(
        self,
        directory: Path,
        *,
        lock_expiry_s: float = Settings.conch_lock_expiry_s,
        remote_ttl_s: float = Settings.conch_remote_ttl_s,
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
    def from_settings(cls: type[_Conch], settings: Settings) -> _Conch:
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
        return read_record(
            self._holder_path,
            parse_holder,
            log_dir=self.log_dir,
            quarantine_bad=locked,
            on_bad=self._settle,
        )

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
                waiter = read_record(
                    self.queue_dir / name, partial(parse_waiter, seq=seq), log_dir=self.log_dir
                )
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
            # Expired, it may still sound until its watcher or its guard notices (8-agent fault
            # test); dead, what the sound server had already mixed of it still plays for a few
            # tens of ms. Either way the next speaker waits BUMP_SETTLE_S, as after a bump.
            self._settle()
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

    def _take(
        self,
        *,
        seq: int,
        session: str,
        agent: str | None,
        voice: str | None,
        pid: int | None,
        now: float,
    ) -> Holder:
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


__all__ = ["ConchFiles"]
