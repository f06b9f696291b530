"""A private PulseAudio null-sink pair per test session, so real streams can be tested.

Each session loads its own sinks (`<prefix>_speaker`, `<prefix>_room`) and routes every stream of
this process and its children there through PULSE_SINK / PULSE_SOURCE, so concurrent test runs on
one machine never hear each other. The default source is the speaker's monitor: what is played
is what the microphone records (a perfect loopback). A low-latency recorder keeps each sink
running, since a fresh null sink stalls new streams for about 2 s (docs/design.md).

The sound server is a test-session option, VOCAL_TEST_SOUND_SERVER (read once, when this module
is imported): `pulseaudio` (the default; scripts/audio-up starts the daemon) or `pipewire` (a
private, headless PipeWire with pipewire-pulse that scripts/pipewire-up starts, beside any
PulseAudio; this process and its children are pointed at its socket through PULSE_SERVER and
XDG_RUNTIME_DIR). The sinks, their routing and the room harness are the same on both: they
speak the PulseAudio protocol through pactl, parec and libpulse.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]

SOUND_SERVERS = ("pulseaudio", "pipewire")


def _requested_sound_server() -> str:
    name = os.environ.get("VOCAL_TEST_SOUND_SERVER", "").strip().lower() or "pulseaudio"
    if name not in SOUND_SERVERS:
        raise ValueError(
            f"VOCAL_TEST_SOUND_SERVER={name!r}: expected one of {', '.join(SOUND_SERVERS)}"
        )
    return name


#: The sound server of this test session. Read at import (conftest imports this module before
#: any test runs) because the tests' own fixture removes every VOCAL_* variable per test.
SOUND_SERVER = _requested_sound_server()
#: The programs each option needs (the Debian packages are in scripts/setup).
PROGRAMS = {
    "pulseaudio": ("pulseaudio", "pactl", "parecord"),
    "pipewire": ("pipewire", "pipewire-pulse", "wireplumber", "dbus-daemon", "pactl", "parecord"),
}


#: scripts/pipewire-up's private directory (its XDG_RUNTIME_DIR, sockets and pid files):
#: VOCAL_PIPEWIRE_DIR, read at import like SOUND_SERVER, or the script's default.
PIPEWIRE_DIR = Path(os.environ.get("VOCAL_PIPEWIRE_DIR") or f"/tmp/vocal-pipewire-{os.getuid()}")


def pipewire_dir() -> Path:
    """scripts/pipewire-up's private directory (PIPEWIRE_DIR)."""
    return PIPEWIRE_DIR


def pipewire_client_env() -> dict[str, str]:
    """The environment that sends a libpulse client (pactl, parec, PortAudio through ALSA's
    pulse plugin) to the private PipeWire server, whether it runs yet or not."""
    runtime = pipewire_dir()
    return {"XDG_RUNTIME_DIR": str(runtime), "PULSE_SERVER": f"unix:{runtime}/pulse/native"}


if SOUND_SERVER == "pipewire":
    # From the start, before anything opens a stream or PortAudio enumerates devices through
    # libpulse: a client with no PULSE_SERVER would talk to the default server (a PulseAudio
    # daemon, if one runs), and this session must never reach it.
    os.environ.update(pipewire_client_env())


def _pactl(*args: str) -> str:
    return subprocess.run(
        ["pactl", *args], check=True, capture_output=True, text=True, timeout=10
    ).stdout


def pactl_info(env: dict[str, str] | None = None) -> dict[str, str] | None:
    """`pactl info` as a dict (C locale), or None when no server answers."""
    try:
        result = subprocess.run(
            ["pactl", "info"], capture_output=True, text=True, timeout=10,
            env={**os.environ, **(env or {}), "LC_ALL": "C"},
        )  # fmt: skip
    except (OSError, subprocess.TimeoutExpired):
        return None
    if result.returncode != 0:
        return None
    pairs = (line.split(":", 1) for line in result.stdout.splitlines() if ":" in line)
    return {key.strip(): value.strip() for key, value in pairs}


def sound_server() -> str | None:
    """The server this process's clients reach, as `pactl info` names it ("pulseaudio",
    "PulseAudio (on PipeWire 0.3.65)"), for reports; None when none answers."""
    info = pactl_info()
    return None if info is None else info.get("Server Name")


