"""One POST to a remote engine: a deadline, retries where a retry can help, clear errors.

Every request has one deadline, `timeout_s`, for connecting, sending, every read and the whole
body together, retries included, so a server that trickles bytes or keeps failing cannot hang a
turn. A 5xx answer in `RETRY_STATUSES` and a connection reset (a server restarting, a proxy
dropping an idle connection) are tried again after a short backoff, up to `retries` times, while
the deadline allows; a refused connection, a name that does not resolve, a timeout or a 4xx is
not (offline stays offline, and the caller may have a fallback to run in the time left).
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

from vocal.errors import EngineError

#: The largest body read back: a minute of 24 kHz float audio is 5.8 MB.
MAX_BODY_BYTES = 64 * 1024 * 1024
#: Answers worth another try: the server or a gateway in front of it failed for now.
RETRY_STATUSES = frozenset({500, 502, 503, 504})
#: The pause before the first and each later retry: short, since a person waits for the
#: answer (no measurement; OpenAI's own clients start at 0.5 s for batch work).
RETRY_BACKOFF_S = (0.1, 0.3)
_READ_BYTES = 64 * 1024
#: A connection the server or a proxy dropped mid-exchange: worth another try.
_DROPPED = (ConnectionResetError, ConnectionAbortedError, BrokenPipeError,
            http.client.RemoteDisconnected, http.client.IncompleteRead)  # fmt: skip


class _Retryable(Exception):
    """A failure another attempt may cure; carries the error to raise when none is left."""

    def __init__(self, error: EngineError) -> None:
        super().__init__(str(error))
        self.error = error


def shown_url(url: str) -> str:
    """`url` as an error message shows it: scheme, host, port and path; never a user name,
    password, query (which may hold a key) or fragment."""
    parts = urllib.parse.urlsplit(url)
    host = parts.hostname or ""
    if ":" in host:  # an IPv6 literal
        host = f"[{host}]"
    try:
        port = f":{parts.port}" if parts.port else ""
    except ValueError:  # a port that is not a number
        port = ""
    return f"{parts.scheme}://{host}{port}{parts.path}"


def post(
    url: str,
    body: bytes,
    headers: dict[str, str],
    *,
    timeout_s: float,
    retries: int = 0,
) -> bytes:
    """POST `body` to `url` and return the answer's body.

    Args:
        url: the endpoint (http or https).
        body: the request body, already encoded; `headers` says its Content-Type.
        timeout_s: the deadline for the whole exchange, retries included.
        retries: how many more attempts a retryable failure gets (module docstring).

    Raises:
        EngineError: every failure (exit 5), one line naming `shown_url(url)`.
    """
    shown = shown_url(url)
    deadline = time.monotonic() + timeout_s
    request = urllib.request.Request(url, data=body, headers=headers, method="POST")
    attempt = 0
    while True:
        try:
            return _attempt(request, shown, deadline, timeout_s)
        except _Retryable as failure:
            pause_s = RETRY_BACKOFF_S[min(attempt, len(RETRY_BACKOFF_S) - 1)]
            if attempt >= retries or time.monotonic() + pause_s >= deadline:
                if attempt:
                    failure.error.args = (f"{failure.error.args[0]} ({attempt + 1} attempts)",)
                raise failure.error from None
            attempt += 1
            time.sleep(pause_s)


def _attempt(
    request: urllib.request.Request, shown: str, deadline: float, timeout_s: float
) -> bytes:
    """One try of `request` within what is left of `deadline`; `_Retryable` or EngineError."""
    late = EngineError(f"{shown} did not answer within {timeout_s:g} s")
    left_s = deadline - time.monotonic()
    if left_s <= 0:
        raise late
    try:
        with urllib.request.urlopen(request, timeout=left_s) as response:  # noqa: S310
            chunks: list[bytes] = []
            size = 0
            while True:
                chunk = response.read(_READ_BYTES)
                if not chunk:
                    return b"".join(chunks)
                chunks.append(chunk)
                size += len(chunk)
                if size > MAX_BODY_BYTES:
                    raise EngineError(f"{shown} sent more than {MAX_BODY_BYTES >> 20} MB")
                if time.monotonic() > deadline:
                    raise late
    except urllib.error.HTTPError as exc:
        detail = _detail(exc)
        if exc.code in (401, 403):
            raise EngineError(
                f"{shown} rejected the API key (HTTP {exc.code})", hint="check the key variable"
            ) from None
        error = EngineError(f"{shown} answered HTTP {exc.code}: {detail}")
        if exc.code in RETRY_STATUSES:
            raise _Retryable(error) from None
        raise error from None
    except urllib.error.URLError as exc:
        raise _failure(exc.reason, shown, late) from None
    except (OSError, http.client.HTTPException) as exc:  # raised while reading the answer
        raise _failure(exc, shown, late) from None


def _failure(reason: object, shown: str, late: EngineError) -> EngineError | _Retryable:
    """The error for a connection that failed with `reason` (an exception, or urllib's text)."""
    if isinstance(reason, (socket.timeout, TimeoutError)):
        return late
    if isinstance(reason, _DROPPED):
        return _Retryable(EngineError(f"{shown} dropped the connection ({_reason(reason)})"))
    return EngineError(f"cannot reach {shown}: {_reason(reason)}",
                       hint="check the network and the server's base URL")  # fmt: skip


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


__all__ = ["MAX_BODY_BYTES", "RETRY_STATUSES", "post", "shown_url"]
