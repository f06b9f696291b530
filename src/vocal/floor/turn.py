"""A turn: what a speaking process wraps its audio in (conch, control socket, history).

    with Turn(settings, kind="speak", session=..., agent=..., voice=...) as turn:
        result = turn.play(audio, text="...", voice="...")    # or drive a Player yourself

On entry the turn binds its control socket (so `vocal control stop` can cancel even a wait),
then takes the conch (unless `use_conch=False`): blocking in "wait" mode, or raising `ConchBusy`
(exit 3) at once in "callback" mode. While it holds the floor a watcher thread renews the hold
and notices when it is lost (`vocal conch bump`, expiry): the output is stopped at once and
`play` raises `ConchLost` (exit 3). With VOCAL_AUTO_FOCUS_PANE, taking the floor also selects
the turn's tmux pane (vocal.floor.focus), beside the audio. Control commands act on the attached
output from the socket's thread (stop/pause/resume land within one audio block) and are queued
as events for the main thread (skip_forward, skip_back), which `play` handles; callers that
drive their own loop (speak with streamed sentences, converse while listening) register
callbacks with `on` and read `events`. On exit, also by exception, SIGTERM or SIGHUP, the turn
stops the output, releases the floor and removes its socket.
"""

from __future__ import annotations

import contextlib
import os
import queue
import signal
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING

from vocal.errors import Interrupted
from vocal.floor.conch.hold import HoldWatcher
from vocal.floor.conch.queue import Conch
from vocal.floor.conch.records import ConchCancelled, ConchLost, Held, Holder, default_session
from vocal.floor.control import ControlServer
from vocal.floor.history import History, Recording, Utterance
from vocal.floor.phases import IllegalTransition, TurnPhase, allowed
from vocal.floor.shown import shown_name

if TYPE_CHECKING:
    from types import FrameType

    import numpy as np

    from vocal.audio.output import PlaybackControl
    from vocal.audio.player import Player
    from vocal.audio.wav import Audio
    from vocal.config import Settings
    from vocal.floor.focus import FocusResult

    #: What `signal.signal` returns: a handler, SIG_DFL or SIG_IGN, or None (not set from Python).
    SignalHandler = Callable[[int, FrameType | None], object] | int | None

Callback = Callable[[dict], "dict | None"]
#: How often the play loop looks at the output and the event queue.
_POLL_S = 0.01


@dataclass
class TurnEvent:
    """A control command for the main thread: `cmd`, the utterance a skip_back chose, and the
    monotonic time the command arrived."""

    cmd: str
    utterance: Utterance | None = None
    at_s: float = 0.0


@dataclass
class PlayResult:
    """How `Turn.play` ended: "finished", "stopped" or "skipped" (skip_forward)."""

    outcome: str
    utterance_id: int | None
    #: Monotonic times: the first output callback, and when the last sample was played (or the
    #: output was stopped). None if nothing played.
    started_at_s: float | None
    ended_at_s: float | None
    #: Utterances played, in order (a skip_back adds the one it went back to).
    played_ids: list[int | None]
    #: Output blocks the device reported it ran dry (a loaded machine).
    underflows: int = 0

    def to_dict(self) -> dict[str, object]:
        return asdict(self)


