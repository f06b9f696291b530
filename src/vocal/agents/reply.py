"""The reply hook's adapter (issue 9): what `vocal hooks reply` does with a `Stop` event.

It takes the reply's text from the event (`last_assistant_message`, in recent versions of Claude
Code), else from the transcript's last assistant turn, and hands its spoken part to a detached
`vocal speak --quotes --message ID --piece 0 --final` scoped to the agent's session: the agent is
not held up while vocal speaks, a newer reply supersedes one still being read, and replies of
other sessions take turns through the conch. (Stop carries the whole reply, so it is one piece;
agents that show a reply in pieces run `vocal speak --message ID --piece N` per piece
themselves.) Installing the hook that runs it: vocal.agents.hooks.

Standard library only.
"""

from __future__ import annotations

import hashlib
import re
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import TypedDict

from vocal.errors import UsageError
from vocal.files.bounded import BoundedReadError, loads_json, read_tail

#: A transcript grows to many MB by right: only its last TRANSCRIPT_TAIL_BYTES are read, which
#: hold the last turn (issue 37; the event itself is bounded in vocal.agents.hook_event).
TRANSCRIPT_TAIL_BYTES = 8 << 20


class ReplyDict(TypedDict):
    """`Reply.to_dict`: what `vocal hooks reply --json` prints."""

    text: str
    session: str | None
    message: str


@dataclass
class Reply:
    """A reply taken from a hook event: its text, the agent's session, and a message id."""

    text: str
    session: str | None
    message: str

    def to_dict(self) -> ReplyDict:
        return {"text": self.text, "session": self.session, "message": self.message}


def _safe(name: str) -> str:
    cleaned = re.sub(r"[^A-Za-z0-9._-]", "-", name).strip(".-")[:48]
    return cleaned or "x"


def reply_from_event(event: object) -> Reply | None:
    """The reply a `Stop` event is about (None when there is no text)."""
    if not isinstance(event, dict):
        raise UsageError("the hook input is not a JSON object")
    session = event.get("session_id") if isinstance(event.get("session_id"), str) else None
    text = event.get("last_assistant_message")
    if not isinstance(text, str) or not text.strip():
        path = event.get("transcript_path")
        text = last_assistant_text(Path(path).expanduser()) if isinstance(path, str) else ""
    if not text.strip():
        return None
    prompt = event.get("prompt_id")
    if isinstance(prompt, str) and prompt:
        digest = hashlib.sha256(f"{session}\n{text}".encode()).hexdigest()[:8]
        message = _safe(f"{prompt}-{digest}")
    else:  # the same words may be said again later: the time keeps the two replies apart
        seed = f"{session}\n{time.time_ns()}\n{text}"
        message = hashlib.sha256(seed.encode()).hexdigest()[:16]
    return Reply(text, f"claude-{_safe(session)}" if session else None, message)


def last_assistant_text(transcript: Path) -> str:
    """The text of the assistant's last turn in a Claude Code transcript (JSONL): its text
    blocks after the last user message, joined by blank lines."""
    texts: list[str] = []
    try:  # its end only: a FIFO or a device is refused, a 10 GB log costs 8 MB (issue 37)
        tail = read_tail(transcript, max_bytes=TRANSCRIPT_TAIL_BYTES, what="transcript_path")
    except BoundedReadError as exc:
        raise UsageError(str(exc)) from None
    except OSError:
        return ""
    for line in tail.decode("utf-8", errors="replace").splitlines():
        try:
            entry = loads_json(line)
        except ValueError:  # not JSON, or nested too deep (BoundedReadError)
            continue
        if not isinstance(entry, dict):
            continue
        message = entry.get("message")
        if not isinstance(message, dict):
            message = {}
        role = message.get("role") or entry.get("type")
        content = message.get("content")
        if role == "user":
            # Tool results come back as user messages: they do not start a new turn.
            blocks = content if isinstance(content, list) else []
            if not blocks or any(isinstance(b, dict) and b.get("type") == "text" for b in blocks):
                texts = []
            continue
        if role != "assistant":
            continue
        if isinstance(content, str):
            texts.append(content)
        elif isinstance(content, list):
            texts += [
                b["text"]
                for b in content
                if isinstance(b, dict)
                and b.get("type") == "text"
                and isinstance(b.get("text"), str)
            ]
    return "\n\n".join(t.strip() for t in texts if t.strip())


def spoken_part(text: str) -> str:
    """What `vocal speak --quotes` would speak of a reply: its blockquote paragraphs, each
    written again as one quoted paragraph (`extract_quotes` reads them back unchanged).

    The speech's length limit (vocal.speaking.text.MAX_TEXT_CHARS) is meant for what is
    spoken: given the whole reply, it refused a review of 40,000 characters whose one spoken
    line was short, so nothing was said (issue 37). The reply scanned here is bounded already:
    an event of at most MAX_HOOK_INPUT_BYTES, or a transcript's last TRANSCRIPT_TAIL_BYTES.
    """
    from vocal.speaking.text import extract_quotes

    return "\n\n".join(f"> {quote}" for quote in extract_quotes(text))


def speak_reply_detached(
    reply: Reply, log_path: Path, *, extra_args: list[str] | None = None, wait: bool = False
) -> subprocess.Popen:
    """Start `vocal speak --quotes --message ID --piece 0 --final -` for `reply` in its own
    session (it outlives the hook), with the reply's spoken part (`spoken_part`) on its stdin
    and its stderr in `log_path`."""
    args = [sys.executable, "-m", "vocal", "speak", "--quotes", "--message", reply.message]
    args += ["--piece", "0", "--final", *(extra_args or [])]
    if reply.session:
        args += ["--session", reply.session]
    args.append("-")
    from vocal.floor.statedir import ensure_private_dir

    ensure_private_dir(log_path.parent)  # vocal's logs: 0700 (issue 37)
    with open(log_path, "ab") as log:
        proc = subprocess.Popen(
            args,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE if wait else subprocess.DEVNULL,
            stderr=log,
            start_new_session=not wait,
            close_fds=True,
        )
    assert proc.stdin is not None
    proc.stdin.write(spoken_part(reply.text).encode("utf-8"))
    proc.stdin.close()
    return proc


__all__ = [
    "TRANSCRIPT_TAIL_BYTES",
    "Reply",
    "last_assistant_text",
    "reply_from_event",
    "speak_reply_detached",
    "spoken_part",
]
