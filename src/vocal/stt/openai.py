"""Remote recognition: any server speaking OpenAI's `POST {base}/audio/transcriptions`.

The utterance the endpointer handed over (16 kHz mono, the same audio a local engine gets) is
uploaded once per turn as a 16-bit WAV in a `multipart/form-data` body: `file`, `model`,
`language` when it is known, `prompt` when one is set (vocabulary the recognizer should expect),
and `response_format=json`; the answer is `{"text": ...}`. Once per turn, not in every pause:
vocal.hearing.early says why.

Settings: `openai_stt_base_url` (unset: `openai_base_url`, which the OpenAI speech engine also
uses), `openai_stt_model` (whisper-1), `openai_stt_timeout_s` (the deadline for the whole
exchange, retries included), `openai_stt_prompt`; the key comes from OPENAI_API_KEY, never from
a flag. The official host needs the key; a compatible server elsewhere (a local
faster-whisper-server, a gateway) may take requests without one. A 5xx or a dropped connection
is retried twice after a short backoff (vocal.net.client); every failure is an EngineError
(exit 5) naming the server, which the `stt_fallback` setting turns into a local transcription
(vocal.stt.fallback).

What comes back is bounded before it is taken as the person's words (issue 37): the answer to
`MAX_ANSWER_BYTES` (a JSON transcript, far below a sentence's audio), its JSON nesting
(vocal.files.bounded), and the transcript to `max_transcript_chars` of the clip's length. A
transcript longer than anyone could say in that time is not the person's words, whatever it
holds; refused, it is a failure the local fallback stands in for, and the hints' respelling
(vocal.stt.respell) never sees more than that.

Imports nothing heavy: the standard library at load (the engine is ready at once, so it is
never loaded in a child process: vocal.hearing.stt_loading), and vocal.audio.wav (numpy) only
inside `transcribe`, when the audio is already an array.
"""

from __future__ import annotations

import os
import time
from typing import TYPE_CHECKING

from vocal.config import Settings
from vocal.errors import EngineError
from vocal.files.bounded import BoundedReadError, loads_json
from vocal.net import client, urls
from vocal.net.multipart import FilePart, form_data
from vocal.stt import Transcript

if TYPE_CHECKING:
    from vocal.audio.wav import Audio

OPENAI_URL = Settings.openai_base_url
DEFAULT_MODEL = Settings.openai_stt_model
#: The deadline for one transcription, retries included: whisper-1 answers a short turn in
#: about a second; ten leaves room for a slow network without leaving a person waiting long
#: (no measurement against the real service here).
DEFAULT_TIMEOUT_S = Settings.openai_stt_timeout_s
#: Attempts after the first for a 5xx or a dropped connection (vocal.net.client).
RETRIES = 2
KEY_VARIABLE = "OPENAI_API_KEY"
#: The largest answer read: `{"text": ...}` for ten minutes of speech is about 10 kB, and the
#: longest transcript taken for them (`max_transcript_chars`), every character escaped as
#: \uXXXX, 230 kB.
MAX_ANSWER_BYTES = 1024 * 1024
#: The longest transcript taken: a floor for a short clip plus so many characters a second.
#: Speech runs at 15-20 characters a second (a fast 200 words a minute); the floor leaves room
#: for one 30 s window of Whisper's longest output (448 tokens, about 2,000 characters).
MIN_TRANSCRIPT_CHARS = 2_000
TRANSCRIPT_CHARS_PER_S = 60


def max_transcript_chars(duration_s: float) -> int:
    """The longest transcript taken for `duration_s` of audio (module docstring)."""
    return MIN_TRANSCRIPT_CHARS + int(TRANSCRIPT_CHARS_PER_S * max(0.0, duration_s))


