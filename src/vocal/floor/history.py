"""The last N utterances on disk, so `replay` and `skip_back` work across processes.

No vocal process outlives its turn, so an in-memory buffer would forget everything between
turns. Each utterance is two files in `Settings.history_dir` (0700):

    000042.json     id, text, voice, sample_rate, created_at, session, agent, complete
    000042.pcm      16-bit little-endian mono PCM at sample_rate, appended as it is played

plus `seq` (the last id), `cursor.json` (where a skip-back walk stands) and `lock` (flock).
An utterance is recorded when it starts playing, so the one being spoken is already the newest;
a process killed mid-utterance leaves what it had played. Size is bounded: at most
`VOCAL_HISTORY_SIZE` utterances (minimum 1), each at most `MAX_UTTERANCE_S` long.

Corrupt state heals itself (issue 17): an entry whose JSON is malformed (a field of the wrong type,
a sample rate out of range, NaN) is quarantined and skipped; every new utterance trims, under the
lock, whatever is beyond the size limit, including orphans (JSON without PCM, PCM without JSON),
so the limit holds whatever is on disk. Writers create, finish and trim entries only under the
lock, so no orphan is ever made by concurrent writers.

skip_back (issue 6): the first press restarts the current or most recent utterance, each further
press steps one back, clamped at the oldest. A press is "further" when the cursor on disk was
set while the same utterance was the newest; a new utterance starts a new walk.

Standard library at import time; numpy only when PCM is decoded.
"""

from __future__ import annotations

import os
import re
import time
from contextlib import AbstractContextManager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import IO, TYPE_CHECKING

from vocal.config import Settings
from vocal.errors import UsageError
from vocal.floor.statefiles import (
    QUARANTINE_MARK,
    BadRecord,
    check_field,
    locked,
    private_dir,
    read_record,
    unlink,
    write_json,
)

if TYPE_CHECKING:
    import numpy as np

    from vocal.audio.wav import Audio

#: The longest utterance kept (longer ones are cut): bounds each entry to
#: 300 s x sample_rate x 2 bytes (14.4 MB at 24 kHz).
MAX_UTTERANCE_S = 300.0
#: Sample rates an entry may claim: vocal.audio.wav's range (not imported: it imports numpy).
MIN_SAMPLE_RATE = 4_000
MAX_SAMPLE_RATE = 768_000
#: Metadata holds the utterance's text; larger than this it is not ours.
MAX_META_BYTES = 8 << 20
#: The largest utterance id: an entry's file name is at most 12 ASCII digits. When the next id
#: would pass it (a planted `999999999999.pcm`, a garbled `seq`), the entries kept are
#: numbered again from 1, so numbering never wedges (issue 37).
MAX_ID = 10**12 - 1
_ENTRY_STEM = re.compile(r"[0-9]{1,12}")
_BYTES_PER_FRAME = 2


@dataclass
class Utterance:
    """One recorded utterance. `frames` counts what is on disk now."""

    id: int
    text: str
    voice: str | None
    sample_rate: int
    created_at: float
    frames: int = 0
    complete: bool = False
    session: str | None = None
    agent: str | None = None
    pcm_path: Path | None = None

    @property
    def duration_s(self) -> float:
        return self.frames / self.sample_rate

    def audio(self) -> Audio:
        """The PCM as an `Audio` (imports numpy)."""
        import numpy as np

        from vocal.audio.wav import Audio

        if self.pcm_path is None:
            raise UsageError(f"utterance {self.id} has no audio")
        limit = round(MAX_UTTERANCE_S * self.sample_rate) * _BYTES_PER_FRAME
        try:
            with open(self.pcm_path, "rb") as pcm:
                raw = pcm.read(limit)  # a PCM grown past the cap is not read whole
        except FileNotFoundError:
            raise UsageError(f"utterance {self.id} has left the history") from None
        usable = len(raw) - len(raw) % _BYTES_PER_FRAME
        samples = np.frombuffer(raw[:usable], dtype="<i2").astype(np.float32) / 32768.0
        return Audio(samples, self.sample_rate)

    def to_dict(self) -> dict[str, object]:
        data = asdict(self)
        data.pop("pcm_path")
        data["duration_s"] = round(self.duration_s, 3)
        return data


