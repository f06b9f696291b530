"""Gates: `vocal mute`, `vocal unmute`, `vocal volume N`, persisted in the state directory.

They are checked before any synthesis cost is paid: muted, or a volume of 0, means no engine is
loaded and nothing is synthesized (docs/design.md), not that silence is played. The file is
`<home>/gates.json`, written atomically; a missing file means the defaults (unmuted, 100 %), and
so does a malformed one (not JSON, nested too deep, a field of the wrong type), which is
quarantined on the way (`vocal.floor.statefiles.read_record`): a broken state file can never silence
vocal for good, nor stop `unmute` or `volume` from writing a good one (issue 17).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path

from vocal.errors import UsageError
from vocal.floor.statefiles import BadRecord, check_field, read_record, write_bytes_atomic

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


def parse_gates(data: object) -> Gates:
    """`Gates` from the JSON of gates.json; a volume out of range is brought into it. Raises
    BadRecord for anything else that is not what `write_gates` writes."""
    if not isinstance(data, dict):
        raise BadRecord(f"gates: a JSON {type(data).__name__}, not an object")
    muted = check_field("muted", data.get("muted", False), "bool")
    volume = check_field("volume_percent", data.get("volume_percent", 100), "int")
    return Gates(muted=muted, volume_percent=min(MAX_VOLUME_PERCENT, max(0, volume)))


def read_gates(home: Path) -> Gates:
    """The persisted gates, or the defaults when there are none (or they are malformed: then
    the file is quarantined and logged under `<home>/logs`)."""
    try:
        gates = read_record(gates_path(home), parse_gates, log_dir=Path(home) / "logs")
    except OSError:  # unreadable (permissions): the defaults, as documented
        return Gates()
    return gates if gates is not None else Gates()


def write_gates(home: Path, gates: Gates) -> Gates:
    """Persist `gates` atomically (a concurrent reader sees the old file or the new one), 0600.
    A link at gates.json is replaced, not followed: the state directory holds no links of ours."""
    path = gates_path(home)
    data = {"muted": gates.muted, "volume_percent": gates.volume_percent}
    from vocal.floor.statedir import ensure_state_dir

    ensure_state_dir(home)  # made 0700 and marked, or refused if another user could write it
    try:
        write_bytes_atomic(path, (json.dumps(data) + "\n").encode())
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


__all__ = [
    "Gates",
    "parse_gates",
    "read_gates",
    "write_gates",
    "set_muted",
    "set_volume",
    "gates_path",
]
