"""Vocabulary hints: the words a turn's speech recognizer should expect.

Coding agents are told names like `parse_config`, `test_conch_stress` or `VOCAL_HOME`, and
Whisper writes what it hears: "parse config", "test conch stress", "vocal home". Given the
names as a prompt (the text Whisper takes as what came before), it writes them as spelled.

Where hints come from (`resolve_hints`):
- the `stt_hints` setting (`--hints TEXT|@FILE`): the text, or a file's;
- with the `stt_hints_git` setting, inside a git repository: the identifiers of the files being
  worked on (changed, new, and those of the last few commits), most frequent first, file names
  first of all (`git_identifiers`).

The result is one short text (`MAX_HINT_CHARS`: Whisper keeps at most 223 prompt tokens, and
every prompt token costs decoding time), handed to the engines: faster-whisper's and
mlx-whisper's initial prompt, the OpenAI endpoint's `prompt`. A list of names is said as a
sentence (`as_prompt`): Whisper writes in the style of its prompt, and a comma-separated list
put commas between the person's words too (benchmarks/hints: 18 commas in 16 sentences against
3 without hints; "We talked about A and B" heard as many names with 3).
"""

from __future__ import annotations

import collections
import keyword
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

from vocal.errors import UsageError

#: A hint text is cut to this many characters (whole words): ~100 Whisper tokens.
MAX_HINT_CHARS = 400
#: A hints file larger than this is not a vocabulary.
MAX_HINTS_FILE_BYTES = 64 * 1024
#: Gathered from git: at most this many identifiers, from at most this many files, each read
#: up to this many bytes (a generated or data file says little of what is said about it).
MAX_GIT_IDENTIFIERS = 40
MAX_GIT_FILES = 20
MAX_FILE_BYTES = 200_000
#: Commits back whose files count as being worked on.
RECENT_COMMITS = 3
#: Each git call's limit: hints are not worth a slow start.
GIT_TIMEOUT_S = 2.0

#: Identifiers Whisper would not write as spelled: snake_case, camelCase, CONSTANT_CASE,
#: dotted or hyphenated names are found by `IDENTIFIER`, and kept if `distinctive`.
IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*(?:[.-][A-Za-z_][A-Za-z0-9_]*)*")


@dataclass(frozen=True)
class Hints:
    """The hint text a turn's recognizer gets, and where it came from ("setting", "file",
    "git", or several joined by "+")."""

    text: str
    source: str
    #: The names among them, all of them (the text holds those that fit), for
    #: vocal.stt.respell.
    names: tuple[str, ...] = ()
    #: Whether the text is Whisper's prompt (the `stt_hints_prompt` setting); names are
    #: respelled either way.
    prompt: bool = True

    def to_dict(self) -> dict[str, object]:
        return {
            "text": self.text,
            "source": self.source,
            "prompt": self.prompt,
            "names": list(self.names),
        }


def distinctive(word: str) -> bool:
    """Whether `word` is an identifier Whisper would not spell by itself: one with an inner
    underscore, dot or hyphen, or a capital after a lower-case letter (camelCase)."""
    core = word.strip("_.-")
    if len(core) < 4 or keyword.iskeyword(core) or core.isdigit():
        return False
    if any(sep in core for sep in "_.-"):
        return any(c.isalpha() for c in core)
    return bool(re.search(r"[a-z][A-Z]", core))


#: A hint text that is only names (separated by commas, semicolons or spaces) becomes a
#: sentence (`as_prompt`).
NAME_LIST = re.compile(r"[\w.\-]+(?:[\s,;]+[\w.\-]+)*[\s,;.]*")


def is_name_list(text: str) -> bool:
    """Whether a hint text is a list of names ("parse_config, VOCAL_HOME", one per line, or
    names only) rather than prose that happens to have no punctuation ("We work on
    parse_config today.")."""
    text = text.strip()
    if not NAME_LIST.fullmatch(text):
        return False
    items = [i.strip(" \t.") for i in re.split(r"[,;\n]+", text) if i.strip(" \t.")]
    return all(len(i.split()) == 1 for i in items) or all(
        distinctive(w.strip(".")) for w in text.split()
    )


def as_prompt(names: list[str], max_chars: int = MAX_HINT_CHARS) -> str:
    """Names as the sentence Whisper is prompted with (see the module docstring), as many of
    them, first first, as fit in `max_chars` ("" when none does)."""
    kept: list[str] = []
    size = len("We talked about .")
    for name in names:
        size += len(name) + (len(" and ") if kept else 0)
        if size > max_chars:
            break
        kept.append(name)
    return "We talked about " + " and ".join(kept) + "." if kept else ""


