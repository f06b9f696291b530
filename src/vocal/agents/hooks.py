"""vocal in an agent's hooks (issue 9): install, remove and inspect our entries in the agent's
settings file.

Claude Code reads hooks from `~/.claude/settings.json` (scope "user") or `.claude/settings.json`
in a project (scope "project"): `{"hooks": {EVENT: [{"matcher": ..., "hooks": [{"type":
"command", "command": ..., "timeout": S}]}]}}`; a command hook gets the event as JSON on stdin
(`session_id`, `transcript_path`, `hook_event_name`, and on `Stop` the reply itself as
`last_assistant_message` in recent versions). Two events map onto what vocal needs:

- `Stop` (the agent finished its reply, which is on screen) runs `vocal hooks reply`, which
  hands the reply to a detached `vocal speak` (the adapter: vocal.agents.reply).
- `SessionStart` runs `vocal warmup --detach`: every on-disk cache is primed in the background
  so the first reply pays no lazy set-up.

Install writes our entries beside whatever is there, keeps a backup of the original bytes
(`settings.json.vocal-backup`) and writes nothing when our entries are already in place; other
entries keep their text when the file is laid out as JSON with a consistent indent (we write
it back with the indent we found). Remove restores the backup byte for byte when the file is
exactly what install left; if it was edited since, only our entries are taken out.

A settings file that is a symbolic link is written through, to its target (dotfile managers).
A link whose target is missing (issue 37) is left exactly as it is: install refuses it (exit 2:
creating a file wherever it points, in a repository that moved, is not ours to do), and remove
has nothing to remove there and says so, keeping the backup beside it, which may be the only
copy of the user's settings.

Standard library only.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypedDict, TypeGuard

from vocal.errors import UsageError, VocalError
from vocal.files.atomic import write_atomic
from vocal.files.bounded import BoundedReadError, loads_json, read_regular

AGENTS = ("claude-code",)
SCOPES = ("user", "project")
BACKUP_SUFFIX = ".vocal-backup"
#: Our commands end with these; an entry whose command does is ours.
REPLY_ARGS = "hooks reply"
WARM_ARGS = "warmup --detach"
#: Seconds Claude Code gives each hook: both return within a process start (they detach).
HOOK_TIMEOUT_S = 30
#: A settings file is a few kB: past this it is refused, not read (issue 37).
MAX_SETTINGS_BYTES = 4 << 20


def vocal_command() -> str:
    """How a hook runs this vocal: the `vocal` script on PATH if it is this installation's,
    else this interpreter with `-m vocal` (a virtualenv not on the agent's PATH)."""
    script = Path(sys.executable).parent / "vocal"
    if script.is_file() and os.access(script, os.X_OK):
        return shlex.quote(str(script))
    found = shutil.which("vocal")
    if found and Path(found).resolve().parent == Path(sys.executable).resolve().parent:
        return shlex.quote(found)
    return f"{shlex.quote(sys.executable)} -m vocal"


def settings_path(scope: str, project_dir: Path | None = None) -> Path:
    """Claude Code's settings file for `scope`."""
    if scope == "user":
        return Path.home() / ".claude" / "settings.json"
    if scope == "project":
        return (project_dir or Path.cwd()) / ".claude" / "settings.json"
    raise UsageError(f"scope must be one of {', '.join(SCOPES)}, got {scope!r}")


def check_agent(agent: str) -> str:
    if agent not in AGENTS:
        raise UsageError(f"unknown agent {agent!r}", hint=f"supported: {', '.join(AGENTS)}")
    return agent


class CommandHook(TypedDict):
    """One hook as Claude Code's settings hold it (the keys vocal writes)."""

    type: str
    command: str
    timeout: int


class HookGroup(TypedDict):
    """A matcher group of an event's hooks (vocal's have no matcher: every occurrence)."""

    hooks: list[CommandHook]


class SettingsFile(TypedDict, total=False):
    """An agent's settings file: its `hooks` object (event -> matcher groups) is all vocal
    reads or changes; every other key is written back as it was."""

    hooks: dict[str, object]


class HookReportDict(TypedDict):
    """`HookReport.to_dict`: what `vocal hooks install|remove|status --json` prints."""

    agent: str
    scope: str
    path: str
    action: str
    events: list[str]
    backup: str | None
    command: str | None
    note: str | None


def our_entries(command: str) -> dict[str, list[HookGroup]]:
    """The matcher groups vocal adds, per event."""

    def group(args: str) -> HookGroup:
        hook: CommandHook = {
            "type": "command",
            "command": f"{command} {args}",
            "timeout": HOOK_TIMEOUT_S,
        }
        return {"hooks": [hook]}

    return {"SessionStart": [group(WARM_ARGS)], "Stop": [group(REPLY_ARGS)]}


def is_ours(hook: object) -> bool:
    """A hook (the inner {"type": "command", ...}) that vocal installed."""
    if not isinstance(hook, dict) or not isinstance(hook.get("command"), str):
        return False
    command = hook["command"].strip()
    return "vocal" in command and command.endswith((f" {REPLY_ARGS}", f" {WARM_ARGS}"))


# -- reading and writing settings files with their layout --------------------------------------
@dataclass
class Layout:
    """How a JSON file was laid out, so it can be written back the same way."""

    indent: str | int | None = 2
    trailing_newline: bool = True

    @classmethod
    def of(cls, text: str) -> Layout:
        match = re.search(r"\n([ \t]+)\S", text)
        if match is None:
            indent: str | int | None = None if "\n" not in text.strip() else 2
        else:
            white = match.group(1)
            indent = white if "\t" in white else len(white)
        return cls(indent, text.endswith("\n"))

    def dump(self, data: object) -> bytes:
        if self.indent is None:
            text = json.dumps(data, ensure_ascii=False)
        else:
            text = json.dumps(data, ensure_ascii=False, indent=self.indent)
        return (text + ("\n" if self.trailing_newline else "")).encode("utf-8")


def _is_settings(data: object) -> TypeGuard[SettingsFile]:
    return isinstance(data, dict) and isinstance(data.get("hooks", {}), dict)


def _parse(path: Path, raw: bytes) -> SettingsFile:
    try:
        data = loads_json(raw.decode("utf-8-sig")) if raw.strip() else {}
    except (ValueError, UnicodeDecodeError) as exc:  # BoundedReadError: nested too deep
        raise UsageError(
            f"{path} is not valid JSON ({exc})", hint="fix it, then run this again"
        ) from None
    if not _is_settings(data):
        raise UsageError(f"{path} does not hold a settings object with a 'hooks' object")
    return data


def _with_ours(raw: bytes | None, path: Path, command: str) -> bytes:
    """The settings file `raw` (None: no file) with our entries added."""
    text = raw.decode("utf-8-sig") if raw else ""
    data = _parse(path, raw or b"")
    layout = Layout.of(text) if text.strip() else Layout()
    hooks = data.setdefault("hooks", {})
    for event, groups in our_entries(command).items():
        existing = hooks.setdefault(event, [])
        if not isinstance(existing, list):
            raise UsageError(f"{path}: hooks.{event} is not a list")
        existing.extend(groups)
    return layout.dump(data)


def _without_ours(raw: bytes, path: Path) -> tuple[bytes, int]:
    """The settings file with our hooks taken out (and groups or events they leave empty)."""
    text = raw.decode("utf-8-sig")
    data = _parse(path, raw)
    layout = Layout.of(text)
    hooks = data.get("hooks", {})
    removed = 0
    for event in list(hooks):
        groups = hooks[event]
        if not isinstance(groups, list):
            continue
        kept_groups = []
        for group in groups:
            inner = group.get("hooks") if isinstance(group, dict) else None
            if isinstance(inner, list) and any(is_ours(h) for h in inner):
                removed += sum(1 for h in inner if is_ours(h))
                rest = [h for h in inner if not is_ours(h)]
                if rest:
                    kept_groups.append({**group, "hooks": rest})
                continue
            kept_groups.append(group)
        if kept_groups:
            hooks[event] = kept_groups
        else:
            del hooks[event]
    if not hooks and "hooks" in data:
        del data["hooks"]
    return layout.dump(data), removed


def dangling_link(path: Path) -> str | None:
    """Where `path` points when it is a symbolic link whose target is missing, else None."""
    if path.is_symlink() and not path.exists():
        return os.readlink(path)
    return None


def _read(path: Path) -> bytes | None:
    try:  # a FIFO or /dev/zero linked there is refused, not read forever (issue 37)
        return read_regular(path, max_bytes=MAX_SETTINGS_BYTES, what="settings file")
    except FileNotFoundError:
        return None
    except BoundedReadError as exc:
        raise UsageError(str(exc)) from None
    except OSError as exc:
        raise UsageError(f"cannot read {path}: {exc.strerror or exc}") from None


def _write(path: Path, data: bytes) -> None:
    """Replace `path` atomically, keeping its permissions, through a symlink (dotfile managers
    link settings.json into a repository: vocal.files.atomic)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        write_atomic(path, data)
    except OSError as exc:  # a full disk, a read-only folder: one line, and nothing changed
        raise VocalError(
            f"{path} was not written: {exc.strerror or exc}",
            hint="the file that was there is as it was",
        ) from None


def _our_hooks(raw: bytes | None, path: Path) -> Iterator[tuple[str, str]]:
    """(event, command) for each of our hooks in the settings file `raw`."""
    if raw is None:
        return
    for event, groups in _parse(path, raw).get("hooks", {}).items():
        for group in groups if isinstance(groups, list) else []:
            inner = group.get("hooks") if isinstance(group, dict) else None
            for hook in inner if isinstance(inner, list) else []:
                if is_ours(hook):
                    yield event, hook["command"]


def _installed(raw: bytes | None, path: Path) -> list[str]:
    """Events that hold one of our hooks."""
    return sorted({event for event, _command in _our_hooks(raw, path)})


def _our_command(raw: bytes, path: Path) -> str | None:
    """The vocal command prefix our installed hooks use."""
    for _event, command in _our_hooks(raw, path):
        command = command.strip()
        for args in (REPLY_ARGS, WARM_ARGS):
            if command.endswith(" " + args):
                return command[: -len(args) - 1]
    return None


def _current(
    scope: str, agent: str, project_dir: Path | None
) -> tuple[Path, bytes | None, list[str]]:
    """The settings file for `scope`, its bytes (None: no file) and the events we hook."""
    check_agent(agent)
    path = settings_path(scope, project_dir)
    raw = _read(path)
    return path, raw, _installed(raw, path)


# -- the three verbs -----------------------------------------------------------------------------
@dataclass
class HookReport:
    """What install, remove or status found and did to one settings file."""

    agent: str
    scope: str
    path: Path
    action: str  # installed, unchanged, removed, restored, absent, status
    events: list[str] = field(default_factory=list)
    backup: Path | None = None
    command: str | None = None
    #: Something the user should know about the file (a link to a missing target).
    note: str | None = None

    def to_dict(self) -> HookReportDict:
        return {
            "agent": self.agent,
            "scope": self.scope,
            "path": str(self.path),
            "action": self.action,
            "events": self.events,
            "backup": str(self.backup) if self.backup else None,
            "command": self.command,
            "note": self.note,
        }


def backup_path(path: Path) -> Path:
    return path.with_name(path.name + BACKUP_SUFFIX)


def install(
    scope: str = "user",
    *,
    agent: str = "claude-code",
    project_dir: Path | None = None,
    command: str | None = None,
) -> HookReport:
    """Add our hook entries to the agent's settings (idempotent; the original is backed up)."""
    path, raw, events = _current(scope, agent, project_dir)
    target = dangling_link(path)
    if target is not None:
        raise UsageError(
            f"{path} is a symbolic link to {target}, which does not exist",
            hint="create the file it points to, or remove the link, then run this again",
        )
    command = command or vocal_command()
    if events:
        return HookReport(agent, scope, path, "unchanged", events, None, command)
    new = _with_ours(raw, path, command)
    backup = backup_path(path)
    if raw is not None:
        _write(backup, raw)
    else:
        backup.unlink(missing_ok=True)  # none: remove deletes the file it created
    _write(path, new)
    kept = backup if raw is not None else None
    return HookReport(agent, scope, path, "installed", _installed(new, path), kept, command)


def remove(
    scope: str = "user", *, agent: str = "claude-code", project_dir: Path | None = None
) -> HookReport:
    """Take our entries out: the original bytes come back when nothing else changed since."""
    path, raw, events = _current(scope, agent, project_dir)
    backup = backup_path(path)
    target = dangling_link(path)
    if target is not None:  # nothing of ours there; the link and any backup stay as they are
        note = f"{path} is a symbolic link to {target}, which does not exist: left as it is"
        kept = backup if backup.exists() else None
        return HookReport(agent, scope, path, "absent", backup=kept, note=note)
    if raw is None or not events:
        backup.unlink(missing_ok=True)
        return HookReport(agent, scope, path, "absent")
    original = _read(backup)
    command = _our_command(raw, path)
    # Unchanged since install: what install would have made of the backup (or of no file).
    if command is not None and raw == _with_ours(original, path, command):
        if original is None:
            # The file install made: through a link, its target (the link stays, as it was).
            Path(os.path.realpath(path)).unlink()
            with contextlib.suppress(OSError):
                path.parent.rmdir()  # the .claude directory, if we made it and it is empty
        else:
            _write(path, original)
        backup.unlink(missing_ok=True)
        return HookReport(agent, scope, path, "restored", events, None, command)
    stripped, _count = _without_ours(raw, path)
    _write(path, stripped)
    backup.unlink(missing_ok=True)
    return HookReport(agent, scope, path, "removed", events, None, command)


def status(
    scope: str = "user", *, agent: str = "claude-code", project_dir: Path | None = None
) -> HookReport:
    """Whether our entries are in the agent's settings for `scope`."""
    path, raw, events = _current(scope, agent, project_dir)
    backup = backup_path(path)
    action = "installed" if events else "absent"
    kept = backup if backup.exists() else None
    command = _our_command(raw, path) if raw and events else None
    return HookReport(agent, scope, path, action, events, kept, command)


__all__ = [
    "AGENTS",
    "SCOPES",
    "HookReport",
    "backup_path",
    "dangling_link",
    "install",
    "is_ours",
    "our_entries",
    "remove",
    "settings_path",
    "status",
    "vocal_command",
]
