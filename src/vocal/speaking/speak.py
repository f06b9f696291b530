"""One `vocal speak`: read the text, check the gates, then speak it to a file or inside a turn
(conch, control socket, history) with `Speech`.
"""

from __future__ import annotations

import queue
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from vocal.errors import EngineError, UsageError
from vocal.floor.phases import TurnPhase
from vocal.speaking.output import open_speech_output, open_speech_player
from vocal.speaking.results import SentenceRecord, SpeechResult, TurnOutcome
from vocal.speaking.speech import (
    POLL_S,
    Report,
    Speech,
    engine_loader,
    preload_audio_backend,
    report_to_stderr,
    resolve_voice,
)
from vocal.speaking.text import (
    MAX_TEXT_BYTES,
    MAX_TEXT_CHARS,
    check_text_length,
    utterances_of,
)
from vocal.timeline import mark

if TYPE_CHECKING:
    import numpy as np

    from vocal.config import Settings
    from vocal.floor.history import Recording, Utterance
    from vocal.floor.turn import Turn


# -- one `vocal speak` ---------------------------------------------------------------------------
def decode_input(data: bytes, *, name: str = "stdin") -> str:
    """Text from bytes read from a pipe; binary data is a UsageError (exit 2), not noise."""
    if b"\x00" in data:
        raise UsageError(f"{name} is not text (it holds NUL bytes)")
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise UsageError(f"{name} is not UTF-8 text (bad byte at offset {exc.start})") from None


def text_argument(text: str | None) -> tuple[str, bool]:
    """The text a command was given: TEXT itself, or stdin when TEXT is '-' (or absent and
    stdin is a pipe); and whether it came from stdin, where "text known" starts only once it
    has been read. No TEXT on a terminal, or a text over `MAX_TEXT_CHARS` (stdin is read no
    further than `MAX_TEXT_BYTES`), is a UsageError (exit 2)."""
    if text is None and sys.stdin.isatty():
        raise UsageError("give TEXT to say, or '-' to read it from stdin")
    if text is None or text == "-":
        return check_text_length(_read_stdin_text(), name="the text on stdin"), True
    return check_text_length(text), False


def _read_stdin_text() -> str:
    """stdin as text, read up to `MAX_TEXT_BYTES`; more than that is too long, whatever it is
    (an endless stream such as `< /dev/zero` ends here)."""
    data = sys.stdin.buffer.read(MAX_TEXT_BYTES + 1)
    if len(data) > MAX_TEXT_BYTES:
        raise UsageError(
            f"the text on stdin is too long: over {MAX_TEXT_BYTES} bytes, the limit is "
            f"{MAX_TEXT_CHARS} characters",
            hint="say it in parts",
        )
    return decode_input(data)


@dataclass(frozen=True)
class SpeakOptions:
    """What `vocal speak` was asked to do (None: from settings and gates)."""

    engine: str | None = None
    voice: str | None = None
    speed: float | None = None
    volume: float | None = None  # gain 0..2; None: the `vocal volume` gate
    output: Path | None = None  # write a WAV instead of playing
    device: str | None = None
    quotes: bool = False
    check: bool = True
    use_conch: bool = True  # take the floor for the audio (--no-conch: talk over others)
    record: bool = True  # keep what is played in the history (`vocal replay`, skip_back)


def speak(
    text: str,
    options: SpeakOptions,
    settings: Settings,
    *,
    report: Report | None = report_to_stderr,
    started_at_s: float | None = None,
    on_start: Callable[[Speech], None] | None = None,
) -> SpeechResult | None:
    """Speak `text` in a turn (or write it to `options.output`); None when the gates say silence.

    Order matters. Gates first: muted costs nothing, not even the conch. Then the voice is
    resolved (a cloned voice without its weights fails here, exit 5, before any wait). The
    engine loads and the first sentence is synthesized in the worker thread while this thread
    takes the floor (`vocal.floor.turn.Turn`: conch, control socket, history) and opens the output,
    so the next speaker starts as soon as the floor is free. `on_start` receives the running
    `Speech`.

    Raises:
        ConchBusy: the floor was not granted (callback mode, or the wait timed out): exit 3.
        ConchLost: the floor was taken while speaking (`vocal conch bump`): exit 3.
    """
    from vocal.floor.gates import read_gates

    started_at_s = time.monotonic() if started_at_s is None else started_at_s
    if not text.strip():
        raise UsageError("nothing to say: the text is empty")
    gain = options.volume
    if options.output is None:
        gates = read_gates(settings.home)
        if gates.silent:
            (report or (lambda _m: None))(
                "muted: nothing spoken" if gates.muted else "volume is 0: nothing spoken"
            )
            return None
        gain = gates.gain if gain is None else gain
    from vocal.tts import engine_class  # after the gates: muted imports no engine registry

    utterances = utterances_of(text, quotes=options.quotes)
    wanted = options.voice or settings.voice
    name, voice = resolve_voice(wanted, options.engine, settings)
    rate = engine_class(name).sample_rate
    # A stored voice resolves to its reference clip's path: show and record its name.
    stored = name == "chatterbox" and wanted is not None and ":" not in wanted and voice != wanted
    shown = wanted if stored else voice
    speech = Speech(
        engine_loader(name, voice, settings),
        utterances,
        engine_name=name,
        voice=shown,
        sample_rate=rate,
        speed=options.speed or settings.speed,
        check=options.check,
        report=report,
        started_at_s=started_at_s,
        sentence_pause_s=settings.sentence_pause_ms / 1000,
    )
    if options.output is not None:  # a file is not the speaker: no floor, no history
        return _speak_to_file(speech, rate, options, on_start)
    return _speak_in_turn(speech, name, shown, rate, gain, options, settings, report, on_start)


