"""Is the output headphones? `--aec auto` needs no echo cancellation when it is.

The answer is taken only where the platform tells it; everything else is "unknown" and keeps
echo cancellation on (a wrong "speakers" costs a little CPU, a wrong "headphones" costs the
agent hearing itself):

- PulseAudio / PipeWire (Linux): the sink our streams go to (`$PULSE_SINK`, else the default
  sink), from `pactl` (JSON output where pactl >= 16 has it, else its C-locale text). Its active
  port (type `Headphones`/`Headset`, or a name like `analog-output-headphones`) decides; a sink
  without ports (Bluetooth, USB) is judged by its `device.form_factor` property.
- macOS: the data source of the default output device from CoreAudio
  (`kAudioDevicePropertyDataSource`: 'hdpn' headphones, 'ispk' internal speakers), via
  ctypes. Written from Apple's AudioHardware.h and not run here (no Mac in CI): any failure
  there answers "unknown".

Standard library only: this runs before any audio module is imported.
"""

from __future__ import annotations

import enum
import json
import os
import shutil
import sys
from dataclasses import dataclass
from typing import Any

from vocal.audio.endpoints import pactl
from vocal.errors import UsageError

# pactl's port types (pulse/def.h pa_device_port_type_t, as pactl prints them, lower-cased).
# "handsfree" and "earpiece" stay unknown: a hands-free kit is a loudspeaker, and a phone's
# earpiece still leaks into its microphone.
_HEADPHONE_PORT_TYPES = ("headphones", "headset", "handset")
_SPEAKER_PORT_TYPES = ("speaker", "line", "hdmi", "spdif", "tv", "hifi", "car", "portable")
# Port names and descriptions for ports whose type is Unknown/Analog (or pactl < 14).
_HEADPHONE_WORDS = ("headphone", "headset", "earphone", "earbud")
_SPEAKER_WORDS = ("speaker", "lineout", "line-out", "line out", "hdmi", "iec958", "spdif")
# PulseAudio's device.form_factor values (proplist.h).
_HEADPHONE_FORM_FACTORS = ("headphone", "headset", "handset")
_SPEAKER_FORM_FACTORS = ("speaker", "internal", "computer", "portable", "car", "hifi", "tv")


class OutputKind(str, enum.Enum):
    """What the output device is, as far as the platform says."""

    HEADPHONES = "headphones"
    SPEAKERS = "speakers"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class OutputDetection:
    """The answer and what it was read from (for `--json` and `vocal doctor`)."""

    kind: OutputKind
    source: str  # "pulseaudio", "coreaudio" or "none"
    device: str | None = None
    detail: str = ""


AEC_MODES = ("auto", "on", "off")


def aec_wanted(mode: str, detect: Any = None) -> tuple[bool, OutputDetection | None]:
    """Whether to cancel echo for `--aec MODE`: `on`/`off` as given; `auto` off only when the
    output is known to be headphones. Returns the decision and the detection (None unless
    `auto`)."""
    mode = mode.strip().lower()
    if mode not in AEC_MODES:
        raise UsageError(f"--aec must be one of {', '.join(AEC_MODES)}, got {mode!r}")
    if mode != "auto":
        return mode == "on", None
    detection = (detect or detect_output)()
    return detection.kind is not OutputKind.HEADPHONES, detection


def detect_output() -> OutputDetection:
    """Headphones, speakers or unknown for the output vocal plays to."""
    if sys.platform == "darwin":
        return detect_coreaudio()
    if shutil.which("pactl"):
        return detect_pulseaudio()
    return OutputDetection(OutputKind.UNKNOWN, "none", detail="no pactl and not macOS")


