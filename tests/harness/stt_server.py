"""A fake OpenAI-compatible transcription server on 127.0.0.1 (issue 21), for the remote
recognition engine (vocal.stt.openai) as `FakeSpeechServer` (harness.speak_audio) is for the
HTTP speech engines.

Every request is parsed on its own terms (the multipart body by the standard library's `email`
parser, not by vocal's encoder) and checked against the shape OpenAI documents for
`POST {base}/audio/transcriptions`: method POST, the path under the base URL, `Authorization:
Bearer <key>` (another key is answered 401), a multipart body whose `file` is a 16 kHz mono
16-bit WAV, `model`, `language` and `prompt` exactly when expected, `response_format=json`. A
request that breaks the shape is answered 400 and its problems kept in `problems`; `check()`
raises them in the test's thread.

Behaviours: answer 200 with `text` after `delay_s` (a simulated processing time); answer 500 to
the first `fail_first` requests; drop the connection on the first `drop_first` (no answer at
all); or `hang` (read the request and never answer). Nothing listening at all is
`harness.speak_audio.closed_port()`.
"""

from __future__ import annotations

import email.parser
import email.policy
import json
import socket
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Self

from vocal.audio.wav import Audio, parse_wav


@dataclass
class TranscriptionRequest:
    """One request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]
    fields: dict[str, str]
    filename: str | None = None
    file_type: str | None = None
    audio: Audio | None = None
    #: The WAV header's sample width in bytes (16-bit PCM: 2).
    sample_width: int | None = None
    received_at_s: float = 0.0
    #: False for a well-formed `Bearer` header with another key (answered 401, as a real
    #: server does; not a shape problem).
    key_accepted: bool = True


@dataclass
class LoopbackHTTP:
    """A threaded HTTP server on a loopback address for a test's lifetime: `serve` starts it
    with a handler class, `stop` (or leaving the `with` block) ends it."""

    port: int = 0
    server: ThreadingHTTPServer | None = None
    _stopping: threading.Event = field(default_factory=threading.Event)

    def serve(
        self, handler: type[BaseHTTPRequestHandler], host: str = "127.0.0.1", poll_s: float = 0.5
    ) -> None:
        self.server = ThreadingHTTPServer((host, 0), handler)
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        threading.Thread(target=self.server.serve_forever, args=(poll_s,), daemon=True).start()

    def start(self) -> LoopbackHTTP:
        raise NotImplementedError

    def stop(self) -> None:
        self._stopping.set()
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()

    def __enter__(self) -> Self:
        return self.start()  # type: ignore[return-value]

    def __exit__(self, *exc: object) -> None:
        self.stop()


@dataclass
class FakeTranscriptionServer(LoopbackHTTP):
    """See the module docstring. `expect_*` None means the field must be absent."""

    text: str = "The fake server heard you."
    key: str | None = "test-stt-key"
    base_path: str = "/v1"
    expect_model: str = "whisper-1"
    expect_language: str | None = "en"
    expect_prompt: str | None = None
    delay_s: float = 0.0
    fail_first: int = 0
    drop_first: int = 0
    hang: bool = False
    requests: list[TranscriptionRequest] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)

    @property
    def url(self) -> str:
        """The base URL (what `openai_stt_base_url` takes)."""
        return f"http://127.0.0.1:{self.port}{self.base_path}"

    def env(self) -> dict[str, str]:
        """The environment that points `vocal listen --engine openai` here."""
        variables = {"VOCAL_OPENAI_STT_BASE_URL": self.url}
        if self.key:
            variables["OPENAI_API_KEY"] = self.key
        return variables

    def check(self) -> None:
        """Raise every shape problem the server saw (the handler runs in another thread)."""
        assert not self.problems, "bad transcription requests: " + "; ".join(self.problems)

    def start(self) -> FakeTranscriptionServer:
        fake = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # keep test output clean
                pass

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                fake.problems.append(f"GET {self.path}: transcription is a POST")
                self._reply(405, {"error": "POST only"})

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length)
                request, problems = fake._parse(self, body)
                fake.requests.append(request)
                index = len(fake.requests)
                if problems:
                    fake.problems.extend(problems)
                    return self._reply(400, {"error": {"message": "; ".join(problems)}})
                if not request.key_accepted:
                    return self._reply(401, {"error": {"message": "Incorrect API key"}})
                if index <= fake.drop_first:
                    self.close_connection = True  # no status line at all: a dropped connection
                    self.connection.shutdown(socket.SHUT_RDWR)
                    return
                if fake.hang:
                    fake._stopping.wait(60)
                    return
                if fake.delay_s:
                    time.sleep(fake.delay_s)
                if index <= fake.drop_first + fake.fail_first:
                    return self._reply(500, {"error": {"message": "the fake server failed"}})
                self._reply(200, {"text": fake.text})

            def _reply(self, status: int, payload: dict[str, Any]) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.serve(Handler)
        return self

    # -- the shape of a request ------------------------------------------------------------------
    def _parse(
        self, handler: BaseHTTPRequestHandler, body: bytes
    ) -> tuple[TranscriptionRequest, list[str]]:
        headers = {k.lower(): v for k, v in handler.headers.items()}
        request = TranscriptionRequest(
            method=handler.command, path=handler.path, headers=headers, fields={},
            received_at_s=time.monotonic(),
        )  # fmt: skip
        problems = []
        if handler.path != f"{self.base_path}/audio/transcriptions":
            problems.append(f"path {handler.path!r}, not {self.base_path}/audio/transcriptions")
        auth = headers.get("authorization")
        if self.key is None and auth is not None:
            problems.append(f"Authorization {auth!r} sent to a server that takes no key")
        elif self.key is not None and not (auth or "").startswith("Bearer "):
            problems.append(f"Authorization {auth!r}, not 'Bearer <key>'")
        elif self.key is not None:
            request.key_accepted = auth == f"Bearer {self.key}"
        content_type = headers.get("content-type", "")
        if not content_type.startswith("multipart/form-data; boundary="):
            problems.append(f"Content-Type {content_type!r} is not multipart/form-data")
            return request, problems
        message = email.parser.BytesParser(policy=email.policy.HTTP).parsebytes(
            f"Content-Type: {content_type}\r\n\r\n".encode() + body
        )
        if not message.is_multipart() or message.defects:
            problems.append(f"the body is not a well-formed multipart body ({message.defects})")
            return request, problems
        for part in message.iter_parts():
            name = part.get_param("name", header="content-disposition")
            data = part.get_payload(decode=True) or b""
            if name == "file":
                request.filename = part.get_filename()
                request.file_type = part.get_content_type()
                try:
                    request.audio = parse_wav(data, name="the uploaded file")
                except Exception as exc:  # noqa: BLE001 - any parse failure is a bad upload
                    problems.append(f"file is not a WAV: {exc}")
                    continue
                request.sample_width = int.from_bytes(data[34:36], "little") // 8
            elif isinstance(name, str):
                request.fields[name] = data.decode("utf-8")
            else:
                problems.append("a part without a name")
        problems.extend(self._check_fields(request))
        return request, problems

    def _check_fields(self, request: TranscriptionRequest) -> list[str]:
        problems = []
        if request.audio is None:
            problems.append("no `file` part")
        else:
            if not (request.filename or "").endswith(".wav") or request.file_type != "audio/wav":
                problems.append(f"file {request.filename!r} of type {request.file_type!r}")
            audio = request.audio
            if audio.sample_rate != 16_000 or audio.channels != 1 or request.sample_width != 2:
                problems.append(f"WAV {audio.sample_rate} Hz x{audio.channels}, "
                                f"{request.sample_width} bytes a sample")  # fmt: skip
        expected = {"model": self.expect_model, "language": self.expect_language,
                    "prompt": self.expect_prompt, "response_format": "json"}  # fmt: skip
        for name, value in expected.items():
            if request.fields.get(name) != value:
                problems.append(f"field {name}={request.fields.get(name)!r}, not {value!r}")
        unknown = set(request.fields) - set(expected)
        if unknown:
            problems.append(f"unexpected fields {sorted(unknown)}")
        return problems


__all__ = ["FakeTranscriptionServer", "TranscriptionRequest"]
