"""The "room": a process between the two null sinks that makes a realistic echo path
(docs/design.md, "The room harness").

It reads what the speaker sink plays (its monitor), convolves it with an impulse response (a
delay, a gain and a decaying reverberant tail), mixes in near-end speech (a person in the room)
at a chosen time, and plays the result into the room sink, whose monitor is the microphone:

    Player -> <prefix>_speaker -> monitor -> [room: IR * far + near] -> <prefix>_room -> monitor
                                                                                -> Microphone

The signal processing is tests/harness/room_effects.py: RoomConfig, and the named conditions
of issue 20 (`ROOM_CONDITIONS`: a distorting loudspeaker, clock drift and a latency jump, a
600 ms delay, fan noise, chatter, a long tail) on top of the linear room.

Audio goes through `parec`/`pacat` (raw float32, 16 kHz mono, 10 and 40 ms latency requests),
not PortAudio, so the room is clocked by the speaker sink and adds a small latency of its own
(10-80 ms on top of the configured delay: tests/test_room.py). pacat asks for 40 ms: at 20 ms it
underran in about 5 runs of 6 of test_room's two seconds of noise even on an idle machine, and
each underrun moves the echo path by about a block for good. The room runs with real-time
priority where allowed, and when it or pacat stalls anyway it drops the backlog rather than let
the echo path grow; that, and an underrun or overrun parec or pacat reports, is a "resync" event
(benchmarks count runs with one apart, since no real room skips).

Control is JSON lines on stdin, events JSON lines on stdout, times are `time.monotonic()`
(CLOCK_MONOTONIC: comparable across processes on one machine):

    {"cmd": "say", "path": "x.wav", "delay_s": 0.5, "after": "now" | "far", "id": "n1"}
        -> {"event": "near_start", "id": "n1", "at_s": ..., "frame": ...} when its first sample
           is written, {"event": "near_end", ...} after its last.
        "after": "far" waits for the next far-end onset (the speaker starting to play).
    {"cmd": "quit"}
    Unasked: {"event": "far_onset" | "far_end" | "resync" | "delay_jump", "at_s": ..., ...};
    "delay_jump" is the output latency growing by `delay_jump_ms` (RoomConfig), once a turn.

Run as a process: `python tests/harness/room.py --speaker SINK --room SINK [--delay-ms ...]`
(it imports numpy, vocal, found through vocal's editable install, and its sibling
room_effects; chatter noise also harness.corpus). Tests use
`running_room(pulse, RoomConfig(...))` (or `Room.start`), and `play_turn` to play a reply
through it with the canceller and the barge-in detector wired as converse wires them.
"""

from __future__ import annotations

import argparse
import array
import contextlib
import fcntl
import json
import os
import queue
import subprocess
import sys
import termios
import threading
import time
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

# The signal processing, RoomConfig and the named conditions live in room_effects.
if __package__:  # imported as harness.room (tests, benchmarks)
    from harness.room_effects import CHUNK_FRAMES, SAMPLE_RATE, EchoPath, RoomConfig, room_noise
else:  # started by path as the room process: its own directory is first on sys.path
    from room_effects import CHUNK_FRAMES, SAMPLE_RATE, EchoPath, RoomConfig, room_noise

CHUNK_BYTES = CHUNK_FRAMES * 4  # float32
#: More than this much audio waiting in a pipe (30 ms) means the room or pacat stalled. Left
#: alone, the backlog would add its length to the echo path for good (a stall ratchets the
#: latency up, and past AEC3's delay range the canceller fails for every later turn); the room
#: drops it instead and reports a "resync" event, like a glitch in a real device.
MAX_BACKLOG_CHUNKS = 3
#: A far-end onset is the first chunk whose peak passes this after silence (-60 dBFS).
FAR_ONSET_PEAK = 1e-3
#: A far-end burst ends after 0.5 s below that; its `far_end` event carries the time of the
#: last loud chunk (when playback was stopped, for barge-in latency).
FAR_END_CHUNKS = 50


