"""HTTP engines: an OpenAI-compatible `/v1/audio/speech` endpoint and ElevenLabs.

Keys come from the environment (OPENAI_API_KEY, ELEVENLABS_API_KEY), never from flags, so they
stay out of shell history and `ps`. Base URLs, models and the timeout are settings
(VOCAL_OPENAI_BASE_URL, VOCAL_ELEVENLABS_BASE_URL, VOCAL_TTS_HTTP_TIMEOUT, ...). Each sentence's
request goes through vocal.net.client, shared with the recognition engine: one deadline,
`tts_http_timeout_s`, for the whole exchange whatever the server's pace, an answer of at most
`MAX_AUDIO_BYTES`, and no redirect followed, so a key goes to the configured host or nowhere.
"""

from __future__ import annotations

import json
import os
import re
from collections.abc import Mapping
from typing import TYPE_CHECKING, ClassVar, TypeVar

from vocal.config import Settings
from vocal.errors import EngineError
from vocal.net import client, urls
from vocal.tts import INSTALL_HINTS, TtsEngine, unknown_voice

if TYPE_CHECKING:
    import numpy as np

DEFAULT_TIMEOUT_S = Settings.tts_http_timeout_s
#: The largest answer read for one sentence: OpenAI takes at most 4,096 characters, about five
#: minutes of speech, 14 MB of 24 kHz 16-bit WAV; this leaves room for a slow `speed`.
MAX_AUDIO_BYTES = 64 * 1024 * 1024
OPENAI_URL = Settings.openai_base_url
#: OpenAI's voices; another compatible server may have others, so only OpenAI's are checked.
OPENAI_VOICES = (
    "alloy",
    "ash",
    "ballad",
    "coral",
    "echo",
    "fable",
    "nova",
    "onyx",
    "sage",
    "shimmer",
    "verse",
)
#: ElevenLabs' "Rachel", a premade voice every account has.
ELEVENLABS_DEFAULT_VOICE = "21m00Tcm4TlvDq8ikWAM"


T = TypeVar("T")


def _setting(settings: Settings | None, name: str, default: T) -> T:
    value = getattr(settings, name, None) if settings is not None else None
    return default if value is None else value


def post(
    url: str, payload: Mapping[str, object], headers: dict[str, str], timeout_s: float, setting: str
) -> bytes:
    """POST `payload` as JSON and return the body; every failure is one clear EngineError
    (vocal.net.client: the deadline, the body cap and the messages; `setting` names the base
    URL). Not retried, as before the client was shared: what a retry would cost a sentence's
    place in the reply is unmeasured."""
    body = json.dumps(payload).encode("utf-8")
    headers = {"Content-Type": "application/json", **headers}
    return client.post(
        url, body, headers, timeout_s=timeout_s, max_body_bytes=MAX_AUDIO_BYTES, setting=setting
    )


