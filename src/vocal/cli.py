"""The `vocal` command line: a root Typer app that finds its commands by file name.

Every module `vocal/commands/NAME.py` that defines a Typer `app` is the command `vocal NAME`
(a command with verbs, `vocal conch status`, is a Typer group in its one module), and so is
`vocal/commands/TOPIC/NAME.py` in a topic folder (`commands/sound/mute.py` is `vocal mute`): a
topic only groups files, it is never a command and adds nothing to the name. `__init__.py`,
`_*.py`, `*_helpers.py` and `types.py` are never commands. Discovery reads file names only: the
root's help reads each command's one-line summary from its module docstring without importing
it, and a command's module is imported only when that command runs or shows its own help.
VOCAL_COMMANDS_ENABLED and VOCAL_COMMANDS_DISABLED narrow the set (`CommandFilter`); they are
read from the environment only, not config.toml, so `--help` stays free of file reads. Command
modules import heavy libraries (numpy, onnxruntime, sounddevice, ...) inside their functions,
so `vocal --help`, `vocal CMD --help` and TAB completion stay at the cost of Typer itself
(guarded by tests/test_startup.py and measured by benchmarks/startup).

Errors: the library raises `VocalError` subclasses; `main()` is the one place that turns them
into `vocal: error: ...` on stderr and the exit code (docs/design.md). `VOCAL_DEBUG=1` re-raises.
"""

from __future__ import annotations

import functools
import importlib
import os
import re
import sys
from pathlib import Path
from typing import Any, NamedTuple

import click
import typer
from click.exceptions import ClickException
from typer.core import TyperGroup

from vocal import __version__
from vocal.completion import COMPLETE_VAR, enable_completion
from vocal.errors import EXIT_INTERRUPTED, EXIT_USAGE, UsageError, VocalError, debug_wanted

COMMANDS_DIR = Path(__file__).parent / "commands"
_DOCSTRING = re.compile(r'\A\s*(?:#[^\n]*\n\s*)*[rRuU]?("""|\'\'\')\s*(.*?)\1', re.DOTALL)
ENABLED_VAR = "VOCAL_COMMANDS_ENABLED"
DISABLED_VAR = "VOCAL_COMMANDS_DISABLED"


def is_command_file(path: Path) -> bool:
    """Whether a file in a commands directory is a command: `__init__.py`, `_*.py`,
    `*_helpers.py` and `types.py` never are (shared code lives there)."""
    stem = path.stem
    return (
        path.suffix == ".py"
        and not stem.startswith("_")
        and not stem.endswith("_helpers")
        and stem != "types"
    )


def command_name(stem: str) -> str:
    """Underscores in a file name become dashes in the command name."""
    return stem.replace("_", "-")


def is_topic_dir(path: Path) -> bool:
    """Whether a directory in `commands/` is a topic folder, whose command files are commands:
    a package (it has `__init__.py`) whose name starts with neither `_` nor `.`."""
    return path.is_dir() and path.name[0] not in "_." and (path / "__init__.py").is_file()


def command_module(path: Path) -> str:
    """The name a command file is imported by (`commands/sound/mute.py`:
    `vocal.commands.sound.mute`)."""
    return ".".join(["vocal.commands", *path.relative_to(COMMANDS_DIR).with_suffix("").parts])


def discover_commands() -> dict[str, Path]:
    """Every command on disk, name -> module file, in name order, from file names only
    (nothing imported).

    `commands/NAME.py` and `commands/TOPIC/NAME.py` are `vocal NAME`; deeper folders are not
    read. VOCAL_COMMANDS_ENABLED/DISABLED are not applied here (see `CommandFilter`).
    """
    return dict(_discover())


def _listing(directory: Path) -> list[Path]:
    try:
        return sorted(directory.iterdir())
    except OSError:
        return []


@functools.lru_cache(maxsize=1)
def _discover() -> dict[str, Path]:
    # Once per process: help and completion ask for every command's summary.
    entries = _listing(COMMANDS_DIR)
    topics = [entry for entry in entries if is_topic_dir(entry)]
    found: dict[str, Path] = {}
    for path in entries + [path for topic in topics for path in _listing(topic)]:
        if not (path.is_file() and is_command_file(path)):
            continue
        name = command_name(path.stem)
        if name in found:  # a mistake of whoever added the file: say so rather than pick one
            raise RuntimeError(f"two modules make `vocal {name}`: {found[name]} and {path}")
        found[name] = path
    return dict(sorted(found.items()))


def summary_of(path: Path) -> str:
    """The first line of a module's docstring, read from its source text (nothing imported)."""
    try:
        with path.open(encoding="utf-8") as source:
            head = source.read(4096)
    except OSError:
        return ""
    match = _DOCSTRING.match(head)
    return match.group(2).strip().splitlines()[0].strip() if match else ""


def _entries(value: str) -> frozenset[tuple[str, ...]]:
    """ "converse, conch status" -> {("converse",), ("conch", "status")}."""
    return frozenset(
        tuple(command_name(word) for word in item.split())
        for item in value.split(",")
        if item.strip()
    )


