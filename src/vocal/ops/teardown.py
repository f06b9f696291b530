"""`vocal teardown`: stop what runs, then remove what vocal downloaded, cached and installed.

vocal deletes only what it can prove it created (issues 17 and 37). The state directory must
carry vocal's marker (`.vocal-state`), which vocal writes when it creates the directory and at
no other time: an unmarked directory that holds anything is refused before anything is stopped
or listed, however much its entries look like vocal's (a `VOCAL_HOME` pointed at a folder of the
user's holding a `cache/` or `history/` of its own, `/`, the home directory). Inside a marked
directory only vocal's entries are removed; a file of the user's that sits there is left, and
said so.

Removed: vocal's entries in the state directory except what is kept, i.e. the cache
(downloaded and converted weights, encoded voice references, engines' optimized models and G2P
tables, MLX conversions), the providers ladder's remembered rungs, the history, logs, the conch
and control files, pieces of messages; in a `tts_cache_dir` set elsewhere (it may be a shared
folder), only the files vocal's engines write there; and vocal's entries in the agent's hook
settings (user scope, and the project in the current directory). Kept unless `all_`: the
voices (`voices/`), the settings (`config.toml`), the gates (`gates.json`: mute and volume are
settings too), Piper voices and sound fonts the user put in `piper/` and `soundfonts/`, and the
marker. With `all_` every vocal entry goes, and the directory too once it is empty. Never
touched: a `chatterbox_dir` or `piper_voices_dir` the user pointed at, a voices directory
outside the state directory, and the Hugging Face hub cache (shared with other programs).

Before removing anything, running vocal processes that hold state are stopped: every control
socket in the run directory is sent `stop`, and a conch holder gets SIGTERM, but only when the
process is verifiably the one recorded (same host, and the start time recorded as `pid_start`
matches the live process's): a pid in a stale or forged record may be anyone's by now.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypedDict

from vocal.errors import UsageError
from vocal.floor.statedir import (
    MADE_MANIFEST_NAME,
    STATE_MARKER_NAME,
    foreign_entries,
    has_state_marker,
    is_state_entry,
    made_in,
)
from vocal.floor.statefiles import HOST, pid_alive, process_start, read_json

if TYPE_CHECKING:
    from vocal.config import Settings
    from vocal.floor.control import Endpoint

#: vocal's entries of the state directory kept without --all (settings and the user's own).
KEPT_NAMES = ("voices", "config.toml", "gates.json", "piper", "soundfonts", STATE_MARKER_NAME)
#: How long stopped processes get to exit (they stop within one audio block).
STOP_WAIT_S = 3.0
#: What vocal's engines write into a tts_cache_dir: a subdirectory per engine holding G2P
#: tables (vocal.tts.hibari) and optimized ORT models (vocal.tts._onnx), each noted in the
#: subdirectory's manifest when written; only names of these shapes are taken from it.
TTS_CACHE_SUBDIRS = ("hibari", "piper")
_TTS_CACHE_FILE = re.compile(
    r"\A(g2p-(us|gb)-[0-9a-f]+\.sqlite|.+-ort[\w.+-]*\.ort|\..+\.(tmp|ort))\Z"
)
#: Shown when teardown refuses a directory.
_HOME_HINT = "set VOCAL_HOME to vocal's own state directory (default ~/.vocal)"


class ProcessEntry(TypedDict):
    """A vocal process teardown stopped or left running, as `--json` shows it."""

    pid: int
    #: "control" (asked on its control socket) or "conch" (the floor's holder, signalled).
    how: str
    kind: str | None


class ProcessOutcome(ProcessEntry, total=False):
    """A process after a real (not dry) run: whether it exited, or why it was not stopped."""

    exited: bool
    why: str


class RunningProcess(ProcessEntry):
    """A vocal process holding state, found by `running`."""

    endpoint: Endpoint | None
    #: May be signalled: verifiably the process its record names (see `verified`).
    verified: bool


class TeardownDict(TypedDict):
    """`TeardownReport.to_dict`: what `vocal teardown --json` prints."""

    dry_run: bool
    stopped: list[ProcessOutcome]
    removed: list[str]
    kept: list[str]
    hooks: list[Mapping[str, object]]
    left: list[str]
    not_stopped: list[ProcessOutcome]


@dataclass
class TeardownReport:
    """What teardown stopped, removed and kept (or would, with `dry_run`)."""

    dry_run: bool
    stopped: list[ProcessOutcome] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    #: Per settings file: vocal.agents.hooks' report, or {"scope", "error"} when unreadable.
    hooks: list[Mapping[str, object]] = field(default_factory=list)
    #: Files of someone else's in the state directory, left where they are.
    left: list[str] = field(default_factory=list)
    #: Recorded processes not signalled because they could not be verified as vocal's.
    not_stopped: list[ProcessOutcome] = field(default_factory=list)

    def to_dict(self) -> TeardownDict:
        return {
            "dry_run": self.dry_run,
            "stopped": self.stopped,
            "removed": self.removed,
            "kept": self.kept,
            "hooks": self.hooks,
            "left": self.left,
            "not_stopped": self.not_stopped,
        }


# -- whose directory ---------------------------------------------------------------------------
def check_state_dir(home: Path) -> None:
    """Raise `UsageError` (exit 2) unless `home` is vocal's state directory, or holds nothing.

    Vocal's: it carries the marker vocal wrote when it made it. An unmarked directory holding
    anything is refused, naming what it holds, and never marked: its entries' names prove
    nothing (issue 37). `/`, the user's home directory and its ancestors are refused whatever
    they hold.
    """
    if not os.path.lexists(home):
        return
    if _protected(home):
        raise UsageError(
            f"refusing to tear down {home}: it is not vocal's state directory", hint=_HOME_HINT
        )
    if not home.is_dir():
        raise UsageError(f"the state directory {home} is not a directory", hint=_HOME_HINT)
    if hasattr(os, "getuid") and home.stat().st_uid != os.getuid():
        raise UsageError(f"the state directory {home} belongs to another user", hint=_HOME_HINT)
    if has_state_marker(home):
        return
    held = sorted(os.listdir(home))
    if held:
        shown = ", ".join(held[:8]) + (f" and {len(held) - 8} more" if len(held) > 8 else "")
        raise UsageError(
            f"refusing to tear down {home}: it has no {STATE_MARKER_NAME} marker, so vocal did "
            f"not make it, and it holds files vocal did not make ({shown})",
            hint=f"{_HOME_HINT}; teardown removes only what vocal created",
        )


def check_home(settings: Settings) -> None:
    """`check_state_dir` on `settings.home`."""
    check_state_dir(settings.home)


def _protected(home: Path) -> bool:
    """`/`, the user's home directory, or an ancestor of it: never a state directory."""
    resolved = home.resolve()
    user_home = Path.home().resolve()
    return (
        resolved == Path(resolved.anchor) or resolved == user_home or resolved in user_home.parents
    )


