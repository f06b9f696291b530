"""One agent turn as a library: take the floor, speak, listen, return what the person said.

`converse(text, options, settings)` assembles the parts other modules own:

- `vocal.floor.turn.Turn`: the conch, the control socket, the history, SIGTERM/SIGHUP unwinding;
- `vocal.speaking.speech.Speech`: sentence streaming into a `Player` (sentence i+1 is synthesized
  while sentence i plays);
- `vocal.duplex.canceller.aec.EchoCanceller`: the Player's output callback feeds AEC3's reverse
  stream, the Microphone's input callback runs the capture stream (docs/design.md: only this wiring
  keeps the reference ahead of its echo);
- `vocal.duplex.bargein.detector.BargeInDetector`: Silero VAD on the cleaned capture while the reply
  plays; it stops playback within one capture block and keeps the chunks that made it fire;
- `vocal.hearing.listening.listen`: endpointing and transcription, with the STT engine imported and
  loaded while the reply plays, in a child process (`vocal.hearing.stt_process`: loading it here
  held the GIL long enough to starve the audio callbacks).

Modes:
- barge-in (default): the microphone is open for the whole turn. After a barge-in the kept
  pre-roll is fed to the endpointer first, so the interrupting words are transcribed; after
  the reply ends, the room's tail (`BargeInOptions.tail_inhibit_ms`) is blanked before listening.
- half-duplex (`barge_in=False`): nothing captured before the reply's end plus
  `REVERB_GAP_MS` reaches the endpointer (the stream opens early, as it takes 0.1-0.5 s to
  start, and what it hears meanwhile is discarded unheard).

The control channel works throughout: `stop` ends the turn (no listening; `stopped` in the
result, a `[stopped]` marker in the text output), `skip_forward` during the reply cuts to
listening and during listening ends the recording (what was heard is still transcribed),
`pause`/`resume` act on the reply.
"""

from __future__ import annotations

import collections
import contextlib
import sys
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from vocal.duplex.adapters import INPUT_TIMEOUT_S, SpeechOutput, TurnSource
from vocal.duplex.options import ConverseOptions, ConverseResult
from vocal.duplex.outcome import TurnParts, converse_result, record_history
from vocal.duplex.wiring import EchoGuard
from vocal.errors import DeviceError, UsageError
from vocal.floor.phases import TurnPhase
from vocal.hearing.live import status_line

if TYPE_CHECKING:
    from vocal.audio.devices import Block, Microphone
    from vocal.config import Settings
    from vocal.duplex.canceller.profile import EchoProfile
    from vocal.duplex.echo_free.onset import OnsetFit
    from vocal.floor.turn import Turn
    from vocal.hearing.listening import ListenResult

#: Half-duplex: the microphone is heard from this long after the reply's last sample, so the
#: room's reverberant tail is not recorded (the issue's ~200 ms; the room harness's tail is
#: 40 ms plus ~30 ms of path latency).
REVERB_GAP_MS = 200
#: An output that plays nothing for this long while not paused has failed (a vanished device
#: stops calling back instead of raising).
OUTPUT_STALL_S = 2.0
#: Cleaned blocks kept while the reply plays (32 ms each: 5 s), for a late barge-in's onset:
#: the detector can fire a second after the person began, and the echo-free capture traces
#: their start up to 2 s further back (vocal.duplex.handover.near_end_onset_s).
KEEP_BLOCKS = 156
#: The marker printed for a turn ended by `vocal control stop`.
STOPPED_MARKER = "[stopped]"

Report = Callable[[str], None]


def report_to_stderr(message: str) -> None:
    """A turn's status line on stderr, as every command prints one."""
    print(f"vocal: {message}", file=sys.stderr, flush=True)


