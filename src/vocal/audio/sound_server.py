"""Finding the person's sound server when the environment does not say where it is.

A desktop session tells its programs where PulseAudio or PipeWire listens: `PULSE_SERVER`, or
`XDG_RUNTIME_DIR` (libpulse looks for `$XDG_RUNTIME_DIR/pulse/native`). Cron, `env -i`, a
systemd service or an agent's sandbox give none of it, and on PipeWire (pipewire-pulse) the
socket lives only under the runtime directory, so `vocal speak` from cron found no server and
no device. `discover` runs first thing in every `vocal` process (`vocal.launch`, before
PortAudio starts): when neither variable leads to a socket and the user's own runtime
directory holds one (`/run/user/UID/pulse/native`, owned by this user), it sets
`PULSE_SERVER` (and `XDG_RUNTIME_DIR`, if unset) for this process and its children (pactl,
PortAudio's ALSA plugin, the speech worker). `vocal doctor` says which server it used and how
it was found (`found`).
"""

from __future__ import annotations

import os
import stat
from collections.abc import MutableMapping
from dataclasses import dataclass
from pathlib import Path

#: Where systemd-logind (and elogind) make each user's runtime directory.
RUN_USER_DIR = "/run/user"
#: The native protocol's socket under a runtime directory (PulseAudio and pipewire-pulse).
SOCKET = Path("pulse") / "native"


@dataclass(frozen=True)
class Found:
    """Where the sound server is, and how vocal knows: "environment" (`PULSE_SERVER`, or a
    socket under `XDG_RUNTIME_DIR`), "discovered" (the user's runtime directory, set by
    `discover`), or "default" (nothing found: libpulse's own search, or no sound server)."""

    address: str | None
    how: str


#: What `discover` found in this process (None: it has not run).
found: Found | None = None


def _own(path: Path, uid: int, kind: int) -> bool:
    """Whether `path` is a `kind` (stat.S_IFSOCK, S_IFDIR) owned by `uid`, not a symlink."""
    try:
        info = path.lstat()
    except OSError:
        return False
    return stat.S_IFMT(info.st_mode) == kind and info.st_uid == uid


def discover(
    environ: MutableMapping[str, str] | None = None,
    *,
    uid: int | None = None,
    run_user_dir: str = RUN_USER_DIR,
) -> Found:
    """Find the sound server (see the module docstring), setting `PULSE_SERVER` in `environ`
    (default: this process's) when it had to be discovered. Never raises."""
    global found
    environ = os.environ if environ is None else environ
    uid = os.getuid() if uid is None else uid
    if environ.get("PULSE_SERVER"):
        found = Found(environ["PULSE_SERVER"], "environment")
        return found
    runtime = environ.get("XDG_RUNTIME_DIR")
    if runtime and (Path(runtime) / SOCKET).exists():
        found = Found(f"unix:{Path(runtime) / SOCKET}", "environment")
        return found
    own_dir = Path(run_user_dir) / str(uid)
    socket = own_dir / SOCKET
    if _own(socket, uid, stat.S_IFSOCK):
        environ["PULSE_SERVER"] = f"unix:{socket}"
        if not runtime and _own(own_dir, uid, stat.S_IFDIR):
            environ["XDG_RUNTIME_DIR"] = str(own_dir)
        found = Found(environ["PULSE_SERVER"], "discovered")
        return found
    found = Found(None, "default")
    return found


def described() -> str | None:
    """How the sound server was found, for `vocal doctor` (None: nothing to say)."""
    if found is None or found.address is None:
        return None
    if found.how == "discovered":
        return f"at {found.address} (found: the environment named none)"
    return f"at {found.address}"


__all__ = ["Found", "described", "discover", "found"]
