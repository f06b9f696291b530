"""One POST to a remote engine: a real deadline, a capped body, no redirects, clear errors.

Keys stay with their host: no redirect is followed. urllib follows a 301/302/303 by itself,
as a GET with every header, `Authorization` included, to wherever `Location` points; the
other host's answer was then taken as the person's words (issue 37). A 3xx is one clear
`EngineError` naming where the server pointed, so the person can set the base URL to it if
they trust it: the request and its key went nowhere else. (Following same-origin redirects
would save nothing a base URL set once does not, and each rule of when to follow is one more
to get wrong: curl and requests strip credentials; vocal sends nothing.)

Every request has one deadline, `timeout_s`, for the name lookup, connecting, the TLS
handshake, sending, the headers and the whole body, retries included: the exchange runs in a
worker thread whose sockets are shut down when the deadline passes (vocal.net.deadline), so a
server that trickles a byte every half second is cut off as surely as one that never answers,
and a caller's fallback runs in the time left. A 5xx answer in `RETRY_STATUSES` and a
connection reset (a server restarting, a proxy dropping an idle connection) are tried again
after a short backoff, up to `retries` times, while the deadline allows; a refused connection,
a name that does not resolve, a timeout or a 4xx is not (offline stays offline). Each caller
caps the body it reads (`max_body_bytes`: a JSON transcript far below a sentence's audio), and
a Content-Length above the cap is refused before a byte of the body is read.
Every failure is an `EngineError` (exit 5) naming the URL without its credentials or query.

Standard library only (urllib): one POST per sentence or per turn needs no client library, and
urllib honours the usual proxy variables.
"""

from __future__ import annotations

import http.client
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from vocal.errors import EngineError
from vocal.net.deadline import Sockets, run_by
from vocal.net.urls import shown_url

#: The default cap on a body read back: a minute of 24 kHz float audio is 5.8 MB.
MAX_BODY_BYTES = 64 * 1024 * 1024
#: Answers worth another try: the server or a gateway in front of it failed for now.
RETRY_STATUSES = frozenset({500, 502, 503, 504})
#: The pause before the first and each later retry: short, since a person waits for the
#: answer (no measurement; OpenAI's own clients start at 0.5 s for batch work).
RETRY_BACKOFF_S = (0.1, 0.3)
#: The longest deadline taken: the settings' ranges stop at 600 s, and a far larger one (1e300)
#: overflows the operating system's timed waits (OverflowError).
MAX_TIMEOUT_S = 24 * 3600.0
_READ_BYTES = 64 * 1024
#: A connection the server or a proxy dropped mid-exchange: worth another try.
_DROPPED = (
    ConnectionResetError,
    ConnectionAbortedError,
    BrokenPipeError,
    http.client.RemoteDisconnected,
    http.client.IncompleteRead,
)


class _Retryable(Exception):
    """A failure another attempt may cure; carries the error to raise when none is left."""

    def __init__(self, error: EngineError) -> None:
        super().__init__(str(error))
        self.error = error


class _NoRedirects(urllib.request.HTTPRedirectHandler):
    """Follow nothing: the 3xx reaches the caller as an HTTPError (module docstring)."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


class _HttpHandler(urllib.request.HTTPHandler):
    """urllib's handler, with each connection's sockets kept for the deadline."""

    def __init__(self, sockets: Sockets) -> None:
        super().__init__()
        self._sockets = sockets

    def http_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        return self.do_open(self._sockets.connection(http.client.HTTPConnection), req)


class _HttpsHandler(urllib.request.HTTPSHandler):
    """urllib's TLS handler (certificates checked), sockets kept for the deadline."""

    def __init__(self, sockets: Sockets) -> None:
        super().__init__()
        self._sockets = sockets

    def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
        context = self._context  # type: ignore[attr-defined]  # urllib's own default context
        connection = self._sockets.connection(http.client.HTTPSConnection)
        return self.do_open(connection, req, context=context)


def post(
    url: str,
    body: bytes,
    headers: dict[str, str],
    *,
    timeout_s: float,
    retries: int = 0,
    max_body_bytes: int = MAX_BODY_BYTES,
    setting: str = "the server's base URL",
) -> bytes:
    """POST `body` to `url` and return the answer's body.

    Args:
        url: the endpoint (http or https).
        body: the request body, already encoded; `headers` says its Content-Type.
        timeout_s: the deadline for the whole exchange, retries included.
        retries: how many more attempts a retryable failure gets (module docstring).
        max_body_bytes: the largest answer taken.
        setting: the setting that names the server, for a redirect's hint.

    Raises:
        EngineError: every failure (exit 5), one line naming `shown_url(url)`.
    """
    shown = shown_url(url)
    if urllib.parse.urlsplit(url).scheme not in ("http", "https"):
        raise EngineError(f"{shown} is not an http(s) URL", hint=f"check {setting}")
    timeout_s = min(timeout_s, MAX_TIMEOUT_S)
    deadline = time.monotonic() + timeout_s
    late = EngineError(f"{shown} did not answer within {timeout_s:g} s")
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    attempt = 0
    while True:
        try:
            return run_by(
                lambda sockets: _attempt(
                    request,
                    sockets,
                    shown=shown,
                    wait_s=deadline - time.monotonic(),
                    max_body_bytes=max_body_bytes,
                    setting=setting,
                    late=late,
                ),
                deadline,
                late,
            )
        except _Retryable as failure:
            pause_s = RETRY_BACKOFF_S[min(attempt, len(RETRY_BACKOFF_S) - 1)]
            if attempt >= retries or time.monotonic() + pause_s >= deadline:
                if attempt:
                    failure.error.args = (f"{failure.error.args[0]} ({attempt + 1} attempts)",)
                raise failure.error from None
            attempt += 1
            time.sleep(pause_s)


