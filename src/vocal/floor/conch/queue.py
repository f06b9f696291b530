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
from dataclasses import dataclass
from pathlib import Path
from types import FrameType

from vocal.errors import Interrupted, UsageError
from vocal.floor.conch.hold import ConchHold
from vocal.floor.conch.records import (
    BUMP_SETTLE_S,
    HEAD_TICK_S,
    MODES,
    TICK_S,
    ConchBusy,
    ConchCancelled,
    ConchState,
    Held,
    Holder,
    RemoteWait,
    Waiter,
    default_session,
    parse_quiet,
)
from vocal.floor.statefiles import (
    HOST,
    SocketPath,
    pid_alive,
    process_start,
    read_record,
    unlink,
    write_json,
)


@dataclass(frozen=True)
class _Request:
    """One call for the floor, as `Conch.acquire` was asked it (see its Args)."""

    session: str
    agent: str | None
    voice: str | None
    mode: str
    timeout_s: float | None
    keep_place: bool
    remote: bool
    cancel: threading.Event | None
    on_wait: Callable[[int, Holder | None], None] | None
    #: This process, and the one the hold names (None: it outlives this process, `detached`).
    pid: int
    holder_pid: int | None
    #: time.monotonic() when asked; `timeout_s` runs from here.
    started: float

    @property
    def deadline(self) -> float | None:
        return None if self.timeout_s is None else self.started + self.timeout_s


