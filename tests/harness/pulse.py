"""A private PulseAudio null-sink pair per test session, so real streams can be tested.

Each session loads its own sinks (`<prefix>_speaker`, `<prefix>_room`) and routes every stream of
this process and its children there through PULSE_SINK / PULSE_SOURCE, so concurrent test runs on
one machine never hear each other. The default source is the speaker's monitor: what is played
is what the microphone records (a perfect loopback). A low-latency recorder keeps each sink
running, since a fresh null sink stalls new streams for about 2 s (docs/design.md).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _pactl(*args: str) -> str:
    return subprocess.run(
        ["pactl", *args], check=True, capture_output=True, text=True, timeout=10
    ).stdout


def pulse_running() -> bool:
    return subprocess.run(["pulseaudio", "--check"], capture_output=True).returncode == 0


def ensure_pulse() -> None:
    """Start the daemon if it is not running (it was once seen to exit under heavy load)."""
    if not pulse_running():
        subprocess.run([str(REPO / "scripts" / "audio-up")], check=True, timeout=30)


@dataclass
class PulseSinks:
    """The sinks of one test session and the processes that keep them awake."""

    prefix: str
    modules: list[str] = field(default_factory=list)
    keepalive: list[subprocess.Popen] = field(default_factory=list)

    @property
    def speaker(self) -> str:
        return f"{self.prefix}_speaker"

    @property
    def room(self) -> str:
        return f"{self.prefix}_room"

    def load(self) -> PulseSinks:
        ensure_pulse()
        for sink in (self.speaker, self.room):
            self.modules.append(
                _pactl(
                    "load-module", "module-null-sink", f"sink_name={sink}",
                    "rate=16000", "channels=1", f"sink_properties=device.description={sink}",
                ).strip()
            )  # fmt: skip
            self.keepalive.append(
                subprocess.Popen(
                    ["parecord", "--latency-msec=10", "-d", f"{sink}.monitor", "/dev/null"],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )
        time.sleep(0.5)  # let the recorders start before the first stream opens
        return self

    def route(self, sink: str | None = None, source: str | None = None) -> dict[str, str]:
        """Environment that sends this process's (and children's) streams to our sinks."""
        return {
            "PULSE_SINK": sink or self.speaker,
            "PULSE_SOURCE": source or f"{self.speaker}.monitor",
        }

    def unload(self) -> None:
        for proc in self.keepalive:
            proc.terminate()
        for proc in self.keepalive:
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()
        for module in self.modules:
            subprocess.run(["pactl", "unload-module", module], capture_output=True, timeout=10)


def warm_up_streams(sinks: PulseSinks) -> None:
    """Run an output and an input stream on each new sink until audio flows in real time.

    The first streams on a fresh null sink stall and lose their first few hundred ms; tests
    must not see that. libpulse reads PULSE_SINK/PULSE_SOURCE when a stream opens, so each
    sink is warmed by pointing them at it in turn."""
    import numpy as np

    from vocal.audio.devices import Microphone
    from vocal.audio.player import Player

    for sink in (sinks.room, sinks.speaker):  # the speaker last: the route tests start with
        os.environ.update(sinks.route(sink, f"{sink}.monitor"))
        mic = Microphone(16_000, block_frames=160).open()
        with Player(16_000) as player:
            player.play(np.zeros(16_000, np.float32))
            player.finish()
            player.wait(10)
        mic.close()


def pulse_available() -> bool:
    return shutil.which("pulseaudio") is not None and shutil.which("pactl") is not None


def session_prefix() -> str:
    return f"vocaltest{os.getpid()}"