def _attempt(
    request: urllib.request.Request,
    sockets: Sockets,
    *,
    shown: str,
    wait_s: float,
    max_body_bytes: int,
    setting: str,
    late: EngineError,
) -> bytes:
    """One try of `request`, in run_by's worker; `_Retryable` or EngineError on failure.
    Each socket wait is bounded by `wait_s`, what was left of the deadline, so a worker the
    deadline left behind ends soon after it."""
    if wait_s <= 0:
        raise late
    opener = urllib.request.build_opener(
        _NoRedirects(), _HttpHandler(sockets), _HttpsHandler(sockets)
    )
    try:
        with opener.open(request, timeout=wait_s) as response:
            return _read_body(response, shown, max_body_bytes)
    except urllib.error.HTTPError as exc:
        error = _status_error(exc, request.full_url, shown, setting)
        if exc.fp is not None:
            exc.close()
        raise error from None
    except urllib.error.URLError as exc:
        raise _failure(exc.reason, shown, late) from None
    except (OSError, http.client.HTTPException) as exc:  # raised while reading the answer
        raise _failure(exc, shown, late) from None


def _read_body(response: http.client.HTTPResponse, shown: str, max_body_bytes: int) -> bytes:
    """The answer's body, at most `max_body_bytes` (a longer one is refused, and one whose
    Content-Length says so before it is read)."""
    too_big = EngineError(f"{shown} sent an answer larger than {_size(max_body_bytes)}")
    declared = response.headers.get("Content-Length", "").strip()
    if declared.isdigit() and int(declared) > max_body_bytes:
        raise too_big
    chunks: list[bytes] = []
    size = 0
    while True:
        chunk = response.read(min(_READ_BYTES, max_body_bytes + 1 - size))
        if not chunk:
            return b"".join(chunks)
        chunks.append(chunk)
        size += len(chunk)
        if size > max_body_bytes:
            raise too_big


def _status_error(
    exc: urllib.error.HTTPError, url: str, shown: str, setting: str
) -> EngineError | _Retryable:
    """The error for an answer that is not a 2xx: a redirect not followed, a rejected key,
    a 5xx worth another try, or the server's own reason."""
    location = exc.headers.get("Location") if exc.headers else None
    if 300 <= exc.code < 400 and location:
        target = shown_url(urllib.parse.urljoin(url, location.strip()))
        return EngineError(
            f"{shown} redirected to {target} (HTTP {exc.code}); vocal follows no redirect, "
            "so neither the request nor its API key was sent there",
            hint=f"if that is the server you meant, set {setting} to its address",
        )
    if exc.code in (401, 403):
        return EngineError(
            f"{shown} rejected the API key (HTTP {exc.code})", hint="check the key variable"
        )
    error = EngineError(f"{shown} answered HTTP {exc.code}: {_detail(exc)}")
    return _Retryable(error) if exc.code in RETRY_STATUSES else error


def _failure(reason: object, shown: str, late: EngineError) -> EngineError | _Retryable:
    """The error for a connection that failed with `reason` (an exception, or urllib's text)."""
    if isinstance(reason, (socket.timeout, TimeoutError)):
        return late
    if isinstance(reason, _DROPPED):
        return _Retryable(EngineError(f"{shown} dropped the connection ({_reason(reason)})"))
    return EngineError(
        f"cannot reach {shown}: {_reason(reason)}",
        hint="check the network and the server's base URL",
    )


def _reason(reason: object) -> str:
    if isinstance(reason, OSError) and reason.strerror:
        return reason.strerror
    text = str(reason).strip()
    return text.splitlines()[0] if text else type(reason).__name__


def _detail(exc: urllib.error.HTTPError) -> str:
    """The start of an error answer's body, on one line (a server's own reason)."""
    try:
        text = exc.read(300).decode("utf-8", errors="replace")
    except (OSError, http.client.HTTPException):
        return ""
    return " ".join(text.split())[:200]


def _size(count: int) -> str:
    if count >= 1 << 20:
        return f"{count / (1 << 20):g} MB"
    return f"{count / (1 << 10):g} kB"


__all__ = ["MAX_BODY_BYTES", "RETRY_STATUSES", "post", "shown_url"]
