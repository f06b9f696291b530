"""espeak-ng: the formant synthesizer every Linux has (a system package), run as a subprocess.

One `espeak-ng --stdout` process per sentence, text on stdin and arguments as a list (never a
shell string), so no text can be taken for an option or a shell word. Its streamed WAV header
carries a placeholder length, which vocal.audio.wav.parse_wav reads to the end of the data.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from typing import TYPE_CHECKING, ClassVar

from vocal.errors import EngineError
from vocal.tts import INSTALL_HINTS, TtsEngine, unknown_voice

if TYPE_CHECKING:
    import numpy as np

DEFAULT_VOICE = "en-us"
#: espeak-ng's own default rate in words per minute: speed 1.0.
BASE_WORDS_PER_MINUTE = 175
_MIN_WPM, _MAX_WPM = 80, 500
#: Seconds allowed per sentence: espeak renders ~100x real time, so this only catches a hang.
_TIMEOUT_S = 30.0


def _binary() -> str:
    path = shutil.which("espeak-ng")
    if path is None:
        raise EngineError("espeak-ng is not installed", hint=INSTALL_HINTS["espeak-ng"])
    return path


def list_voices() -> list[tuple[str, str]]:
    """(language code, voice name) of every installed espeak-ng voice."""
    try:
        out = subprocess.run(
            [_binary(), "--voices"], capture_output=True, text=True, timeout=10, check=False
        ).stdout
    except (OSError, subprocess.TimeoutExpired):
        return []
    voices = []
    for line in out.splitlines()[1:]:
        fields = line.split()
        if len(fields) >= 4:
            voices.append((fields[1], fields[3]))
    return voices


class EspeakEngine(TtsEngine):
    """espeak-ng through its command line.

    Args:
        voice: a language code ("en-us", "en-gb", "de"), a voice name from `espeak-ng --voices`,
            optionally with a variant ("en-us+f3").
    """

    name: ClassVar[str] = "espeak-ng"
    multilingual: ClassVar[bool] = True
    sample_rate = 22_050
    voice: str  # DEFAULT_VOICE when none is asked for

    def __init__(self, voice: str | None = None, **_options: object) -> None:
        self._binary = _binary()
        self.voice = voice or DEFAULT_VOICE
        if not re.fullmatch(r"[\w().+-]+", self.voice):
            raise unknown_voice(self.name, self.voice, self.voice_names())
        # Ask espeak-ng itself: it knows its voices, variants and mbrola voices that lack data.
        probe = subprocess.run(
            [self._binary, "-q", "-v", self.voice, "x"],
            capture_output=True,
            text=True,
            timeout=10,
            check=False,
        )
        if probe.returncode != 0 or "Error:" in probe.stderr:
            raise unknown_voice(self.name, self.voice, self.voice_names())

    @property
    def english_only(self) -> bool:
        # An English voice reads a Chinese line as "Chinese letter, Chinese letter, ...".
        return self.voice.split("+")[0].lower().startswith(("en", "english"))

    @classmethod
    def voice_names(cls, **_options: object) -> list[str]:
        try:
            codes = [code for code, _name in list_voices()]
        except EngineError:
            return []
        unique = sorted(set(codes), key=lambda c: (c != DEFAULT_VOICE, not c.startswith("en"), c))
        return unique

    def synthesize(self, sentence: str, *, speed: float = 1.0) -> np.ndarray:
        from vocal.audio.wav import parse_wav
        from vocal.errors import AudioFormatError

        words_per_minute = round(min(_MAX_WPM, max(_MIN_WPM, BASE_WORDS_PER_MINUTE * speed)))
        command = [
            self._binary,
            "-v",
            self.voice,
            "-s",
            str(words_per_minute),
            "--stdout",
            "--stdin",
        ]
        try:
            result = subprocess.run(
                command,
                input=sentence.encode("utf-8"),
                capture_output=True,
                timeout=_TIMEOUT_S,
                check=False,
            )
        except subprocess.TimeoutExpired:
            raise EngineError(
                f"espeak-ng took more than {_TIMEOUT_S:.0f} s for one sentence"
            ) from None
        except OSError as exc:
            raise EngineError(
                f"cannot run espeak-ng: {exc}", hint=INSTALL_HINTS["espeak-ng"]
            ) from None
        if result.returncode != 0:
            detail = result.stderr.decode(errors="replace").strip().splitlines()
            raise EngineError(f"espeak-ng failed: {detail[-1] if detail else result.returncode}")
        try:
            audio = parse_wav(result.stdout, name="espeak-ng")
        except AudioFormatError as exc:
            raise EngineError(f"espeak-ng wrote no usable audio: {exc}") from None
        if audio.sample_rate != self.sample_rate:  # mbrola voices render at 16 kHz
            audio = audio.resample(self.sample_rate)
        return audio.mono_samples


__all__ = ["EspeakEngine", "list_voices"]
