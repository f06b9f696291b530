"""The Typer app factory every command module uses, so all commands behave alike."""

from __future__ import annotations

from typing import Any

import typer


def command_app(**settings: Any) -> typer.Typer:
    """A Typer app for one command module: plain help (Rich doubles --help time, STYLE.md),
    no per-command completion options (`vocal completions` serves all), no pretty tracebacks
    (vocal.cli.main reports errors)."""
    defaults: dict[str, Any] = {
        "add_completion": False,
        "rich_markup_mode": None,
        "pretty_exceptions_enable": False,
        "no_args_is_help": False,
        "context_settings": {"help_option_names": ["-h", "--help"]},
    }
    defaults.update(settings)
    return typer.Typer(**defaults)
