"""Side channel into a running speak/converse: stop, pause, resume, skip, status."""

from __future__ import annotations

import json
from typing import Any

import typer

from vocal.commands._app import FiniteFloatRange, command_app, finite

app = command_app(no_args_is_help=True)

# PIDs are at most 2**22 on Linux (PID_MAX_LIMIT), 99998 on macOS.
_PID = typer.Option(
    None, "--pid", min=1, max=1 << 22, help="The process to control (see `vocal control status`)."
)
_SESSION = typer.Option(None, "--session", help="The session whose turn to control.")
_JSON = typer.Option(False, "--json", help="Print the turn's reply as one JSON line.")
_TIMEOUT = typer.Option(
    2.0,
    "--timeout",
    click_type=FiniteFloatRange(0.1, 600.0),
    callback=finite,
    help="Seconds to wait for the answer.",
)


def _send(
    cmd: str, pid: int | None, session: str | None, as_json: bool, timeout: float
) -> dict[str, Any] | None:
    """Send `cmd` to the chosen turn and print the reply; None if no turn is running."""
    from vocal.config import load_settings
    from vocal.floor.conch.queue import Conch
    from vocal.floor.control import ControlError, find_endpoint, send_command

    settings = load_settings()
    holder = None if pid or session else Conch.from_settings(settings).status().holder
    endpoint = find_endpoint(
        settings.run_dir, pid=pid, session=session, holder_pid=holder.pid if holder else None
    )
    if endpoint is None:
        if pid or session:
            target = f"pid {pid}" if pid else f"session {session!r}"
            raise ControlError(
                f"no running vocal turn for {target}", hint="`vocal control status` lists them"
            )
        return None
    reply = send_command(endpoint, cmd, timeout_s=timeout)
    if as_json:
        print(json.dumps(reply))
    if not reply.get("ok"):
        raise ControlError(f"{cmd} refused by pid {endpoint.pid}: {reply.get('error')}")
    return reply


def _no_turn() -> None:
    from vocal.floor.control import ControlError

    raise ControlError("no running vocal turn to control", hint="nothing is speaking now")


@app.command()
def stop(
    pid: int | None = _PID,
    session: str | None = _SESSION,
    as_json: bool = _JSON,
    timeout: float = _TIMEOUT,
) -> None:
    """Stop speaking, or give up waiting for the floor.

    The turn ends there: a converse turn does not go on to listen.
    """
    if _send("stop", pid, session, as_json, timeout) is None:
        _no_turn()


@app.command()
def pause(
    pid: int | None = _PID,
    session: str | None = _SESSION,
    as_json: bool = _JSON,
    timeout: float = _TIMEOUT,
) -> None:
    """Pause playback where it is (silence until resume)."""
    if _send("pause", pid, session, as_json, timeout) is None:
        _no_turn()


@app.command()
def resume(
    pid: int | None = _PID,
    session: str | None = _SESSION,
    as_json: bool = _JSON,
    timeout: float = _TIMEOUT,
) -> None:
    """Resume paused playback."""
    if _send("resume", pid, session, as_json, timeout) is None:
        _no_turn()


@app.command("skip-forward")
def skip_forward(
    pid: int | None = _PID,
    session: str | None = _SESSION,
    as_json: bool = _JSON,
    timeout: float = _TIMEOUT,
) -> None:
    """Cut playback and go to listening (or end the recording).

    While a converse turn listens, this ends the recording and transcribes what was heard.
    """
    if _send("skip_forward", pid, session, as_json, timeout) is None:
        _no_turn()


@app.command("skip-back")
def skip_back(
    pid: int | None = _PID,
    session: str | None = _SESSION,
    as_json: bool = _JSON,
    timeout: float = _TIMEOUT,
) -> None:
    """Restart the current utterance; each further press: one back.

    The first press restarts the current or most recent utterance, each further press steps
    one back, clamped at the oldest.

    The walk is kept on disk, so it goes on across processes. With no turn running, this
    command plays the utterance itself (from the history, no STT or TTS), taking the floor
    like any turn; pressing again while it plays steps further back.
    """
    if _send("skip_back", pid, session, as_json, timeout) is not None:
        return
    from vocal.config import load_settings
    from vocal.errors import UsageError
    from vocal.floor.history import History
    from vocal.floor.turn import replay

    settings = load_settings()
    utterance = History.from_settings(settings).step_back()
    if utterance is None:
        raise UsageError("the history is empty: nothing to go back to")
    result = replay(settings, utterance)
    if as_json:
        payload = {"ok": True, "cmd": "skip_back", "replayed": utterance.to_dict()}
        print(json.dumps({**payload, **result.to_dict()}))


@app.command("status")
def status_(
    pid: int | None = _PID,
    session: str | None = _SESSION,
    as_json: bool = _JSON,
    timeout: float = _TIMEOUT,
) -> None:
    """What the running turns are doing (all of them, or one with --pid/--session)."""
    from vocal.config import load_settings
    from vocal.floor.control import endpoints, send_command

    if pid or session:
        reply = _send("status", pid, session, as_json, timeout)
        if not as_json and reply is not None:
            _print_status(reply)
        return
    replies = []
    for endpoint in endpoints(load_settings().run_dir):
        try:
            replies.append(send_command(endpoint, "status", timeout_s=timeout))
        except Exception as exc:  # one wedged turn must not hide the others
            replies.append({"ok": False, "pid": endpoint.pid, "error": str(exc)})
    if as_json:
        print(json.dumps(replies))
        return
    if not replies:
        print("no vocal turn is running")
    for reply in replies:
        _print_status(reply)


def _print_status(reply: dict[str, Any]) -> None:
    """One turn's reply for a person: what the peer sent, shown safely (vocal.floor.shown)."""
    from vocal.floor.shown import MAX_SHOWN_TEXT_CHARS, shown_name

    pid = shown_name(reply.get("pid"))
    if not reply.get("ok"):
        print(f"pid {pid}: error: {shown_name(reply.get('error'), MAX_SHOWN_TEXT_CHARS)}")
        return
    who = shown_name(reply.get("agent") or reply.get("session"))
    kind, state = shown_name(reply.get("kind")), shown_name(reply.get("state"))
    line = f"pid {pid} {kind} ({who}): {state}"
    if reply.get("state") == "waiting" and reply.get("position"):
        line += f" at position {shown_name(reply['position'])}"
    utterance = reply.get("utterance")
    if utterance:
        text = shown_name(utterance.get("text", ""), 60)
        line += f", utterance {shown_name(utterance.get('id'))} {text!r}"
    if "played_s" in reply:
        line += f", {reply['played_s']:.1f} s played"
    print(line)
