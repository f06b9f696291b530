"""The floor: who speaks now, who waits, and the operator's overrides."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import typer

from vocal.commands._app import command_app

if TYPE_CHECKING:
    from vocal.conch import Conch

app = command_app(no_args_is_help=True)

_SESSION_HELP = "The session (default VOCAL_SESSION)."


def _conch() -> Conch:
    from vocal.conch import Conch
    from vocal.config import load_settings

    return Conch.from_settings(load_settings())


def _session(session: str | None, verb: str) -> str:
    from vocal.config import load_settings
    from vocal.errors import UsageError

    session = session or load_settings().session
    if not session:
        raise UsageError(f"`vocal conch {verb}` needs a session", hint="pass --session or set "
                         "VOCAL_SESSION")  # fmt: skip
    return session


def _who(record: dict) -> str:
    name = record.get("agent") or record["session"]
    where = f"pid {record['pid']}" if record.get("pid") else "no process"
    return f"{name} (session {record['session']}, {where})"


@app.command()
def status(as_json: bool = typer.Option(False, "--json", help="Print the state as JSON.")) -> None:
    """Who holds the floor and who waits, in order.

    Entries of processes that died and places whose TTL ran out are dropped first.
    """
    state = _conch().status().to_dict()
    if as_json:
        print(json.dumps(state))
        return
    holder = state["holder"]
    if holder is None:
        print("the floor is free" if not state["queue"] else "the floor is being handed over")
    else:
        print(f"speaking: {_who(holder)} for {holder['held_s']:.1f} s, "
              f"expires in {holder['expires_in_s']:.0f} s")  # fmt: skip
    for waiter in state["queue"]:
        mark = "  (granted, claiming)" if waiter["granted"] else ""
        print(f"{waiter['position']:>3}. {_who(waiter)} waiting {waiter['waited_s']:.1f} s{mark}")


@app.command()
def give(
    session: str = typer.Argument(..., help="The waiting session that goes next."),
    now: bool = typer.Option(False, "--now", help="Also bump the current holder."),
) -> None:
    """Make SESSION the next to speak, ahead of the whole queue."""
    waiter = _conch().give(session, now=now)
    if waiter is None:
        typer.echo(f"{session} already holds the floor", err=True)


@app.command()
def bump(as_json: bool = typer.Option(False, "--json", help="Print the bumped holder.")) -> None:
    """Take the floor from its holder: it stops, the next goes.

    The bumped turn stops its audio within about 50 ms and exits 3; the next waiter starts
    after a short pause (0.25 s) so the two never overlap.
    """
    holder = _conch().bump()
    if as_json:
        print(json.dumps(holder.to_dict() if holder else None))
    elif holder is None:
        typer.echo("nobody holds the floor", err=True)
    else:
        typer.echo(f"bumped {_who(holder.to_dict())}", err=True)


@app.command()
def release(session: str | None = typer.Option(None, "--session", help=_SESSION_HELP)) -> None:
    """Give up the floor your session holds (after `vocal conch wait`)."""
    from vocal.errors import UsageError

    name = _session(session, "release")
    if _conch().release_session(name) is None:
        raise UsageError(f"session {name!r} does not hold the floor",
                         hint="`vocal conch status` shows who does")  # fmt: skip


@app.command()
def wait(
    session: str | None = typer.Option(None, "--session", help=_SESSION_HELP),
    agent: str | None = typer.Option(None, "--agent", help="A name shown in status."),
    timeout: float | None = typer.Option(
        None, "--timeout", min=0.0, help="Seconds to wait (default VOCAL_CONCH_TIMEOUT)."
    ),
    callback: bool = typer.Option(
        False, "--callback", help="Do not wait: take it if free, else keep a place and exit 3."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the hold as JSON."),
) -> None:
    """Take the floor for your session, held after this exits.

    The session's own `vocal speak`/`converse` commands then speak without queueing, until
    `vocal conch release`, a bump, or VOCAL_CONCH_LOCK_EXPIRY. Exit 3 if it is not granted in
    time (or at once with --callback; the place in the queue is kept for
    VOCAL_CONCH_REMOTE_TTL, and calling again takes the floor when it is granted).
    """
    from vocal.conch import Conch
    from vocal.config import load_settings

    settings = load_settings(session=session, agent=agent)
    name = _session(settings.session, "wait")
    held = Conch.from_settings(settings).acquire(
        session=name,
        agent=settings.agent,
        mode="callback" if callback else settings.conch_mode,
        timeout_s=settings.conch_timeout_s if timeout is None else timeout,
        keep_place=True,
        detached=True,
    )
    if as_json:
        print(json.dumps({"session": held.session, "seq": held.seq,
                          "waited_s": round(held.waited_s, 3)}))  # fmt: skip


@app.command()
def leave(session: str | None = typer.Option(None, "--session", help=_SESSION_HELP)) -> None:
    """Give up your session's place in the queue."""
    from vocal.errors import UsageError

    name = _session(session, "leave")
    if not _conch().leave(name):
        raise UsageError(f"session {name!r} is not waiting", hint="see `vocal conch status`")