# -- the turn ---------------------------------------------------------------------------------
def converse(
    text: str,
    options: ConverseOptions,
    settings: Settings,
    *,
    report: Report | None = report_to_stderr,
    started_at_s: float | None = None,
) -> ConverseResult:
    """Speak `text` in a turn, then listen for the answer; see the module docstring.

    Raises:
        UsageError: empty text, a bad --aec value, unknown voice (exit 2).
        ConchTimeout / ConchLost: the floor was not granted, or taken mid-turn (exit 3).
        DeviceError / EngineError: a device failed or vanished, an engine is missing (exit 5).
        Interrupted: SIGTERM, SIGHUP or Ctrl-C (exit 130).
    Nobody speaking is not an error here: `speech_heard` is False (the command exits 4).
    """
    from vocal.audio.headphones import aec_wanted
    from vocal.duplex.bargein.room_level import fresh_room_level
    from vocal.duplex.canceller.profile import HALF_DUPLEX, known_pair, load_profile
    from vocal.floor.gates import read_gates
    from vocal.speaking.speech import resolve_voice
    from vocal.tts import engine_class

    started_at_s = time.monotonic() if started_at_s is None else started_at_s
    report = report or (lambda _m: None)
    if not text.strip():
        raise UsageError("nothing to say: the text is empty")
    if options.push_to_talk:
        from vocal.hearing.push_to_talk import require_terminal

        require_terminal()  # before anything is said
    barge_in = settings.barge_in
    use_aec, detection = aec_wanted(settings.aec)
    if not barge_in:
        use_aec = False  # nothing is heard while the reply plays: nothing to cancel
    profile = room_db = None
    devices = (settings.output_device, settings.input_device)
    pair = known_pair(settings.home, *devices) if use_aec else None
    if pair is not None:  # one `pactl info` for the profile, the room and what is learnt
        profile = load_profile(settings.home, *pair)
        room_db = fresh_room_level(settings.home, *pair, now_s=time.time())
        devices = pair
    if profile is not None and profile.verdict == HALF_DUPLEX and detection is not None:
        # --aec auto (the only mode with a detection), and `vocal doctor --echo` found the
        # echo here too strong to cancel.
        barge_in = use_aec = False
        report(
            f"half-duplex: `vocal doctor --echo` found the echo here cancelled by "
            f"{profile.reduction_db or 0:.0f} dB only; speak after the reply "
            "(headphones give barge-in back)"
        )
    name, voice = resolve_voice(options.voice or settings.voice, options.engine, settings)
    rate = engine_class(name).sample_rate
    gates = read_gates(settings.home)
    parts = TurnParts(
        text=text,
        voice=voice,
        barge_in=barge_in,
        use_aec=use_aec,
        started_at_s=started_at_s,
        clock={"started": started_at_s},
    )
    run = _Run(
        parts,
        options,
        settings,
        report,
        name=name,
        rate=rate,
        gain=None if gates.silent else gates.gain,
        devices=devices,
        profile=profile,
        room_db=room_db,
    )
    result = run.run()
    result.aec_detection = detection.kind.value if detection is not None else None
    result.echo_profile = profile.to_dict() if profile is not None else None
    result.learned_echo_delay_ms = parts.learned_delay_ms
    return result