# -- what goes -------------------------------------------------------------------------------------
def plan(settings: Settings, *, all_: bool = False) -> tuple[list[Path], list[Path]]:
    """(paths to remove, paths kept) in and around the state directory.

    Only vocal's entries are listed: `left_behind` names the others. Call `check_home`
    first: this does not judge whose directory it is.
    """
    home = settings.home
    remove: list[Path] = []
    keep: list[Path] = []
    if home.is_dir():
        for entry in sorted(home.iterdir()):
            if not is_state_entry(entry.name):
                continue
            if entry.name == STATE_MARKER_NAME and not all_:
                continue  # kept, and not news: it only says the directory is vocal's
            (keep if entry.name in KEPT_NAMES and not all_ else remove).append(entry)
    # The marker goes last: an interrupted --all leaves a directory that is still vocal's.
    remove.sort(key=lambda path: path.name == STATE_MARKER_NAME)
    remove.extend(tts_cache_files(settings))
    return remove, keep


def left_behind(settings: Settings) -> list[Path]:
    """Entries of the state directory that are not vocal's: never removed."""
    skip = _tts_cache_top(settings)
    return [settings.home / n for n in foreign_entries(settings.home) if n != skip]


def tts_cache_files(settings: Settings) -> list[Path]:
    """The files vocal's engines wrote in a `tts_cache_dir` outside vocal's cache: only those
    (the folder may be shared with other programs), as each engine folder's manifest names
    them (`vocal.floor.statedir.record_made`), never by their names alone (issue 37)."""
    if settings.tts_cache_dir is None:
        return []
    cache = Path(settings.tts_cache_dir)
    if _inside_state_entry(cache, settings.home):
        return []  # removed with the state directory's cache/
    found: list[Path] = []
    for sub in TTS_CACHE_SUBDIRS:
        directory = cache / sub
        if directory.is_symlink() or not directory.is_dir():
            continue
        made = made_in(directory)
        found.extend(
            directory / name
            for name in sorted(made)
            if _TTS_CACHE_FILE.match(name)
            and (directory / name).is_file()
            and not (directory / name).is_symlink()
        )
        if made:
            found.append(directory / MADE_MANIFEST_NAME)
    return found


