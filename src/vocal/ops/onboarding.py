"""`vocal setup` as a library: fetch what the chosen engines need, prove a spoken turn works,
and only then keep the choices in config.toml.

The proof is one real turn (vocal.duplex.converse): vocal says `PROOF_TEXT` with the chosen voice
and listens for one answer with the chosen Whisper model. Only when it heard words are the choices
written, so a configuration that cannot hold a conversation is never saved. The write keeps
every other key and every comment of config.toml (the chosen keys are replaced in place or
appended) and is atomic (a temporary file renamed over the old one).

Downloads go through huggingface_hub, which keeps partial files in its cache and resumes
them on the next try; offline, the fetch fails with exit 5 and nothing is written.
"""

from __future__ import annotations

import dataclasses
import json
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from vocal.config import parse_config, read_config_file
from vocal.errors import NoSpeechError, UsageError
from vocal.files.atomic import write_atomic

if TYPE_CHECKING:
    from vocal.config import Settings
    from vocal.duplex.options import ConverseResult

PROOF_TEXT = "Hello, this is vocal. Say something, and I will write down what I hear."
#: Engines whose weights `vocal setup --engine` fetches.
FETCHABLE_ENGINES = ("chatterbox",)


@dataclass(frozen=True)
class SetupChoices:
    """What the person chose; None means "keep what is configured"."""

    stt_model: str | None = None
    tts_engine: str | None = None
    voice: str | None = None
    fetch_engines: tuple[str, ...] = ()

    def settings_flags(self) -> dict[str, str]:
        """The choices as `load_settings` flags (and config.toml keys)."""
        chosen = {"stt_model": self.stt_model, "tts_engine": self.tts_engine, "voice": self.voice}
        return {key: value for key, value in chosen.items() if value is not None}


@dataclass
class SetupResult:
    """What `vocal setup` did, for --json."""

    fetched: list[str] = field(default_factory=list)
    proof: dict[str, object] | None = None
    heard: str | None = None
    written: dict[str, str] = field(default_factory=dict)
    config_path: str | None = None

    def to_dict(self) -> dict[str, object]:
        return {
            "fetched": self.fetched,
            "heard": self.heard,
            "written": self.written,
            "config_path": self.config_path,
            "proof": self.proof,
        }


def status(message: str) -> None:
    print(f"vocal: {message}", file=sys.stderr, flush=True)


def fetch(choices: SetupChoices, settings: Settings) -> list[str]:
    """Download what the choices need; the names of what is now on disk."""
    unknown = [name for name in choices.fetch_engines if name not in FETCHABLE_ENGINES]
    if unknown:
        known = ", ".join(FETCHABLE_ENGINES)
        raise UsageError(f"nothing to fetch for engine {unknown[0]!r}", hint=f"known: {known}")
    fetched = []
    resume = "an interrupted download resumes where it stopped"
    if choices.stt_model is not None:
        from vocal.stt import load_stt, local_engine_name

        status(f"fetching the speech recognition model {choices.stt_model} ({resume})")
        # fetched into the hub cache and loaded (a remote recognizer's fallback uses it)
        load_stt(local_engine_name(settings.stt_engine), choices.stt_model)
        status(f"speech recognition model {choices.stt_model} is ready")
        fetched.append(f"stt:{choices.stt_model}")
    if "chatterbox" in choices.fetch_engines:
        from vocal.providers import forget_rung
        from vocal.tts.chatterbox_weights import download_weights

        status(f"fetching the Chatterbox weights ({resume})")
        weights = download_weights(settings)
        forget_rung(settings, "chatterbox")  # new weights: a GPU rung that failed may work now
        status(f"Chatterbox weights are ready in {weights.root}")
        fetched.append("chatterbox")
    return fetched


