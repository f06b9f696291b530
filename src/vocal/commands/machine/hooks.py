"""Wire vocal into an agent's hooks: spoken replies and a warm-up at session start."""

from __future__ import annotations

import typer

from vocal.commands._app import command_app

app = command_app()

AGENT = typer.Option("claude-code", "--agent", help="The agent whose settings to edit.")
SCOPE = typer.Option(
    "user", "--scope", help="user (~/.claude/settings.json) or project (.claude/settings.json)."
)
JSON = typer.Option(False, "--json", help="Print what was done as JSON.")


def _show(report: object, json_output: bool) -> None:
    import json

    data = report.to_dict()  # type: ignore[attr-defined]
    if json_output:
        typer.echo(json.dumps(data))
        return
    events = ", ".join(data["events"]) or "none"
    typer.echo(f"{data['action']}: {data['path']} (vocal hooks: {events})")
    if data.get("backup"):
        typer.echo(f"backup of the original: {data['backup']}")
    if data.get("note"):
        typer.echo(f"vocal: {data['note']}", err=True)


@app.command()
def install(agent: str = AGENT, scope: str = SCOPE, json_output: bool = JSON) -> None:
    """Add vocal's hooks to the agent's settings, beside the hooks already there.

    Claude Code: Stop (a reply is on screen) runs `vocal hooks reply`, which speaks the reply's
    blockquotes in the background; SessionStart runs `vocal warmup --detach`. Running it again
    changes nothing; the original file is kept as settings.json.vocal-backup. A settings file
    that is a link to a missing file is refused (exit 2) and left as it is.
    """
    from vocal.agents.hooks import install as install_hooks

    _show(install_hooks(scope, agent=agent), json_output)


@app.command()
def remove(agent: str = AGENT, scope: str = SCOPE, json_output: bool = JSON) -> None:
    """Take vocal's hooks out of the agent's settings, and only those.

    If the file is as install left it, the original comes back byte for byte. A settings
    file that is a link to a missing file is left as it is (exit 0: nothing to remove).
    """
    from vocal.agents.hooks import remove as remove_hooks

    _show(remove_hooks(scope, agent=agent), json_output)


@app.command()
def status(agent: str = AGENT, json_output: bool = JSON) -> None:
    """Show where vocal's hooks are installed (user and project scope)."""
    import json

    from vocal.agents.hooks import SCOPES
    from vocal.agents.hooks import status as hook_status

    reports = [hook_status(scope, agent=agent) for scope in SCOPES]
    if json_output:
        typer.echo(json.dumps([r.to_dict() for r in reports]))
        return
    for report in reports:
        events = ", ".join(report.events) or "-"
        typer.echo(f"{report.scope:8} {report.action:10} {events:20} {report.path}")


@app.command()
def reply(
    print_only: bool = typer.Option(
        False, "--print", help="Print the reply found (JSON) instead of speaking it."
    ),
    wait: bool = typer.Option(
        False, "--wait", help="Wait for the speech and pass on its --json line and exit code."
    ),
) -> None:
    """The Stop hook: read the hook's JSON on stdin and speak the reply's blockquotes.

    The text is the event's last_assistant_message, else the assistant's last turn in its
    transcript_path. It is spoken by a detached `vocal speak --quotes --message ID --piece 0
    --final` in the agent's session, so the hook returns at once; a newer reply supersedes one
    still being read. Its messages go to the log directory (hooks.log). Exit 0 when there is
    nothing to say.

    The event is read for at most 3 s and 4 MB, the transcript from its last 8 MB; past
    either, or with a transcript_path that is not a regular file, it is an error (exit 1,
    never 2: Claude Code reads a Stop hook's 2 as "keep going").
    """
    import json
    import sys

    from vocal.agents.cues import hook_exit_code
    from vocal.agents.hook_event import read_hook_event
    from vocal.agents.reply import reply_from_event, speak_reply_detached
    from vocal.config import load_settings
    from vocal.errors import VocalError

    try:
        found = reply_from_event(read_hook_event(sys.stdin.buffer))
    except VocalError as exc:
        # Never exit 2 from the Stop hook: Claude Code reads it as "keep going".
        exc.exit_code = hook_exit_code(exc.exit_code)
        raise
    if print_only:
        typer.echo(json.dumps(found.to_dict() if found else None))
        return
    if found is None:
        return
    settings = load_settings()
    proc = speak_reply_detached(
        found, settings.log_dir / "hooks.log", extra_args=["--json"] if wait else None, wait=wait
    )
    if wait:
        assert proc.stdout is not None
        out = proc.stdout.read()  # stdin is closed already: not communicate()
        proc.wait()
        typer.echo(out.decode().strip())
        raise typer.Exit(proc.returncode)
