"""Pane focus: when an agent running in tmux takes the floor, select its pane.

With `VOCAL_AUTO_FOCUS_PANE=true`, the process that takes the conch (a `Turn`, or a granted
`vocal conch wait`) calls `focus_pane`. If it runs inside tmux (`$TMUX` and `$TMUX_PANE` set)
the pane `$TMUX_PANE` is made the active pane of its window and that window the current window
of its session, so the person sees who is talking. Outside tmux nothing happens. Callers check
`Settings.auto_focus_pane` before importing this module: disabled, it costs nothing.

tmux is run with argument lists, never a shell string, and always on the server `$TMUX` names
(`tmux -S SOCKET`), so a pane of another server (another user, a nested tmux) is never touched.

The hold sentinel keeps focus from jumping while the person works in another pane. It is one
file, `<VOCAL_HOME>/run/focus.json`, with one record per tmux session (server socket and
session id, as focus moves within a session):

    pane          the pane vocal last selected, or found the person in
    hold_until    focus does not move before this time (0: no hold)
    reason        "vocal" (vocal selected the pane), "manual" (the person moved) or "hold"
                  (`vocal focus hold`)

It is written (under a lock, `focus.lock`) in three cases:
  - vocal selected a pane: the record names it, with no hold;
  - at the next focus, the session's active pane differs from the recorded one: the person
    changed panes since vocal last looked. That pane is recorded and held for
    `VOCAL_FOCUS_HOLD_SECONDS` (default 30) from then, and focus does not move;
  - `vocal focus hold [--seconds N]` holds the active pane (bind it to a key in tmux to say
    "I am working here"); `vocal focus release` ends a hold.
While a hold lasts and the person is not in the speaker's pane, focus stays where it is; a
person who keeps changing panes renews the hold each time a focus finds them elsewhere. A
session's first focus has no record to compare with, so it always moves focus.

Standard library only: it runs on every turn's start when enabled.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Mapping
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict, TypeGuard

from vocal.errors import UsageError
from vocal.floor.statefiles import (
    BadRecord,
    check_field,
    locked,
    private_dir,
    read_record,
    write_json,
)

if TYPE_CHECKING:
    from vocal.config import Settings

#: A tmux command answers in a few ms; more than this means a stuck server, and focus is a
#: nicety that must never hold up a turn.
TMUX_TIMEOUT_S = 2.0
SENTINEL_NAME = "focus.json"


@dataclass(frozen=True)
class TmuxPane:
    """A pane and the socket of its tmux server, from a process's `$TMUX` and `$TMUX_PANE`."""

    socket: str
    pane: str

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> TmuxPane | None:
        """The caller's pane, or None outside tmux. `$TMUX` is "SOCKET,SERVER_PID,SESSION"."""
        env = os.environ if env is None else env
        tmux, pane = env.get("TMUX", ""), env.get("TMUX_PANE", "")
        socket_path = tmux.split(",", 1)[0]
        if not socket_path or not pane.startswith("%"):
            return None
        return cls(socket_path, pane)


@dataclass
class FocusResult:
    """What `focus_pane` did: "focused", "already" (the pane was active), "held" (the sentinel
    kept focus where the person is), "outside-tmux" or "failed" (tmux said no: `detail`)."""

    action: str
    pane: str | None = None
    #: The session's active pane before (and, unless focused, after).
    active: str | None = None
    hold_until: float = 0.0
    detail: str = ""

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


class TmuxError(Exception):
    """A tmux command failed (the server or the pane is gone)."""


