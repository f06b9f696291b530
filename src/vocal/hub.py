"""Models fetched from the Hugging Face hub: the cache first, else a download with a progress bar.

Shared by every stage that loads a model from the hub (Whisper in vocal.stt, the words' model in
vocal.hearing.words_model, Chatterbox's weights in vocal.tts.chatterbox), so it sits below them all.

A download may rightly take minutes, so it has no total deadline; what it has is a stall bound
on every wait (`bound_hub_stalls`). Keys stay with the hub: huggingface_hub itself sends the
token only to hub hosts, dropping it for the CDN a file redirects to (file_download's metadata
step), and its HTTP client strips `Authorization` on any redirect to another origin.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from vocal.errors import EngineError

OFFLINE_HINT = "connect to the network once to fetch it, or pass --model PATH to a local model"


def first_line(exc: BaseException) -> str:
    """An exception's message cut to one line (errors are one line, docs/design.md)."""
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


_BOUNDED = False


def bound_hub_stalls() -> None:
    """Make every request huggingface_hub sends give up after a stall: no connect, read,
    write or wait for a connection longer than HF_HUB_DOWNLOAD_TIMEOUT (10 s unless set).

    The hub bounds a file's reads by that, but sends its API calls (the repository's file list
    that every first download starts with) with no timeout at all: a hub or proxy that accepts
    the connection and never answers hung the download for ever (issue 37). A request hook
    fills in each timeout left unset. Hubs older than its httpx client (requests) are left
    as they are.
    """
    global _BOUNDED
    if _BOUNDED:
        return
    try:
        import huggingface_hub
        from huggingface_hub import constants
        from huggingface_hub.utils import _http

        default_factory = _http.default_client_factory
        set_factory = huggingface_hub.set_client_factory
    except (ImportError, AttributeError):
        return
    stall_s = float(constants.HF_HUB_DOWNLOAD_TIMEOUT)

    def bound(request: Any) -> None:
        timeout = request.extensions.get("timeout")
        if isinstance(timeout, dict) and None in timeout.values():
            request.extensions["timeout"] = {
                name: stall_s if value is None else value for name, value in timeout.items()
            }

    def bounded_client() -> Any:
        client = default_factory()
        hooks = client.event_hooks
        client.event_hooks = {**hooks, "request": [*hooks.get("request", []), bound]}
        return client

    set_factory(bounded_client)
    _BOUNDED = True


def rich_progress_class() -> type | None:
    """tqdm's Rich front end, for huggingface_hub's download bars (bytes, rate, time left);
    None (the hub's plain bars) where rich is not installed."""
    import warnings

    try:
        from tqdm import TqdmExperimentalWarning
        from tqdm.rich import tqdm
    except ImportError:
        return None
    warnings.filterwarnings("ignore", category=TqdmExperimentalWarning)
    return tqdm


def hub_snapshot(repo_id: str, *, allow_patterns: list[str], what: str) -> Path:
    """A hub repository's files, from the local cache or downloaded with a progress bar.

    The cache is tried first with no network at all; a download shows progress only when
    stderr is a terminal (scripts and cron get no progress bars). Offline, or for a repository
    the hub does not have, raises EngineError (exit 5) saying what to do.
    """
    import huggingface_hub

    try:
        return Path(
            huggingface_hub.snapshot_download(
                repo_id, allow_patterns=allow_patterns, local_files_only=True
            )
        )
    except Exception:  # not cached yet: fetch it below
        pass
    if os.environ.get("HF_HUB_OFFLINE", "") not in ("", "0"):
        raise EngineError(f"{what} is not downloaded and HF_HUB_OFFLINE is set", hint=OFFLINE_HINT)
    bound_hub_stalls()
    interactive = sys.stderr.isatty()
    if interactive:
        print(f"vocal: downloading {what} from {repo_id} (once)", file=sys.stderr, flush=True)
    tqdm_class = None  # the hub's default bars
    if interactive:
        tqdm_class = rich_progress_class()
    else:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    try:
        return Path(
            huggingface_hub.snapshot_download(
                repo_id, allow_patterns=allow_patterns, tqdm_class=tqdm_class
            )
        )
    except Exception as exc:
        raise EngineError(
            f"cannot download {what} ({first_line(exc)})", hint=OFFLINE_HINT
        ) from None


__all__ = ["OFFLINE_HINT", "bound_hub_stalls", "first_line", "hub_snapshot", "rich_progress_class"]
