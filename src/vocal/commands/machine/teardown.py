"""Remove what vocal downloaded, cached and installed (keeps voices and settings)."""

from __future__ import annotations

import typer

from vocal.commands._app import command_app

app = command_app()


@app.command()
def teardown(
    all_: bool = typer.Option(
        False, "--all", help="Also remove voices, config.toml and gates: the whole state directory."
    ),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask (needed without a terminal)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Only say what would be done."),
    json_output: bool = typer.Option(False, "--json", help="Print what was done as JSON."),
) -> None:
    """Stop running vocal processes, then remove what vocal downloaded or cached.

    Stops every speak/converse/listen with a control socket and the conch holder (a recorded
    process is signalled only when it is verifiably still the one recorded), then removes the
    cache (weights, encoded voice references, optimized models, the provider ladder's
    remembered rung, MLX conversions), history, logs, conch and run files, and vocal's hook
    entries (user scope and this project). Keeps voices/, config.toml and gates.json unless
    --all. The Hugging Face hub cache (shared with other programs) is left alone.

    Only what vocal created is removed: a state directory (VOCAL_HOME) without the marker vocal
    writes when it makes one (.vocal-state) is refused with exit 2, naming what it holds, and
    in a marked one files vocal did not make are left; a VOCAL_TTS_CACHE_DIR elsewhere loses
    only the files vocal's engines wrote there.

    Without a terminal it needs --yes (exit 2 otherwise); --dry-run changes nothing.
    """
    import json
    import sys

    from vocal.config import load_settings
    from vocal.errors import UsageError
    from vocal.ops.teardown import check_home, installed_hook_files, left_behind, plan
    from vocal.ops.teardown import teardown as run_teardown

    settings = load_settings()
    check_home(settings)  # a directory that is not vocal's: refused before asking
    if not yes and not dry_run:
        if not sys.stdin.isatty():
            raise UsageError(
                "teardown removes files and asks first",
                hint="pass --yes to run it "
                "without a terminal, or --dry-run to see what it would remove",
            )
        remove, keep = plan(settings, all_=all_)
        for path in remove:
            typer.echo(f"remove {path}", err=True)
        for path in installed_hook_files():
            typer.echo(f"remove vocal hooks from {path}", err=True)
        for path in left_behind(settings):
            typer.echo(f"leave {path} (not vocal's)", err=True)
        typer.confirm("Stop running vocal processes and remove the above?", abort=True, err=True)
    report = run_teardown(settings, all_=all_, dry_run=dry_run)
    if json_output:
        typer.echo(json.dumps(report.to_dict()))
        return
    verb = "would remove" if dry_run else "removed"
    for proc in report.stopped:
        typer.echo(f"{'would stop' if dry_run else 'stopped'} pid {proc['pid']} ({proc['kind']})")
    for removed in report.removed:
        typer.echo(f"{verb} {removed}")
    for hook in report.hooks:
        typer.echo(f"{verb} vocal hooks from {hook['path']}")
    for kept in report.kept:
        typer.echo(f"kept {kept}")
    for left in report.left:
        typer.echo(f"left {left} (not vocal's)")
    for proc in report.not_stopped:
        typer.echo(f"left pid {proc['pid']} ({proc['kind']}) running: {proc['why']}", err=True)