def tmux(socket_path: str, *args: str) -> str:
    """Run `tmux -S SOCKET ARGS...` and return its stdout; TmuxError if it fails."""
    try:
        result = subprocess.run(
            ["tmux", "-S", socket_path, *args],
            capture_output=True,
            text=True,
            timeout=TMUX_TIMEOUT_S,
            stdin=subprocess.DEVNULL,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        raise TmuxError(str(exc)) from None
    if result.returncode != 0:
        raise TmuxError(result.stderr.strip() or f"tmux exited {result.returncode}")
    return result.stdout


def active_pane(target: TmuxPane) -> tuple[str, str]:
    """(session id, active pane of its current window) for the session holding `target.pane`."""
    listing = tmux(
        target.socket,
        "list-panes",
        "-s",
        "-t",
        target.pane,
        "-F",
        "#{session_id} #{pane_id} #{window_active} #{pane_active}",
    )
    for line in listing.splitlines():
        session, pane, window_active, pane_active = (line.split() + ["", "", "", ""])[:4]
        if window_active == "1" and pane_active == "1":
            return session, pane
    raise TmuxError(f"no active pane in the session of {target.pane}")


def select_pane(target: TmuxPane) -> None:
    """Make `target.pane` the active pane of its window and that window current (one call)."""
    tmux(target.socket, "select-window", "-t", target.pane, ";", "select-pane", "-t", target.pane)


class FocusRecord(TypedDict, total=False):
    """One tmux session's record in focus.json (`parse_sentinel` makes sure of every key)."""

    #: The pane focus stays on (or was last put on) and until when (0: no hold).
    pane: str
    hold_until: float
    #: Who wrote it: "vocal", "manual", "hold", "released".
    reason: str
    at: float


class FocusStatus(TypedDict):
    """`focus_record`: what `vocal focus status --json` prints."""

    socket: str
    session: str
    pane: str
    active: str
    enabled: bool
    record: FocusRecord | None


def parse_sentinel(data: object) -> dict[str, FocusRecord]:
    """focus.json as `FocusSentinel.write` makes it: {KEY: {pane, hold_until, reason, at}}.
    Anything else raises BadRecord: the file is quarantined and the sentinel starts afresh,
    rather than every turn failing on it (issue 37)."""
    if _checked_sentinel(data):
        return data
    raise BadRecord("focus: not a record")  # not reached: the check raises first


def _checked_sentinel(data: object) -> TypeGuard[dict[str, FocusRecord]]:
    """True, or raises BadRecord; completes each record (as a type guard, the file's own dict
    is returned: nothing is copied)."""
    if not isinstance(data, dict):
        raise BadRecord(f"focus: a JSON {type(data).__name__}, not an object")
    for record in data.values():
        if not isinstance(record, dict):
            raise BadRecord("focus: a record is not an object")
        check_field("pane", record.get("pane"), "str")
        record["hold_until"] = check_field("hold_until", record.get("hold_until", 0.0), "float")
        check_field("reason", record.setdefault("reason", ""), "str")
        check_field("at", record.setdefault("at", 0.0), "float")
    return True


class FocusSentinel:
    """The hold sentinel (see the module docstring): one record per tmux session, keyed
    "SOCKET SESSION_ID". A malformed file is quarantined (logged in `log_dir`) by whoever
    holds its lock, and read as empty by everyone."""

    def __init__(self, run_dir: Path, log_dir: Path | None = None) -> None:
        self.run_dir = Path(run_dir)
        self.path = self.run_dir / SENTINEL_NAME
        self.log_dir = log_dir

    def lock(self) -> AbstractContextManager[int]:
        private_dir(self.run_dir)
        return locked(self.run_dir / "focus.lock")

    def records(self, *, heal: bool = True) -> dict[str, FocusRecord]:
        """Every session's record; `heal` (the caller holds `lock()`): quarantine a bad file."""
        found = read_record(self.path, parse_sentinel, log_dir=self.log_dir, quarantine_bad=heal)
        return found or {}

    def read(self, key: str, *, heal: bool = True) -> FocusRecord | None:
        return self.records(heal=heal).get(key)

    def write(self, key: str, pane: str, hold_until: float, reason: str, now: float) -> None:
        data = self.records()
        data[key] = {"pane": pane, "hold_until": hold_until, "reason": reason, "at": now}
        write_json(self.path, data)


def focus_pane(settings: Settings, env: Mapping[str, str] | None = None) -> FocusResult:
    """Select the caller's tmux pane unless the hold sentinel says the person works elsewhere.

    Never raises for tmux trouble: a failed focus is reported in the result, not to the turn.
    """
    target = TmuxPane.from_env(env)
    if target is None:
        return FocusResult("outside-tmux")
    sentinel = FocusSentinel(settings.run_dir, settings.log_dir)
    with sentinel.lock():
        now = time.time()
        try:
            session, active = active_pane(target)
        except TmuxError as exc:
            return FocusResult("failed", target.pane, detail=str(exc))
        key = f"{target.socket} {session}"
        record = sentinel.read(key)
        if record is not None and record["pane"] != active:
            # The person changed panes since vocal last looked: they work there now.
            hold_until = now + settings.focus_hold_s
            sentinel.write(key, active, hold_until, "manual", now)
            return FocusResult("held", target.pane, active, hold_until)
        hold_until = float(record.get("hold_until", 0.0)) if record else 0.0
        if active == target.pane:
            return FocusResult("already", target.pane, active, hold_until)
        if now < hold_until:
            return FocusResult("held", target.pane, active, hold_until)
        try:
            select_pane(target)
        except TmuxError as exc:
            return FocusResult("failed", target.pane, active, detail=str(exc))
        sentinel.write(key, target.pane, 0.0, "vocal", now)
        return FocusResult("focused", target.pane, active)


def hold_focus(
    settings: Settings, seconds: float | None = None, env: Mapping[str, str] | None = None
) -> FocusResult:
    """Hold focus on the active pane of the caller's tmux session (`vocal focus hold`)."""
    target = _need_tmux(env)
    sentinel = FocusSentinel(settings.run_dir, settings.log_dir)
    with sentinel.lock():
        now = time.time()
        session, active = _active_or_usage(target)
        hold_until = now + (settings.focus_hold_s if seconds is None else seconds)
        sentinel.write(f"{target.socket} {session}", active, hold_until, "hold", now)
    return FocusResult("held", target.pane, active, hold_until)


def release_focus(settings: Settings, env: Mapping[str, str] | None = None) -> bool:
    """End a hold on the caller's tmux server; False if there was none."""
    target = _need_tmux(env)
    sentinel = FocusSentinel(settings.run_dir, settings.log_dir)
    with sentinel.lock():
        key = f"{target.socket} {_active_or_usage(target)[0]}"
        record = sentinel.read(key)
        if record is None or float(record.get("hold_until", 0.0)) <= time.time():
            return False
        sentinel.write(key, record["pane"], 0.0, "released", time.time())
        return True


def focus_record(settings: Settings, env: Mapping[str, str] | None = None) -> FocusStatus:
    """The sentinel's record for the caller's tmux server (`vocal focus status`)."""
    target = _need_tmux(env)
    session, active = _active_or_usage(target)
    sentinel = FocusSentinel(settings.run_dir, settings.log_dir)
    record = sentinel.read(f"{target.socket} {session}", heal=False)
    return {
        "socket": target.socket,
        "session": session,
        "pane": target.pane,
        "active": active,
        "enabled": settings.auto_focus_pane,
        "record": record,
    }


def _active_or_usage(target: TmuxPane) -> tuple[str, str]:
    try:
        return active_pane(target)
    except TmuxError as exc:
        raise UsageError(f"tmux: {exc}") from None


def _need_tmux(env: Mapping[str, str] | None) -> TmuxPane:
    target = TmuxPane.from_env(env)
    if target is None:
        raise UsageError("not inside tmux ($TMUX and $TMUX_PANE are not set)")
    return target


__all__ = [
    "FocusResult",
    "FocusSentinel",
    "TmuxError",
    "TmuxPane",
    "active_pane",
    "focus_pane",
    "focus_record",
    "hold_focus",
    "parse_sentinel",
    "release_focus",
    "select_pane",
    "tmux",
]
