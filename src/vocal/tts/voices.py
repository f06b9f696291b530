"""The voice store: reference clips for cloned voices.

Layout, in the state directory (`VOCAL_VOICES_DIR` overrides it)::

    voices/<name>/default.wav     5–9 s of clean speech: the voice (a symlink into the bin)
    voices/<name>/<sample>.wav    more takes of the same voice form a sample bin
    voices/<name>/description.txt one line, for `vocal voices list`
    voices/<name>/persona.md      notes for the agent that speaks in this voice

`vocal voices add` validates a clip (vocal.tts.clips: readable audio, 5–9 s of speech once leading
and trailing silence is trimmed, not clipped, not silent), converts it to mono 16-bit at the
cloning engine's rate with its loudness normalised, and stores it as a sample with `default.wav`
pointing at it. `use` moves the symlink to another sample. A directory with several WAVs and no
`default.wav` is reported as a problem, never silently resolved to one of them.

vocal removes or replaces only a voice directory it can prove it made (issues 17 and 37): `add`
writes a `.vocal-voice` manifest naming every file it wrote, and `remove` (or `add --force`)
goes ahead only when that manifest is there and the directory holds nothing else
(vocal.tts.voice_dirs). A folder of recordings that merely looks like a voice (WAVs, a
`default.wav`), a link to one, or a voice the user added takes to by hand is refused and left as
it is. A folder of the user's (`VOCAL_VOICES_DIR` pointed at a projects folder) is listed as
"not a voice" and is never changed; a `default.wav` link must name a file in its own directory.
Directories are made 0700 (vocal.floor.statedir).

Which engine speaks a stored voice (`--voice NAME`) is decided in vocal.tts.resolve.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from vocal.audio.wav import read_wav, write_wav
from vocal.errors import UsageError
from vocal.floor.statedir import make_private_dirs
from vocal.tts.clips import ClipReport, prepare_clip, read_clip
from vocal.tts.voice_dirs import (
    DEFAULT_FILE,
    DESCRIPTION_FILE,
    MARKER_FILE,
    PERSONA_FILE,
    default_link_problem,
    ownership_problem,
    refuse_foreign,
    removal_problem,
    written_by_add,
)

if TYPE_CHECKING:
    from vocal.config import Settings

#: The engine that speaks stored voices.
CLONING_ENGINE = "chatterbox"
NAME_MAX_CHARS = 64
PERSONA_MAX_BYTES = 64 * 1024


# fullmatch, not `$`: `$` also matches before a trailing newline ("alice\n" is no name).
_NAME = re.compile(r"\w[\w.-]*")


# -- names ------------------------------------------------------------------------------------
def validate_voice_name(name: str) -> str:
    """`name` if it can name a voice directory, else a `UsageError` (exit 2) saying why.

    Letters, digits, `_`, `-` and `.`; no path separators, no `..`, no hidden (leading-dot)
    names, at most 64 characters: a name never reaches outside the voice store.
    """
    reason = None
    if not name:
        reason = "it is empty"
    elif "/" in name or "\\" in name or os.sep in name:
        reason = "it contains a path separator"
    elif ".." in name:
        reason = "it contains '..'"
    elif name.startswith("."):
        reason = "hidden names (a leading '.') are not allowed"
    elif len(name) > NAME_MAX_CHARS:
        reason = f"it is longer than {NAME_MAX_CHARS} characters"
    elif not _NAME.fullmatch(name):
        reason = "use letters, digits, '_', '-' and '.' only"
    if reason:
        raise UsageError(f"invalid voice name {name!r}: {reason}")
    return name


def is_voice_name(name: str) -> bool:
    """True when `validate_voice_name` would accept `name`."""
    try:
        validate_voice_name(name)
    except UsageError:
        return False
    return True


def sample_name_for(path: Path) -> str:
    """A sample's file stem derived from the clip's name (`take 1.WAV` -> `take-1`)."""
    stem = re.sub(r"[^\w.-]+", "-", path.stem).strip("-.")[:NAME_MAX_CHARS]
    stem = stem.replace("..", "-")
    return stem if stem and stem.lower() != "default" else "sample"


# -- the store --------------------------------------------------------------------------------
@dataclass
class Sample:
    """One WAV in a voice's bin."""

    name: str
    path: Path
    duration_s: float | None = None
    sample_rate: int | None = None


@dataclass
class Voice:
    """A directory in the voice store, as found on disk."""

    name: str
    path: Path
    samples: list[Sample] = field(default_factory=list)
    #: The active sample's name (what default.wav is or points to), None if there is none.
    default: str | None = None
    description: str | None = None
    persona: str | None = None
    #: Why this voice cannot speak (None when it can): no samples, several and no default, ...
    problem: str | None = None

    def reference(self) -> Path:
        """The clip to clone: `default.wav` (or the only sample). Raises `UsageError` (exit 2)
        when the directory is not usable, with the fix."""
        if self.problem:
            raise UsageError(f"voice {self.name!r}: {self.problem}")
        default = self.path / DEFAULT_FILE
        if default.exists():
            return default
        return self.samples[0].path

    def to_dict(self) -> dict[str, object]:
        """The voice as JSON-ready data (`vocal voices list --json`)."""
        return {
            "name": self.name,
            "path": str(self.path),
            "default": self.default,
            "samples": [
                {
                    "name": s.name,
                    "file": s.path.name,
                    "duration_s": s.duration_s,
                    "sample_rate": s.sample_rate,
                }
                for s in self.samples
            ],
            "description": self.description,
            "persona": self.persona is not None,
            "problem": self.problem,
        }


