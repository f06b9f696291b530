"""Holding the floor and giving it up (`ConchHold`, the middle of `Conch`), and `HoldWatcher`,
the thread that keeps a hold alive while a turn runs. See vocal.floor.conch.queue.
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Callable

from vocal.errors import UsageError
from vocal.floor.conch.files import ConchFiles
from vocal.floor.conch.records import BUMP_SETTLE_S, ConchState, Held, Holder, Waiter
from vocal.floor.statefiles import unlink, write_json


class ConchHold(ConchFiles):
    """Holding the floor and giving it up: renew, release, bump, give, leave, heartbeat."""

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


class HoldWatcher:
    """A thread that keeps a hold alive and notices when it is lost.

    Every `poll_s` it reads the holder record; if the token is gone (bumped, or expired and
    handed on) it calls `on_lost` once and stops. Every `renew_s` it renews the expiry.
    `valid_until` is the expiry last written: past it the hold is not ours, even if this
    process was frozen (SIGSTOP) and has not yet looked.
    """

    def __init__(
        self,
        conch: ConchHold,
        held: Held,
        on_lost: Callable[[], None],
        *,
        poll_s: float = 0.05,
        renew_s: float | None = None,
    ) -> None:
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


__all__ = ["ConchHold", "HoldWatcher"]
