"""Which sound-server sink and source vocal's streams reach, and the device pair they make.

PortAudio's "default" and "pulse" devices are the PulseAudio (or pipewire-pulse) server's: the
sink and source behind them are `$PULSE_SINK` / `$PULSE_SOURCE` when set (libpulse honours them
per stream), else the server's defaults, read with `pactl`. An echo profile
(`vocal.duplex.canceller.profile`) is kept per such pair: the echo path belongs to a loudspeaker and
a microphone, not to PortAudio's name for them.

Standard library only: this runs before any audio module is imported.
"""

from __future__ import annotations

import os
import shutil
import subprocess

PACTL_TIMEOUT_S = 3.0


def pactl(*args: str) -> str | None:
    """`pactl ARGS`'s output in the C locale, or None when it fails or does not answer."""
    env = dict(os.environ, LC_ALL="C")  # pactl's text output is translated otherwise
    try:
        done = subprocess.run(
            ["pactl", *args], capture_output=True, text=True, timeout=PACTL_TIMEOUT_S, env=env
        )
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout if done.returncode == 0 else None


def pactl_info() -> dict[str, str] | None:
    """`pactl info` as a dict, or None when the server does not answer."""
    text = pactl("info")
    if text is None:
        return None
    pairs = (line.split(":", 1) for line in text.splitlines() if ":" in line)
    return {key.strip(): value.strip() for key, value in pairs}


def pulse_endpoints() -> tuple[str | None, str | None]:
    """The PulseAudio sink and source vocal's streams reach: $PULSE_SINK / $PULSE_SOURCE
    (libpulse honours them per stream), else the server's defaults."""
    sink, source = os.environ.get("PULSE_SINK"), os.environ.get("PULSE_SOURCE")
    if (sink is None or source is None) and shutil.which("pactl"):
        info = pactl_info() or {}
        sink = sink or info.get("Default Sink")
        source = source or info.get("Default Source")
    return sink, source


def device_pair(output_device: str | None, input_device: str | None) -> tuple[str, str]:
    """(output, input) as the echo path knows them: a device vocal is told to use by name
    (`output_device`, `input_device`), else the sound server's sink or source behind
    PortAudio's default, else "default"."""
    sink, source = (None, None)
    if output_device is None or input_device is None:
        sink, source = pulse_endpoints()
    return output_device or sink or "default", input_device or source or "default"


__all__ = ["PACTL_TIMEOUT_S", "device_pair", "pactl", "pactl_info", "pulse_endpoints"]
