"""Sound-font cues for agent hook events: `vocal cue EVENT [--tool NAME]`.

A sound font is a directory tree. The user's font ($VOCAL_SOUNDFONTS_DIR, default
<state dir>/soundfonts) is searched first, then the small font shipped in this package
(`vocal/soundfont/`). In each font the most specific place wins:

    EVENT/TOOL/   the cue for one tool (PreToolUse/Bash/)
    EVENT/        the cue for the event
    ./            the fallback

A place is a directory holding `default.<ext>` and/or numbered variants `01.<ext>` ... `99.<ext>`
(one is picked at random among them all), or a single file beside it (`PreToolUse/Bash.wav`).
A file named `MUTE` in a place silences it and everything below it that has no sound of its own
(`PreToolUse/MUTE` mutes every tool's PreToolUse cue except those given one). Formats: WAV, and
what libsndfile decodes without ffmpeg: FLAC, OGG (Vorbis, Opus) and MP3 (libsndfile >= 1.1).

A cue is skipped (exit 0, said on stderr) while another session holds the conch: an agent's
ticks must not talk over another agent's speech. The status is read, never waited for.

Latency: a cue must start within 100 ms of its process starting. Typer alone costs ~70 ms,
vocal.config's imports (dataclasses, pathlib, tomllib) 40-80 ms and sounddevice's import
(PortAudio enumerating ALSA devices) 140-350 ms here, while `paplay` starts a file in ~20 ms
(benchmarks/cue). So hooks run the lean entry point `python -c 'import vocal.cuehook' EVENT`
(what `vocal cue --install-snippet` prints), and this module keeps to os and sys on that path:
paths are strings, results plain classes, and vocal.config, vocal.floor.gates and vocal.floor.conch
are imported only when their files exist (a config.toml, gates set by `vocal mute`/`volume`, a
conch holder). On Linux the file goes to `paplay` (PulseAudio or PipeWire; it decodes with
libsndfile too). PortAudio is the fallback, the path
on macOS and for a chosen output device: 16-bit WAV frames go raw to a RawOutputStream (no
numpy), other formats through soundfile. `cue_player` (VOCAL_CUE_PLAYER) forces one.
"""

from __future__ import annotations

import os
import sys

from vocal.errors import EXIT_ERROR, EXIT_USAGE, UsageError, VocalError, debug_wanted

# typing's import costs a cue ~8 ms and annotations are strings here (PEP 563).
TYPE_CHECKING = False
if TYPE_CHECKING:
    import random
    from pathlib import Path
    from typing import Any

    from vocal.floor.gates import Gates

#: The font shipped in the package.
BUILTIN_FONT = os.path.join(
    os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "soundfont"
)
MUTE_FILE = "MUTE"
FORMATS = (".wav", ".flac", ".ogg", ".oga", ".opus", ".mp3")
#: How long to wait for a hook's JSON on a piped stdin (Claude Code writes it at once).
STDIN_WAIT_S = 0.05
#: Once it has begun, the JSON is read to its end within this long and this size, else the
#: cue is a usage error (issue 37: `< /dev/zero` was read until MemoryError, a writer that
#: never closed the pipe held the cue forever). A PostToolUse event carries the tool's output,
#: which Claude Code cuts well below this.
STDIN_TIMEOUT_S = 1.0
MAX_STDIN_BYTES = 16 << 20
#: Claude Code hook events and what the shipped font plays for them.
HOOK_EVENTS = ("PreToolUse", "PostToolUse", "Notification", "Stop", "SubagentStop")
_TOOL_EVENTS = ("PreToolUse", "PostToolUse")
#: vocal.floor.conch keeps the holder in this file of the conch directory; no file, no holder.
CONCH_HOLDER_FILE = "holder.json"
#: vocal.floor.gates' file in the state directory, and vocal.config's (tests/test_cue.py checks
#: these names, and the environment variables below, still match their owners).
GATES_FILE = "gates.json"
CONFIG_FILE = "config.toml"
#: Players: paplay starts a cue in ~25 ms where PortAudio's start-up alone costs 100-300 ms
#: here (benchmarks/cue); PortAudio is the fallback and the path on macOS or a chosen device.
PLAYERS = ("auto", "paplay", "portaudio")


