"""Replace a file whole, or not at all: the one atomic writer every vocal output goes through.

A temporary file in the same directory, then `os.replace`: a reader (or a process killed
mid-write) never sees half a file, and a failed write leaves the old file as it was. Two things
the naive pattern gets wrong, and this does not (issue 17):

- **A symlink is written through, not replaced.** Dotfile managers link `~/.claude/settings.json`
  or `config.toml` into a repository; renaming over the link would turn it into a plain file and
  silently fork the user's configuration. The temporary file goes beside the link's target.
- **Permissions are kept.** An existing file keeps its mode; a new one gets `mode` (or the
  ordinary 0666 less the umask, as `open` would give).

Standard library only: config and hooks are on the fast-start path.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path


def umask() -> int:
    """The process's umask (read by setting it and back: there is no getter)."""
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: str | os.PathLike, data: bytes, *, mode: int | None = None) -> Path:
    """Write `data` to `path` atomically, through a symlink to its target; returns the path
    written (the target). Raises OSError as `open` would (missing directory, permission)."""
    target = Path(os.path.realpath(path))
    try:
        keep = target.stat().st_mode & 0o7777
    except FileNotFoundError:
        keep = None
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(data)
        if keep is not None:
            os.chmod(tmp, keep)
        else:
            os.chmod(tmp, mode if mode is not None else 0o666 & ~umask())
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    return target


__all__ = ["umask", "write_atomic"]