def _inside_state_entry(path: Path, home: Path) -> bool:
    """Whether `path` lies inside one of vocal's entries of `home` (e.g. <home>/cache/tts)."""
    try:
        relative = path.resolve().relative_to(home.resolve())
    except ValueError:
        return False
    return bool(relative.parts) and is_state_entry(relative.parts[0])


def _tts_cache_top(settings: Settings) -> str | None:
    """The top-level name in the state directory of a tts_cache_dir set inside it elsewhere
    than under vocal's entries (`<home>/tts`): vocal made it, so it is not foreign."""
    if settings.tts_cache_dir is None:
        return None
    try:
        relative = Path(settings.tts_cache_dir).resolve().relative_to(settings.home.resolve())
    except ValueError:
        return None
    return relative.parts[0] if relative.parts else None


def _remove(path: Path) -> None:
    """Remove `path`: a directory with what is in it, a file or a link (never followed)."""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            path.unlink()


def _prune(directories: list[Path]) -> list[Path]:
    """Remove each directory that is empty now (deepest first); returns the ones removed."""
    removed = []
    for directory in directories:
        try:
            directory.rmdir()
        except OSError:  # not empty (someone else's files), missing, or in use
            continue
        removed.append(directory)
    return removed


# -- what runs ------------------------------------------------------------------------------------
def verified(record: Mapping[str, object]) -> bool:
    """Whether the process a state record names is verifiably still that process: same host,
    and its recorded start time matches the live one (without `pid_start` it cannot be told)."""
    pid, start = record.get("pid"), record.get("pid_start")
    if type(pid) is not int or type(start) is not int or pid <= 0:
        return False
    if record.get("host", HOST) != HOST:
        return False
    return process_start(pid) == start and pid_alive(pid, start)


def running(settings: Settings) -> list[RunningProcess]:
    """vocal processes holding state: control sockets (speak, converse, ...) and the conch
    holder. `verified` says whether each may be signalled (see `verified`)."""
    from vocal.floor.control import endpoints

    found: list[RunningProcess] = [
        {
            "pid": e.pid,
            "how": "control",
            "kind": e.kind,
            "endpoint": e,
            "verified": verified({"pid": e.pid, "pid_start": e.pid_start}),
        }
        for e in endpoints(settings.run_dir)
    ]
    holder = read_json(settings.conch_dir / "holder.json")
    if isinstance(holder, dict) and type(holder.get("pid")) is int:
        pid = holder["pid"]
        if pid != os.getpid() and verified(holder) and all(f["pid"] != pid for f in found):
            found.append(
                {"pid": pid, "how": "conch", "kind": "holder", "endpoint": None, "verified": True}
            )
    return found


def _stop_one(proc: RunningProcess) -> bool:
    """Ask one process to stop; True if it was asked (or signalled)."""
    from vocal.floor.control import send_command

    if proc["endpoint"] is not None:
        try:
            send_command(proc["endpoint"], "stop")
            return True
        except Exception:  # gone meanwhile, or not answering: a signal only if it is ours
            pass
    if not proc["verified"]:
        return False
    with contextlib.suppress(OSError):
        os.kill(proc["pid"], signal.SIGTERM)
    return True


