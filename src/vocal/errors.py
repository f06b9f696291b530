"""Errors the library raises, each carrying the process exit code the CLI turns it into.

Exit codes are part of vocal's interface (see docs/design.md): scripts and agents branch on them.
"""

from __future__ import annotations

import os
from typing import Any

EXIT_OK = 0
EXIT_ERROR = 1
EXIT_USAGE = 2
EXIT_CONCH_TIMEOUT = 3
EXIT_NO_SPEECH = 4
EXIT_UNAVAILABLE = 5
EXIT_INTERRUPTED = 130


def debug_wanted() -> bool:
    """VOCAL_DEBUG is set (and not 0): errors are raised with their traceback, not reported."""
    return os.environ.get("VOCAL_DEBUG", "") not in ("", "0")


class VocalError(Exception):
    """Base of every error vocal reports to the user.

    The message is one line that says what went wrong and, where there is one, what to do next.
    """

    exit_code = EXIT_ERROR

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.hint = hint

    def __str__(self) -> str:
        message = super().__str__()
        return f"{message} ({self.hint})" if self.hint else message


class UsageError(VocalError):
    """Bad arguments or input the caller can fix: an unreadable file, a bad name, empty text."""

    exit_code = EXIT_USAGE


class AudioFormatError(UsageError):
    """A file that is not audio vocal can read (not WAV, truncated, zero channels, ...)."""


class ConchTimeout(VocalError):
    """The floor was not granted in time (or callback mode returned a queue position)."""

    exit_code = EXIT_CONCH_TIMEOUT


class NoSpeechError(VocalError):
    """Nobody spoke before the no-speech timeout."""

    exit_code = EXIT_NO_SPEECH


class UnavailableError(VocalError):
    """An audio device, PortAudio, an engine or a model is missing or failed."""

    exit_code = EXIT_UNAVAILABLE


class DeviceError(UnavailableError):
    """PortAudio or an audio device is missing or failed."""


class EngineError(UnavailableError):
    """A speech engine or its model is not installed or could not load."""


class Interrupted(VocalError):
    """The user or a signal ended the command."""

    exit_code = EXIT_INTERRUPTED


# -- across a pipe: vocal's worker processes (speech synthesis, speech recognition) ------------
def error_reply(exc: VocalError) -> dict[str, Any]:
    """`exc` as the JSON reply a worker process sends for it (`error_from_reply` reads it)."""
    return {
        "message": exc.args[0] if exc.args else str(exc),
        "hint": exc.hint,
        "exit_code": exc.exit_code,
    }


def error_from_reply(reply: dict[str, Any]) -> EngineError:
    """The error a worker's reply carries (`error_reply`): an EngineError with its exit code."""
    error = EngineError(str(reply.get("message")), hint=reply.get("hint"))
    error.exit_code = int(reply.get("exit_code") or error.exit_code)
    return error
