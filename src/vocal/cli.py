"""The `vocal` command line: a root Typer app that finds its commands by file name.

Every module `vocal/commands/NAME.py` that defines a Typer `app` is the command `vocal NAME`.
The root's help reads each command's one-line summary from its module docstring without
importing it, and a command's module is imported only when that command runs or shows its own
help. Command modules import heavy libraries (numpy, onnxruntime, sounddevice, ...) inside their
functions, so `vocal --help`, `vocal CMD --help` and TAB completion stay at the cost of Typer
itself (guarded by tests/test_startup.py and measured by benchmarks/startup).

Errors: the library raises `VocalError` subclasses; `main()` is the one place that turns them
into `vocal: error: ...` on stderr and the exit code (DESIGN.md). `VOCAL_DEBUG=1` re-raises.
"""

from __future__ import annotations

import importlib
import os
import re
import sys
from pathlib import Path
from typing import Any

import typer
from typer.core import TyperGroup

from vocal import __version__
from vocal.completion import COMPLETE_VAR, enable_completion
from vocal.errors import EXIT_INTERRUPTED, EXIT_USAGE, VocalError

from click.exceptions import ClickException

COMMANDS_DIR = Path(__file__).parent / "commands"
_DOCSTRING = re.compile(r'\A\s*(?:#[^\n]*\n\s*)*[rRuU]?("""|\'\'\')\s*(.*?)\1', re.DOTALL)


def discover_commands() -> dict[str, Path]:
    """Command name -> module file, from file names in `commands/` only (nothing imported).

    `__init__.py`, `_*.py`, `*_helpers.py` and `types.py` are never commands. Underscores in
    a file name become dashes in the command name.
    """
    found = {}
    for path in COMMANDS_DIR.glob("*.py"):
        stem = path.stem
        if stem.startswith("_") or stem.endswith("_helpers") or stem == "types":
            continue
        found[stem.replace("_", "-")] = path
    return dict(sorted(found.items()))


def summary_of(path: Path) -> str:
    """The first line of a module's docstring, read from its source text."""
    try:
        with path.open(encoding="utf-8") as source:
            head = source.read(4096)
    except OSError:
        return ""
    match = _DOCSTRING.match(head)
    return match.group(2).strip().splitlines()[0].strip() if match else ""


class LazyGroup(TyperGroup):
    """A root group that lists commands from file names and imports one only to run it."""

    def list_commands(self, ctx: Any) -> list[str]:
        return list(discover_commands())

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        path = discover_commands().get(cmd_name)
        if path is None:
            return None
        module = importlib.import_module(f"vocal.commands.{path.stem}")
        command = typer.main.get_command(module.app)
        command.name = cmd_name
        if not command.help and module.__doc__:  # a group: its module docstring is its help
            command.help = module.__doc__.strip()
        return command

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        rows = [(name, summary_of(path)) for name, path in discover_commands().items()]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def shell_complete(self, ctx: Any, incomplete: str) -> list[Any]:
        # Complete command names from file names, as --help does, instead of importing every
        # command module to ask for its short help.
        from click.shell_completion import CompletionItem

        items = [
            CompletionItem(name, help=summary_of(path))
            for name, path in discover_commands().items()
            if name.startswith(incomplete)
        ]
        options = [
            CompletionItem(opt)
            for param in self.get_params(ctx)
            for opt in getattr(param, "opts", [])
            if incomplete.startswith("-") and opt.startswith(incomplete)
        ]
        return items + options


app = typer.Typer(
    cls=LazyGroup,
    name="vocal",
    help="A voice loop for the terminal and for coding agents: listen, speak, converse.",
    epilog="Exit codes: 0 ok, 1 error, 2 usage, 3 conch not granted, 4 no speech heard, "
    "5 audio device or engine unavailable, 130 interrupted. VOCAL_DEBUG=1 shows tracebacks.",
    add_completion=False,
    no_args_is_help=True,
    rich_markup_mode=None,  # Rich help doubles --help time (STYLE.md); plain help is enough
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _show_version(value: bool) -> None:
    if value:
        typer.echo(f"vocal {__version__}")
        raise typer.Exit()


@app.callback()
def root(
    version: bool = typer.Option(
        False, "--version", callback=_show_version, is_eager=True, help="Print the version."
    ),
) -> None:
    """A voice loop for the terminal and for coding agents: listen, speak, converse."""


def report_error(message: str) -> None:
    """Print one `vocal: error: ...` line on stderr."""
    print(f"vocal: error: {message}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: run the CLI and turn every failure into its exit code."""
    debug = os.environ.get("VOCAL_DEBUG", "") not in ("", "0")
    if COMPLETE_VAR in os.environ:  # a TAB press: answer and exit
        enable_completion()
    command = typer.main.get_command(app)
    try:
        code = command.main(args=argv, prog_name="vocal", standalone_mode=False)
    except VocalError as exc:
        if debug:
            raise
        report_error(str(exc))
        code = exc.exit_code
    except typer.Abort:
        print(file=sys.stderr)
        code = EXIT_INTERRUPTED
    except KeyboardInterrupt:
        code = EXIT_INTERRUPTED
    except ClickException as exc:
        exc.show()
        code = exc.exit_code
    except BrokenPipeError:
        # The reader of our stdout went away (`vocal devices | head`): not an error of ours.
        sys.stderr.close()
        code = 0
    except Exception as exc:  # the promise is one line, never a traceback
        if debug:
            raise
        report_error(f"unexpected {type(exc).__name__}: {exc} (VOCAL_DEBUG=1 shows the traceback)")
        code = 1
    sys.exit(code if isinstance(code, int) else 0)


__all__ = ["app", "main", "discover_commands", "EXIT_USAGE"]
