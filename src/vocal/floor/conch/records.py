"""The conch's records and errors: the holder, a waiter, a grant, the state a status shows, and
their parsers (every record is validated field by field as it is read; see vocal.floor.conch.queue).
"""

from __future__ import annotations

import os
import time
from dataclasses import asdict, dataclass, field
from typing import TypedDict

from vocal.errors import ConchTimeout
from vocal.floor.statefiles import HOST, BadRecord, finite, record_from

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
#: (~30 ms) drains. So after a SIGKILLed holder too: its stream leaves the server at once, but
#: what was mixed already reaches the sink's monitor 11-29 ms after the kill, and without the
#: pause the next speaker was heard 43-80 ms after it (an overlap under CI's load).
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

    def __init__(
        self,
        message: str,
        *,
        position: int | None,
        hint: str | None = None,
        holder: Holder | None = None,
    ) -> None:
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

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def parse_holder(data: object) -> Holder:
    """A `Holder` from the JSON of holder.json; raises BadRecord if any field is wrong."""
    holder = record_from(
        Holder,
        data,
        {
            "seq": _SEQ_RANGE,
            "pid": _PID_RANGE,
            "pid_start": _TICKS_RANGE,
            "speaker_pid": _PID_RANGE,
            "speaker_start": _TICKS_RANGE,
            "expiry_s": (0.0, MAX_LOCK_EXPIRY_S),
        },
    )
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

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def parse_waiter(data: object, seq: int | None = None) -> Waiter:
    """A `Waiter` from the JSON of queue/N.json (N = `seq`, which the record must repeat: the
    file is removed by that number); raises BadRecord if any field is wrong."""
    waiter = record_from(
        Waiter, data, {"seq": _SEQ_RANGE, "pid": _PID_RANGE, "pid_start": _TICKS_RANGE}
    )
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

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


def parse_grant(data: object) -> Grant:
    """A `Grant` from the JSON of grant.json; raises BadRecord if any field is wrong."""
    return record_from(Grant, data, {"seq": _SEQ_RANGE})


def parse_quiet(data: object) -> float:
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


class _RemoteWaitDict(TypedDict):
    session: str
    granted: bool
    waited_s: float
    position: int | None
    queue_length: int
    holder: dict[str, object] | None


class RemoteWaitDict(_RemoteWaitDict, total=False):
    """`RemoteWait.to_dict`: what `vocal conch wait --json` prints; `seq` and `expires_in_s`
    only when granted."""

    seq: int
    expires_in_s: float


class ConchStateDict(TypedDict):
    """`ConchState.to_dict`: what `vocal conch status --json` prints. The holder and each
    queue entry are their records' fields plus the times since and until (`held_s`,
    `expires_in_s`; `position`, `waited_s`, `granted`)."""

    holder: dict[str, object] | None
    grant: dict[str, object] | None
    queue: list[dict[str, object]]


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

    def to_dict(self, now: float | None = None) -> RemoteWaitDict:
        now = time.time() if now is None else now
        data: RemoteWaitDict = {
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

    def to_dict(self) -> ConchStateDict:
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


__all__ = [
    "MODES",
    "BUMP_SETTLE_S",
    "ConchBusy",
    "ConchCancelled",
    "ConchLost",
    "ConchState",
    "Grant",
    "Held",
    "Holder",
    "RemoteWait",
    "Waiter",
    "default_session",
    "parse_grant",
    "parse_holder",
    "parse_quiet",
    "parse_waiter",
]
