"""Play the sound-font cue for an agent hook event (skipped while another agent speaks)."""

from __future__ import annotations

import typer

from vocal.commands._app import command_app

app = command_app()


@app.command()
def cue(
    event: str | None = typer.Argument(
        None, help="The hook event: PreToolUse, PostToolUse, Notification, Stop, or any name."
    ),
    tool: str | None = typer.Option(
        None, "--tool", help="The tool (default: tool_name from a hook's JSON on stdin)."
    ),
    json_output: bool = typer.Option(
        False, "--json", help="Print JSON: event, tool, path, played, skipped, detail."
    ),
    install_snippet: bool = typer.Option(
        False, "--install-snippet", help="Print the hooks JSON for Claude Code's settings.json."
    ),
) -> None:
    """Play the cue for EVENT (and --tool) from the sound fonts, within 100 ms.

    Fonts: $VOCAL_SOUNDFONTS_DIR (default ~/.vocal/soundfonts) first, then the one shipped with
    vocal. In each, the most specific place wins: EVENT/TOOL/, then EVENT/, then the font's
    root. A place holds default.wav and numbered variants 01.wav..99.wav (one is picked at
    random), or is a single file EVENT/TOOL.wav. A MUTE file silences a place and everything
    below it without a sound of its own. Formats: WAV, FLAC, OGG/Opus, MP3 (libsndfile).

    Skipped (exit 0, said on stderr) while another session holds the conch, or while vocal is
    muted (`vocal mute`). Hooks should run the lean form that `--install-snippet` prints
    (`python -c 'import vocal.cuehook' EVENT`): the same cue without the CLI's start-up cost.

    A hook's JSON on stdin is waited for 50 ms (none: no tool), then read for at most 1 s and
    16 MB.

    Exit codes: 0 played or skipped, 2 bad EVENT/--tool, an undecodable file, or a stdin
    past those bounds (or nested over 64 levels), 5 no audio output.
    """
    from vocal.agents.cues import cue_settings, hook_snippet, play_cue, report, tool_from_hook_input
    from vocal.errors import UsageError

    if install_snippet:
        import json

        typer.echo(json.dumps(hook_snippet(), indent=2))
        return
    if event is None:
        raise UsageError("give an EVENT (e.g. PreToolUse), or --install-snippet")
    report(play_cue(event, tool or tool_from_hook_input(), cue_settings()), json_output)