class Turn:
    """One process's turn at the speaker. See the module docstring."""

    def __init__(
        self,
        settings: Settings,
        *,
        kind: str = "speak",
        session: str | None = None,
        agent: str | None = None,
        voice: str | None = None,
        use_conch: bool = True,
        mode: str | None = None,
        timeout_s: float | None = None,
        control: bool = True,
        warm_audio: bool = True,
        status: Callable[[str], None] | None = None,
    ) -> None:
        self.settings = settings
        self.kind = kind
        explicit = session or settings.session
        self.session = explicit or default_session()
        self.agent = agent or settings.agent
        self.voice = voice
        self.use_conch = use_conch
        self.mode = mode or settings.conch_mode
        self.timeout_s = settings.conch_timeout_s if timeout_s is None else timeout_s
        self._keep_place = explicit is not None
        self._control_enabled = control
        self._warm_audio = warm_audio
        self._status = status or _stderr
        self.conch = Conch.from_settings(settings)
        self.history = History.from_settings(settings)
        self.held: Held | None = None
        #: Where the turn is (`set_phase` moves it; vocal.floor.phases has the moves).
        self.phase = TurnPhase.STARTING
        self._phase_lock = threading.Lock()
        self._strict_phases = os.environ.get("VOCAL_STRICT_PHASES") == "1"
        self.position: int | None = None
        self.events: queue.SimpleQueue[TurnEvent] = queue.SimpleQueue()
        self.stopped = threading.Event()
        self.lost = threading.Event()
        self._cancel = threading.Event()
        self._callbacks: dict[str, list[Callback]] = {}
        self._output: PlaybackControl | None = None
        self._output_lock = threading.RLock()
        self._current: Utterance | None = None
        self._server: ControlServer | None = None
        self._watcher: HoldWatcher | None = None
        self._old_handlers: dict[int, SignalHandler] = {}
        self._warmer: threading.Thread | None = None
        self._focuser: threading.Thread | None = None
        #: What pane focus did when this turn took the floor (vocal.floor.focus.FocusResult).
        self.focus: FocusResult | None = None

    # -- lifecycle ---------------------------------------------------------------------------
    def __enter__(self) -> Turn:
        try:
            if self._warm_audio:
                # Importing sounddevice starts PortAudio (~100 ms here, most of the silence
                # between two speakers): do it while the conch is being taken, not after.
                self._warmer = threading.Thread(target=_warm_audio, name="warm-audio", daemon=True)
                self._warmer.start()
            self._install_signal_handlers()
            if self._control_enabled:
                self._server = ControlServer(
                    self.settings.run_dir,
                    self._handle,
                    info={"session": self.session, "agent": self.agent, "kind": self.kind},
                ).start()
            if self.use_conch:
                self._take_floor()
            self.set_phase(TurnPhase.READY)
        except BaseException:
            self._cleanup()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self._cleanup()

    def _take_floor(self) -> None:
        self.set_phase(TurnPhase.WAITING)
        try:
            self.held = self.conch.acquire(
                session=self.session,
                agent=self.agent,
                voice=self.voice,
                mode=self.mode,
                timeout_s=self.timeout_s,
                keep_place=self._keep_place,
                cancel=self._cancel,
                on_wait=self._on_wait,
            )
        except ConchCancelled:
            self.stopped.set()
            return
        self.position = 0
        self._watcher = HoldWatcher(self.conch, self.held, self._on_lost).start()
        if self.settings.auto_focus_pane:  # off: no import, no tmux process
            # Beside the audio, not before it: two tmux calls cost ~10-20 ms.
            self._focuser = threading.Thread(target=self._focus_pane, name="focus", daemon=True)
            self._focuser.start()

    def _focus_pane(self) -> None:
        from vocal.floor.focus import focus_pane

        self.focus = focus_pane(self.settings)

    def _on_wait(self, position: int, holder: Holder | None) -> None:
        first = self.position is None
        self.position = position
        if first:
            # The holder's name is from the conch's files: shown safely (vocal.floor.shown).
            who = shown_name(holder.agent or holder.session) if holder else "the previous speaker"
            self._status(f"waiting for the floor: position {position}, {who} is speaking")

    def _on_lost(self) -> None:
        self.lost.set()
        self.events.put(TurnEvent("lost", at_s=time.monotonic()))
        self.stop_output()

    def _cleanup(self) -> None:
        for signum in self._old_handlers:  # a second SIGTERM must not cut the clean-up short
            signal.signal(signum, signal.SIG_IGN)
        self.stop_output()
        if self._watcher is not None:
            self._watcher.stop()  # before releasing, or it would see its own release as a loss
        if self.held is not None and not self.held.reentrant and not self.lost.is_set():
            with contextlib.suppress(OSError):
                self.conch.release(self.held.token)
        if self._server is not None:
            self._server.close()
            self._server = None
        self._restore_signal_handlers()
        if self._focuser is not None:
            self._focuser.join(5.0)
        if self._warmer is not None:
            # Exiting while that thread is inside Pa_Initialize crashes the interpreter at
            # shutdown (SIGSEGV seen when SIGTERM came during the wait): let it finish.
            self._warmer.join(5.0)
        self.set_phase(TurnPhase.DONE)

    def _install_signal_handlers(self) -> None:
        # SIGTERM/SIGHUP would end the process without unwinding: no release, socket left.
        # Raising instead runs every `finally` on the way out (exit 130, like Ctrl-C).
        if threading.current_thread() is not threading.main_thread():
            return
        for signum in (signal.SIGTERM, signal.SIGHUP):
            self._old_handlers[signum] = signal.signal(signum, _raise_interrupted)

    def _restore_signal_handlers(self) -> None:
        for signum, handler in self._old_handlers.items():
            signal.signal(signum, handler)
        self._old_handlers.clear()

    # -- what callers use --------------------------------------------------------------------
    @property
    def holds_floor(self) -> bool:
        return self.held is not None and not self.lost.is_set()

    def on(self, cmd: str, callback: Callback) -> None:
        """Run `callback(request)` on the control thread when `cmd` arrives, after the default
        action; a dict it returns is added to the reply (converse: skip_forward while listening
        ends the recording)."""
        self._callbacks.setdefault(cmd, []).append(callback)

    def attach_output(self, output: PlaybackControl | None) -> None:
        """The output that stop/pause/resume/skip act on (None: detach)."""
        with self._output_lock:
            self._output = output

    def guard_block(self, out: np.ndarray) -> None:
        """A block observer of the output (the second: vocal.audio.output): silence once the
        floor is lost or its hold has run out. The watcher stops the output within its poll,
        but a process frozen (SIGSTOP) past its expiry would otherwise talk over the next
        speaker for that long when it wakes."""
        watcher = self._watcher
        if watcher is not None and (self.lost.is_set() or time.time() >= watcher.valid_until):
            out[:] = 0.0

    def stop_output(self) -> None:
        with self._output_lock:
            if self._output is not None:
                with contextlib.suppress(Exception):
                    self._output.stop()

    @property
    def state(self) -> TurnPhase:
        """The phase (read-only: `set_phase` moves it)."""
        return self.phase

    def set_phase(self, phase: TurnPhase) -> None:
        """Move the turn to `phase` (what `status` reports as "state"), from any thread.

        A move that `vocal.floor.phases.TRANSITIONS` does not allow raises `IllegalTransition`
        where transitions are strict (VOCAL_STRICT_PHASES=1: the tests). Elsewhere it is
        reported on stderr and made anyway: the phase only reports what the turn is doing, so
        refusing it would make `status` lie, and raising would end a turn that is playing and
        holds the floor (or fail a control request on the socket's thread) over bookkeeping.
        """
        with self._phase_lock:
            old = self.phase
            if not allowed(old, phase):
                if self._strict_phases:
                    raise IllegalTransition(f"turn phase {old} -> {phase}")
                _stderr(f"warning: turn phase {old} -> {phase} is not an allowed transition")
            self.phase = phase

    def check(self) -> None:
        """Raise `ConchLost` if the floor was taken from this turn."""
        if self.lost.is_set():
            raise ConchLost(
                "the floor was taken from this turn (vocal conch bump, or the hold expired)",
                hint="see `vocal conch status`",
            )

    def begin_utterance(self, *, text: str, voice: str | None, sample_rate: int) -> Recording:
        """Record a new utterance in the history; `append` its PCM as it is played."""
        recording = self.history.begin(
            text=text, voice=voice, sample_rate=sample_rate, session=self.session, agent=self.agent
        )
        self._current = recording.utterance
        return recording

    # -- playing -----------------------------------------------------------------------------
    def play(
        self,
        audio: Audio,
        *,
        text: str = "",
        voice: str | None = None,
        record: bool = True,
        utterance: Utterance | None = None,
        device: str | int | None = None,
        volume: float = 1.0,
    ) -> PlayResult:
        """Play `audio` to the speaker, obeying control commands, until it ends.

        `record` adds it to the history first (a replay passes `utterance` instead). skip_back
        plays the utterance the history walk picks (the first press restarts this one) and the
        turn goes on from there; skip_forward and stop end it early.

        Raises:
            ConchLost: the floor was taken while playing.
        """
        from vocal.audio.player import Player

        if record:
            with self.begin_utterance(
                text=text, voice=voice or self.voice, sample_rate=audio.sample_rate
            ) as recording:
                recording.append(audio.mono_samples)
            utterance = recording.utterance
        elif utterance is not None:
            self._current = utterance
        result = PlayResult("stopped", utterance.id if utterance else None, None, None, [])
        if self.stopped.is_set():
            return result
        samples, sample_rate = audio.mono_samples, audio.sample_rate
        while True:
            self.check()
            player = Player(sample_rate, device=device, volume=volume)
            player.add_block_observer(self.guard_block)
            player.open()
            result.played_ids.append(self._current.id if self._current else None)
            self.attach_output(player)
            self.set_phase(TurnPhase.PLAYING)
            event = None
            try:
                player.play(samples)
                player.finish()
                event = self._wait_for(player)
            finally:
                self.attach_output(None)
                player.stop() if event is not None else player.close()
                if result.started_at_s is None:
                    result.started_at_s = player.started_at_s
                result.underflows += player.underflows
                result.ended_at_s = time.monotonic()
            self.set_phase(TurnPhase.READY)
            if event is None:
                result.outcome = "finished"
                return result
            if event.cmd == "lost":
                self.check()
            if event.cmd == "stop":
                result.outcome = "stopped"
                return result
            if event.cmd == "skip_forward":
                result.outcome = "skipped"
                return result
            if event.cmd == "skip_back" and event.utterance is not None:
                self._current = event.utterance
                replay = event.utterance.audio()
                samples, sample_rate = replay.mono_samples, replay.sample_rate

    def _wait_for(self, player: Player) -> TurnEvent | None:
        """Block until `player` has played everything (None) or an event ends this stretch."""
        while True:
            try:
                event = self.events.get(timeout=_POLL_S)
            except queue.Empty:
                if player.done and not player.paused:
                    # Stopped from outside between two looks: the reason is queued by now.
                    try:
                        event = self.events.get_nowait()
                    except queue.Empty:
                        return None
                else:
                    continue
            if event.cmd in ("stop", "skip_forward", "skip_back", "lost"):
                return event

    # -- the control handler (runs on the socket's threads) ----------------------------------
    def _handle(self, cmd: str, request: dict) -> dict:
        now = time.monotonic
        reply: dict[str, object] = {}
        with self._output_lock:
            output = self._output
            # Events go in before the output stops: the play loop, seeing the output done,
            # must find the reason waiting for it.
            if cmd == "stop":
                self.stopped.set()
                self._cancel.set()  # a turn still waiting for the floor gives up its place
                self.events.put(TurnEvent("stop", at_s=now()))
                if output is not None:
                    output.stop()
            elif cmd == "pause":
                if output is None:
                    reply = {"ok": False, "error": f"nothing is playing (state {self.phase})"}
                else:
                    output.pause()
                    self.set_phase(TurnPhase.PAUSED)
            elif cmd == "resume":
                if output is None:
                    reply = {"ok": False, "error": f"nothing is playing (state {self.phase})"}
                else:
                    output.resume()
                    self.set_phase(TurnPhase.PLAYING)
            elif cmd == "skip_forward":
                self.events.put(TurnEvent("skip_forward", at_s=now()))
                if output is not None:
                    output.stop()
            elif cmd == "skip_back":
                target = self.history.step_back()
                if target is None:
                    reply = {"ok": False, "error": "the history is empty"}
                else:
                    self.events.put(TurnEvent("skip_back", target, at_s=now()))
                    if output is not None:
                        output.stop()
                    reply = {"target": target.to_dict()}
        reply["applied_at_s"] = now()
        if cmd != "status" and reply.get("ok", True):
            for callback in self._callbacks.get(cmd, []):
                reply.update(callback(request) or {})
        reply.update(self.status())
        return reply

    def status(self) -> dict[str, object]:
        """What `vocal control status` shows."""
        output = self._output
        current = self._current
        info: dict[str, object] = {
            "state": self.phase.value,
            "pid": os.getpid(),
            "kind": self.kind,
            "session": self.session,
            "agent": self.agent,
            "voice": self.voice,
            "holds_floor": self.holds_floor,
            "position": self.position,
            "utterance": None,
        }
        if current is not None:
            info["utterance"] = {"id": current.id, "text": current.text}
        if output is not None:
            # The reply's audio sent so far: paused time and silence do not count (issue 17).
            played = output.consumed_frames
            info["played_s"] = round(played / output.sample_rate, 3)
            info["paused"] = bool(output.paused)
        for callback in self._callbacks.get("status", []):
            info.update(callback({}) or {})
        return info


