"""The URLs of remote engines: a base URL checked once, endpoints under it, and the form an
error message shows (never a password, user name or query, which may hold a key).

Here rather than in each engine so that vocal.net holds every use of urllib (issue 37): the
engines name a base URL and a path, and the client alone talks to the server.
"""

from __future__ import annotations

import urllib.parse

from vocal.errors import UsageError


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


def base_url(value: str, setting: str) -> str:
    """`value` without its trailing slashes, checked to be an http(s) URL with a host.

    Raises:
        UsageError: anything else (exit 2), naming `setting` and the URL as `shown_url` shows it.
    """
    base = value.strip().rstrip("/")
    parts = urllib.parse.urlsplit(base)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise UsageError(f"{setting} must be an http(s) URL, got {shown_url(base)!r}")
    return base


def endpoint(base: str, path: str) -> str:
    """`path` under `base`'s path; a query the base carries (a gateway's API version) stays
    a query, and a fragment is dropped."""
    parts = urllib.parse.urlsplit(base)
    return urllib.parse.urlunsplit(
        parts._replace(path=f"{parts.path.rstrip('/')}/{path.lstrip('/')}", fragment="")
    )


def hostname(url: str) -> str | None:
    """The host `url` names, lower case (None for none)."""
    return urllib.parse.urlsplit(url).hostname


__all__ = ["base_url", "endpoint", "hostname", "shown_url"]