class OpenAiEngine(TtsEngine):
    """Any server speaking OpenAI's `POST {base}/audio/speech` (WAV responses).

    Args:
        voice: a voice of the server (OpenAI: alloy, coral, nova, ...; default alloy).
        settings: vocal settings (openai_base_url, openai_tts_model, tts_http_timeout_s).
    """

    name: ClassVar[str] = "openai"
    multilingual: ClassVar[bool] = True
    sample_rate = 24_000

    def __init__(
        self, voice: str | None = None, *, settings: Settings | None = None, **_options: object
    ) -> None:
        self.base_url = urls.base_url(
            str(_setting(settings, "openai_base_url", OPENAI_URL)), "openai_base_url"
        )
        self.model = _setting(settings, "openai_tts_model", Settings.openai_tts_model)
        self.timeout_s = float(_setting(settings, "tts_http_timeout_s", DEFAULT_TIMEOUT_S))
        self.voice = voice or "alloy"
        official = urls.hostname(self.base_url) == "api.openai.com"
        if official and self.voice not in OPENAI_VOICES:
            raise unknown_voice(self.name, self.voice, list(OPENAI_VOICES))
        self._key = os.environ.get("OPENAI_API_KEY", "")
        if official and not self._key:
            raise EngineError("OPENAI_API_KEY is not set", hint=INSTALL_HINTS["openai"])

    @classmethod
    def voice_names(cls, **_options: object) -> list[str]:
        return list(OPENAI_VOICES)

    def synthesize(self, sentence: str, *, speed: float = 1.0) -> np.ndarray:
        from vocal.audio.wav import parse_wav
        from vocal.errors import AudioFormatError

        headers = {"Authorization": f"Bearer {self._key}"} if self._key else {}
        payload = {
            "model": self.model,
            "input": sentence,
            "voice": self.voice,
            "response_format": "wav",
            "speed": min(4.0, max(0.25, speed)),
        }
        url = urls.endpoint(self.base_url, "audio/speech")
        body = post(url, payload, headers, self.timeout_s, "openai_base_url")
        try:
            audio = parse_wav(body, name=urls.shown_url(url))
        except AudioFormatError as exc:
            raise EngineError(f"the speech server sent no WAV audio: {exc}") from None
        if audio.sample_rate != self.sample_rate:
            audio = audio.resample(self.sample_rate)
        return audio.mono_samples


class ElevenLabsEngine(TtsEngine):
    """ElevenLabs' `POST {base}/v1/text-to-speech/{voice_id}` with 24 kHz 16-bit PCM back.

    Args:
        voice: a voice ID from the ElevenLabs voice library (default: Rachel's).
        settings: vocal settings (elevenlabs_base_url, elevenlabs_model, tts_http_timeout_s).
    """

    name: ClassVar[str] = "elevenlabs"
    multilingual: ClassVar[bool] = True
    sample_rate = 24_000

    def __init__(
        self, voice: str | None = None, *, settings: Settings | None = None, **_options: object
    ) -> None:
        self.base_url = urls.base_url(
            str(_setting(settings, "elevenlabs_base_url", Settings.elevenlabs_base_url)),
            "elevenlabs_base_url",
        )
        self.model = _setting(settings, "elevenlabs_model", Settings.elevenlabs_model)
        self.timeout_s = float(_setting(settings, "tts_http_timeout_s", DEFAULT_TIMEOUT_S))
        self.voice = voice or ELEVENLABS_DEFAULT_VOICE
        if not re.fullmatch(r"[A-Za-z0-9]{8,64}", self.voice):
            raise unknown_voice(self.name, self.voice, [ELEVENLABS_DEFAULT_VOICE])
        self._key = os.environ.get("ELEVENLABS_API_KEY", "")
        if not self._key:
            raise EngineError("ELEVENLABS_API_KEY is not set", hint=INSTALL_HINTS["elevenlabs"])

    @classmethod
    def voice_names(cls, **_options: object) -> list[str]:
        return [ELEVENLABS_DEFAULT_VOICE]

    def synthesize(self, sentence: str, *, speed: float = 1.0) -> np.ndarray:
        import numpy as np

        url = f"{self.base_url}/v1/text-to-speech/{self.voice}?output_format=pcm_{self.sample_rate}"
        payload = {
            "text": sentence,
            "model_id": self.model,
            "voice_settings": {"speed": min(1.2, max(0.7, speed))},
        }
        headers = {"xi-api-key": self._key, "Accept": "audio/pcm"}
        body = post(url, payload, headers, self.timeout_s, "elevenlabs_base_url")
        if body[:4] in (b"RIFF", b'{"de', b"<htm") or len(body) < 2:
            raise EngineError("ElevenLabs sent no raw PCM audio")
        usable = len(body) - len(body) % 2
        return np.frombuffer(body[:usable], dtype="<i2").astype(np.float32) / 32768.0


__all__ = ["OpenAiEngine", "ElevenLabsEngine", "post"]
