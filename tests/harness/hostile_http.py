"""A hostile HTTP server on the loopback for every remote engine (issue 37).

`HostileServer` answers every POST (and GET) the way its `behaviour` says, whatever the path,
so one server stands in for OpenAI's transcription and speech endpoints and for ElevenLabs:

- "answer": 200 with `body` (the `recorder` a redirect points at answers this way);
- "redirect": `redirect_status` (301/302/303/307/308) to the same path on `redirect_to`;
- "silent": read the request and never answer (until the server stops);
- "trickle-headers": a status line, then one header byte every `trickle_s`, never ending;
- "trickle-body": whole headers promising a megabyte, then one body byte every `trickle_s`;
- "huge": 100 MB of zeros behind a Content-Length that says so, streamed 64 kB at a time;
- "huge-unsized": the same without a Content-Length (read until the server closes);
- "hub": a Hugging Face hub with one repository of `HUB_FILES` (commit `HUB_SHA`), whose file
  URLs redirect to `redirect_to` + "/cdn/NAME" as the real hub's do to its CDN (the file is
  `body` there: point `redirect_to` at an "answer" server).

Every request's method, path and headers (lower-cased names) are kept in `requests`, so a test
can tell whether a credential reached it. Loops are bounded in time and bytes and end when the
client hangs up or the server stops. `second_loopback()` is another address than 127.0.0.1
(127.0.0.2 on Linux), so a redirect there goes to another host, not just another port.
"""

from __future__ import annotations

import json
import socket
import time
import urllib.parse
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler
from typing import Any

from harness.stt_server import LoopbackHTTP

HUGE_BYTES = 100 * 1024 * 1024
#: A trickle stops on its own after this long, whatever the client does.
TRICKLE_LIMIT_S = 90.0
#: The credential headers a key travels in (OpenAI, ElevenLabs).
CREDENTIAL_HEADERS = ("authorization", "xi-api-key")
#: The fake hub's repository: a Whisper model's files (vocal.stt.faster_whisper.HUB_FILES).
HUB_FILES = ("config.json", "model.bin", "tokenizer.json", "vocabulary.txt")
HUB_SHA = "0123456789abcdef0123456789abcdef01234567"


def second_loopback() -> str:
    """127.0.0.2 where it can be bound (Linux routes all of 127/8 to the loopback), else
    127.0.0.1 (another port is still another origin)."""
    probe = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        probe.bind(("127.0.0.2", 0))
    except OSError:
        return "127.0.0.1"
    finally:
        probe.close()
    return "127.0.0.2"


def transcript_json(text: str) -> bytes:
    """An OpenAI transcription answer holding `text`."""
    return json.dumps({"text": text}).encode()


def deep_json(depth: int = 100_000) -> bytes:
    """A transcription answer whose "text" is an array nested `depth` levels deep."""
    return b'{"text": ' + b"[" * depth + b"]" * depth + b"}"