class _Run:
    """The state of one converse turn (kept together so clean-up sees everything opened)."""

    def __init__(
        self,
        parts: TurnParts,
        options: ConverseOptions,
        settings: Settings,
        report: Report,
        *,
        name: str,
        rate: int,
        gain: float | None,
        devices: tuple[str | None, str | None],
        profile: EchoProfile | None = None,
        room_db: float | None = None,
    ) -> None:
        #: What the turn opens and measures; the result is made from it alone.
        self.parts = parts
        self.options, self.settings, self.report = options, settings, report
        self.devices = devices  # (output, input) as the options and settings name them
        #: The room's level a recent turn heard here (vocal.duplex.bargein.room_level), or None.
        self.room_db = room_db
        self.name, self.rate, self.gain = name, rate, gain
        #: This device pair's echo as last measured (vocal.duplex.canceller.profile): its delay
        #: starts the canceller closer to the echo.
        self.profile = profile
        self.listen_stop = threading.Event()
        #: What the turn is doing, on stderr when it is a terminal (vocal.hearing.live).
        self.line = status_line()
        #: The converse step `status` reports: "starting", "speaking", "listening".
        self.phase = "starting"

    # control callbacks (the control socket's thread)
    def _on_skip(self, _request: dict) -> dict:
        if self.phase == "speaking":
            self.parts.skip_requested.set()
        else:
            self.listen_stop.set()
        return {"converse": self.phase}

    def _on_stop(self, _request: dict) -> dict:
        self.listen_stop.set()
        return {"converse": self.phase}

    def _status(self, _request: dict) -> dict:
        return {"converse": self.phase}

    def run(self) -> ConverseResult:
        from vocal.floor.turn import Turn

        settings, options, parts = self.settings, self.options, self.parts
        with Turn(
            settings,
            kind="converse",
            voice=parts.voice,
            use_conch=options.use_conch,
        ) as turn:
            parts.clock["floor"] = time.monotonic()
            turn.on("skip_forward", self._on_skip)
            turn.on("stop", self._on_stop)
            turn.on("status", self._status)
            try:
                return self._run_turn(turn)
            finally:
                self._close()

    def _result(self, listened: ListenResult | None, *, stopped: bool) -> ConverseResult:
        return converse_result(
            self.parts, listened, stopped=stopped, trace=self.settings.barge_in_trace
        )

    def _close(self) -> None:
        parts = self.parts
        speech, player, mic = parts.speech, parts.player, parts.mic
        loader, models = parts.loader, parts.turn_models
        for closer in (
            lambda: self.line.clear() if self.line is not None else None,
            lambda: speech.stop() if speech is not None else None,
            lambda: player.close() if player is not None else None,
            lambda: mic.close() if mic is not None else None,
            lambda: speech.join(3.0) if speech is not None else None,
            # Never exit while CTranslate2 loads in native code: it aborts the process.
            lambda: loader.wait(10.0) if loader is not None else None,
            lambda: loader.close() if loader is not None else None,
            lambda: models.wait(10.0) if models is not None else None,
            lambda: models.keep(self.settings.home) if models is not None else None,
            lambda: parts.learner.join(1.0) if parts.learner is not None else None,
            lambda: parts.room_keeper.join(1.0) if parts.room_keeper is not None else None,
        ):
            with contextlib.suppress(Exception):
                closer()

    def _run_turn(self, turn: Turn) -> ConverseResult:
        import numpy  # noqa: F401  (before any stream opens: python-sounddevice #487)

        from vocal.audio.vad import SileroVad
        from vocal.duplex.bargein.ambient import room_gate
        from vocal.hearing.listening import listen_options
        from vocal.hearing.stt_loading import stt_loader

        settings, options, parts = self.settings, self.options, self.parts
        if turn.stopped.is_set():  # `vocal control stop` while waiting for the floor
            return self._result(None, stopped=True)
        # The STT engine loads from now on, while the reply plays.
        loader = parts.loader = stt_loader(settings, beside_playback=True)
        listening = listen_options(settings)
        mic = self._open_microphone()
        parts.clock["mic_opened"] = mic.opened_at_s
        kept, heard_from_s = self._speak(turn, mic)
        turn.check()
        if turn.stopped.is_set():
            return self._result(None, stopped=True)
        # -- listen ----------------------------------------------------------------------------
        if listening.end_of_turn.enabled:
            # The models load once the reply is over, not while it plays: Smart Turn's load
            # beside playback, AEC and Whisper's warm-up lost a barge-in's onset (1 run in 4).
            from vocal.hearing.turn_models import EndOfTurnModels

            parts.turn_models = EndOfTurnModels.start(self.settings, context=parts.text)
        self.phase = "listening"
        turn.set_phase(TurnPhase.LISTENING)
        rebuild = parts.echo_free.samples_for if parts.echo_free is not None else None
        source = TurnSource(
            mic, kept, heard_from_s=heard_from_s, drop_before=not parts.barge_in, rebuild=rebuild
        )
        from vocal.hearing.listening import listen
        from vocal.hearing.live import meter_hooks
        from vocal.hearing.push_to_talk import keys_for

        on_block, on_words = meter_hooks(self.line, turn.check)
        gate = parts.room_gate = room_gate(parts.guard.detector, self.room_db)
        confidence = SileroVad() if gate is None else gate.wrap(SileroVad())
        with keys_for(options.push_to_talk, self.listen_stop, listening) as (keys, listening):
            listened = keys.ended(
                listen(
                    source,
                    stt=loader,
                    options=listening,
                    confidence=confidence,
                    models=parts.turn_models,
                    context=parts.text,
                    stop=self.listen_stop,
                    on_block=keys.watching(on_block),
                    on_words=on_words,
                )
            )
        parts.mic = None  # listen closed it
        turn.check()
        return self._result(listened, stopped=turn.stopped.is_set())

    def _open_microphone(self) -> Microphone:
        from vocal.audio.devices import Microphone

        on_block = None
        if self.parts.use_aec:
            from vocal.duplex.canceller.aec import EchoCanceller

            guard = self.parts.guard = EchoGuard(
                EchoCanceller(  # the profile's delay and drift
                    render_sample_rate=self.rate,
                    log_levels=self.settings.barge_in_trace,
                    stream_delay_ms=self.profile.stream_delay_ms if self.profile else None,
                    drift_ppm=self.profile.drift_ppm if self.profile else 0.0,
                )
            )
            on_block = guard.capture
        mic = self.parts.mic = Microphone(
            16_000,
            device=self.settings.input_device,
            on_block=on_block,
        ).open()
        return mic

    # -- speaking --------------------------------------------------------------------------------
    def _speak(self, turn: Turn, mic: Microphone) -> tuple[list[Block], float | None]:
        """Play the reply while watching the microphone; returns the blocks to hand to the
        endpointer first (a barge-in's pre-roll) and the time from which capture counts."""
        from vocal.audio.vad import SileroVad
        from vocal.duplex.bargein.detector import BargeInOptions, barge_in_options
        from vocal.duplex.bargein.room_level import hear_room_first, keep_heard_level
        from vocal.duplex.handover import kept_blocks
        from vocal.duplex.paused_reply import hear_out
        from vocal.speaking.output import open_speech_player
        from vocal.speaking.speech import Speech, engine_loader

        settings, parts = self.settings, self.parts
        if self.gain is None:  # muted or volume 0: nothing is said, the turn only listens
            self.report("muted: the reply is not spoken")
            parts.clock["reply_ended"] = time.monotonic()
            return [], None
        self.phase = "speaking"
        speech = parts.speech = Speech(
            engine_loader(self.name, parts.voice, settings),
            [parts.text],
            engine_name=self.name,
            voice=parts.voice,
            sample_rate=self.rate,
            speed=self.options.speed or settings.speed,
            report=self.report,
            keep_audio=True,
            started_at_s=parts.started_at_s,
            sentence_pause_s=settings.sentence_pause_ms / 1000,
        ).start()
        echo_guard = parts.guard
        try:
            # The observer chain (vocal.audio.output): the floor guard silences the block once
            # the floor is lost, before the canceller's reverse stream sees what is played.
            player = parts.player = open_speech_player(
                self.rate,
                device=settings.output_device,
                volume=self.gain,
                observers=(turn.guard_block, echo_guard.render),
            )
        except BaseException as exc:
            speech.fail(exc)
            speech.join(2.0)
            raise
        detector = None
        # Backchannels on: a barge-in pauses the reply till its words tell "yeah" from "stop".
        judge_backchannels = parts.barge_in and settings.barge_in_backchannels
        if parts.barge_in:
            on_barge_in = speech.pause if judge_backchannels else speech.stop
            detector = echo_guard.watch(
                SileroVad(),
                on_barge_in,
                barge_in_options(settings),
                player=player,
                mic=mic,
                room_level_db=self.room_db,
            )
            parts.room_first_s = hear_room_first(mic, echo_guard.feed, detector.ambient)
        speech.attach_output(player)
        # A resume restarts the far end after a silence and the canceller finds the echo path
        # again: barge-in waits (BargeInOptions.resume_inhibit_ms).
        turn.attach_output(SpeechOutput(speech, player, on_resume=echo_guard.hold_after_resume))
        turn.set_phase(TurnPhase.PLAYING)
        # The cleaned blocks of the last few seconds: a barge-in decided late (an inhibit window
        # held it back) still hands the endpointer the person's first word.
        recent: collections.deque[Block] = collections.deque(maxlen=KEEP_BLOCKS)
        last_frames, last_progress_s = -1, time.monotonic()
        fit: OnsetFit | None = None
        try:
            blocks = mic.blocks(INPUT_TIMEOUT_S)
            for block in blocks:
                now = time.monotonic()
                if speech.done:
                    break
                if parts.skip_requested.is_set():
                    speech.stop()
                    break
                recent.append(block)
                if detector is not None:
                    fired = echo_guard.feed(block)
                    if fired is not None:
                        parts.clock["barge_in"] = fired.at_s
                        parts.onset_s = detector.onset_s()
                        fit = self._start_fit(parts.onset_s)
                        if not judge_backchannels or not hear_out(
                            parts, turn, detector, blocks, recent, fit
                        ):
                            speech.stop()
                            break
                        fit = None
                        last_progress_s = time.monotonic()
                # A vanished output stops calling back: nothing is played, nothing fails.
                frames = player.played_frames
                if self.line is not None and (playing := speech.result.playing(frames)):
                    self.line.speaking(playing.text)
                if frames != last_frames or speech.paused or player.started_at_s is None:
                    last_frames, last_progress_s = frames, now
                elif now - last_progress_s > OUTPUT_STALL_S:
                    speech.stop()
                    raise DeviceError(
                        f"the audio output stopped playing for {OUTPUT_STALL_S:.0f} s",
                        hint="see `vocal devices`",
                    )
            ended_s = time.monotonic()
            if player.failed or (speech.done and not player.stopped and player.pending_frames > 0):
                # The stream ended by itself (PortAudio's finished callback fired with nobody
                # stopping it) or with audio still queued: the device went away, not stalled.
                raise DeviceError(
                    "the audio output stopped before the reply was played",
                    hint="see `vocal devices`",
                )
            speech.stop() if not speech.done else None
            parts.speech_result = speech.wait(5.0)
        finally:
            turn.attach_output(None)
            parts.underflows = player.underflows
            parts.underflows_before_audio = player.underflows_before_audio
            player.close()
        parts.clock["reply_ended"] = ended_s
        turn.check()
        record_history(turn, parts)
        if detector is not None:
            parts.room_keeper = keep_heard_level(settings.home, *self.devices, detector.ambient)
        if detector is not None and detector.fired is not None and fit is not None:
            return kept_blocks(parts, detector, recent, fit, self._learn_delay), None
        if parts.barge_in and parts.use_aec and not speech.result.stopped:
            from vocal.duplex.handover import handover_blocks

            handed_over, echo_free, parts.tail_audio = handover_blocks(echo_guard, recent, ended_s)
            self._learn_delay(parts.tail_audio["echo_removed_db"], parts.tail_audio["delay_ms"])
            if handed_over is not None:
                parts.echo_free = echo_free
                return handed_over, None
        if parts.barge_in:
            # The detector's own tail window: longer after a long echo delay (EchoGuard.watch).
            detector_options = detector.options if detector is not None else BargeInOptions()
            tail_s = detector_options.tail_inhibit_ms / 1000 if parts.use_aec else 0.0
            return [], ended_s + tail_s
        return [], ended_s + REVERB_GAP_MS / 1000

    def _start_fit(self, onset_s: float) -> OnsetFit:
        """Start fitting the reply's echo before `onset_s` (duplex/echo_free/onset) in a thread."""
        from vocal.duplex.echo_free.onset import OnsetFit
        from vocal.duplex.handover import fit_after_s

        detector = self.parts.guard.detector
        after_s = fit_after_s(detector, onset_s) if detector is not None else None
        return OnsetFit(lambda: self.parts.guard.echo_free_onset(onset_s, after_s))

    def _learn_delay(self, removed_db: float | None, delay_ms: float | None) -> None:
        """Keep the echo delay of a fit that held (vocal.duplex.canceller.profile.learn_delay) for
        the next turn's canceller, in a thread while the person talks: the file is written off
        the turn's path, and a state directory that cannot take it never fails the turn."""
        from vocal.duplex.canceller.profile import LEARN_MIN_REMOVED_DB, learn_delay_in_background

        parts, settings = self.parts, self.settings
        if removed_db is None or delay_ms is None or removed_db < LEARN_MIN_REMOVED_DB:
            return
        if parts.underflows or (parts.mic is not None and parts.mic.overflows):
            return  # the streams glitched: the delay may be this stream's own (see profile.py)
        if parts.learner is None:  # one per turn: the first fit that held

            def learned(delay_ms: float) -> None:
                parts.learned_delay_ms = delay_ms

            parts.learner = learn_delay_in_background(
                settings.home, *self.devices, delay_ms, learned
            )


__all__ = ["REVERB_GAP_MS", "STOPPED_MARKER", "Report", "converse", "report_to_stderr"]