def stop_running(
    settings: Settings, wait_s: float = STOP_WAIT_S
) -> tuple[list[ProcessOutcome], list[ProcessOutcome]]:
    """Stop every running vocal process that holds state; wait up to `wait_s` for them.

    Returns (stopped, not stopped): a process that did not answer its control socket and
    cannot be verified as the recorded one is never signalled.
    """
    asked: list[RunningProcess] = []
    refused: list[RunningProcess] = []
    for proc in running(settings):
        (asked if _stop_one(proc) else refused).append(proc)
    deadline = time.monotonic() + wait_s
    while any(pid_alive(p["pid"]) for p in asked) and time.monotonic() < deadline:
        time.sleep(0.05)
    stopped: list[ProcessOutcome] = [
        {"pid": p["pid"], "how": p["how"], "kind": p["kind"], "exited": not pid_alive(p["pid"])}
        for p in asked
    ]
    not_stopped: list[ProcessOutcome] = [
        {
            "pid": p["pid"],
            "how": p["how"],
            "kind": p["kind"],
            "why": "not verified as the recorded vocal process",
        }
        for p in refused
    ]
    return stopped, not_stopped


def installed_hook_files(project_dir: Path | None = None) -> list[Path]:
    """Settings files that hold vocal's hook entries (unreadable ones are left out)."""
    from vocal.agents import hooks

    found = []
    for scope in hooks.SCOPES:
        with contextlib.suppress(UsageError):
            report = hooks.status(scope, project_dir=project_dir)
            if report.events:
                found.append(report.path)
    return found


def _remove_hooks(report: TeardownReport, project_dir: Path | None) -> None:
    from vocal.agents import hooks

    for scope in hooks.SCOPES:
        try:
            found = hooks.status(scope, project_dir=project_dir)
            if found.events and not report.dry_run:
                found = hooks.remove(scope, project_dir=project_dir)
        except UsageError as exc:  # a settings file we cannot parse: left alone, said so
            report.hooks.append({"scope": scope, "error": str(exc)})
            continue
        if found.events:
            report.hooks.append(found.to_dict())


def teardown(
    settings: Settings,
    *,
    all_: bool = False,
    dry_run: bool = False,
    project_dir: Path | None = None,
) -> TeardownReport:
    """Stop, then remove (see the module docstring); `dry_run` only says what it would do.

    Raises `UsageError` before doing anything when the state directory is not vocal's.
    """
    home = settings.home
    check_home(settings)
    marked = has_state_marker(home)  # before the marker goes with --all
    report = TeardownReport(dry_run)
    if dry_run:
        for proc in running(settings):
            entry: ProcessOutcome = {"pid": proc["pid"], "how": proc["how"], "kind": proc["kind"]}
            asked = proc["verified"] or proc["endpoint"] is not None
            (report.stopped if asked else report.not_stopped).append(entry)
    else:
        report.stopped, report.not_stopped = stop_running(settings)
    remove, keep = plan(settings, all_=all_)
    report.kept = [str(p) for p in keep]
    report.left = [str(p) for p in left_behind(settings)]
    _remove_hooks(report, project_dir)
    for path in remove:
        report.removed.append(str(path))
        if not dry_run:
            _remove(path)
    if not dry_run:
        cache = Path(settings.tts_cache_dir) if settings.tts_cache_dir else None
        emptied = [cache / sub for sub in TTS_CACHE_SUBDIRS] + [cache] if cache else []
        if all_ and marked:  # an empty folder of the user's stays
            emptied.append(home)
        report.removed.extend(str(p) for p in _prune(emptied))
    return report


__all__ = [
    "KEPT_NAMES",
    "TeardownReport",
    "check_home",
    "check_state_dir",
    "installed_hook_files",
    "left_behind",
    "plan",
    "running",
    "stop_running",
    "teardown",
    "tts_cache_files",
    "verified",
]
