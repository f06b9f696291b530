"""`vocal teardown`: stop what runs, then remove what vocal downloaded, cached and installed.

Removed: everything in the state directory except what is kept, i.e. the cache (downloaded and
converted weights, encoded voice references, engines' optimized models and G2P tables, MLX
conversions), the providers ladder's remembered rungs, the history, logs, the conch and control
files, pieces of messages; a `tts_cache_dir` set outside the state directory; and vocal's
entries in the agent's hook settings (user scope, and the project in the current directory).
Kept unless `all_`: the voices (`voices/`), the settings (`config.toml`) and the gates
(`gates.json`: mute and volume are settings too). With `all_` the whole state directory goes.
Never touched: a `chatterbox_dir` or `piper_voices_dir` the user pointed at, a voices
directory outside the state directory, and the Hugging Face hub cache (shared with other
programs; `vocal setup` says where it is).

Before removing anything, running vocal processes that hold state are stopped: every control
socket in the run directory is sent `stop`, a live conch holder gets SIGTERM, and both are
waited for briefly.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from vocal.statefiles import pid_alive, read_json

if TYPE_CHECKING:
    from vocal.config import Settings

#: Files and directories of the state directory kept without --all.
KEPT_NAMES = ("voices", "config.toml", "gates.json")
#: How long stopped processes get to exit (they stop within one audio block).
STOP_WAIT_S = 3.0


@dataclass
class TeardownReport:
    """What teardown stopped, removed and kept (or would, with `dry_run`)."""

    dry_run: bool
    stopped: list[dict[str, Any]] = field(default_factory=list)
    removed: list[str] = field(default_factory=list)
    kept: list[str] = field(default_factory=list)
    hooks: list[dict[str, Any]] = field(default_factory=list)

    def to_dict(self) -> dict[str, Any]:
        return {"dry_run": self.dry_run, "stopped": self.stopped, "removed": self.removed,
                "kept": self.kept, "hooks": self.hooks}  # fmt: skip


def plan(settings: Settings, *, all_: bool = False) -> tuple[list[Path], list[Path]]:
    """(paths to remove, paths kept) in and around the state directory."""
    home = settings.home
    remove: list[Path] = []
    keep: list[Path] = []
    if home.is_dir():
        if all_:
            remove.append(home)
        else:
            for entry in sorted(home.iterdir()):
                (keep if entry.name in KEPT_NAMES else remove).append(entry)
    if settings.tts_cache_dir is not None:
        cache = Path(settings.tts_cache_dir)
        if cache.exists() and not _inside(cache, home):
            remove.append(cache)
    return remove, keep


def _inside(path: Path, parent: Path) -> bool:
    try:
        path.resolve().relative_to(parent.resolve())
        return True
    except ValueError:
        return False


def running(settings: Settings) -> list[dict[str, Any]]:
    """vocal processes holding state: control sockets (speak, converse, ...) and the conch
    holder."""
    from vocal.control import endpoints

    found = [{"pid": e.pid, "how": "control", "kind": e.kind, "endpoint": e}
             for e in endpoints(settings.run_dir)]  # fmt: skip
    holder = read_json(settings.conch_dir / "holder.json")
    if isinstance(holder, dict) and isinstance(holder.get("pid"), int):
        pid = holder["pid"]
        if (
            pid != os.getpid()
            and pid_alive(pid, holder.get("pid_start"))
            and all(f["pid"] != pid for f in found)
        ):
            found.append({"pid": pid, "how": "conch", "kind": "holder", "endpoint": None})
    return found


def stop_running(settings: Settings, wait_s: float = STOP_WAIT_S) -> list[dict[str, Any]]:
    """Stop every running vocal process that holds state; wait up to `wait_s` for them."""
    from vocal.control import send_command

    found = running(settings)
    for proc in found:
        try:
            if proc["endpoint"] is not None:
                send_command(proc["endpoint"], "stop")
            else:
                os.kill(proc["pid"], signal.SIGTERM)
        except Exception:  # it may have exited meanwhile, or not answer: SIGTERM it
            with contextlib.suppress(OSError):
                os.kill(proc["pid"], signal.SIGTERM)
    deadline = time.monotonic() + wait_s
    while any(pid_alive(p["pid"]) for p in found) and time.monotonic() < deadline:
        time.sleep(0.05)
    return [{"pid": p["pid"], "how": p["how"], "kind": p["kind"],
             "exited": not pid_alive(p["pid"])} for p in found]  # fmt: skip


def installed_hook_files(project_dir: Path | None = None) -> list[Path]:
    """Settings files that hold vocal's hook entries (unreadable ones are left out)."""
    from vocal import hooks
    from vocal.errors import UsageError

    found = []
    for scope in hooks.SCOPES:
        with contextlib.suppress(UsageError):
            report = hooks.status(scope, project_dir=project_dir)
            if report.events:
                found.append(report.path)
    return found


def teardown(settings: Settings, *, all_: bool = False, dry_run: bool = False,
             project_dir: Path | None = None) -> TeardownReport:  # fmt: skip
    """Stop, then remove (see the module docstring); `dry_run` only says what it would do."""
    from vocal import hooks

    report = TeardownReport(dry_run)
    if dry_run:
        report.stopped = [{"pid": p["pid"], "how": p["how"], "kind": p["kind"]}
                          for p in running(settings)]  # fmt: skip
    else:
        report.stopped = stop_running(settings)
    remove, keep = plan(settings, all_=all_)
    report.kept = [str(p) for p in keep]
    from vocal.errors import UsageError

    for scope in hooks.SCOPES:
        try:
            found = hooks.status(scope, project_dir=project_dir)
            if found.events and not dry_run:
                found = hooks.remove(scope, project_dir=project_dir)
        except UsageError as exc:  # a settings file we cannot parse: left alone, said so
            report.hooks.append({"scope": scope, "error": str(exc)})
            continue
        if found.events:
            report.hooks.append(found.to_dict())
    for path in remove:
        report.removed.append(str(path))
        if dry_run:
            continue
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path, ignore_errors=True)
        else:
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
    return report


__all__ = [
    "KEPT_NAMES",
    "TeardownReport",
    "installed_hook_files",
    "plan",
    "running",
    "stop_running",
    "teardown",
]