# -- PulseAudio / PipeWire ------------------------------------------------------------------------
def detect_pulseaudio() -> OutputDetection:
    """The sink streams go to ($PULSE_SINK or the default), judged by port and form factor."""
    sink = os.environ.get("PULSE_SINK") or _default_sink()
    if not sink:
        return OutputDetection(OutputKind.UNKNOWN, "pulseaudio", detail="no default sink")
    sinks = _sinks_json()
    if sinks is None:
        text = pactl("list", "sinks")
        if text is None:
            return OutputDetection(OutputKind.UNKNOWN, "pulseaudio", sink, "pactl failed")
        sinks = parse_sinks_text(text)
    for info in sinks:
        if info.get("name") == sink:
            return classify_sink(info)
    return OutputDetection(OutputKind.UNKNOWN, "pulseaudio", sink, "sink not listed")


def _default_sink() -> str | None:
    name = pactl("get-default-sink")  # pactl >= 15
    if name and name.strip():
        return name.strip()
    info = pactl("info") or ""
    for line in info.splitlines():
        if line.startswith("Default Sink:"):
            return line.split(":", 1)[1].strip() or None
    return None


def _sinks_json() -> list[dict] | None:
    raw = pactl("--format=json", "list", "sinks")  # pactl >= 16
    if not raw:
        return None
    try:
        data = json.loads(raw)
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, list) else None


def parse_sinks_text(text: str) -> list[dict]:
    """`LC_ALL=C pactl list sinks` as the JSON form's dicts (name, properties, ports,
    active_port), for pactl before 16."""
    sinks: list[dict] = []
    current: dict | None = None
    section = ""
    for line in text.splitlines():
        if line.startswith("Sink #"):
            current = {"name": None, "properties": {}, "ports": [], "active_port": None}
            sinks.append(current)
            section = ""
            continue
        if current is None or not line.strip():
            continue
        stripped = line.strip()
        depth = len(line) - len(line.lstrip("\t"))
        if depth == 1:
            key, _, value = stripped.partition(":")
            section = key
            if key == "Name":
                current["name"] = value.strip()
            elif key == "Active Port":
                current["active_port"] = value.strip() or None
        elif depth >= 2 and section == "Properties":
            key, _, value = stripped.partition(" = ")
            current["properties"][key.strip()] = value.strip().strip('"')
        elif depth == 2 and section == "Ports":
            name, _, rest = stripped.partition(": ")
            description, _, extra = rest.partition(" (")
            port_type = ""
            for field in extra.rstrip(")").split(", "):
                if field.startswith("type: "):
                    port_type = field[len("type: ") :]
            current["ports"].append({"name": name, "description": description, "type": port_type})
    return sinks


def classify_sink(info: dict) -> OutputDetection:
    """Headphones, speakers or unknown for one sink (pactl's JSON form)."""
    name = info.get("name")
    active = info.get("active_port")
    if active:
        port: dict[str, Any] = next(
            (p for p in info.get("ports") or [] if p.get("name") == active), {}
        )
        port_type = str(port.get("type") or "").lower()
        words = f"{active} {port.get('description') or ''}".lower()
        if port_type in _HEADPHONE_PORT_TYPES:
            return OutputDetection(OutputKind.HEADPHONES, "pulseaudio", name, f"port {active}")
        if port_type in _SPEAKER_PORT_TYPES:
            return OutputDetection(OutputKind.SPEAKERS, "pulseaudio", name, f"port {active}")
        if port_type in ("", "unknown", "analog", "aux"):
            if any(w in words for w in _HEADPHONE_WORDS):
                return OutputDetection(OutputKind.HEADPHONES, "pulseaudio", name, f"port {active}")
            if any(w in words for w in _SPEAKER_WORDS):
                return OutputDetection(OutputKind.SPEAKERS, "pulseaudio", name, f"port {active}")
    properties = info.get("properties") or {}
    form_factor = str(properties.get("device.form_factor") or "").lower()
    if form_factor in _HEADPHONE_FORM_FACTORS:
        return OutputDetection(
            OutputKind.HEADPHONES, "pulseaudio", name, f"form factor {form_factor}"
        )
    if form_factor in _SPEAKER_FORM_FACTORS:
        return OutputDetection(
            OutputKind.SPEAKERS, "pulseaudio", name, f"form factor {form_factor}"
        )
    detail = f"port {active}" if active else "no active port and no form factor"
    return OutputDetection(OutputKind.UNKNOWN, "pulseaudio", name, detail)