# Plain classes, not dataclasses: importing dataclasses (inspect, re) costs a cue ~15 ms.
class Pcm:
    """Interleaved little-endian 16-bit samples."""

    __slots__ = ("frames", "sample_rate", "channels")

    def __init__(self, frames: bytes, sample_rate: int, channels: int) -> None:
        self.frames, self.sample_rate, self.channels = frames, sample_rate, channels

    @property
    def duration_s(self) -> float:
        return len(self.frames) / (2 * self.channels * self.sample_rate)


class CueResult:
    """What `vocal cue` did: the file it played, or why it played nothing.

    skipped: "muted" (a MUTE file), "no cue", "conch" (another session holds it), "gates"
    (vocal mute); player: "paplay" or "portaudio".
    """

    def __init__(self, event: str, tool: str | None) -> None:
        self.event, self.tool = event, tool
        self.path: str | None = None
        self.played = False
        self.skipped: str | None = None
        self.detail = ""
        self.player: str | None = None

    def to_dict(self) -> dict[str, object]:
        return dict(self.__dict__)


class CueSettings:
    """The settings a cue reads (a subset of vocal.config.Settings, resolved the same way)."""

    __slots__ = ("home", "session", "output_device", "cue_player")

    def __init__(
        self,
        home: str,
        session: str | None = None,
        output_device: str | None = None,
        cue_player: str = "auto",
    ) -> None:
        self.home, self.session = str(home), session
        self.output_device, self.cue_player = output_device, cue_player

    @property
    def conch_dir(self) -> str:
        return os.path.join(self.home, "conch")


#: CueSettings field -> its environment variable (vocal.config.env_name; a test checks them).
CUE_ENV = {
    "session": "VOCAL_SESSION",
    "output_device": "VOCAL_OUTPUT_DEVICE",
    "cue_player": "VOCAL_CUE_PLAYER",
}


def cue_settings() -> CueSettings:
    """Flags aside, what vocal.config.load_settings would say for these fields: from the
    environment and defaults alone when there is no config.toml (no vocal.config import),
    else from load_settings itself."""
    home = os.path.expanduser(os.environ.get("VOCAL_HOME") or os.path.join("~", ".vocal"))
    if os.path.exists(os.path.join(home, CONFIG_FILE)):
        from vocal.config import load_settings

        full = load_settings()
        return CueSettings(str(full.home), full.session, full.output_device, full.cue_player)
    values = {name: os.environ.get(env) or None for name, env in CUE_ENV.items()}
    return CueSettings(
        home, values["session"], values["output_device"], values["cue_player"] or "auto"
    )


def user_font_dir(home: str | Path) -> str:
    """$VOCAL_SOUNDFONTS_DIR, or <state dir>/soundfonts."""
    override = os.environ.get("VOCAL_SOUNDFONTS_DIR")
    return os.path.expanduser(override) if override else os.path.join(str(home), "soundfonts")


def _check_name(kind: str, name: str) -> str:
    if not name or name in (".", "..") or "/" in name or "\\" in name or "\0" in name:
        raise UsageError(f"{kind} must be a plain name, got {name!r}")
    return name


def is_variant(stem: str) -> bool:
    """`default`, or a variant number 01..99."""
    return stem == "default" or (len(stem) == 2 and stem.isdigit() and stem != "00")


def sounds_at(place: str, *, single_file: bool = True) -> list[str]:
    """The playable files of one place: default and numbered variants in a directory, or a
    single `place.<ext>` file (not for a font's root: that file would lie outside the font)."""
    found = []
    if os.path.isdir(place):
        for name in os.listdir(place):
            stem, ext = os.path.splitext(name)
            path = os.path.join(place, name)
            if ext.lower() in FORMATS and is_variant(stem) and os.path.isfile(path):
                found.append(path)
    if not found and single_file:
        found = [place + ext for ext in FORMATS if os.path.isfile(place + ext)]
    return sorted(found)