def read_hints(value: str) -> tuple[str, str]:
    """(text, source) of a `--hints` value: "@FILE" reads the file, anything else is the text.

    Raises:
        UsageError: an unreadable, oversized or non-UTF-8 file (exit 2).
    """
    if not value.startswith("@"):
        return value, "setting"
    from vocal.files.bounded import BoundedReadError, read_regular

    path = Path(value[1:]).expanduser()
    try:
        if path.stat().st_size > MAX_HINTS_FILE_BYTES:
            raise UsageError(f"hints file {path} is over {MAX_HINTS_FILE_BYTES // 1024} KB")
        # /dev/zero, a FIFO nobody writes, a directory: refused, never read (issue 37).
        data = read_regular(path, max_bytes=MAX_HINTS_FILE_BYTES, what="hints file")
        return data.decode("utf-8"), "file"
    except BoundedReadError as exc:
        raise UsageError(str(exc)) from None
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise UsageError(f"cannot read the hints file {path}: {reason}") from None


def _git(args: list[str], cwd: Path) -> str | None:
    """`git ARGS` in `cwd`: its output, or None when git is missing, fails or is slow."""
    try:
        result = subprocess.run(
            ["git", *args],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=GIT_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return result.stdout if result.returncode == 0 else None


def worked_on_files(cwd: Path) -> list[Path]:
    """The files being worked on in the git repository around `cwd` (none outside one):
    changed and new files first, then those of the last `RECENT_COMMITS` commits."""
    top = _git(["rev-parse", "--show-toplevel"], cwd)
    if not top:
        return []
    root = Path(top.strip())
    names: list[str] = []
    for args in (
        ["diff", "--name-only", "HEAD"],
        ["ls-files", "--others", "--exclude-standard"],
        ["log", f"-{RECENT_COMMITS}", "--name-only", "--format="],
    ):
        names.extend((_git(args, root) or "").split("\n"))
    seen: dict[str, None] = dict.fromkeys(n.strip() for n in names if n.strip())
    files = [root / name for name in seen]
    return [f for f in files if f.is_file()][:MAX_GIT_FILES]


def git_identifiers(cwd: Path, limit: int = MAX_GIT_IDENTIFIERS) -> list[str]:
    """The distinctive identifiers of the files being worked on (`worked_on_files`): their
    names' stems first, then the rest by how often they occur."""
    files = worked_on_files(cwd)
    counts: collections.Counter[str] = collections.Counter()
    stems = [f.stem for f in files if distinctive(f.stem)]
    for path in files:
        try:
            with path.open("rb") as handle:
                text = handle.read(MAX_FILE_BYTES).decode("utf-8", errors="ignore")
        except OSError:
            continue
        counts.update(w.strip("._-") for w in IDENTIFIER.findall(text) if distinctive(w))
    ranked = list(dict.fromkeys([*stems, *(w for w, _ in counts.most_common())]))
    return ranked[:limit]


def clip(text: str, max_chars: int = MAX_HINT_CHARS) -> str:
    """`text` with its whitespace folded, cut to `max_chars` at a word boundary."""
    words = text.split()
    kept: list[str] = []
    size = 0
    for word in words:
        if size + len(word) + bool(kept) > max_chars:
            break
        kept.append(word)
        size += len(word) + (len(kept) > 1)
    return " ".join(kept)


def resolve_hints(value: str | None, *, from_git: bool, cwd: Path | None = None) -> Hints | None:
    """The hints a turn uses: `value` (the `stt_hints` setting: text or @FILE) and, with
    `from_git`, the identifiers of the git work around `cwd` (default: the current
    directory); None when there are none."""
    names: list[str] = []
    in_prose: list[str] = []  # names inside a text that is not a list: respelled only
    texts: list[str] = []
    sources: list[str] = []
    if value and value.strip():
        text, source = read_hints(value.strip())
        if is_name_list(text):
            names.extend(n.strip(".") for n in re.split(r"[\s,;]+", text.strip()) if n.strip("."))
        elif text.strip():
            texts.append(" ".join(text.split()))
            in_prose.extend(w for w in IDENTIFIER.findall(text) if distinctive(w))
        sources.append(source)
    if from_git:
        found = git_identifiers(cwd or Path.cwd())
        names.extend(n for n in found if n not in names)
        if found:
            sources.append("git")
    prose = clip(" ".join(texts))
    names_room = MAX_HINT_CHARS - len(prose) - (1 if prose else 0)
    text = " ".join(t for t in (prose, as_prompt(names, names_room)) if t)
    return Hints(text, "+".join(sources), tuple(dict.fromkeys(names + in_prose))) if text else None


__all__ = [
    "Hints",
    "MAX_HINT_CHARS",
    "as_prompt",
    "clip",
    "distinctive",
    "git_identifiers",
    "read_hints",
    "resolve_hints",
    "worked_on_files",
]