class CommandFilter(NamedTuple):
    """VOCAL_COMMANDS_ENABLED / VOCAL_COMMANDS_DISABLED: comma lists of `NAME`, `GROUP` or
    `GROUP VERB`, narrowing the commands for an environment (an agent that should only
    `converse`). Enabled (when set) keeps only what it names: a group named whole keeps all
    its verbs, `GROUP VERB` keeps the group with only those verbs. Disabled then removes what
    it names. A command filtered out is absent from help and completion; running it is a usage
    error (exit 2) that says it is disabled.
    """

    enabled: frozenset[tuple[str, ...]] | None = None
    disabled: frozenset[tuple[str, ...]] = frozenset()

    @classmethod
    def from_env(cls, env: Any = None) -> CommandFilter:
        env = os.environ if env is None else env
        enabled = env.get(ENABLED_VAR, "")
        return cls(
            _entries(enabled) if enabled.strip() else None, _entries(env.get(DISABLED_VAR, ""))
        )

    def why_not(self, path: tuple[str, ...]) -> str | None:
        """None if the command `path` (("conch",), ("conch", "status")) is available, else
        the variable that removes it."""
        if self.enabled is not None and not any(
            path[: len(entry)] == entry or entry[: len(path)] == path for entry in self.enabled
        ):
            return f"not in {ENABLED_VAR}"
        if any(path[: len(entry)] == entry for entry in self.disabled):
            return f"in {DISABLED_VAR}"
        return None


def disabled_command(path: tuple[str, ...], why: str) -> click.Command:
    """A hidden stand-in for a filtered-out command: running it (even with --help or any
    arguments) says it is disabled, with exit 2."""

    def refuse(args: Any = None) -> None:
        raise UsageError(f"`vocal {' '.join(path)}` is disabled here ({why})")

    return click.Command(
        path[-1],
        callback=refuse,
        params=[click.Argument(["args"], nargs=-1, required=False)],
        hidden=True,
        add_help_option=False,
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
    )


def load_command(name: str, path: Path, rules: CommandFilter) -> click.Command:
    """The Click command of the module `path`, imported now; a group's filtered-out verbs are
    replaced by stand-ins that refuse to run."""
    module = importlib.import_module(command_module(path))
    command = typer.main.get_command(module.app)
    command.name = name
    if not command.help and module.__doc__:  # a group: its module docstring is its help
        command.help = module.__doc__.strip()
    if isinstance(command, click.Group):
        for verb in list(command.commands):
            why = rules.why_not((name, verb))
            if why is not None:
                command.commands[verb] = disabled_command((name, verb), why)
    return command


class LazyGroup(TyperGroup):
    """A root group that lists commands from file names, with summaries read from source text,
    and imports a command's module only to run it or show its own help."""

    def list_commands(self, ctx: Any) -> list[str]:
        rules = CommandFilter.from_env()
        return [name for name in discover_commands() if rules.why_not((name,)) is None]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        path = discover_commands().get(cmd_name)
        if path is None:
            return None
        rules = CommandFilter.from_env()
        why = rules.why_not((cmd_name,))
        if why is not None:
            return disabled_command((cmd_name,), why)
        return load_command(cmd_name, path, rules)

    def summary(self, name: str) -> str:
        """The one line `vocal --help` shows for `name`, read from its module's source."""
        return summary_of(discover_commands()[name])

    def format_commands(self, ctx: Any, formatter: Any) -> None:
        rows = [(name, self.summary(name)) for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def shell_complete(self, ctx: Any, incomplete: str) -> list[Any]:
        from click.shell_completion import CompletionItem

        items = [
            CompletionItem(name, help=self.summary(name))
            for name in self.list_commands(ctx)
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
    # Rich help doubles --help time (docs/design.md, "Fast start"); plain help is enough
    rich_markup_mode=None,
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


#: The longest error line printed (the longest vocal writes, the list of known settings in a
#: config.toml error, is about 1,000 characters).
MAX_ERROR_CHARS = 4_000


def report_error(message: str) -> None:
    """Print one `vocal: error: ...` line on stderr: a name or path in `message` that came
    from a file or a peer brings no line break or escape sequence with it (vocal.floor.shown)."""
    from vocal.floor.shown import shown_name

    print(f"vocal: error: {shown_name(message, MAX_ERROR_CHARS)}", file=sys.stderr, flush=True)


def main(argv: list[str] | None = None) -> None:
    """Console entry point: run the CLI and turn every failure into its exit code."""
    debug = debug_wanted()
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
    except click.BadParameter as exc:  # a flag's value of the wrong type or out of its range
        report_error(exc.format_message())
        code = exc.exit_code
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


__all__ = [
    "CommandFilter",
    "EXIT_USAGE",
    "app",
    "command_module",
    "discover_commands",
    "main",
    "summary_of",
]