def _speak_to_file(
    speech: Speech, rate: int, options: SpeakOptions, on_start: Callable[[Speech], None] | None
) -> SpeechResult:
    """Speak into `options.output`: the file is written whole, in this thread, once the speech
    has ended and produced speech; on every other way out (an engine error, every sentence
    failing the check, nothing speakable, Ctrl-C, SIGTERM, a full disk) the file that was
    there is left byte for byte (issue 37)."""
    from vocal.audio.file_devices import WavSink
    from vocal.floor.conch.queue import interrupt_on_signals

    with interrupt_on_signals():  # SIGTERM/SIGHUP unwind (exit 130) instead of killing
        speech.start()
        try:
            gain = 1.0 if options.volume is None else options.volume
            output = open_speech_output(
                rate, output=options.output, volume=gain, write_on_finish=False
            )
        except BaseException as exc:
            speech.fail(exc)
            speech.join(2.0)
            raise
        try:
            speech.attach_output(output)
            if on_start is not None:
                on_start(speech)
            result = speech.wait()
        except BaseException:
            speech.stop()
            speech.join(2.0)
            raise
        finally:
            output.close()
        _check_spoken(result)
        if not result.played:
            raise UsageError(
                f"nothing speakable in the text: {options.output} was not written",
                hint="--quotes reads only blockquotes ('> ' lines)"
                if options.quotes
                else "markdown, code, links and emoji are not read aloud",
            )
        if isinstance(output, WavSink):  # always, for a file (open_speech_output)
            output.commit()
    return result


class HistoryWriter:
    """Records each sentence in the turn's history as it goes to the output (feeder thread):
    one history utterance per utterance of the text."""

    def __init__(self, turn: Turn | None, utterances: Sequence[str], voice: str | None, rate: int):
        self.turn = turn
        self.utterances = utterances
        self.voice = voice
        self.rate = rate
        self.ids: list[int] = []
        self._number: int | None = None
        self._recording: Recording | None = None
        self._lock = threading.Lock()

    def add(self, record: SentenceRecord, samples: np.ndarray) -> None:
        with self._lock:
            if record.utterance != self._number:
                self._finish()
                self._number = record.utterance
                assert self.turn is not None, "bound to its turn before any output"
                self._recording = self.turn.begin_utterance(
                    text=self.utterances[record.utterance],
                    voice=self.voice,
                    sample_rate=self.rate,
                )
                self.ids.append(self._recording.utterance.id)
            assert self._recording is not None
            self._recording.append(samples)

    def finish(self) -> None:
        with self._lock:
            self._finish()

    def _finish(self) -> None:
        if self._recording is not None:
            self._recording.finish()
            self._recording = None


def _speak_in_turn(
    speech: Speech,
    name: str,
    shown: str | None,
    rate: int,
    gain: float | None,
    options: SpeakOptions,
    settings: Settings,
    report: Report | None,
    on_start: Callable[[Speech], None] | None,
) -> SpeechResult:
    turn_outcome = TurnOutcome()
    speech.result.turn = turn_outcome
    writer: HistoryWriter | None = None
    if options.record:
        # The turn does not exist yet: the writer is bound to it below, before any output.
        writer = HistoryWriter(None, speech._utterances, shown, rate)
        speech._on_sentence = writer.add
    # Synthesis starts first, before the turn's modules load (~50 ms): the speech worker gets
    # the first sentence at once, and synthesis overlaps the wait for the floor (the worker
    # thread holds the first sentence until an output is attached, so a long wait wastes
    # nothing more). PortAudio's own start-up runs in a thread meanwhile
    # (preload_audio_backend).
    speech.start()
    preload = preload_audio_backend()
    from vocal.floor.turn import Turn

    try:
        with Turn(
            settings,
            kind="speak",
            voice=shown,
            use_conch=options.use_conch,
            warm_audio=False,
            status=report or (lambda _m: None),
        ) as turn:
            mark("floor_taken")
            held = turn.held
            turn_outcome.session = turn.session
            if held is not None:
                turn_outcome.seq, turn_outcome.waited_s = held.seq, held.waited_s
                turn_outcome.position_on_arrival = held.position_on_arrival
            if turn.stopped.is_set():  # `vocal control stop` while waiting for the floor
                turn_outcome.outcome = "stopped"
                speech.stop()
                speech.wait()
                speech.result.stopped = True
                return speech.result
            if writer is not None:
                writer.turn = turn
            back = play_in_turn(
                speech, turn, turn_outcome, rate, gain, options, settings, on_start, writer
            )
            if writer is not None:
                turn_outcome.utterance_ids = list(writer.ids)
            turn.check()  # the floor was lost: exit 3 (the output was silenced at once)
            replay_back(turn, back, turn_outcome, gain, options, settings)
    except BaseException:
        speech.stop()
        speech.join(2.0)
        raise
    finally:
        # Exiting while that thread is inside Pa_Initialize can crash the interpreter, and
        # sounddevice points fd 2 at /dev/null meanwhile (an error printed then would vanish).
        preload.join(5.0)
    result = speech.result
    if turn_outcome.outcome == "finished":
        _check_spoken(result)
    return result