def server_option(name: str | None) -> str | None:
    """Which VOCAL_TEST_SOUND_SERVER `pactl info`'s Server Name `name` belongs to: "pipewire"
    for pipewire-pulse ("PulseAudio (on PipeWire 0.3.65)"), "pulseaudio" for the PulseAudio
    daemon ("pulseaudio"), None for anything else or no answer."""
    if name is None:
        return None
    lowered = name.lower()
    if "on pipewire" in lowered:
        return "pipewire"
    return "pulseaudio" if lowered == "pulseaudio" else None


def pulse_running() -> bool:
    """Whether this session's sound server runs: the PulseAudio daemon, or the private
    PipeWire server answering on its own socket (asked there, never through the default)."""
    if SOUND_SERVER == "pipewire":
        info = pactl_info(pipewire_client_env())
        return server_option(None if info is None else info.get("Server Name")) == "pipewire"
    return subprocess.run(["pulseaudio", "--check"], capture_output=True).returncode == 0


def ensure_pulse() -> None:
    """Start this session's sound server if it is not running (PulseAudio was once seen to
    exit under heavy load). With pipewire, never PulseAudio: scripts/pipewire-up (idempotent)
    starts or checks the private server, and its environment goes into os.environ so that this
    process and its children use it."""
    if SOUND_SERVER == "pipewire":
        ensure_pipewire()
    elif not pulse_running():
        subprocess.run([str(REPO / "scripts" / "audio-up")], check=True, timeout=30)


def ensure_pipewire() -> dict[str, str]:
    """Run scripts/pipewire-up and put the `export NAME=VALUE` lines it prints into
    os.environ; the variables set."""
    script = REPO / "scripts" / "pipewire-up"
    result = subprocess.run(
        [str(script)], capture_output=True, text=True, timeout=60,
        env={**os.environ, "VOCAL_PIPEWIRE_DIR": str(pipewire_dir())},
    )  # fmt: skip
    if result.returncode != 0:
        raise RuntimeError(f"{script} failed (exit {result.returncode}): {result.stderr.strip()}")
    exported = {}
    for line in result.stdout.splitlines():
        words = shlex.split(line)
        if len(words) == 2 and words[0] == "export" and "=" in words[1]:
            name, value = words[1].split("=", 1)
            exported[name] = value
    if "PULSE_SERVER" not in exported:
        raise RuntimeError(f"{script} printed no PULSE_SERVER: {result.stdout!r}")
    os.environ.update(exported)
    return exported


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


@dataclass
class MonitorCapture:
    """`parecord` of one source (a sink's monitor) into a raw float32 file while the block
    runs: what the sink played, as a plain client of the sound server hears it (no PortAudio).

        with MonitorCapture(f"{sinks.speaker}.monitor", tmp_path / "heard.raw") as heard:
            ...
        samples = heard.samples()
    """

    source: str
    path: Path
    sample_rate: int = 16_000
    proc: subprocess.Popen | None = None

    def __enter__(self) -> MonitorCapture:
        # 20 ms fragments: with the default (up to 2 s) a recorder stopped by a signal loses
        # the last fragment, seen on pipewire-pulse as a second of a three-second recording.
        self.proc = subprocess.Popen(
            ["parecord", "--raw", "--format=float32le", f"--rate={self.sample_rate}",
             "--channels=1", "--latency-msec=20", "-d", self.source, str(self.path)],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
        )  # fmt: skip
        time.sleep(0.3)  # recording before anything plays
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.proc is not None
        time.sleep(0.3)  # the last blocks of what was played
        self.proc.send_signal(signal.SIGINT)
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)

    def samples(self) -> Any:
        """The recording as mono float32 samples (numpy)."""
        import numpy as np

        return np.fromfile(self.path, dtype="<f4")


def loudest_dbfs(samples: Any, sample_rate: int = 16_000, window_s: float = 0.1) -> float:
    """The RMS level (dBFS) of the loudest `window_s` of `samples`; -inf for silence."""
    import numpy as np

    n = max(1, round(window_s * sample_rate))
    if len(samples) < n:
        return float("-inf")
    power = np.convolve(np.square(samples, dtype=np.float64), np.ones(n) / n, mode="valid")
    peak = float(power.max())
    return 10 * float(np.log10(peak)) if peak > 0 else float("-inf")


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


def missing_programs(option: str = SOUND_SERVER) -> list[str]:
    """The programs the sound server of `option` needs that are not installed."""
    return [name for name in PROGRAMS[option] if shutil.which(name) is None]


def pulse_available() -> bool:
    """Whether this session's sound server (and pactl, parecord) is installed."""
    return not missing_programs()


def session_prefix() -> str:
    return f"vocaltest{os.getpid()}"