class Conch(ConchHold):
    """The floor, in files under `directory`. Safe across processes and threads."""

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
        if mode not in MODES:
            raise UsageError(f"conch mode must be one of {', '.join(MODES)}, got {mode!r}")
        pid = os.getpid()
        request = _Request(
            session=session or default_session(pid),
            agent=agent,
            voice=voice,
            mode=mode,
            timeout_s=timeout_s,
            keep_place=keep_place,
            remote=remote,
            cancel=cancel,
            on_wait=on_wait,
            pid=pid,
            holder_pid=None if detached or remote else pid,
            started=time.monotonic(),
        )
        held = self._acquire(request)
        if not held.reentrant:
            # No lock here: a malformed file is left for the next bump to replace.
            quiet = read_record(self._quiet_path, parse_quiet, quarantine_bad=False)
            if quiet is not None:
                time.sleep(min(BUMP_SETTLE_S, max(0.0, quiet - time.time())))
        return held

    def _acquire(self, request: _Request) -> Held:
        while True:
            with self._lock() as lock_fd:
                now = time.time()
                state = self._tidy(now)
                held = self._reenter(state.holder, request, now)
                if held is not None:
                    return held
                if not self._session_speaking(state.holder, request.session):
                    entered = self._enter(lock_fd, state, request, now)
                    if isinstance(entered, Held):
                        return entered
                    mine, wake = entered
                    break
            # Another process of this session speaks under the floor the session holds (`vocal
            # conch wait`): this one waits for it to finish, so they never talk at once.
            self._wait_for_speaker(state.holder, request)
        try:
            return self._wait(mine, wake, request)
        finally:
            if wake is not None:
                wake.close()

    def _hold(
        self, request: _Request, seq: int, now: float, *, position: int, waited: bool = False
    ) -> Held:
        """Under the lock: make `request` the holder, as the caller that arrived as `seq` at
        `position` in the queue; `waited`: it queued, for as long as since it asked."""
        holder = self._take(
            seq=seq,
            session=request.session,
            agent=request.agent,
            voice=request.voice,
            pid=request.holder_pid,
            now=now,
        )
        return Held(
            holder.token,
            holder.seq,
            request.session,
            time.monotonic() - request.started if waited else 0.0,
            position_on_arrival=position,
            expires_at=holder.expires_at,
        )

    def _enter(
        self, lock_fd: int, state: ConchState, request: _Request, now: float
    ) -> Held | tuple[Waiter, socket.socket | None]:
        """Under the lock: take a free floor (or the grant our kept place has), or join the
        queue. Returns the hold, or our place and its wake socket to wait on; raises ConchBusy
        in callback mode."""
        session, agent, voice = request.session, request.agent, request.voice
        # A place this session kept in callback mode is adopted, not duplicated.
        mine = next((w for w in state.waiters if w.session == session and w.pid is None), None)
        if mine is not None and state.grant is not None and state.grant.seq == mine.seq:
            return self._hold(request, mine.seq, now, position=1)
        if state.holder is None and state.grant is None and not state.waiters:
            seq = self._next_seq(lock_fd, state)
            return self._hold(request, seq, now, position=0)
        if request.mode == "callback":
            position = None
            if request.keep_place:
                if mine is None:
                    seq = self._next_seq(lock_fd, state)
                    mine = Waiter(seq, session, agent, voice, None, None, HOST, now, now, 0.0)
                    mine.order = float(mine.seq)
                    state.waiters.append(mine)
                mine.heartbeat_at = now
                self._write_waiter(mine)
                position = next(i for i, w in enumerate(state.waiters, 1) if w is mine)
            raise _busy(state, position, session, remote=request.remote)
        # Wait mode: join the queue (or adopt our kept place) with a wake socket. A remote
        # waiter's place stays without a process: it outlives this call.
        pid = request.pid
        if mine is None:
            seq = self._next_seq(lock_fd, state)
            mine = Waiter(seq, session, agent, voice, pid, None, HOST, now, now, float(seq))
        if request.remote:
            mine.pid, mine.pid_start, mine.heartbeat_at = None, None, now
        else:
            mine.pid, mine.pid_start = pid, process_start(pid)
        mine.agent, mine.voice = agent or mine.agent, voice or mine.voice
        wake = _bind_wake(self._wake_path(mine.seq)) if self.wake else None
        self._write_waiter(mine)
        self._tidy(now)  # a free floor (holder died, queue empty ahead) goes to the head now
        return mine, wake

    def _reenter(self, holder: Holder | None, request: _Request, now: float) -> Held | None:
        """Under the lock: the hold `request.session` already has, if this process may speak
        under it.

        A session holding the floor between commands (pid None) lets its own commands speak,
        one process at a time: the one speaking is written into the record, and another waits
        for it (`_session_speaking`). Another live process of a session whose floor is held by
        a process still queues, so two never talk at once.
        """
        session, pid = request.session, request.pid
        if holder is None or holder.session != session or holder.pid not in (None, pid):
            return None
        if request.remote:  # a remote holder calling again renews its hold; it does not speak
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

    def _wait_for_speaker(self, speaker: Holder | None, request: _Request) -> None:
        """One tick of waiting for the session's own speaking process; raises ConchBusy in
        callback mode or past the deadline, ConchCancelled when cancelled."""
        session, speaker_pid = (speaker.session, speaker.speaker_pid) if speaker else ("?", "?")
        where = f"session {session} is speaking in process {speaker_pid}"
        if request.mode == "callback":
            raise ConchBusy(
                f"the floor is in use: {where}",
                position=None,
                holder=speaker,
                hint="call again when it has finished",
            )
        deadline = request.deadline
        if deadline is not None and time.monotonic() >= deadline:
            raise ConchBusy(
                f"the floor was not free within {request.timeout_s:g} s: {where}",
                position=None,
                holder=speaker,
                hint="raise VOCAL_CONCH_TIMEOUT, or see `vocal conch status`",
            )
        if request.cancel is not None and request.cancel.is_set():
            raise ConchCancelled()
        if request.on_wait is not None:
            request.on_wait(1, speaker)
        remaining = None if deadline is None else deadline - time.monotonic()
        time.sleep(HEAD_TICK_S if remaining is None else max(0.0, min(HEAD_TICK_S, remaining)))

    def _wait(self, mine: Waiter, wake: socket.socket | None, request: _Request) -> Held:
        remote, cancel, on_wait = request.remote, request.cancel, request.on_wait
        deadline = request.deadline
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
                        place = last_position or 1
                        held = self._hold(request, mine.seq, now, position=place, waited=True)
                        taken = True
                        return held
                    found = next(
                        ((i, w) for i, w in enumerate(state.waiters, 1) if w.seq == mine.seq),
                        None,
                    )
                    if found is None and not self._quarantined_waiter(mine.seq) <= set_aside:
                        # Our record was garbled and set aside (again), not removed by `leave`:
                        # we know what it said, so the place is written back (issue 17).
                        set_aside |= self._quarantined_waiter(mine.seq)
                        mine.heartbeat_at = now
                        self._write_waiter(mine)
                        continue
                    if found is None:
                        raise ConchBusy(
                            "this waiter was removed from the conch queue (vocal conch leave)",
                            position=None,
                        )
                    position, me = found
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
                    raise _busy(
                        state, position, mine.session, timeout_s=request.timeout_s, remote=remote
                    )
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
            held = self.acquire(
                session=session,
                agent=agent,
                voice=voice,
                mode="wait" if timeout_s > 0 else "callback",
                timeout_s=timeout_s,
                keep_place=True,
                remote=True,
                cancel=cancel,
            )
        except ConchBusy as busy:
            queued = len(self.status().waiters)
            waited_s = time.monotonic() - started
            return RemoteWait(
                session, False, waited_s, busy.position, queued, busy.holder, message=str(busy)
            )
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


def _busy(
    state: ConchState,
    position: int | None,
    session: str,
    timeout_s: float | None = None,
    remote: bool = False,
) -> ConchBusy:
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

    def _raise(signum: int, _frame: FrameType | None) -> None:
        for other in old:  # a second signal must not cut the clean-up short
            signal.signal(other, signal.SIG_IGN)
        raise Interrupted(f"terminated by {signal.Signals(signum).name}")

    old: dict[signal.Signals, Callable[[int, FrameType | None], object] | int | None] = {}
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


__all__ = ["Conch", "interrupt_on_signals"]