@dataclass
class HostileServer(LoopbackHTTP):
    """See the module docstring."""

    behaviour: str = "answer"
    host: str = "127.0.0.1"
    body: bytes = field(default_factory=lambda: transcript_json("the right host heard you"))
    content_type: str = "application/json"
    redirect_status: int = 302
    redirect_to: str = ""
    trickle_s: float = 0.5
    requests: list[dict[str, Any]] = field(default_factory=list)

    @property
    def origin(self) -> str:
        """scheme://host:port, with no path."""
        return f"http://{self.host}:{self.port}"

    def credentials_seen(self) -> list[str]:
        """The credential headers any request to this server carried."""
        return [
            name
            for request in self.requests
            for name in CREDENTIAL_HEADERS
            if name in request["headers"]
        ]

    def start(self) -> HostileServer:
        hostile = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:  # keep test output clean
                pass

            def end_headers(self) -> None:
                # Every connection is closed after one answer: said, so that a client never
                # sends its next request on it (httpx then saw "Server disconnected without
                # sending a response" and huggingface_hub printed a retry, under load).
                self.send_header("Connection", "close")
                super().end_headers()

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                self._serve()

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                self._serve()

            def do_HEAD(self) -> None:  # noqa: N802 - http.server's naming
                self._serve()

            def _serve(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                headers = {k.lower(): v for k, v in self.headers.items()}
                hostile.requests.append(
                    {"method": self.command, "path": self.path, "headers": headers}
                )
                self.close_connection = True
                try:
                    getattr(self, "_" + hostile.behaviour.replace("-", "_"))()
                except OSError:  # the client hung up: the point of most behaviours
                    pass

            def _answer(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", hostile.content_type)
                self.send_header("Content-Length", str(len(hostile.body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(hostile.body)

            def _hub(self) -> None:
                path = urllib.parse.urlsplit(self.path).path
                if path.startswith("/api/models/"):
                    repo = "/".join(path.split("/")[3:5])
                    size = len(hostile.body)
                    listing: Any = {
                        "id": repo,
                        "modelId": repo,
                        "sha": HUB_SHA,
                        "siblings": [{"rfilename": f} for f in HUB_FILES],
                    }
                    if "/tree/" in path:
                        listing = [
                            {"type": "file", "path": f, "size": size, "oid": f"{f}-{size}"}
                            for f in HUB_FILES
                        ]
                    data = json.dumps(listing).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", "application/json")
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    return self.wfile.write(data) if self.command != "HEAD" else None
                if "/resolve/" not in path:
                    self.send_response(404)
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return None
                name = path.rsplit("/", 1)[-1]
                self.send_response(302)
                self.send_header("Location", f"{hostile.redirect_to}/cdn/{name}")
                self.send_header("X-Repo-Commit", HUB_SHA)
                self.send_header("X-Linked-Etag", f'"{name}-{len(hostile.body)}"')
                self.send_header("X-Linked-Size", str(len(hostile.body)))
                self.send_header("Content-Length", "0")
                self.end_headers()
                return None

            def _redirect(self) -> None:
                self.send_response(hostile.redirect_status)
                self.send_header("Location", hostile.redirect_to + self.path)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def _silent(self) -> None:
                hostile._stopping.wait(TRICKLE_LIMIT_S)

            def _trickle_headers(self) -> None:
                self.wfile.write(b"HTTP/1.1 200 OK\r\n")
                self._trickle(b"X-Slow: " + b"a" * 100_000)

            def _trickle_body(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", hostile.content_type)
                self.send_header("Content-Length", str(1 << 20))
                self.end_headers()
                self._trickle(b" " * (1 << 20))

            def _trickle(self, data: bytes) -> None:
                started_s = time.monotonic()
                for index in range(len(data)):
                    if hostile._stopping.is_set() or time.monotonic() - started_s > TRICKLE_LIMIT_S:
                        return
                    self.wfile.write(data[index : index + 1])
                    self.wfile.flush()
                    hostile._stopping.wait(hostile.trickle_s)

            def _huge(self) -> None:
                self._stream(sized=True)

            def _huge_unsized(self) -> None:
                self._stream(sized=False)

            def _stream(self, *, sized: bool) -> None:
                self.send_response(200)
                self.send_header("Content-Type", hostile.content_type)
                if sized:
                    self.send_header("Content-Length", str(HUGE_BYTES))
                self.end_headers()
                block = bytes(64 * 1024)
                for _ in range(HUGE_BYTES // len(block)):
                    if hostile._stopping.is_set():
                        return
                    self.wfile.write(block)

        # A short poll: `stop` waits for it, twice per test (a server and the other host).
        self.serve(Handler, self.host, poll_s=0.05)
        return self


__all__ = [
    "CREDENTIAL_HEADERS",
    "HUB_FILES",
    "HUB_SHA",
    "HUGE_BYTES",
    "HostileServer",
    "deep_json",
    "second_loopback",
    "transcript_json",
]