def _read_sample(path: Path) -> Sample:
    try:
        audio = read_wav(path)
        return Sample(path.stem, path, round(audio.duration_s, 2), audio.sample_rate)
    except UsageError:
        return Sample(path.stem, path)


class VoiceStore:
    """The voices under one directory (`settings.voices_dir`)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    @classmethod
    def from_settings(cls, settings: Settings) -> VoiceStore:
        """The store in `settings.voices_dir` (`VOCAL_VOICES_DIR` or `<home>/voices`)."""
        return cls(settings.voices_dir)

    def path(self, name: str) -> Path:
        """Where voice `name` lives (the name is validated first)."""
        return self.root / validate_voice_name(name)

    def exists(self, name: str) -> bool:
        """True when `name` is a valid voice name with a directory in the store."""
        return is_voice_name(name) and (self.root / name).is_dir()

    def names(self) -> list[str]:
        """The voice directories, sorted; hidden ones (a failed add's leftovers) are skipped."""
        if not self.root.is_dir():
            return []
        return sorted(
            p.name for p in self.root.iterdir() if p.is_dir() and not p.name.startswith(".")
        )

    def voices(self) -> list[Voice]:
        """Every stored voice, problems included."""
        return [self.load(name) for name in self.names()]

    def get(self, name: str) -> Voice:
        """The stored voice `name`, or a `UsageError` (exit 2) listing the ones there are."""
        validate_voice_name(name)
        if not (self.root / name).is_dir():
            known = self.names()
            hint = (
                f"stored voices: {', '.join(known)}"
                if known
                else "add one with `vocal voices add NAME FILE`"
            )
            raise UsageError(f"no voice named {name!r} in {self.root}", hint=hint)
        return self.load(name)

    def load(self, name: str) -> Voice:
        """Read a voice directory as it is, problems included."""
        path = self.root / name
        voice = Voice(name=name, path=path)
        foreign = ownership_problem(path)  # a link out of the voice, or a folder of the user's
        if foreign:  # nothing in it is read, and nothing offers to replace it
            voice.problem = foreign
            return voice
        wavs = sorted(
            p
            for p in path.iterdir()
            if p.suffix.lower() == ".wav" and not p.name.startswith(".") and p.name != DEFAULT_FILE
        )
        default = path / DEFAULT_FILE
        voice.samples = [_read_sample(p) for p in wavs]
        if default.is_symlink():
            target = Path(os.readlink(default))
            if not default.exists():
                voice.problem = f"default.wav points to {target}, which does not exist"
            else:
                voice.default = target.stem
                if target.parent == Path(".") and not any(
                    s.path.name == target.name for s in voice.samples
                ):
                    voice.samples.append(_read_sample(path / target.name))
        elif default.is_file():
            voice.samples.insert(0, _read_sample(default))
            voice.default = "default"
        elif len(wavs) == 1:
            voice.default = wavs[0].stem
        elif wavs:
            names = ", ".join(s.name for s in voice.samples)
            voice.problem = (
                f"{len(wavs)} samples ({names}) and no default.wav: pick one with "
                f"`vocal voices use {name} SAMPLE`"
            )
        else:
            voice.problem = f"no samples: add one with `vocal voices add {name} FILE --force`"
        if voice.problem is None:
            active = next((s for s in voice.samples if s.name == voice.default), None)
            if active is not None and active.duration_s is None:
                voice.problem = f"{active.path.name} is not a readable WAV file"
        description = path / DESCRIPTION_FILE
        if description.is_file():
            text = description.read_text(encoding="utf-8", errors="replace").strip()
            voice.description = " ".join(text.split()) or None
        persona = path / PERSONA_FILE
        if persona.is_file():
            voice.persona = persona.read_text(encoding="utf-8", errors="replace")
        return voice

    # -- changes -------------------------------------------------------------------------
    def add(
        self,
        name: str,
        clip: Path,
        *,
        description: str | None = None,
        persona: Path | None = None,
        force: bool = False,
    ) -> tuple[Voice, ClipReport]:
        """Validate and store `clip` as voice `name` (replacing it with `force`).

        The voice is built in a hidden directory and moved into place, so a failed or
        interrupted add leaves the store as it was.
        """
        validate_voice_name(name)
        target = self.root / name
        if os.path.lexists(target):
            refuse_foreign(target, "replace")
        if target.exists() and not force:
            raise UsageError(
                f"a voice named {name!r} already exists",
                hint="pass --force to replace it, or choose another name",
            )
        persona_text = _read_persona(persona) if persona is not None else None
        audio, report = prepare_clip(read_clip(Path(clip)), name=str(clip))
        make_private_dirs(self.root)
        staging = Path(tempfile.mkdtemp(prefix=f".add-{name}-", dir=self.root))  # 0700
        try:
            sample = f"{sample_name_for(Path(clip))}.wav"
            write_wav(staging / sample, audio)
            _link_default(staging, sample)
            if description is not None and description.strip():
                (staging / DESCRIPTION_FILE).write_text(
                    " ".join(description.split()) + "\n", encoding="utf-8"
                )
            if persona_text is not None:
                (staging / PERSONA_FILE).write_text(persona_text, encoding="utf-8")
            # Last, naming what is there: the proof `remove` asks for (issue 37).
            manifest = {"version": 1, "files": sorted(os.listdir(staging))}
            (staging / MARKER_FILE).write_text(json.dumps(manifest) + "\n", encoding="utf-8")
            if target.exists():
                refuse_foreign(target, "replace")  # checked again: it may have changed
                old = Path(tempfile.mkdtemp(prefix=f".old-{name}-", dir=self.root))
                os.replace(target, old / name)
                os.replace(staging, target)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(staging, target)
        except BaseException:
            shutil.rmtree(staging, ignore_errors=True)
            raise
        return self.load(name), report

    def use(self, name: str, sample: str) -> Voice:
        """Point `default.wav` at `sample` (a WAV in the voice's directory; `.wav` optional),
        after checking the sample is a usable reference clip."""
        voice = self.get(name)
        refuse_foreign(voice.path, "change")
        stem = sample[:-4] if sample.lower().endswith(".wav") else sample
        found = next((s for s in voice.samples if s.name == stem), None)
        if found is None or not is_voice_name(stem):
            names = ", ".join(s.name for s in voice.samples) or "none"
            raise UsageError(f"voice {name!r} has no sample {sample!r}", hint=f"samples: {names}")
        prepare_clip(read_clip(found.path), name=found.path.name)  # refuse a bad take
        default = voice.path / DEFAULT_FILE
        target_name = found.path.name
        if default.is_file() and not default.is_symlink():
            if stem == "default":
                return self.load(name)
            # A hand-made default.wav is a take of its own: keep it in the bin under a free name.
            keep = _free_name(voice.path, "previous-default")
            os.replace(default, voice.path / keep)
        _link_default(voice.path, target_name)
        return self.load(name)

    def remove(self, name: str) -> Path:
        """Delete voice `name`, a directory vocal made, and its files; returns the path removed.

        A directory without `add`'s manifest, or holding anything the manifest does not name,
        is refused (`UsageError`, exit 2) and left as it is. Files are removed one by one
        (never a tree), so one that appears meanwhile stays, with its directory.
        """
        voice = self.get(name)
        refuse_foreign(voice.path, "remove")
        written = written_by_add(voice.path) or set()
        for entry in os.listdir(voice.path):
            if entry in written and entry != MARKER_FILE:
                (voice.path / entry).unlink(missing_ok=True)
        (voice.path / MARKER_FILE).unlink(missing_ok=True)  # last: proof until the end
        try:
            voice.path.rmdir()
        except OSError:
            raise UsageError(
                f"{voice.path} was not removed: files appeared in it meanwhile",
                hint="look at what is there, and remove it yourself if it is not needed",
            ) from None
        return voice.path


def _free_name(directory: Path, stem: str) -> str:
    candidate, n = f"{stem}.wav", 1
    while (directory / candidate).exists():
        n += 1
        candidate = f"{stem}-{n}.wav"
    return candidate


def _link_default(directory: Path, sample_file: str) -> None:
    """Make `default.wav` a relative symlink to `sample_file`, replacing any old link at once."""
    link = directory / DEFAULT_FILE
    tmp = directory / f".default-{os.getpid()}.wav"
    tmp.unlink(missing_ok=True)
    try:
        os.symlink(sample_file, tmp)
    except OSError:
        # No symlinks (some Windows set-ups): a copy is the next best thing.
        shutil.copyfile(directory / sample_file, tmp)
    os.replace(tmp, link)


def _read_persona(path: Path) -> str:
    from vocal.files.bounded import BoundedReadError, read_regular

    path = Path(path)
    try:  # a directory, a FIFO, /dev/zero: refused, never read (issue 37)
        data = read_regular(path, max_bytes=PERSONA_MAX_BYTES, what="persona file")
    except FileNotFoundError:
        raise UsageError(f"{path}: no such file") from None
    except BoundedReadError as exc:
        raise UsageError(str(exc)) from None  # not a regular file, or over 64 kB of notes
    except OSError as exc:
        raise UsageError(f"{path}: cannot read: {exc.strerror}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError:
        raise UsageError(f"{path} is not UTF-8 text") from None


def voices_json(voices: list[Voice]) -> str:
    """`vocal voices list --json`: an array of `Voice.to_dict()`."""
    return json.dumps([v.to_dict() for v in voices], indent=2)


__all__ = [
    "CLONING_ENGINE",
    "Sample",
    "Voice",
    "VoiceStore",
    "default_link_problem",
    "is_voice_name",
    "ownership_problem",
    "removal_problem",
    "sample_name_for",
    "validate_voice_name",
    "voices_json",
    "written_by_add",
]