def replay(
    settings: Settings,
    utterance: Utterance,
    *,
    session: str | None = None,
    agent: str | None = None,
    use_conch: bool = True,
    device: str | int | None = None,
    volume: float = 1.0,
) -> PlayResult:
    """Play a recorded utterance again in its own turn: PCM from disk, no STT or TTS.

    The skip-back walk then stands on it, so a skip_back during or after it steps further back.
    """
    history = History.from_settings(settings)
    history.set_cursor(utterance.id)
    audio = utterance.audio()
    with Turn(
        settings,
        kind="replay",
        session=session,
        agent=agent,
        voice=utterance.voice,
        use_conch=use_conch,
    ) as turn:
        return turn.play(audio, record=False, utterance=utterance, device=device, volume=volume)


def _warm_audio() -> None:
    with contextlib.suppress(Exception):  # a missing PortAudio is reported when output opens
        from vocal.audio.devices import sounddevice

        sounddevice()


def _raise_interrupted(signum: int, _frame: FrameType | None) -> None:
    raise Interrupted(f"terminated by {signal.Signals(signum).name}")


def _stderr(message: str) -> None:
    print(f"vocal: {message}", file=sys.stderr, flush=True)


__all__ = ["PlayResult", "Turn", "TurnEvent", "replay"]