# -- the process ----------------------------------------------------------------------------
@dataclass
class _Near:
    id: str
    samples: np.ndarray
    start_frame: int | None  # None: waiting for the far-end onset
    delay_frames: int
    started: bool = False
    position: int = 0


_emit_lock = threading.Lock()


def _emit(event: str, **fields: Any) -> None:
    with _emit_lock:  # the loop and the xrun watchers both report
        sys.stdout.write(json.dumps({"event": event, **fields}) + "\n")
        sys.stdout.flush()


def _watch_xruns(stderr: Any, side: str) -> None:
    """Report parec's overruns and pacat's underruns (they say so on stderr with `-v`) as
    "resync" events. The pipes' backlog cannot show these: an underrun in pacat makes the sink
    play silence and every later chunk arrives that much later, so the echo path grows by a
    block or so while the room's own loop kept time."""
    for line in iter(stderr.readline, b""):
        # Verbose mode also prints a running "time: ...; latency: ..." status, ended by \r.
        for text in line.decode(errors="replace").lower().split("\r"):
            if "underrun" in text or "overrun" in text or "overflow" in text:
                _emit("resync", side=side, xrun=text.strip(), at_s=time.monotonic())


def _read_into(pipe: Any, view: memoryview) -> bool:
    """Fill `view` from a raw pipe; False at end of stream."""
    got = 0
    while got < len(view):
        n = pipe.readinto(view[got:])
        if not n:
            return False
        got += n
    return True


def _read_exactly(pipe: Any, count: int) -> None:
    _read_into(pipe, memoryview(bytearray(count)))


def _pipe_bytes(pipe: Any) -> int:
    """Bytes waiting in a pipe (either end)."""
    count = array.array("i", [0])
    fcntl.ioctl(pipe.fileno(), termios.FIONREAD, count)
    return count[0]


def _read_near(path: str) -> np.ndarray:
    from vocal.audio.wav import read_wav

    return read_wav(path).to_mono().resample(SAMPLE_RATE).mono_samples.astype(np.float32)


def _commands(inbox: queue.SimpleQueue) -> None:
    for line in sys.stdin:
        line = line.strip()
        if line:
            inbox.put(json.loads(line))
    inbox.put({"cmd": "quit"})  # stdin closed: the test process went away


def _raise_priority() -> None:
    """Physics is never late: run the room (and the parec/pacat it starts) ahead of the tests
    sharing the machine, so a busy CPU does not stretch its echo path (a stall would add its
    length to the room's latency for good). Real-time scheduling where allowed (root), else a
    lower nice value, else as is."""
    try:
        os.sched_setscheduler(0, os.SCHED_FIFO, os.sched_param(20))
        return
    except (AttributeError, PermissionError, OSError):
        pass
    try:
        os.nice(-10)
    except (PermissionError, OSError):
        pass


