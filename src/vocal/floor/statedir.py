"""The state directory (`VOCAL_HOME`, default `~/.vocal`): vocal's, and private (issue 17).

It is made 0700 and marked as vocal's (`.vocal-state`) when vocal creates it, and only then: a
directory vocal did not make is never marked, whatever it holds, and teardown removes nothing
from it (issue 37). No component below it may be a symbolic link. Every directory vocal makes,
whichever command makes it, is made here, 0700 (issue 37: a first `speak` or `warmup` left
0755 state): `ensure_private_dir` for the directories sockets, locks and records live in,
`make_private_dirs` for caches and stores (it leaves existing directories, and links, alone).
Standard library only.
"""

from __future__ import annotations

import os
from pathlib import Path

from vocal.config import CONFIG_FILE_NAME, Settings
from vocal.errors import UsageError


def ensure_private_dir(path: Path) -> Path:
    """Create `path` (and missing parents) 0700 and return it: sockets and locks live there.

    Inside the state directory, the state directory is made and checked first
    (`ensure_state_dir`), and no component below it may be a symbolic link: vocal would
    otherwise chmod, and write history into, whatever the link points at (issue 17).
    """
    path = Path(path)
    home = state_home()
    inside = _within(path, home)
    if inside:
        ensure_state_dir(home)
        _refuse_links(path, home)  # before creating anything through one
    elif path.is_symlink():
        raise UsageError(f"{path} is a symbolic link; vocal keeps its state in real directories")
    _make_missing(path)
    os.chmod(path, 0o700)
    return path


def make_private_dirs(path: Path) -> Path:
    """Create `path` and its missing parents 0700, and return it: caches, stores, logs.

    Unlike `ensure_private_dir`, directories that exist are left as they are (a cache folder
    the user pointed vocal at may be shared on purpose) and links are followed (a cache moved
    to another disk). Below a state directory that does not exist yet, that is made first,
    0700 and marked (`create_state_dir`): a cache written before any state still makes the
    state directory vocal's.
    """
    path = Path(path)
    home = state_home()
    if _within(path, home) and not os.path.lexists(home):
        create_state_dir(home)
    _make_missing(path)
    return path


def _make_missing(path: Path) -> None:
    """mkdir each missing component of `path`, 0700 whatever the umask."""
    missing = []
    probe = Path(path)
    while not os.path.lexists(probe) and probe != probe.parent:
        missing.append(probe)
        probe = probe.parent
    for directory in reversed(missing):
        try:
            os.mkdir(directory, 0o700)
        except FileExistsError:  # another process made it meanwhile
            continue
        os.chmod(directory, 0o700)  # mkdir's mode is filtered by the umask


# -- what vocal wrote in a folder it shares (issue 37) -----------------------------------------
#: In a cache folder that may be shared with other programs (a `tts_cache_dir` outside the state
#: directory), the names of the files vocal wrote there, one a line: teardown removes those and
#: nothing else, whatever else looks like them.
MADE_MANIFEST_NAME = ".vocal-made"
#: Far more than the few cache files an engine writes; past it the manifest is not read.
MADE_MANIFEST_MAX_BYTES = 64 * 1024


def record_made(path: Path) -> None:
    """Note in its folder's manifest that vocal wrote `path` (one appended line: concurrent
    writers do not lose each other's names). A manifest that cannot be written costs only the
    teardown of that file, which is then left."""
    line = (Path(path).name + "\n").encode("utf-8", "surrogateescape")
    manifest = Path(path).parent / MADE_MANIFEST_NAME
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(manifest, flags, 0o600)
        try:
            os.write(fd, line)
        finally:
            os.close(fd)
    except OSError:
        pass


