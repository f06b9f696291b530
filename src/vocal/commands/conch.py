"""The floor: who speaks now, who waits (local or remote agents), and the operator's overrides."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

import typer

from vocal.commands._app import command_app, finite, float_range

if TYPE_CHECKING:
    from vocal.floor.conch.queue import Conch

app = command_app(no_args_is_help=True)

_SESSION_HELP = "The session (default VOCAL_SESSION)."


def _conch() -> Conch:
    from vocal.config import load_settings
    from vocal.floor.conch.queue import Conch

    return Conch.from_settings(load_settings())


def _session(session: str | None, verb: str) -> str:
    from vocal.config import load_settings
    from vocal.errors import UsageError

    session = session or load_settings().session
    if not session:
        raise UsageError(
            f"`vocal conch {verb}` needs a session", hint="pass --session or set VOCAL_SESSION"
        )
    return session


def _who(record: dict) -> str:
    """A holder or waiter for a person: names from the conch's files, shown safely (issue 37:
    a name once carried terminal escape codes into `vocal conch status`)."""
    from vocal.floor.shown import shown_name

    name = shown_name(record.get("agent") or record["session"])
    where = f"pid {record['pid']}" if record.get("pid") else "no process"
    return f"{name} (session {shown_name(record['session'])}, {where})"


def _shown(name: str) -> str:
    from vocal.floor.shown import shown_name

    return shown_name(name)


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
        print(
            f"speaking: {_who(holder)} for {holder['held_s']:.1f} s, "
            f"expires in {holder['expires_in_s']:.0f} s"
        )
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
        typer.echo(f"{_shown(session)} already holds the floor", err=True)


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
        raise UsageError(
            f"session {name!r} does not hold the floor", hint="`vocal conch status` shows who does"
        )


@app.command()
def wait(
    session: str | None = typer.Option(None, "--session", help=_SESSION_HELP),
    agent: str | None = typer.Option(None, "--agent", help="A name shown in status."),
    timeout: float | None = typer.Option(
        None,
        "--timeout",
        click_type=float_range("conch_timeout_s"),
        help="Seconds to wait (default VOCAL_CONCH_TIMEOUT), at most VOCAL_CONCH_WAIT_CAP.",
        callback=finite,
    ),
    callback: bool = typer.Option(
        False, "--callback", help="Do not wait: take it if free, else keep a place and exit 3."
    ),
    as_json: bool = typer.Option(False, "--json", help="Print the outcome as JSON."),
) -> None:
    """Take the floor for your session, held after this exits; or keep a place in the queue.

    This is how an agent that is not a local process (in a container, over SSH, a tool server
    sharing the state directory) takes turns: the place it takes in the queue has no process
    behind it. The call blocks at most VOCAL_CONCH_WAIT_CAP seconds (--timeout or
    VOCAL_CONCH_TIMEOUT if shorter) and prints where it stands:

    granted (exit 0): the session holds the floor; its own `vocal speak`/`converse` commands
    speak without queueing, until `vocal conch release --session ID`, a bump, or
    VOCAL_CONCH_LOCK_EXPIRY after the grant or the last `vocal conch heartbeat`.

    not granted (exit 3): stdout says the position (1 = next) and who holds the floor. The
    place is kept while the session calls `vocal conch heartbeat --session ID` (about every
    30 s) or `wait` again within VOCAL_CONCH_REMOTE_TTL seconds; calling `wait` again
    takes the floor once it is granted. `vocal conch leave` gives the place up.
    """
    from vocal.config import load_settings
    from vocal.floor.conch.queue import Conch, interrupt_on_signals
    from vocal.floor.conch.records import ConchBusy

    settings = load_settings(session=session, agent=agent)
    name = _session(settings.session, "wait")
    limit_s = settings.conch_timeout_s if timeout is None else timeout
    if callback or settings.conch_mode == "callback":
        limit_s = 0.0
    limit_s = min(limit_s, settings.conch_wait_cap_s)
    # Killed while it waits (SIGTERM, SIGHUP), it gives its place back (issue 17).
    with interrupt_on_signals():
        outcome = Conch.from_settings(settings).wait_remote(
            name, agent=settings.agent, timeout_s=limit_s
        )
    if outcome.granted and settings.auto_focus_pane:
        from vocal.floor.focus import focus_pane

        focus_pane(settings)
    if as_json:
        print(json.dumps(outcome.to_dict()))
    elif outcome.granted:
        print(f"granted: session {_shown(name)} holds the floor")
    elif outcome.position:
        holder = _who(outcome.holder.to_dict()) if outcome.holder else "nobody (handing over)"
        print(f"waiting: position {outcome.position} of {outcome.queue_length}; speaking: {holder}")
    if not outcome.granted:
        raise ConchBusy(outcome.message, position=outcome.position, holder=outcome.holder)


@app.command()
def heartbeat(
    session: str | None = typer.Option(None, "--session", help=_SESSION_HELP),
    as_json: bool = typer.Option(False, "--json", help="Print the place as JSON."),
) -> None:
    """Keep your session's place in the queue, or renew the floor it holds.

    A remote agent calls this about every 30 s while it waits (a place with no heartbeat for
    VOCAL_CONCH_REMOTE_TTL seconds is dropped) and while it holds the floor (the
    hold then lasts VOCAL_CONCH_LOCK_EXPIRY from now). Prints the position (0: holding, 1: next;
    "granted" when the floor waits for it: call `vocal conch wait` to take it). Exit 3 if the
    session has no place (never joined, left, or dropped): call `vocal conch wait` again.
    """
    from vocal.floor.conch.records import ConchBusy

    name = _session(session, "heartbeat")
    conch = _conch()
    position = conch.heartbeat(name)
    if position is None:
        raise ConchBusy(
            f"session {name!r} holds no place in the conch queue",
            position=None,
            hint="call `vocal conch wait --session ID` to join it",
        )
    state = conch.status()
    granted = state.grant is not None and state.grant.session == name
    holder = state.holder.to_dict() if state.holder else None
    if as_json:
        payload = {
            "session": name,
            "position": position,
            "granted": granted,
            "queue_length": len(state.waiters),
            "holder": holder,
        }
        print(json.dumps(payload))
    elif position == 0:
        assert state.holder is not None  # position 0: this session is the holder
        print(
            f"holding: session {_shown(name)} holds the floor, "
            f"expires in {state.holder.expires_at - state.now:.0f} s"
        )
    elif granted:
        print(
            f"granted: the floor waits for session {_shown(name)}: call `vocal conch wait` "
            "to take it"
        )
    else:
        who = _who(holder) if holder else "nobody (handing over)"
        print(f"waiting: position {position} of {len(state.waiters)}; speaking: {who}")


@app.command()
def leave(session: str | None = typer.Option(None, "--session", help=_SESSION_HELP)) -> None:
    """Give up your session's place in the queue."""
    from vocal.errors import UsageError

    name = _session(session, "leave")
    if not _conch().leave(name):
        raise UsageError(f"session {name!r} is not waiting", hint="see `vocal conch status`")
