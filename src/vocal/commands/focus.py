"""tmux pane focus: hold focus where you work, or see what vocal will do."""

from __future__ import annotations

import json

import typer

from vocal.commands._app import command_app, finite, float_range, shown_default

app = command_app(no_args_is_help=True)


@app.command()
def hold(
    seconds: float | None = typer.Option(
        None,
        "--seconds",
        click_type=float_range("focus_hold_s"),
        help=f"How long (default VOCAL_FOCUS_HOLD_SECONDS, {shown_default('focus_hold_s')}).",
        callback=finite,
    ),
) -> None:
    """Keep focus on the active pane of this tmux session for a while.

    With VOCAL_AUTO_FOCUS_PANE=true, an agent that takes the floor has its pane selected; a
    hold stops that until it runs out or `vocal focus release`. vocal also holds on its own
    when it finds you moved to another pane since it last selected one. Bind it to a key:
    `bind-key H run-shell "vocal focus hold"`.
    """
    from vocal.config import load_settings
    from vocal.floor.focus import hold_focus

    result = hold_focus(load_settings(), seconds)
    from vocal.floor.shown import shown_name

    typer.echo(f"focus held on {shown_name(result.active)}", err=True)


@app.command()
def release() -> None:
    """End a focus hold on this tmux session: the next speaker's pane is selected again."""
    from vocal.config import load_settings
    from vocal.floor.focus import release_focus

    if not release_focus(load_settings()):
        typer.echo("no focus hold to release", err=True)


@app.command()
def status(as_json: bool = typer.Option(False, "--json", help="Print the record as JSON.")) -> None:
    """Whether pane focus is on, the active pane, and the hold (if any) in this tmux session."""
    import time

    from vocal.config import load_settings
    from vocal.floor.focus import focus_record
    from vocal.floor.shown import shown_name

    info = focus_record(load_settings())
    if as_json:
        print(json.dumps(info))
        return
    record = info["record"] or {}
    left_s = float(record.get("hold_until", 0.0)) - time.time()
    active, pane = shown_name(info["active"]), shown_name(info["pane"])
    print(
        f"auto focus: {'on' if info['enabled'] else 'off (VOCAL_AUTO_FOCUS_PANE)'}; "
        f"active pane {active}; this pane {pane}"
    )
    if left_s > 0:
        held, reason = shown_name(record["pane"]), shown_name(record["reason"])
        print(f"held on {held} for {left_s:.0f} s more ({reason})")