def made_in(directory: Path) -> set[str]:
    """The names `record_made` noted in `directory` (empty without a readable manifest)."""
    manifest = Path(directory) / MADE_MANIFEST_NAME
    try:
        fd = os.open(manifest, os.O_RDONLY | os.O_CLOEXEC | getattr(os, "O_NOFOLLOW", 0))
    except OSError:
        return set()
    with os.fdopen(fd, "rb") as f:
        data = f.read(MADE_MANIFEST_MAX_BYTES + 1)
    if len(data) > MADE_MANIFEST_MAX_BYTES:
        return set()
    names = data.decode("utf-8", "surrogateescape").splitlines()
    return {n for n in names if n and n not in (".", "..") and "/" not in n and "\0" not in n}


# -- the state directory: vocal's, and private (issue 17) ------------------------------------
#: Marks a directory as vocal's state directory: written when vocal creates it, and only then
#: (never for a directory found there). Teardown removes nothing from a directory without it.
STATE_MARKER_NAME = ".vocal-state"
STATE_MARKER_VERSION = 1
#: Every name vocal itself puts at the top of the state directory (Settings' layout, gates,
#: the provider ladder's rungs, Piper voices and sound fonts, the marker).
STATE_ENTRY_NAMES = frozenset(
    {
        CONFIG_FILE_NAME,
        "gates.json",
        "conch",
        "run",
        "history",
        "voices",
        "cache",
        "logs",
        "providers",
        "piper",
        "soundfonts",
        "echo",
        STATE_MARKER_NAME,
    }
)
#: Leftovers of vocal's own writes there: atomic writes' temporary files
#: (`.config.toml.k3j2.tmp`), `vocal doctor`'s probe file, and a malformed gates file set
#: aside (`vocal.floor.statefiles.quarantine`).
_STATE_TEMP_PREFIXES = (
    ".config.toml.",
    ".gates.json.",
    f"{STATE_MARKER_NAME}.",
    ".doctor-",
    "gates.json.bad-",
)
#: Mode bits that let other users change the state directory (group- or world-writable).
_OPEN_WRITE_BITS = 0o022


def state_home() -> Path:
    """The state directory as `load_settings` resolves it: `VOCAL_HOME`, else `~/.vocal`."""
    raw = os.environ.get("VOCAL_HOME")
    return Path(raw).expanduser() if raw else Settings().home


def is_state_entry(name: str) -> bool:
    """Whether `name`, at the top of a state directory, is something vocal puts there."""
    return name in STATE_ENTRY_NAMES or name.startswith(_STATE_TEMP_PREFIXES)


def foreign_entries(home: Path) -> list[str]:
    """The names in `home` that vocal did not put there, sorted ([] when it is missing)."""
    try:
        names = os.listdir(home)
    except (FileNotFoundError, NotADirectoryError):
        return []
    return sorted(name for name in names if not is_state_entry(name))