def find_cue(
    event: str, tool: str | None, fonts: list[str | Path], rng: random.Random | None = None
) -> tuple[str | None, str | None]:
    """(the file to play, None) or (None, the place whose MUTE silenced it) or (None, None)."""
    places: list[tuple[str, ...]] = [(event, tool)] if tool else []
    places += [(event,), ()]
    for font in fonts:
        for place in places:
            where = os.path.join(str(font), *place)
            if os.path.exists(os.path.join(where, MUTE_FILE)):
                return None, where
            sounds = sounds_at(where, single_file=bool(place))
            if sounds:
                # os.urandom rather than the random module: its import costs the cue ~5 ms.
                draw = rng.randrange(1 << 16) if rng else int.from_bytes(os.urandom(2), "little")
                pick = draw % len(sounds)
                return sounds[pick], None
    return None, None


def read_pcm(path: str | Path) -> Pcm:
    """Decode a cue to 16-bit PCM: 16-bit WAV with the standard library (no numpy), the rest
    through libsndfile (soundfile, imported only then)."""
    path = str(path)
    if path.lower().endswith(".wav"):
        import wave

        try:
            with wave.open(str(path), "rb") as wav:
                if wav.getsampwidth() == 2:
                    return Pcm(
                        wav.readframes(wav.getnframes()), wav.getframerate(), wav.getnchannels()
                    )
        except (wave.Error, EOFError):
            pass  # float or 24-bit WAV, WAVE_FORMAT_EXTENSIBLE: libsndfile reads those
    try:
        import soundfile
    except (ImportError, OSError) as exc:
        raise UsageError(f"cannot decode {path}: libsndfile is missing ({exc})") from None
    import numpy as np

    try:
        # float32, scaled here: libsndfile reads a float file as int16 without scaling (zeros).
        data, sample_rate = soundfile.read(str(path), dtype="float32", always_2d=True)
    except Exception as exc:  # soundfile.LibsndfileError, RuntimeError on old versions
        raise UsageError(f"cannot decode cue {path}: {exc}") from None
    pcm = np.clip(np.round(data * 32767), -32768, 32767).astype("<i2")
    return Pcm(pcm.tobytes(), int(sample_rate), int(data.shape[1]))


def scale(pcm: Pcm, gain: float) -> Pcm:
    """`pcm` at `gain` (vocal volume), clipped; cues are short, so plain Python is enough."""
    import array

    samples = array.array("h", pcm.frames)
    if sys.byteorder != "little":
        samples.byteswap()
    for i, value in enumerate(samples):
        samples[i] = max(-32768, min(32767, int(value * gain)))
    if sys.byteorder != "little":
        samples.byteswap()
    return Pcm(samples.tobytes(), pcm.sample_rate, pcm.channels)


def play_pcm(pcm: Pcm, device: str | int | None = None) -> None:
    """Play `pcm` and return when it has been heard (the stream drains on stop)."""
    from vocal.audio.devices import _port_audio_error, resolve_device, sounddevice

    sd = sounddevice()
    index = resolve_device(device, "output") if device not in (None, "") else None
    try:
        stream = sd.RawOutputStream(
            samplerate=pcm.sample_rate,
            channels=pcm.channels,
            dtype="int16",
            device=index,
            latency="low",
        )
        stream.start()
        try:
            stream.write(pcm.frames)
        finally:
            stream.stop()  # Pa_StopStream plays what is buffered first
            stream.close()
    except sd.PortAudioError as exc:
        raise _port_audio_error("play the cue", exc) from None


def _gates(home: str) -> Gates | None:
    """`vocal mute` / `vocal volume`, or None when they were never set: vocal.floor.gates is
    imported only then (its imports cost a cue 10-30 ms here)."""
    if not os.path.exists(os.path.join(home, GATES_FILE)):
        return None
    from pathlib import Path

    from vocal.floor.gates import read_gates

    return read_gates(Path(home))


def _which(name: str) -> str | None:
    """shutil.which for a plain name (importing shutil costs the cue ~5 ms)."""
    for directory in os.environ.get("PATH", os.defpath).split(os.pathsep):
        path = os.path.join(directory, name)
        if os.access(path, os.X_OK) and not os.path.isdir(path):
            return path
    return None