def prove(choices: SetupChoices, settings: Settings) -> ConverseResult:
    """One spoken turn with the choices; NoSpeechError (exit 4) unless words were heard."""
    from vocal.duplex.converse import converse
    from vocal.duplex.options import ConverseOptions

    status(f'proof: saying "{PROOF_TEXT}" and listening for your answer')
    # Half-duplex: the answer comes after the sentence, so echo cancellation is not on trial.
    half_duplex = dataclasses.replace(settings, barge_in=False)
    result = converse(PROOF_TEXT, ConverseOptions(), half_duplex)
    if not result.speech_heard or not result.text.strip():
        what = "heard sound but no words" if result.speech_heard else "heard nobody"
        raise NoSpeechError(
            f"the proof {what}; nothing was written to {settings.config_path}",
            hint="check `vocal doctor`, then run `vocal setup` again and answer after the sentence",
        )
    status(f'proof: heard "{result.text.strip()}"')
    return result


def toml_value(value: object) -> str:
    """A TOML literal for a setting's value (JSON strings are valid TOML basic strings)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return json.dumps(str(value), ensure_ascii=False)


#: `key = value  # comment`: the comment kept when the value changes (no quote in it, so it
#: is not part of a string value).
_SETTING_LINE = re.compile(r"^(?P<key>\s*[A-Za-z0-9_]+\s*=).*?(?P<comment>\s+#[^\"']*)?$")


def write_config(path: Path, values: Mapping[str, object]) -> None:
    """Set `values` in config.toml, keeping every other line and each changed line's comment;
    atomically, and through a symlink to its target (vocal.files.atomic).

    A key already set at the top level is replaced on its line; others are appended. The new
    text is parsed back before it replaces the file, so a config.toml vocal cannot read is
    never written.
    """
    # An unreadable existing file (or a FIFO, /dev/zero, a huge one): UsageError before
    # anything changes, and before its text is read whole.
    read_config_file(path)
    text = path.read_text(encoding="utf-8") if path.exists() else ""
    lines = text.splitlines()
    first_table = next(
        (i for i, line in enumerate(lines) if line.lstrip().startswith("[")), len(lines)
    )
    for key, value in values.items():
        line = f"{key} = {toml_value(value)}"
        pattern = re.compile(rf"^\s*{re.escape(key)}\s*=")
        at = next((i for i in range(first_table) if pattern.match(lines[i])), None)
        if at is None:
            lines.insert(first_table, line)
            first_table += 1
        else:
            old = _SETTING_LINE.match(lines[at])
            lines[at] = line + (old.group("comment") or "" if old else "")
    new_text = ("\n".join(lines) + "\n").encode("utf-8")
    parsed = parse_config(new_text, path)
    if any(parsed.get(key) != value for key, value in values.items()):
        raise UsageError(f"could not update {path} safely", hint="edit it by hand")
    from vocal.floor.statedir import make_private_dirs

    make_private_dirs(path.parent)  # 0700, and a new state directory is marked (issue 37)
    write_atomic(path, new_text)


def run_setup(choices: SetupChoices, *, proof: bool = True) -> SetupResult:
    """Fetch, prove, then write the choices (see the module docstring). Without the proof
    nothing is written: the choices are only ever saved once a turn worked with them."""
    from vocal.config import load_settings

    settings = load_settings(**choices.settings_flags())
    result = SetupResult(config_path=str(settings.config_path))
    result.fetched = fetch(choices, settings)
    if not result.fetched:
        status("the embedded defaults need no download")
    values = choices.settings_flags()
    if not proof:
        if values:
            status(f"--no-proof: {', '.join(values)} not written (only a proof writes them)")
        return result
    turn = prove(choices, settings)
    result.heard = turn.text.strip()
    result.proof = {"timings": turn.to_dict()["timings"], "mode": turn.mode}
    if values:
        from vocal.floor.statedir import ensure_state_dir

        ensure_state_dir(settings.home)  # 0700 and vocal's, or refused (issue 17)
        write_config(settings.config_path, values)
        result.written = values
        status(f"wrote {', '.join(values)} to {settings.config_path}")
    return result