# -- CoreAudio (macOS) -----------------------------------------------------------------------------
def _fourcc(code: str) -> int:
    return int.from_bytes(code.encode("ascii"), "big")


# From CoreAudio/AudioHardware.h and AudioHardwareBase.h.
_SYSTEM_OBJECT = 1  # kAudioObjectSystemObject
_DEFAULT_OUTPUT_DEVICE = _fourcc("dOut")  # kAudioHardwarePropertyDefaultOutputDevice
_DATA_SOURCE = _fourcc("ssrc")  # kAudioDevicePropertyDataSource
_SCOPE_GLOBAL = _fourcc("glob")  # kAudioObjectPropertyScopeGlobal
_SCOPE_OUTPUT = _fourcc("outp")  # kAudioDevicePropertyScopeOutput
_ELEMENT_MAIN = 0  # kAudioObjectPropertyElementMain
_SOURCE_HEADPHONES = _fourcc("hdpn")
_SOURCE_INTERNAL_SPEAKER = _fourcc("ispk")


def detect_coreaudio() -> OutputDetection:
    """The default output device's data source: 'hdpn' headphones, 'ispk' built-in speakers.

    Untested here (no Mac in CI). USB and Bluetooth devices usually have no data source and
    answer "unknown" (echo cancellation stays on).
    """
    try:
        import ctypes

        class _Address(ctypes.Structure):  # AudioObjectPropertyAddress
            _fields_ = [
                ("selector", ctypes.c_uint32),
                ("scope", ctypes.c_uint32),
                ("element", ctypes.c_uint32),
            ]

        core = ctypes.CDLL("/System/Library/Frameworks/CoreAudio.framework/CoreAudio")
        get = core.AudioObjectGetPropertyData
        get.restype = ctypes.c_int32  # OSStatus
        get.argtypes = [
            ctypes.c_uint32,
            ctypes.POINTER(_Address),
            ctypes.c_uint32,
            ctypes.c_void_p,
            ctypes.POINTER(ctypes.c_uint32),
            ctypes.c_void_p,
        ]

        def read_u32(obj: int, selector: int, scope: int) -> int | None:
            address = _Address(selector, scope, _ELEMENT_MAIN)
            value = ctypes.c_uint32(0)
            size = ctypes.c_uint32(ctypes.sizeof(value))
            status = get(
                obj, ctypes.byref(address), 0, None, ctypes.byref(size), ctypes.byref(value)
            )
            return value.value if status == 0 else None

        device = read_u32(_SYSTEM_OBJECT, _DEFAULT_OUTPUT_DEVICE, _SCOPE_GLOBAL)
        if not device:
            return OutputDetection(OutputKind.UNKNOWN, "coreaudio", detail="no default output")
        source = read_u32(device, _DATA_SOURCE, _SCOPE_OUTPUT)
    except Exception as exc:  # a missing framework or symbol: say unknown, keep AEC on
        return OutputDetection(OutputKind.UNKNOWN, "coreaudio", detail=f"CoreAudio failed: {exc}")
    if source == _SOURCE_HEADPHONES:
        return OutputDetection(OutputKind.HEADPHONES, "coreaudio", str(device), "data source hdpn")
    if source == _SOURCE_INTERNAL_SPEAKER:
        return OutputDetection(OutputKind.SPEAKERS, "coreaudio", str(device), "data source ispk")
    detail = "no data source" if source is None else f"data source {source:#x}"
    return OutputDetection(OutputKind.UNKNOWN, "coreaudio", str(device), detail)
