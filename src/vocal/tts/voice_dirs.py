"""Whose voice directory this is: the layout `vocal voices add` makes, and the proof that it
made one (its `.vocal-voice` manifest), which removing or replacing a voice asks for (issues 17
and 37). Standard library only.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from vocal.errors import UsageError

DEFAULT_FILE = "default.wav"
DESCRIPTION_FILE = "description.txt"
PERSONA_FILE = "persona.md"
#: Written by `add` into every voice directory, naming the files it wrote: the proof that
#: this one is vocal's to remove or replace.
MARKER_FILE = ".vocal-voice"
#: A manifest is a few names: anything larger is not one of ours.
MARKER_MAX_BYTES = 4096


# -- whose directory ----------------------------------------------------------------------------
def default_link_problem(directory: Path) -> str | None:
    """Why `default.wav` in `directory` is not a link vocal makes (None if it is one, or is
    not a link): vocal's links name a file beside them, so they never leave the voice."""
    link = Path(directory) / DEFAULT_FILE
    if not link.is_symlink():
        return None
    target = os.readlink(link)
    parts = Path(target).parts
    if len(parts) != 1 or parts[0] in (".", "..") or Path(target).is_absolute():
        return f"default.wav points outside the voice's directory (to {target})"
    return None


def _is_voice_entry(directory: Path, name: str) -> bool:
    """Whether entry `name` of a voice directory is one `add` and `use` make."""
    path = directory / name
    if name == DEFAULT_FILE and path.is_symlink():
        return default_link_problem(directory) is None
    if path.is_symlink() or not path.is_file():
        return False
    if name in (MARKER_FILE, DESCRIPTION_FILE, PERSONA_FILE):
        return True
    # Samples, and the temporary link `_link_default` leaves if it is killed.
    return name.lower().endswith(".wav") and (
        not name.startswith(".") or name.startswith(".default-")
    )


def ownership_problem(directory: Path) -> str | None:
    """Why `directory` is not in a voice's layout (None when it is): a real directory holding
    only what `add` and `use` make, with or without the manifest (a voice made by hand is read
    and spoken; removing or replacing one also needs the manifest: `removal_problem`). Anything
    else (code, notes, sub-folders) is the user's."""
    directory = Path(directory)
    if directory.is_symlink():
        return f"{directory} is a symbolic link, not a voice directory"
    if not directory.is_dir():
        return f"{directory} is not a directory"
    link = default_link_problem(directory)
    if link:
        return link
    foreign = sorted(n for n in os.listdir(directory) if not _is_voice_entry(directory, n))
    if not foreign:
        return None
    shown = ", ".join(foreign[:5]) + (f" and {len(foreign) - 5} more" if len(foreign) > 5 else "")
    return f"not a voice: it holds files `vocal voices add` does not make ({shown})"


def written_by_add(directory: Path) -> set[str] | None:
    """The names `add` wrote into `directory`, from its `.vocal-voice` manifest (None when
    there is no readable manifest: a regular file, not a link, with a version)."""
    marker = Path(directory) / MARKER_FILE
    try:
        if marker.is_symlink() or not marker.is_file():
            return None
        with open(marker, "rb") as f:
            raw = f.read(MARKER_MAX_BYTES + 1)
        data = json.loads(raw) if len(raw) <= MARKER_MAX_BYTES else None
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(data, dict) or type(data.get("version")) is not int:
        return None
    files = data.get("files")
    if isinstance(files, list) and all(isinstance(f, str) for f in files):
        return {*files, MARKER_FILE}
    # A manifest from before it listed files: what that `add` wrote, and only that.
    named = {MARKER_FILE, DEFAULT_FILE, DESCRIPTION_FILE, PERSONA_FILE}
    link = Path(directory) / DEFAULT_FILE
    if link.is_symlink():
        named.add(os.readlink(link))
    return named


def removal_problem(directory: Path) -> str | None:
    """Why vocal may not remove or replace `directory` (None when it may): it must be a voice
    (`ownership_problem`) whose manifest names every file in it (issue 37)."""
    problem = ownership_problem(directory)
    if problem:
        return problem
    written = written_by_add(directory)
    if written is None:
        return f"`vocal voices add` did not make it (no {MARKER_FILE} manifest)"
    others = sorted(set(os.listdir(directory)) - written)
    if not others:
        return None
    shown = ", ".join(others[:5]) + (f" and {len(others) - 5} more" if len(others) > 5 else "")
    return f"it holds files `vocal voices add` did not write ({shown})"


def refuse_foreign(directory: Path, doing: str) -> None:
    problem = removal_problem(directory) if doing in ("remove", "replace") else None
    problem = problem or ownership_problem(directory)
    if problem:
        raise UsageError(
            f"refusing to {doing} {directory}: {problem}",
            hint="vocal changes only voices it made; move the folder, or set VOCAL_VOICES_DIR "
            "to a directory of voices only",
        )


__all__ = [
    "DEFAULT_FILE",
    "DESCRIPTION_FILE",
    "MARKER_FILE",
    "PERSONA_FILE",
    "default_link_problem",
    "ownership_problem",
    "refuse_foreign",
    "removal_problem",
    "written_by_add",
]
