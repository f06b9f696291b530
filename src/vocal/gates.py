"""Gates: `vocal mute`, `vocal unmute`, `vocal volume N`, persisted in the state directory.

They are checked before any synthesis cost is paid: muted, or a volume of 0, means no engine is
loaded and nothing is synthesized (DESIGN.md), not that silence is played. The file is
`<home>/gates.json`, written atomically; a missing or unreadable file means the defaults
(unmuted, 100 %), so a broken state file can never silence vocal for good.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass
from pathlib import Path

from vocal.errors import UsageError

GATES_FILE_NAME = "gates.json"
#: The loudest `vocal volume` allows: twice the engine's level (clipping starts beyond).
MAX_VOLUME_PERCENT = 200


@dataclass(frozen=True)
class Gates:
    """Whether vocal may speak, and how loud (percent of the engine's level)."""

    muted: bool = False
    volume_percent: int = 100

    @property
    def silent(self) -> bool:
        """True when nothing should be synthesized at all."""
        return self.muted or self.volume_percent <= 0

    @property
    def gain(self) -> float:
        """The playback gain the volume stands for (1.0 at 100 %)."""
        return 0.0 if self.muted else self.volume_percent / 100.0

    def to_dict(self) -> dict[str, object]:
        return {**asdict(self), "silent": self.silent}


def gates_path(home: Path) -> Path:
    return Path(home) / GATES_FILE_NAME


def read_gates(home: Path) -> Gates:
    """The persisted gates, or the defaults when there are none (or they are unreadable)."""
    try:
        data = json.loads(gates_path(home).read_text(encoding="utf-8"))
        muted = data.get("muted", False)
        volume = data.get("volume_percent", 100)
        if not isinstance(muted, bool) or isinstance(volume, bool) or not isinstance(volume, int):
            return Gates()
        return Gates(muted=muted, volume_percent=min(MAX_VOLUME_PERCENT, max(0, volume)))
    except (OSError, ValueError, AttributeError):
        return Gates()


def write_gates(home: Path, gates: Gates) -> Gates:
    """Persist `gates` atomically (a concurrent reader sees the old file or the new one)."""
    import tempfile  # only writers pay for it; every speak reads the gates

    path = gates_path(home)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            json.dump({"muted": gates.muted, "volume_percent": gates.volume_percent}, out)
            out.write("\n")
        os.replace(tmp, path)
    except OSError as exc:
        raise UsageError(f"cannot write {path}: {exc.strerror or exc}") from None
    return gates


def set_muted(home: Path, muted: bool) -> Gates:
    """Mute or unmute; the volume is kept."""
    current = read_gates(home)
    return write_gates(home, Gates(muted=muted, volume_percent=current.volume_percent))


def set_volume(home: Path, percent: int) -> Gates:
    """Set the volume in percent (0 to MAX_VOLUME_PERCENT); muting is kept."""
    if isinstance(percent, bool) or not 0 <= percent <= MAX_VOLUME_PERCENT:
        raise UsageError(f"volume must be 0 to {MAX_VOLUME_PERCENT} (percent), got {percent}")
    current = read_gates(home)
    return write_gates(home, Gates(muted=current.muted, volume_percent=int(percent)))


__all__ = ["Gates", "read_gates", "write_gates", "set_muted", "set_volume", "gates_path"]
