"""What the end of turn needs beside the recording: its two models, each loading in a thread of
its own while the person speaks, and the person's rhythm (issue 36). `listen` and `converse`
start it the same way (`EndOfTurnModels.start`) and hand it to `vocal.hearing.listening.listen`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pathlib import Path

    from vocal.config import Settings
    from vocal.hearing.rhythm import Rhythm
    from vocal.hearing.smart_turn import SmartTurn, TurnModelLoader
    from vocal.hearing.words_model import WordsModel, WordsModelLoader


@dataclass
class EndOfTurnModels:
    """Smart Turn and the words' model loading (None: not asked for), and the rhythm learnt in
    this turn (None: nothing is learnt)."""

    turn: TurnModelLoader | None = None
    words: WordsModelLoader | None = None
    rhythm: Rhythm | None = None

    @classmethod
    def start(
        cls, settings: Settings, *, person: bool = True, context: str | None = None
    ) -> EndOfTurnModels:
        """Start loading the models the settings ask for. `person`: a person at the
        microphone, whose rhythm is read from the state directory (a file given with --input
        learns within itself only). `context`: the line they answer, read ahead."""
        from vocal.hearing.rhythm import Rhythm, load_rhythm
        from vocal.hearing.smart_turn import TurnModelLoader
        from vocal.hearing.words_model import WordsModelLoader

        return cls(
            turn=TurnModelLoader(),
            words=WordsModelLoader(context=context) if settings.words_model else None,
            rhythm=load_rhythm(settings.home) if person else Rhythm(),
        )

    def audio_model(self) -> SmartTurn | None:
        return self.turn.model() if self.turn is not None else None

    def words_model(self) -> WordsModel | None:
        return self.words.model() if self.words is not None else None

    def wait(self, timeout_s: float | None = None) -> None:
        """Wait for both loads to end (never exit while one runs in native code)."""
        for loader in (self.turn, self.words):
            if loader is not None:
                loader.wait(timeout_s)

    def keep(self, home: Path) -> None:
        """Keep what the turn taught of the person's rhythm for their next turn."""
        from vocal.hearing.rhythm import keep_rhythm

        if self.rhythm is not None:
            keep_rhythm(home, self.rhythm)


__all__ = ["EndOfTurnModels"]
