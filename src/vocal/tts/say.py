"""macOS `say`, rendered to a file and played by vocal (so echo cancellation has the reference
of every sample, and stop/pause work the same as for any engine).

`say -o FILE --file-format=WAVE --data-format=LEF32@22050 -f -` writes 32-bit float WAV that
vocal.audio.wav reads; the text goes on stdin (`-f -`), never as an argument.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from typing import TYPE_CHECKING, ClassVar

from vocal.errors import EngineError
from vocal.tts import INSTALL_HINTS, TtsEngine, unknown_voice

if TYPE_CHECKING:
    import numpy as np

#: say's default rate in words per minute: speed 1.0.
BASE_WORDS_PER_MINUTE = 175
_TIMEOUT_S = 60.0


def _binary() -> str:
    path = shutil.which("say")
    if sys.platform != "darwin" or path is None:
        raise EngineError("the say engine needs macOS", hint=INSTALL_HINTS["say"])
    return path


def list_voices() -> list[str]:
    """Voice names from `say -v ?` (name, locale, sample sentence per line)."""
    try:
        out = subprocess.run(
            [_binary(), "-v", "?"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    names = []
    for line in out.splitlines():
        head = line.split("#", 1)[0].rsplit(None, 1)  # "Name With Spaces   en_US"
        if len(head) == 2:
            names.append(head[0].strip())
    return names


class SayEngine(TtsEngine):
    """macOS speech through `say`, one file per sentence.

    Args:
        voice: a name from `say -v ?` ("Samantha", "Daniel", ...); None is the system voice.
    """

    name: ClassVar[str] = "say"
    multilingual: ClassVar[bool] = True
    sample_rate = 22_050

    def __init__(self, voice: str | None = None, **_options: object) -> None:
        self._binary = _binary()
        if voice is not None:
            known = list_voices()
            if known and voice not in known:
                raise unknown_voice(self.name, voice, known)
        self.voice = voice

    @classmethod
    def voice_names(cls, **_options: object) -> list[str]:
        try:
            return list_voices()
        except EngineError:
            return []

    def synthesize(self, sentence: str, *, speed: float = 1.0) -> np.ndarray:
        from vocal.audio.wav import read_wav
        from vocal.errors import AudioFormatError

        fd, path = tempfile.mkstemp(prefix="vocal-say-", suffix=".wav")
        os.close(fd)
        data_format = f"LEF32@{self.sample_rate}"
        words_per_minute = str(round(BASE_WORDS_PER_MINUTE * speed))
        command = [self._binary, "-o", path, "--file-format=WAVE", f"--data-format={data_format}"]
        command += ["-r", words_per_minute, "-f", "-"]  # the sentence comes on stdin
        if self.voice:
            command[1:1] = ["-v", self.voice]
        try:
            result = subprocess.run(
                command,
                input=sentence.encode("utf-8"),
                capture_output=True,
                timeout=_TIMEOUT_S,
                check=False,
            )
            if result.returncode != 0:
                detail = result.stderr.decode(errors="replace").strip()
                raise EngineError(f"say failed: {detail or result.returncode}")
            audio = read_wav(path, allow_empty=True)
        except subprocess.TimeoutExpired:
            raise EngineError(f"say took more than {_TIMEOUT_S:.0f} s for one sentence") from None
        except AudioFormatError as exc:
            raise EngineError(f"say wrote no usable audio: {exc}") from None
        finally:
            os.unlink(path)
        if audio.sample_rate != self.sample_rate:
            audio = audio.resample(self.sample_rate)
        return audio.mono_samples


__all__ = ["SayEngine", "list_voices"]
