"""`vocal doctor`'s line on the end of turn: which of its models a turn will have (issue 36).

Found without importing them (a model that is missing is a slower or more eager turn, never a
failed one, so this is at worst a warning): Smart Turn ships inside vocal; the words' model
needs llama-cpp-python and its GGUF file (vocal[words]).
"""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING

from vocal.errors import EngineError
from vocal.ops.check import OK, WARN, Check

if TYPE_CHECKING:
    from vocal.config import Settings


def check_end_of_turn(settings: Settings) -> Check:
    """Whether pauses will be judged by the voice and the words, or by less."""
    from vocal.hearing.smart_turn import find_turn_model
    from vocal.hearing.words_model import INSTALL_HINT, find_words_model

    if not settings.turn_model:
        return Check("end of turn", OK, "turn model off: every pause ends after silence_ms")
    try:
        voice = f"voice: {find_turn_model().name}"
    except EngineError as exc:
        return Check("end of turn", WARN, f"no voice model ({exc})", fix=exc.hint)
    if not settings.words_model:
        return Check("end of turn", OK, f"{voice}; words' model off (words_model = false)")
    if importlib.util.find_spec("llama_cpp") is None:
        return Check(
            "end of turn",
            WARN,
            f"{voice}; no words' model (llama-cpp-python is not installed): pauses after a "
            "clause that reads finished are waited through less often",
            fix=INSTALL_HINT,
        )
    try:
        words = f"words: {find_words_model(download=False).name}"
    except EngineError as exc:
        return Check(
            "end of turn",
            WARN,
            f"{voice}; {exc}: downloaded on the first turn",
            fix=exc.hint or INSTALL_HINT,
        )
    return Check("end of turn", OK, f"{voice}; {words}")


__all__ = ["check_end_of_turn"]