def run_room(speaker: str, room: str, config: RoomConfig) -> None:
    """The room's loop: parec from the speaker monitor, the echo path (room_effects.EchoPath)
    + near end + noise, pacat into the room."""
    # Built before parec starts (loading the chatter takes ~0.1 s, which would be a backlog).
    try:
        echo, noise = EchoPath(config), room_noise(config)
    except (RuntimeError, ValueError) as exc:  # e.g. chatter without the corpus: one clear line
        sys.exit(f"room: {exc}")
    _raise_priority()  # children inherit the scheduling policy
    fmt = ["--raw", "--format=float32le", f"--rate={SAMPLE_RATE}", "--channels=1"]
    # Unbuffered pipes: a backlog must show in FIONREAD, not hide in a Python buffer.
    rec = subprocess.Popen(
        ["parec", "-v", *fmt, "--latency-msec=10", "-d", f"{speaker}.monitor"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0,
    )  # fmt: skip
    play = subprocess.Popen(
        ["pacat", "-v", "--playback", *fmt, "--latency-msec=40", "-d", room],
        stdin=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0,
    )  # fmt: skip
    for proc, side in ((rec, "input"), (play, "output")):
        threading.Thread(target=_watch_xruns, args=(proc.stderr, side), daemon=True).start()
    inbox: queue.SimpleQueue = queue.SimpleQueue()
    threading.Thread(target=_commands, args=(inbox,), daemon=True).start()
    pending: list[_Near] = []
    frame = 0
    far_active = False  # the speaker is playing (for far-end onsets)
    quiet_chunks = 0
    last_loud = (0.0, 0)
    raw = bytearray(CHUNK_BYTES)
    view = memoryview(raw)
    _emit("ready", pid=os.getpid())
    try:
        while True:
            if not _read_into(rec.stdout, view):
                return
            now = time.monotonic()
            far = np.frombuffer(raw, np.float32).copy()
            behind = _pipe_bytes(rec.stdout) // CHUNK_BYTES
            if behind > MAX_BACKLOG_CHUNKS:  # we were stalled: catch up, keep the latency
                _read_exactly(rec.stdout, behind * CHUNK_BYTES)
                _emit("resync", side="input", dropped_ms=behind * 10, at_s=now, frame=frame)
            while not inbox.empty():
                cmd = inbox.get()
                if cmd["cmd"] == "quit":
                    return
                if cmd["cmd"] == "say":
                    delay = round(float(cmd.get("delay_s", 0.0)) * SAMPLE_RATE)
                    start = frame + delay if cmd.get("after", "now") == "now" else None
                    pending.append(
                        _Near(cmd.get("id", ""), _read_near(cmd["path"]) * cmd.get("gain", 1.0),
                              start, delay)
                    )  # fmt: skip
            peak = float(np.max(np.abs(far)))
            if peak > FAR_ONSET_PEAK:
                if not far_active:
                    far_active = True
                    _emit("far_onset", at_s=now, frame=frame)
                    echo.far_onset()  # drift and latency jump start again
                    for near in pending:
                        if near.start_frame is None:
                            near.start_frame = frame + near.delay_frames
                quiet_chunks = 0
                last_loud = (now, frame + CHUNK_FRAMES)
            else:
                quiet_chunks += 1
                if far_active and quiet_chunks >= FAR_END_CHUNKS:
                    far_active = False
                    _emit("far_end", at_s=last_loud[0], frame=last_loud[1])
            out = echo.process(far)
            if echo.jumped_at is not None:
                _emit("delay_jump", at_s=now + echo.jumped_at / SAMPLE_RATE,
                      frame=frame + echo.jumped_at)  # fmt: skip
            for near in list(pending):
                if near.start_frame is None or near.start_frame >= frame + CHUNK_FRAMES:
                    continue
                offset = max(0, near.start_frame - frame)
                take = min(CHUNK_FRAMES - offset, near.samples.shape[0] - near.position)
                out[offset : offset + take] += near.samples[near.position : near.position + take]
                if not near.started:
                    near.started = True
                    _emit("near_start", id=near.id, at_s=now + offset / SAMPLE_RATE,
                          frame=frame + offset)  # fmt: skip
                near.position += take
                if near.position >= near.samples.shape[0]:
                    pending.remove(near)
                    end_frame = frame + offset + take
                    _emit("near_end", id=near.id, at_s=time.monotonic(), frame=end_frame)
            if noise is not None:
                out += noise.next(CHUNK_FRAMES)
            queued = _pipe_bytes(play.stdin) // CHUNK_BYTES
            if queued > MAX_BACKLOG_CHUNKS:  # pacat fell behind: drop rather than lag
                _emit("resync", side="output", dropped_ms=10, at_s=now, frame=frame)
            else:
                play.stdin.write(out.astype(np.float32).tobytes())
                play.stdin.flush()
            frame += CHUNK_FRAMES
    except BrokenPipeError:
        return
    finally:
        for proc in (rec, play):
            proc.terminate()
        for proc in (rec, play):
            try:
                proc.wait(5)
            except subprocess.TimeoutExpired:
                proc.kill()


def parse_args(argv: list[str] | None = None) -> tuple[str, str, RoomConfig]:
    """The room process's command line: (speaker sink, room sink, RoomConfig.args()' config)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--speaker", required=True, help="sink whose monitor is the far end")
    parser.add_argument("--room", required=True, help="sink the room plays into (the mic)")
    names = [f.name for f in fields(RoomConfig)]
    for name in names:  # --delay-ms ... --noise-kind, one per field, as RoomConfig.args() writes
        default = getattr(RoomConfig, name)
        kind = float if default is None else type(default)  # None: noise_dbfs, a level
        parser.add_argument(f"--{name.replace('_', '-')}", type=kind, default=default)
    args = parser.parse_args(argv)
    return args.speaker, args.room, RoomConfig(**{n: getattr(args, n) for n in names})


def main(argv: list[str] | None = None) -> None:
    run_room(*parse_args(argv))


# -- the test side ----------------------------------------------------------------------------
@dataclass
class Room:
    """A running room process and the events it reported."""

    proc: subprocess.Popen
    config: RoomConfig
    speaker: str
    room: str
    events: list[dict] = field(default_factory=list)
    _cond: threading.Condition = field(default_factory=threading.Condition)
    _said: int = 0

    @classmethod
    def start(cls, speaker: str, room: str, config: RoomConfig = RoomConfig()) -> Room:  # noqa: B008 (frozen)
        proc = subprocess.Popen(
            [sys.executable, str(Path(__file__).resolve()), "--speaker", speaker, "--room", room,
             *config.args()],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, bufsize=1,
        )  # fmt: skip
        room_ = cls(proc, config, speaker, room)
        threading.Thread(target=room_._read_events, daemon=True).start()
        room_.wait_event("ready", timeout_s=10)
        time.sleep(0.3)  # parec/pacat streams settle before anything plays
        return room_

    @property
    def microphone_source(self) -> str:
        """The PulseAudio source the microphone must record: the room sink's monitor."""
        return f"{self.room}.monitor"

    def _read_events(self) -> None:
        for line in self.proc.stdout:
            with self._cond:
                self.events.append(json.loads(line))
                self._cond.notify_all()

    def wait_event(self, name: str, *, id: str | None = None, timeout_s: float = 10.0,
                   after: int = 0) -> dict:  # fmt: skip
        """The first event `name` (with `id`) at index >= `after`; raises on timeout."""
        deadline = time.monotonic() + timeout_s
        with self._cond:
            while True:
                for event in self.events[after:]:
                    if event["event"] == name and (id is None or event.get("id") == id):
                        return event
                left = deadline - time.monotonic()
                if left <= 0 or self.proc.poll() is not None:
                    raise TimeoutError(f"the room reported no {name!r} event")
                self._cond.wait(min(left, 0.1))

    def find_event(self, name: str, *, id: str | None = None) -> dict | None:
        with self._cond:
            for event in self.events:
                if event["event"] == name and (id is None or event.get("id") == id):
                    return event
        return None

    def index_of(self, event: dict) -> int:
        """The index in `events` of `event` (one that wait_event or find_event returned)."""
        with self._cond:
            return next(i for i, seen in enumerate(self.events) if seen is event)

    def stalls(self, since: int = 0) -> int:
        """How often the room dropped a backlog ("resync") since event `since`."""
        with self._cond:
            return sum(1 for e in self.events[since:] if e["event"] == "resync")

    def say(self, path: str | os.PathLike, *, delay_s: float = 0.0, after: str = "now",
            gain: float = 1.0) -> str:  # fmt: skip
        """Schedule a person speaking the WAV at `path`, `delay_s` after now or after the next
        far-end onset (`after="far"`). Returns the id its events carry."""
        self._said += 1
        near_id = f"near{self._said}"
        command = {"cmd": "say", "path": str(path), "delay_s": delay_s, "after": after,
                   "gain": gain, "id": near_id}  # fmt: skip
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()
        return near_id

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.proc.stdin.write(json.dumps({"cmd": "quit"}) + "\n")
                self.proc.stdin.flush()
            except (BrokenPipeError, ValueError):
                pass
            try:
                self.proc.wait(5)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
        for stream in (self.proc.stdin, self.proc.stdout):
            try:
                stream.close()
            except Exception:
                pass

    def __enter__(self) -> Room:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def describe(self) -> dict:
        return asdict(self.config)


# -- one echo-cancelled turn through the room ---------------------------------------------------
#: A measurement is retried this often when the room itself stalled during it: a stall jumps
#: the echo path in a way no real room does (the machine's other load, not vocal, broke it).
#: Five: on CI's two loaded cores all three runs of the ERLE test were once disturbed.
STALL_ATTEMPTS = 5


def without_room_stall(
    room: Room, measure: Any, attempts: int = STALL_ATTEMPTS, clean: Any = None
) -> Any:
    """`measure()` until one run passes with the room never stalling (and `clean(result)`
    true, if given); that run's result. The last run's result if every attempt was disturbed
    (the test then judges it as it is)."""
    result = None
    for _ in range(attempts):
        before = len(room.events)
        result = measure()
        time.sleep(0.05)  # the room's events for the run's last chunks
        if room.stalls(before) == 0 and (clean is None or clean(result)):
            return result
    return result


def loaded_machine() -> bool:
    """More processes wanted a core than there are cores, over the last minute: a result that
    a loaded machine can spoil (issue 38) may then be allowed for, and said so."""
    return os.getloadavg()[0] > (os.cpu_count() or 1)


@dataclass
class TurnRecording:
    """What one reply played through the room left: the microphone's raw and cleaned signals
    (aligned, from the moment the microphone opened), the far end's activity, the detector."""

    captured: np.ndarray
    cleaned: np.ndarray
    start_s: float  # monotonic capture time of the first sample
    first_loud_s: float | None
    barge_in: Any  # vocal.duplex.bargein.detector.BargeIn | None
    detector: Any  # vocal.duplex.bargein.detector.BargeInDetector | None
    stopped_at_s: float | None  # when the detector's stop callback returned
    played_s: float  # seconds of the reply sent to the device
    overflows: int
    underflows: int
    aec_errors: int
    glitches: int  # late callbacks the canceller saw

    def index(self, at_s: float) -> int:
        """The sample index in `captured`/`cleaned` of monotonic time `at_s`."""
        return round((at_s - self.start_s) * SAMPLE_RATE)


def aec_module_default(name: str) -> Any:
    from vocal.duplex.canceller import aec as aec_module

    return getattr(aec_module, name)


def play_turn(
    reply: np.ndarray,
    sample_rate: int = SAMPLE_RATE,
    *,
    speech_probability: Any = None,
    options: Any = None,
    after_s: float = 0.8,
    listen_after_barge_in_s: float = 1.5,
    aec_options: Any = None,
    render_log: list | None = None,
    glitch_slack_s: float | None = None,
    raw_when_quiet_s: float | None = aec_module_default("RAW_WHEN_QUIET_S"),
    stream_delay_ms: int | None = None,
    drift_ppm: float = 0.0,
) -> TurnRecording:
    """Play `reply` (mono at `sample_rate`) through the current PULSE_SINK with the
    microphone (PULSE_SOURCE: the room's output) open, both wired to a fresh APM as converse
    wires them. With `speech_probability`, a `BargeInDetector` watches the cleaned signal and
    stops the player. Returns when playback has ended (or been stopped) and `after_s` (or
    `listen_after_barge_in_s` after a barge-in) has passed. `stream_delay_ms`: the canceller's
    delay hint, as an echo profile gives it (vocal.duplex.canceller.profile), and `drift_ppm` its
    output clock's drift."""
    from vocal.audio.devices import Microphone
    from vocal.audio.player import Player
    from vocal.duplex.canceller import aec as aec_module
    from vocal.duplex.wiring import EchoGuard

    aec_module._reset_shared_apm()  # every turn is a new process: a fresh canceller
    canceller = aec_module.EchoCanceller(
        render_sample_rate=sample_rate,
        options=aec_options or aec_module.AecOptions(),
        glitch_slack_s=glitch_slack_s or aec_module.CALLBACK_GLITCH_S,
        raw_when_quiet_s=raw_when_quiet_s,
        stream_delay_ms=stream_delay_ms,
        drift_ppm=drift_ppm,
    )
    guard = EchoGuard(canceller)  # wired as converse wires it
    raw: list[np.ndarray] = []

    def render(block: np.ndarray) -> None:
        guard.render(block)
        if render_log is not None:
            render_log.append((time.monotonic(), float(np.max(np.abs(block)))))

    def capture(block: np.ndarray) -> np.ndarray:
        raw.append(block.copy())
        return guard.capture(block)

    mic = Microphone(SAMPLE_RATE, on_block=capture).open()
    player = Player(sample_rate, on_block=render).open()  # plays silence until `play`
    stopped: list[float] = []

    def stop() -> None:
        player.stop()
        stopped.append(time.monotonic())

    detector = None
    if speech_probability is not None:
        detector = guard.watch(speech_probability, stop, options, player=player, mic=mic)
    cleaned: list[np.ndarray] = []
    # Play only once capture runs: a new input stream's first block can take half a second
    # on a loaded machine, and the canceller must see the echo from its first sample.
    first = mic.read(timeout_s=5.0)
    if first is None:
        player.close()
        mic.close()
        raise RuntimeError("the microphone delivered nothing for 5 s")
    start_s = first.captured_at_s - first.samples.shape[0] / SAMPLE_RATE
    cleaned.append(first.samples)
    player.play(reply)
    player.finish()
    deadline = None
    try:
        for block in mic.blocks():
            cleaned.append(block.samples)
            if detector is not None and detector.fired is None:
                guard.feed(block)
            if deadline is None and (player.done or stopped):
                wait = listen_after_barge_in_s if stopped else after_s
                deadline = time.monotonic() + wait
            if deadline is not None and time.monotonic() >= deadline:
                break
    finally:
        player.close()
        mic.close()
    delay = guard.capture_delay_frames
    captured = np.concatenate(raw) if raw else np.zeros(0, np.float32)
    clean = np.concatenate(cleaned)[delay:] if cleaned else np.zeros(0, np.float32)
    n = min(captured.shape[0], clean.shape[0])
    return TurnRecording(
        captured=captured[:n], cleaned=clean[:n], start_s=start_s,
        first_loud_s=canceller.activity.first_loud_s,
        barge_in=detector.fired if detector else None, detector=detector,
        stopped_at_s=stopped[0] if stopped else None,
        played_s=player.played_frames / sample_rate, overflows=mic.overflows,
        underflows=player.underflows, aec_errors=canceller.errors, glitches=canceller.glitches,
    )  # fmt: skip


@contextlib.contextmanager
def running_room(pulse: Any, config: RoomConfig = RoomConfig()):  # noqa: B008 (frozen)
    """A room between this session's sinks (`pulse`), with the microphone (PULSE_SOURCE) moved
    to its output until the block ends. Test modules wrap it in a module-scoped fixture."""
    with Room.start(pulse.speaker, pulse.room, config) as started:
        with microphone_on(started.microphone_source):
            yield started


@contextlib.contextmanager
def microphone_on(source: str):
    """PULSE_SOURCE set to `source` while streams open inside the block (libpulse reads it
    when each stream's context is created)."""
    previous = os.environ.get("PULSE_SOURCE")
    os.environ["PULSE_SOURCE"] = source
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("PULSE_SOURCE", None)
        else:
            os.environ["PULSE_SOURCE"] = previous


if __name__ == "__main__":
    main()
