"""Never woken by vocal itself: a phrase heard while vocal speaks, or while it is muted, is
ignored.

vocal speaks only while some process holds the floor (the conch) or runs a turn with a control
socket (`speak`, `converse`, `play`, `replay`: a `--no-conch` turn too), so the phrase said by
vocal's own voice in a reply is heard while one of them is there. `vocal mute` silences waking
as it silences speech. `floor_busy` reads those state files (a stat when there are none);
`WakeGate` asks it at most every `POLL_S` while the stream runs, and once more when a phrase is
heard, and ignores a phrase that began within `AFTER_BUSY_S` of the last time vocal was seen
busy: the end of a reply is still in the air (the output's buffer, the room) for a moment after
its process lets go of the floor.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from vocal.config import Settings

#: How often the state files are read while listening (a stat each when there are none).
POLL_S = 0.2
#: A phrase that began this soon after vocal was last seen busy is still ignored.
AFTER_BUSY_S = 0.5


def floor_busy(settings: Settings) -> str | None:
    """Why a phrase heard now would not count ("vocal is muted", who holds the floor, which
    vocal turn is running), or None. A state file that cannot be read counts as not busy:
    waking must not stop for it."""
    from vocal.floor.gates import gates_path, read_gates

    home = settings.home
    if gates_path(home).exists() and read_gates(home).muted:
        return "vocal is muted"
    if (settings.conch_dir / "holder.json").exists():
        from vocal.floor.conch.queue import Conch

        try:
            holder = Conch.from_settings(settings).status().holder
        except OSError:
            holder = None
        if holder is not None:
            return f"{holder.session} holds the floor"
    from vocal.floor.control import endpoints

    running = endpoints(settings.run_dir)
    if running:
        turn = running[-1]
        return f"vocal {turn.kind or 'turn'} (pid {turn.pid}) is running"
    return None


class WakeGate:
    """Whether a phrase heard may wake (see the module docstring).

    Args:
        probe: why vocal is busy now, or None (`floor_busy` with the settings bound).
        poll_s: read the state at most this often in `poll`.
        after_busy_s: how long after vocal was last seen busy a phrase still does not count.
        clock: `time.monotonic`, or a test's clock.
    """

    def __init__(
        self,
        probe: Callable[[], str | None],
        *,
        poll_s: float = POLL_S,
        after_busy_s: float = AFTER_BUSY_S,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.probe = probe
        self.poll_s = poll_s
        self.after_busy_s = after_busy_s
        self.clock = clock
        self._polled_at: float | None = None
        self._now_reason: str | None = None
        #: When vocal was last seen busy, and why (None: never).
        self.busy_at: float | None = None
        self.busy_reason: str | None = None

    def poll(self, *, force: bool = False) -> str | None:
        """Read the state if `poll_s` has passed since the last read (or `force`); why vocal
        is busy as of that read, or None."""
        now = self.clock()
        if force or self._polled_at is None or now - self._polled_at >= self.poll_s:
            self._polled_at = now
            self._now_reason = self.probe()
            if self._now_reason is not None:
                self.busy_at, self.busy_reason = now, self._now_reason
        return self._now_reason

    def blocked(self, since_s: float) -> str | None:
        """Why a phrase that began at `since_s` (on the gate's clock) must be ignored, or
        None: vocal is busy now, or was seen busy less than `after_busy_s` (plus one poll,
        when it may have let go unseen) before the phrase began."""
        reason = self.poll(force=True)
        if reason is not None:
            return reason
        if self.busy_at is not None and since_s <= self.busy_at + self.poll_s + self.after_busy_s:
            return f"{self.busy_reason} (just before)"
        return None


__all__ = ["AFTER_BUSY_S", "POLL_S", "WakeGate", "floor_busy"]