def parse_entry(data: object, utterance_id: int | None = None) -> Utterance:
    """An `Utterance` from the JSON of NNNNNN.json (N = `utterance_id`, which the record must
    repeat), field by field; raises BadRecord. `frames` and `pcm_path` are the caller's."""
    if not isinstance(data, dict):
        raise BadRecord(f"history entry: a JSON {type(data).__name__}, not an object")
    entry_id = check_field("id", data.get("id"), "int", (0, MAX_ID))
    if utterance_id is not None and entry_id != utterance_id:
        raise BadRecord(f"history entry: id {entry_id} in the file of {utterance_id}")
    rate = check_field(
        "sample_rate", data.get("sample_rate"), "int", (MIN_SAMPLE_RATE, MAX_SAMPLE_RATE)
    )
    return Utterance(
        id=entry_id,
        text=check_field("text", data.get("text") or "", "str"),
        voice=check_field("voice", data.get("voice"), "str | None"),
        sample_rate=rate,
        created_at=check_field("created_at", data.get("created_at") or 0.0, "float"),
        complete=check_field("complete", data.get("complete", False), "bool"),
        session=check_field("session", data.get("session"), "str | None"),
        agent=check_field("agent", data.get("agent"), "str | None"),
    )


def _parse_count(data: object) -> int:
    return check_field("seq", data, "int", (0, MAX_ID))


def entry_id(stem: str) -> int | None:
    """The utterance id a file name's stem spells (`000042` -> 42), or None when the stem is
    not one vocal writes: only ASCII digits count ("²".isdigit() is true, and int() of it
    raised in every later `speak`), at most 12 of them (a 250-digit name made every next
    name too long to create)."""
    return int(stem) if _ENTRY_STEM.fullmatch(stem) else None


class Recording:
    """An utterance being recorded: `append` PCM as it is played, then `finish`.

    `out` is the PCM file, opened by `History.begin` under the lock: opened later, it could
    recreate a PCM that a concurrent writer had just trimmed (an orphan, issue 17)."""

    def __init__(self, history: History, utterance: Utterance, out: IO[bytes]) -> None:
        self.history = history
        self.utterance = utterance
        self._max_frames = round(MAX_UTTERANCE_S * utterance.sample_rate)
        self._out = out

    def append(self, samples: np.ndarray) -> None:
        """Add mono float32 samples at the utterance's sample rate (beyond the cap: dropped)."""
        from vocal.audio.wav import to_int16

        room = self._max_frames - self.utterance.frames
        if room <= 0 or self._out.closed:
            return
        block = to_int16(samples.reshape(-1)[:room])
        self._out.write(block.tobytes())
        self._out.flush()  # another process may replay it while we still speak
        self.utterance.frames += block.shape[0]

    def finish(self) -> Utterance:
        """Close the PCM and mark the utterance complete."""
        if not self._out.closed:
            self._out.close()
            self.utterance.complete = True
            self.history._finish_meta(self.utterance)
        return self.utterance

    def __enter__(self) -> Recording:
        return self

    def __exit__(self, *exc: object) -> None:
        self.finish()