def _run_quiet(argv: list[str]) -> int:
    """Run `argv` with stdio on /dev/null; its exit code. os.posix_spawn, because importing
    subprocess costs a cue 20-50 ms here."""
    devnull = os.open(os.devnull, os.O_RDWR)
    try:
        actions = [(os.POSIX_SPAWN_DUP2, devnull, fd) for fd in (0, 1, 2)]
        pid = os.posix_spawn(argv[0], argv, os.environ, file_actions=actions)
    finally:
        os.close(devnull)
    _, status = os.waitpid(pid, 0)
    return os.waitstatus_to_exitcode(status)


def conch_holder_elsewhere(settings: CueSettings) -> str | None:
    """The session holding the conch if it is not ours, else None (never waits)."""
    if not os.path.exists(os.path.join(settings.conch_dir, CONCH_HOLDER_FILE)):
        return None  # the usual case, for the cost of a stat: no vocal.floor.conch import (~20 ms)
    from vocal.config import load_settings
    from vocal.floor.conch.queue import Conch

    try:
        holder = Conch.from_settings(load_settings(home=settings.home)).status().holder
    except OSError:
        return None  # an unreadable conch must not cost the cue
    if holder is None or (settings.session and holder.session == settings.session):
        return None
    return holder.session + (f" ({holder.agent})" if holder.agent else "")


def play_cue(
    event: str,
    tool: str | None,
    settings: CueSettings,
    *,
    play: bool = True,
    rng: random.Random | None = None,
) -> CueResult:
    """Find and play the cue for `event` (and `tool`); see the module docstring."""
    event = _check_name("EVENT", event)
    tool = _check_name("--tool", tool) if tool else None
    result = CueResult(event, tool)
    path, muted_by = find_cue(event, tool, [user_font_dir(settings.home), BUILTIN_FONT], rng)
    if path is None:
        result.skipped = "muted" if muted_by else "no cue"
        muted = os.path.join(muted_by, MUTE_FILE) if muted_by else None
        result.detail = f"muted by {muted}" if muted else "no cue in any font"
        return result
    result.path = path
    gates = _gates(settings.home)
    if gates is not None and gates.silent:
        result.skipped, result.detail = "gates", "vocal is muted (vocal unmute)"
        return result
    holder = conch_holder_elsewhere(settings)
    if holder:
        result.skipped, result.detail = "conch", f"{holder} holds the conch"
        return result
    if play:
        gain = gates.gain if gates is not None else 1.0
        result.player = play_file(path, gain, settings.output_device, settings.cue_player)
        result.played = True
    return result


def play_wake_cue(_detection: object = None) -> None:
    """The Wake cue (`vocal wake`, `converse --wake`), on a thread: the request is heard
    meanwhile. A cue that cannot play (no output device, no sound server) costs the wake
    nothing."""
    import threading

    def play() -> None:
        try:
            play_cue("Wake", None, cue_settings())
        except (VocalError, OSError):
            pass

    threading.Thread(target=play, name="vocal-wake-cue", daemon=True).start()


def play_file(path: str, gain: float, device: str | None, player: str = "auto") -> str:
    """Play a cue file, and say with what: `paplay` (PulseAudio/PipeWire, the file decoded by
    paplay's libsndfile), else PortAudio. `auto` tries paplay where it can serve: Linux, no
    device chosen, paplay on PATH; if it fails (no server, a file it cannot read) PortAudio
    plays it, or reports why not."""
    if player not in PLAYERS:
        raise UsageError(f"cue_player must be one of {', '.join(PLAYERS)}, got {player!r}")
    paplay = _which("paplay") if player != "portaudio" else None
    if paplay and (player == "paplay" or (sys.platform.startswith("linux") and not device)):
        volume = max(0, round(gain * 65536))  # PA_VOLUME_NORM is 65536
        code = _run_quiet([paplay, f"--volume={volume}", path])
        if code == 0:
            return "paplay"
        if player == "paplay":
            raise UsageError(f"paplay could not play {path} (exit {code})")
    pcm = read_pcm(path)
    if gain != 1.0:
        pcm = scale(pcm, gain)
    play_pcm(pcm, device)
    return "portaudio"