def replay_back(
    turn: Turn,
    back: Utterance | None,
    turn_outcome: TurnOutcome,
    gain: float | None,
    options: SpeakOptions,
    settings: Settings,
) -> None:
    """skip_back: the history walk chose an utterance (the first press: this one); play its
    PCM in this turn, where further skip_backs step on."""
    if back is None:
        return
    replayed = turn.play(
        back.audio(),
        record=False,
        utterance=back,
        device=options.device or settings.output_device,
        volume=1.0 if gain is None else gain,
    )
    turn_outcome.utterance_ids += [i for i in replayed.played_ids if i is not None]


def play_in_turn(
    speech: Speech,
    turn: Turn,
    turn_outcome: TurnOutcome,
    rate: int,
    gain: float | None,
    options: SpeakOptions,
    settings: Settings,
    on_start: Callable[[Speech], None] | None,
    writer: HistoryWriter | None,
    should_stop: Callable[[], bool] | None = None,
) -> Utterance | None:
    """Play the speech in `turn` until it ends; the utterance a skip_back chose, if any.

    `should_stop` is polled between sentences and while one plays (a newer message has
    superseded this one): when it says so the speech stops at once (outcome "superseded").
    """
    try:
        # turn.guard_block silences the output in the audio callback once the floor is lost.
        output = open_speech_player(
            rate,
            device=options.device or settings.output_device,
            volume=1.0 if gain is None else gain,
            observers=(turn.guard_block,),
        )
    except BaseException as exc:
        speech.fail(exc)
        speech.join(2.0)
        raise
    mark("output_open")
    back = None
    try:
        turn.on("status", lambda _request: {"sentence": speech.status()})
        # The turn's control handler acts on the output itself (stop, pause and resume land
        # within one block from the socket's thread); the events then end the speech here.
        turn.attach_output(output)
        turn.set_phase(TurnPhase.PLAYING)
        speech.attach_output(output)
        if on_start is not None:
            on_start(speech)
        while not speech.done:
            try:
                event = turn.events.get(timeout=POLL_S * 4)
            except queue.Empty:
                if should_stop is not None and should_stop():
                    turn_outcome.outcome = "superseded"
                    speech.stop()
                continue
            if event.cmd in ("stop", "lost", "skip_forward", "skip_back"):
                turn_outcome.outcome = {
                    "stop": "stopped",
                    "lost": "lost",
                    "skip_forward": "skipped",
                    "skip_back": "replayed",
                }[event.cmd]
                back = event.utterance if event.cmd == "skip_back" else None
                speech.stop()
        speech.wait()
    except BaseException:
        speech.stop()
        speech.join(2.0)
        raise
    finally:
        turn.attach_output(None)
        turn.set_phase(TurnPhase.READY)
        output.close()
        if writer is not None:
            writer.finish()
    return back


def _check_spoken(result: SpeechResult) -> None:
    if result.sentences and not result.played and not result.stopped:
        raise EngineError(
            f"the {result.engine} engine produced no speech: every sentence failed the speech "
            "check",
            hint="try another engine or voice with --engine / --voice",
        )


def process_started_at_s() -> float | None:
    """time.monotonic() at which this process started (Linux, 10 ms resolution), else None."""
    try:
        import os

        with open("/proc/self/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
        start_ticks = int(fields[19])  # field 22 of stat(5), counted after the ")"
        since_boot_s = start_ticks / os.sysconf("SC_CLK_TCK")
        now_boot = time.clock_gettime(time.CLOCK_BOOTTIME)
        return time.monotonic() - (now_boot - since_boot_s)
    except (OSError, ValueError, IndexError, AttributeError):
        return None


__all__ = [
    "HistoryWriter",
    "SpeakOptions",
    "decode_input",
    "play_in_turn",
    "process_started_at_s",
    "replay_back",
    "speak",
    "text_argument",
]