class History:
    """The on-disk history of `directory`, keeping the newest `size` utterances."""

    def __init__(self, directory: Path, size: int = Settings.history_size) -> None:
        self.directory = Path(directory)
        self.size = max(1, int(size))  # the minimum: skip_back needs one utterance
        self._ready = False

    @classmethod
    def from_settings(cls, settings: Settings) -> History:
        return cls(settings.history_dir, settings.history_size)

    def _lock(self) -> AbstractContextManager[int]:
        if not self._ready:
            private_dir(self.directory)
            self._ready = True
        return locked(self.directory / "lock")

    def _meta_path(self, utterance_id: int) -> Path:
        return self.directory / f"{utterance_id:06d}.json"

    def _pcm_path(self, utterance_id: int) -> Path:
        return self.directory / f"{utterance_id:06d}.pcm"

    @property
    def log_dir(self) -> Path:
        """Where quarantined entries are logged: the state directory's logs/."""
        return self.directory.parent / "logs"

    def _write_meta(self, utterance: Utterance) -> None:
        data = utterance.to_dict()
        data.pop("duration_s")
        write_json(self._meta_path(utterance.id), data)

    def _finish_meta(self, utterance: Utterance) -> None:
        """Mark `utterance` complete on disk, unless it has been trimmed meanwhile (writing it
        then would leave a JSON without its PCM)."""
        with self._lock():
            if self._meta_path(utterance.id).exists():
                self._write_meta(utterance)

    def _load(self, meta_path: Path) -> Utterance | None:
        utterance_id = entry_id(meta_path.name[:-5])
        if utterance_id is None:
            return None
        utterance = read_record(
            meta_path,
            lambda d: parse_entry(d, utterance_id),
            log_dir=self.log_dir,
            max_bytes=MAX_META_BYTES,
        )
        if utterance is None:
            return None
        utterance.pcm_path = self._pcm_path(utterance.id)
        try:
            utterance.frames = utterance.pcm_path.stat().st_size // _BYTES_PER_FRAME
        except FileNotFoundError:
            return None
        return utterance

    # -- reading ---------------------------------------------------------------------------------
    def entries(self) -> list[Utterance]:
        """Every utterance kept, newest first (malformed entries are quarantined and skipped)."""
        names = sorted(self._names(), reverse=True)
        found = []
        for name in names:
            if name.endswith(".json") and entry_id(name[:-5]) is not None:
                utterance = self._load(self.directory / name)
                if utterance is not None:
                    found.append(utterance)
        return found

    def get(self, back: int = 1) -> Utterance:
        """The `back`-th most recent utterance (1 = the newest)."""
        entries = self.entries()
        if back < 1:
            raise UsageError(f"N must be 1 or more, got {back}")
        if not entries:
            raise UsageError(
                "the history is empty", hint="it fills as vocal speaks (VOCAL_HISTORY_SIZE)"
            )
        if back > len(entries):
            raise UsageError(f"the history holds {len(entries)} utterance(s), not {back}")
        return entries[back - 1]

    # -- recording ---------------------------------------------------------------------------
    def begin(
        self,
        *,
        text: str,
        voice: str | None,
        sample_rate: int,
        session: str | None = None,
        agent: str | None = None,
    ) -> Recording:
        """Start recording a new utterance (it becomes the newest at once)."""
        with self._lock():
            utterance_id = self._next_id()
            write_json(self.directory / "seq", utterance_id)
            utterance = Utterance(
                id=utterance_id,
                text=text,
                voice=voice,
                sample_rate=int(sample_rate),
                created_at=time.time(),
                session=session,
                agent=agent,
                pcm_path=self._pcm_path(utterance_id),
            )
            # 0600: what was said is the user's alone (issue 17: the PCM was 0644). O_NOFOLLOW: a
            # link planted in the history directory is not written through.
            flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_CLOEXEC | os.O_NOFOLLOW
            out = os.fdopen(os.open(utterance.pcm_path, flags, 0o600), "wb")  # type: ignore[arg-type]
            try:
                self._write_meta(utterance)
                self._trim()
            except BaseException:
                out.close()
                raise
        return Recording(self, utterance, out)

    def _next_id(self) -> int:
        """Under the lock: one more than the last id handed out and than every id on disk (the
        `seq` file may be lost or garbled)."""
        last = read_record(self.directory / "seq", _parse_count, log_dir=self.log_dir) or 0
        on_disk = [entry_id(n.partition(".")[0]) or 0 for n in self._names()]
        next_id = max([last, *on_disk]) + 1
        return next_id if next_id <= MAX_ID else self._renumber() + 1

    def _renumber(self) -> int:
        """Under the lock: number the entries kept 1, 2, ... oldest first (ids only shrink, so
        no rename lands on another entry); the highest id now, 0 when there are none."""
        self._trim()  # orphans and the entries beyond the size limit go first
        entries = sorted(self.entries(), key=lambda u: u.id)
        for new_id, utterance in enumerate(entries, 1):
            if utterance.id == new_id:
                continue
            old_id = utterance.id
            os.replace(self._pcm_path(old_id), self._pcm_path(new_id))
            utterance.id = new_id
            self._write_meta(utterance)
            unlink(self._meta_path(old_id))
        unlink(self.directory / "cursor.json")  # it names the old ids
        return len(entries)

    def _names(self) -> list[str]:
        try:
            return [n for n in os.listdir(self.directory) if QUARANTINE_MARK not in n]
        except (FileNotFoundError, NotADirectoryError):
            return []

    def _trim(self) -> None:
        """Under the lock: keep the newest `size` entries and remove everything else that is
        an entry's file: older entries, orphan JSON (no PCM) and orphan PCM (no valid JSON)."""
        keep = {u.id for u in self.entries()[: self.size]}
        for name in self._names():
            stem, dot, suffix = name.partition(".")
            number = entry_id(stem)
            if dot and suffix in ("json", "pcm") and number is not None and number not in keep:
                unlink(self.directory / name)

    def record(
        self,
        audio: Audio,
        *,
        text: str,
        voice: str | None = None,
        session: str | None = None,
        agent: str | None = None,
    ) -> Utterance:
        """Record a whole utterance at once."""
        with self.begin(
            text=text, voice=voice, sample_rate=audio.sample_rate, session=session, agent=agent
        ) as recording:
            recording.append(audio.mono_samples)
        return recording.utterance

    def _remove(self, utterance_id: int) -> None:
        unlink(self._meta_path(utterance_id))  # metadata first: a reader skips the entry
        unlink(self._pcm_path(utterance_id))

    def clear(self) -> int:
        """Forget every utterance; how many there were."""
        with self._lock():
            entries = self.entries()
            for utterance in entries:
                self._remove(utterance.id)
            unlink(self.directory / "cursor.json")
            return len(entries)

    # -- the skip-back walk --------------------------------------------------------------------
    def step_back(self) -> Utterance | None:
        """One skip_back press: the utterance to play now, or None if the history is empty."""
        with self._lock():
            entries = self.entries()
            if not entries:
                return None
            ids = [u.id for u in entries]
            cursor = read_record(
                self.directory / "cursor.json", _parse_cursor, log_dir=self.log_dir
            )
            target = entries[0]
            if cursor is not None and cursor[1] == ids[0] and cursor[0] in ids:
                index = ids.index(cursor[0])
                target = entries[min(index + 1, len(entries) - 1)]
            self._write_cursor(target.id, ids[0])
            return target

    def set_cursor(self, utterance_id: int) -> None:
        """Make `utterance_id` where the walk stands (a replay is a step of the walk)."""
        with self._lock():
            entries = self.entries()
            if entries:
                self._write_cursor(utterance_id, entries[0].id)

    def _write_cursor(self, utterance_id: int, newest_id: int) -> None:
        write_json(
            self.directory / "cursor.json",
            {"utterance_id": utterance_id, "newest_id": newest_id, "at": time.time()},
        )


def _parse_cursor(data: object) -> tuple[int, int]:
    """(utterance_id, newest_id) from the JSON of cursor.json; raises BadRecord."""
    if not isinstance(data, dict):
        raise BadRecord("cursor: not an object")
    return (
        check_field("utterance_id", data.get("utterance_id"), "int"),
        check_field("newest_id", data.get("newest_id"), "int"),
    )


__all__ = [
    "MAX_ID",
    "MAX_UTTERANCE_S",
    "entry_id",
    "parse_entry",
    "History",
    "Recording",
    "Utterance",
]