class OpenAiSttEngine:
    """Speech to text on an OpenAI-compatible server (module docstring).

    Args:
        model: the server's model name (OpenAI: whisper-1, gpt-4o-transcribe,
            gpt-4o-mini-transcribe).
        language: a language code sent with the audio; None, "" or "auto" lets the server
            detect it.
        base_url: the API's base, up to and including `/v1` (default OpenAI's).
        timeout_s: the deadline for one transcription, retries included.
        prompt: text the recognizer should expect (names, jargon), sent as `prompt`.

    Raises:
        UsageError: a base URL that is not http(s) (exit 2).
        EngineError: no OPENAI_API_KEY for the official host (exit 5).
    """

    name = "openai"
    #: Called once per turn, never in pauses (vocal.hearing.early.transcribes_early).
    remote = True

    def __init__(
        self,
        model: str = DEFAULT_MODEL,
        *,
        language: str | None = Settings.language,
        base_url: str | None = None,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        prompt: str | None = None,
    ) -> None:
        started = time.perf_counter()
        self.model_name = model or DEFAULT_MODEL
        self.language = None if language in (None, "", "auto") else language
        self.base_url = urls.base_url(base_url or OPENAI_URL, "openai_stt_base_url")
        self.url = urls.endpoint(self.base_url, "audio/transcriptions")
        self.timeout_s = timeout_s
        self.prompt = prompt or None
        self._key = os.environ.get(KEY_VARIABLE, "")
        if urls.hostname(self.base_url) == "api.openai.com" and not self._key:
            raise EngineError(
                f"{KEY_VARIABLE} is not set, and {self.base_url} needs it",
                hint=f"export {KEY_VARIABLE}=..., point openai_stt_base_url at a compatible "
                "server, or recognize locally: --engine auto",
            )
        self.load_s = time.perf_counter() - started

    def transcribe(self, audio: Audio) -> Transcript:
        """Upload `audio` (any rate and channel count: sent as 16 kHz mono 16-bit WAV) and
        return the server's transcript (EngineError on any failure)."""
        from vocal.audio.wav import wav_bytes

        clip = audio.for_stt()
        started = time.perf_counter()
        fields = {"model": self.model_name, "response_format": "json"}
        if self.language:
            fields["language"] = self.language
        if self.prompt:
            fields["prompt"] = self.prompt
        body, content_type = form_data(
            fields, [FilePart("file", "utterance.wav", "audio/wav", wav_bytes(clip))]
        )
        headers = {"Content-Type": content_type, "Accept": "application/json"}
        if self._key:
            headers["Authorization"] = f"Bearer {self._key}"
        answer = client.post(
            self.url,
            body,
            headers,
            timeout_s=self.timeout_s,
            retries=RETRIES,
            max_body_bytes=MAX_ANSWER_BYTES,
            setting="openai_stt_base_url",
        )
        text = self._text(answer).strip()
        limit = max_transcript_chars(clip.duration_s)
        if len(text) > limit:
            raise EngineError(
                f"{urls.shown_url(self.url)} sent a transcript of {len(text):,} characters for "
                f"{clip.duration_s:.1f} s of audio (at most {limit:,}): not taken as the words said"
            )
        if not any(c.isalnum() for c in text):
            text = ""  # "." or "..." for silence or noise is no words, as the local engines say
        return Transcript(
            text=text,
            language=self.language,
            duration_s=clip.duration_s,
            transcribe_s=time.perf_counter() - started,
            engine=self.name,
        )

    def _text(self, answer: bytes) -> str:
        """The transcript in the server's JSON answer (EngineError when there is none)."""
        shown = urls.shown_url(self.url)
        try:
            reply = loads_json(answer)
        except BoundedReadError as exc:
            raise EngineError(f"{shown} sent no transcript: {exc}") from None
        except ValueError:  # not JSON, or not UTF-8 (UnicodeDecodeError)
            start = " ".join(answer[:80].decode("utf-8", errors="replace").split())
            raise EngineError(f"{shown} sent no JSON transcript: {start!r}") from None
        text = reply.get("text") if isinstance(reply, dict) else None
        if not isinstance(text, str):
            raise EngineError(f'{shown} sent JSON without a transcript (no "text")')
        return text


__all__ = ["DEFAULT_MODEL", "MAX_ANSWER_BYTES", "OpenAiSttEngine", "max_transcript_chars"]