def has_state_marker(home: Path) -> bool:
    """Whether `home` carries vocal's marker (a regular file, not a link, with a version)."""
    import json

    marker = Path(home) / STATE_MARKER_NAME
    try:
        if marker.is_symlink() or not marker.is_file():
            return False
        data = json.loads(marker.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return False
    return isinstance(data, dict) and type(data.get("version")) is int


def write_state_marker(home: Path) -> None:
    """Mark `home` as vocal's state directory (atomically, 0600)."""
    import json
    import time

    from vocal.files.atomic import write_atomic

    data = {"version": STATE_MARKER_VERSION, "made_by": "vocal", "marked_at": int(time.time())}
    write_atomic(Path(home) / STATE_MARKER_NAME, json.dumps(data).encode() + b"\n", mode=0o600)


def state_dir_problem(home: Path) -> str | None:
    """Why `home` is not safe to keep vocal's state in (None when it is, or is missing):
    not a directory, owned by another user, or writable by the group or everyone."""
    try:
        info = os.stat(home)
    except FileNotFoundError:
        return None
    import stat

    if not stat.S_ISDIR(info.st_mode):
        return f"the state directory {home} is not a directory"
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        return f"the state directory {home} belongs to another user (uid {info.st_uid})"
    if info.st_mode & _OPEN_WRITE_BITS:
        mode = oct(info.st_mode & 0o777)[2:]
        return f"the state directory {home} is writable by other users (mode {mode})"
    return None


def state_dir_fix(home: Path) -> str:
    """What to do about a `state_dir_problem`."""
    return f"run `chmod 700 {home}` if it is yours, or set VOCAL_HOME to a directory you own"


def create_state_dir(home: Path) -> bool:
    """Make `home` 0700 and mark it, if it does not exist; True if this call made it."""
    home = Path(home)
    if os.path.lexists(home):
        return False
    _make_missing(home.parent)
    try:
        os.mkdir(home, 0o700)
    except FileExistsError:  # another vocal made it meanwhile
        return False
    os.chmod(home, 0o700)  # mkdir's mode is filtered by the umask
    write_state_marker(home)
    # Made here so it is private whoever writes the first log (hooks, warm-up, quarantine).
    try:
        os.mkdir(home / "logs", 0o700)
    except FileExistsError:  # a concurrent vocal's first log
        pass
    return True


def ensure_state_dir(home: Path) -> Path:
    """The state directory, created 0700 and marked, or checked when it exists.

    An existing directory owned by another user or writable by others is a `UsageError`:
    anyone who can write there can swap vocal's records and sockets. An existing directory
    is never marked: the marker is the proof that vocal made the directory, and teardown
    deletes nothing without it, however much the entries look like vocal's (issue 37: a
    folder of the user's holding `cache/` and `history/` of its own was adopted, then torn
    down). A marked one has its history and logs made 0700.
    """
    home = Path(home)
    if create_state_dir(home):
        return home
    problem = state_dir_problem(home)
    if problem:
        raise UsageError(problem, hint=state_dir_fix(home))
    # A stat, not a parse: this runs on every conch and control call (teardown parses it).
    marked = os.path.isfile(home / STATE_MARKER_NAME)
    if marked:
        # What was said (history, logs) is kept from other users even in an older vocal's
        # 0755 directory. The directory itself keeps the mode it was given: someone may have
        # opened it on purpose (a shared home whose run/ stays 0700).
        _tighten(home / "history")
        _tighten(home / "logs")
    return home


def _tighten(directory: Path) -> None:
    """Make a directory of vocal's 0700 if others may enter it (an older vocal's 0755); a
    link is left alone (`ensure_private_dir` refuses it where vocal writes)."""
    try:
        info = os.lstat(directory)
    except FileNotFoundError:
        return
    import stat

    if stat.S_ISDIR(info.st_mode) and info.st_mode & 0o077:
        os.chmod(directory, 0o700)


def _within(path: Path, parent: Path) -> bool:
    """Whether `path` is `parent` or below it, by their absolute names (no links resolved)."""
    path_abs, parent_abs = os.path.abspath(path), os.path.abspath(parent)
    return path_abs == parent_abs or path_abs.startswith(parent_abs.rstrip(os.sep) + os.sep)


def _refuse_links(path: Path, home: Path) -> None:
    """A UsageError when a component of `path` below `home` is a symbolic link."""
    relative = Path(os.path.abspath(path)).relative_to(os.path.abspath(home))
    current = Path(os.path.abspath(home))
    for part in relative.parts:
        current = current / part
        if current.is_symlink():
            raise UsageError(
                f"{current} is a symbolic link; vocal keeps its state in real directories",
                hint=f"remove the link (`rm {current}`) and run the command again",
            )


__all__ = [
    "MADE_MANIFEST_NAME",
    "STATE_ENTRY_NAMES",
    "STATE_MARKER_NAME",
    "create_state_dir",
    "ensure_private_dir",
    "ensure_state_dir",
    "foreign_entries",
    "has_state_marker",
    "is_state_entry",
    "make_private_dirs",
    "made_in",
    "state_dir_fix",
    "state_dir_problem",
    "record_made",
    "state_home",
    "write_state_marker",
]