def tool_from_hook_input(stream: Any = None) -> str | None:
    """The `tool_name` of a hook's JSON on a piped stdin, or None (a terminal, no JSON, no
    tool). Waits at most STDIN_WAIT_S for the data, so a silent pipe costs no more; then
    reads it within STDIN_TIMEOUT_S and MAX_STDIN_BYTES.

    Raises:
        UsageError: stdin too large, not ended in time, or JSON nested too deep.
    """
    import select

    stream = stream or sys.stdin
    try:
        if stream is None or stream.isatty():
            return None
        ready, _, _ = select.select([stream], [], [], STDIN_WAIT_S)
        if not ready:
            return None
    except (OSError, ValueError):
        return None
    from vocal.files.bounded import BoundedReadError, loads_json, read_stream

    what = "the hook's JSON on stdin"
    try:
        raw = read_stream(stream, max_bytes=MAX_STDIN_BYTES, timeout_s=STDIN_TIMEOUT_S, what=what)
    except BoundedReadError as exc:
        raise UsageError(str(exc)) from None
    except OSError:
        return None
    if not raw.strip():
        return None  # an empty pipe (/dev/null)
    try:
        data = loads_json(raw)
    except BoundedReadError as exc:
        raise UsageError(f"{what}: {exc}") from None
    except ValueError:  # not JSON: a cue without a tool
        return None
    tool = data.get("tool_name") if isinstance(data, dict) else None
    return tool if isinstance(tool, str) and tool else None


def hook_snippet(command: list[str] | None = None) -> dict[str, dict[str, list[dict[str, object]]]]:
    """The `hooks` block for Claude Code's settings.json that plays a cue per event.

    `command`: how to run the lean entry point (default: this interpreter importing
    vocal.cuehook: `-c` rather than `-m` skips runpy and compiling, ~10 ms).
    The tool's name reaches `vocal cue` as the hook's JSON on stdin.
    """
    import shlex

    base = command or [sys.executable, "-c", "import vocal.cuehook"]
    hooks: dict[str, list[dict[str, object]]] = {}
    for event in HOOK_EVENTS:
        entry: dict[str, object] = {
            "hooks": [{"type": "command", "command": shlex.join([*base, event]), "timeout": 5}]
        }
        if event in _TOOL_EVENTS:
            entry = {"matcher": "*", **entry}
        hooks[event] = [entry]
    return {"hooks": hooks}


def report(result: CueResult, json_output: bool) -> None:
    """Say what happened: JSON on stdout with --json; a skip on stderr."""
    if json_output:
        import json

        print(json.dumps(result.to_dict()), flush=True)
    if result.skipped in ("conch", "gates"):
        print(f"vocal: cue skipped: {result.detail}", file=sys.stderr, flush=True)


def hook_exit_code(code: int) -> int:
    """`code` as a hook may exit: never 2, which Claude Code reads as "block" (a PreToolUse
    hook's 2 stops the tool call, a Stop hook's keeps the agent going); a bad input is an
    error (1) there, which it shows and passes over."""
    return EXIT_ERROR if code == EXIT_USAGE else code


def main(argv: list[str] | None = None) -> int:
    """`python -m vocal.cuehook EVENT [--tool NAME] [--json]`: `vocal cue` without Typer."""
    args = list(sys.argv[1:] if argv is None else argv)
    json_output = "--json" in args
    args = [a for a in args if a != "--json"]
    tool = None
    try:
        if "--tool" in args:
            at = args.index("--tool")
            if at + 1 >= len(args):
                raise UsageError("--tool needs a NAME")
            tool = args.pop(at + 1)
            args.pop(at)
        if len(args) != 1 or args[0].startswith("-"):
            raise UsageError("usage: python -m vocal.cuehook EVENT [--tool NAME] [--json]")
        tool = tool or tool_from_hook_input()
        report(play_cue(args[0], tool, cue_settings()), json_output)
    except VocalError as exc:
        print(f"vocal: error: {exc}", file=sys.stderr, flush=True)
        return hook_exit_code(exc.exit_code)
    except KeyboardInterrupt:
        return 130
    except Exception as exc:  # as vocal.cli: one line, never a traceback (issue 37)
        if debug_wanted():
            raise
        reason = f"unexpected {type(exc).__name__}: {exc} (VOCAL_DEBUG=1 shows the traceback)"
        print(f"vocal: error: {reason}", file=sys.stderr, flush=True)
        return 1
    return 0
