"""Pieces of a message (`vocal speak --message ID --piece N`): an agent's reply spoken piece by
piece as it is written, in order, inside one held turn (vocal.floor.pieces keeps the board).
"""

from __future__ import annotations

import contextlib
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from vocal.errors import UsageError
from vocal.speaking.results import TurnOutcome
from vocal.speaking.speak import HistoryWriter, SpeakOptions, play_in_turn, replay_back
from vocal.speaking.speech import (
    Report,
    Speech,
    engine_loader,
    preload_audio_backend,
    report_to_stderr,
    resolve_voice,
)
from vocal.speaking.text import (
    speakable_lines,
    utterances_of,
)

if TYPE_CHECKING:
    from vocal.config import Settings
    from vocal.floor.pieces import PieceOutcome
    from vocal.tts import TtsEngine


# -- pieces of a message (`vocal speak --message ID --piece N`) -----------------------------------
class _KeepOpen:
    """An engine shared by the speeches of several pieces: `Speech` closes its engine after
    its last sentence, which must not end it for the next piece (closed in `PieceSpeaker`)."""

    def __init__(self, engine: TtsEngine) -> None:
        self._engine = engine

    def __getattr__(self, name: str) -> Any:
        return getattr(self._engine, name)

    def close(self) -> None:
        pass


class PieceSpeaker:
    """Speaks the pieces that one process reads as its message's reader: the engine is loaded
    once and the floor taken once (at the first piece with a spoken line) for all of them.

    `read(piece, text)` is `vocal.floor.pieces.run_piece`'s callback; `should_stop` says that a
    newer message superseded this one (polled between sentences and while one plays).
    """

    def __init__(
        self,
        options: SpeakOptions,
        settings: Settings,
        *,
        gain: float | None,
        should_stop: Callable[[], bool],
        report: Report | None = report_to_stderr,
    ) -> None:
        self.options = options
        self.settings = settings
        self.gain = gain
        self.should_stop = should_stop
        self.report = report
        self._stack = contextlib.ExitStack()
        self._turn: Any = None
        self._engine: TtsEngine | None = None
        self._voice: tuple[str, str | None, str | None, int] | None = None
        self._preload: threading.Thread | None = None

    def _resolved(self) -> tuple[str, str | None, str | None, int]:
        if self._voice is None:
            from vocal.tts import engine_class

            wanted = self.options.voice or self.settings.voice
            name, voice = resolve_voice(wanted, self.options.engine, self.settings)
            stored = (
                name == "chatterbox"
                and wanted is not None
                and ":" not in wanted
                and voice != wanted
            )
            self._voice = (name, voice, wanted if stored else voice, engine_class(name).sample_rate)
        return self._voice

    def _engine_source(self) -> Any:
        if self._engine is not None:
            return _KeepOpen(self._engine)
        name, voice, _shown, _rate = self._resolved()
        load = engine_loader(name, voice, self.settings)

        def loader() -> Any:
            self._engine = load()
            return _KeepOpen(self._engine)

        return loader

    def read(self, piece: int, text: str) -> tuple[str, dict[str, Any] | None]:
        """Speak one piece: ("read" | "empty" | "skipped" | "superseded" | "stopped", result)."""
        from vocal.floor.turn import Turn

        utterances = utterances_of(text, quotes=self.options.quotes)
        if not any(speakable_lines(u, english_only=False) for u in utterances):
            return "empty", None
        if self.should_stop():
            return "superseded", None
        name, _voice, shown, rate = self._resolved()
        speech = Speech(
            self._engine_source(),
            utterances,
            engine_name=name,
            voice=shown,
            sample_rate=rate,
            speed=self.options.speed or self.settings.speed,
            check=self.options.check,
            report=self.report,
            sentence_pause_s=self.settings.sentence_pause_ms / 1000,
        )
        writer = None
        if self.options.record:
            writer = HistoryWriter(None, speech._utterances, shown, rate)
            speech._on_sentence = writer.add
        speech.start()
        turn_outcome = TurnOutcome()
        speech.result.turn = turn_outcome
        try:
            if self._turn is None:
                self._preload = preload_audio_backend()
                self._turn = self._stack.enter_context(
                    Turn(
                        self.settings,
                        kind="speak",
                        voice=shown,
                        use_conch=self.options.use_conch,
                        warm_audio=False,
                        status=self.report or (lambda _m: None),
                    )
                )
            turn = self._turn
            turn_outcome.session = turn.session
            if turn.held is not None:
                turn_outcome.seq, turn_outcome.waited_s = turn.held.seq, turn.held.waited_s
            if turn.stopped.is_set():
                speech.stop()
                speech.wait()
                return "stopped", speech.result.to_dict()
            if self.should_stop():  # superseded while this process waited for the floor
                speech.stop()
                speech.wait()
                return "superseded", speech.result.to_dict()
            if writer is not None:
                writer.turn = turn
            back = play_in_turn(
                speech,
                turn,
                turn_outcome,
                rate,
                self.gain,
                self.options,
                self.settings,
                None,
                writer,
                should_stop=self.should_stop,
            )
            if writer is not None:
                turn_outcome.utterance_ids = list(writer.ids)
            turn.check()
            replay_back(turn, back, turn_outcome, self.gain, self.options, self.settings)
        except BaseException:
            speech.stop()
            speech.join(2.0)
            raise
        status = {
            "finished": "read",
            "replayed": "read",
            "skipped": "skipped",
            "stopped": "stopped",
            "superseded": "superseded",
        }.get(turn_outcome.outcome, turn_outcome.outcome)
        if status == "read" and not speech.result.played:
            status = "empty"  # every sentence failed the speech check, or nothing was left
        return status, speech.result.to_dict()

    def close(self) -> None:
        """Give the floor back and close the engine."""
        try:
            self._stack.close()
        finally:
            if self._engine is not None:
                with contextlib.suppress(Exception):
                    self._engine.close()
            if self._preload is not None:
                self._preload.join(5.0)


def speak_piece(
    text: str,
    options: SpeakOptions,
    settings: Settings,
    *,
    message: str,
    piece: int,
    final: bool = False,
    report: Report | None = report_to_stderr,
) -> PieceOutcome:
    """`vocal speak --message ID --piece N [--final]`: send one piece of a message and stay
    until it is read (by this process or by another of the message), dropped or superseded;
    see `vocal.floor.pieces`. Gates first: muted or volume 0 returns at once ("muted"), before any
    waiting, engine or floor.
    """
    from vocal.floor.gates import read_gates
    from vocal.floor.pieces import MessageBoard, PieceOutcome, run_piece, validate_message_id

    validate_message_id(message)
    gain = options.volume
    if options.output is not None:
        raise UsageError("--message pieces are spoken, not written: drop --output")
    gates = read_gates(settings.home)
    if gates.silent:
        (report or (lambda _m: None))(
            "muted: nothing spoken" if gates.muted else "volume is 0: nothing spoken"
        )
        now = time.monotonic()
        return PieceOutcome("muted", message, piece, final, arrived_at_s=now, finished_at_s=now)
    gain = gates.gain if gain is None else gain
    board = MessageBoard(settings.run_dir, settings.session, log_dir=settings.log_dir)
    speaker = PieceSpeaker(
        options, settings, gain=gain, report=report, should_stop=lambda: board.superseded(message)
    )
    try:
        return run_piece(
            board,
            message,
            piece,
            text,
            final=final,
            read=speaker.read,
            timeout_s=settings.piece_timeout_s,
        )
    finally:
        speaker.close()


__all__ = ["PieceSpeaker", "speak_piece"]
