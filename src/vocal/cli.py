"""The `vocal` command line: a root Typer app that finds its commands by file name.

Every module `vocal/commands/NAME.py` that defines a Typer `app` is the command `vocal NAME`,
and every module `vocal/commands/GROUP/NAME.py` is `vocal GROUP NAME` (the group's help is the
docstring of `GROUP/__init__.py`, or a default; see `CommandSource` for a directory beside a
module of the same name). `__init__.py`, `_*.py`, `*_helpers.py` and `types.py` are never
commands. Discovery reads file names only: the root's help reads each command's one-line summary
from its module docstring without importing it, and a command's module is imported only when
that command runs or shows its own help. VOCAL_COMMANDS_ENABLED and VOCAL_COMMANDS_DISABLED
narrow the set (`CommandFilter`); they are read from the environment only, not config.toml, so
`--help` stays free of file reads. Command modules import heavy libraries (numpy, onnxruntime,
sounddevice, ...) inside their functions, so `vocal --help`, `vocal CMD --help` and TAB
completion stay at the cost of Typer itself (guarded by tests/test_startup.py and measured by
benchmarks/startup).

Errors: the library raises `VocalError` subclasses; `main()` is the one place that turns them
into `vocal: error: ...` on stderr and the exit code (docs/design.md). `VOCAL_DEBUG=1` re-raises.
"""

from __future__ import annotations

import functools
import importlib
import importlib.util
import inspect
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
    """Underscores in a file or directory name become dashes in the command name."""
    return stem.replace("_", "-")


def command_files(directory: Path) -> dict[str, Path]:
    """Command name -> module file, for the command files directly in `directory`."""
    try:
        paths = sorted(directory.iterdir())
    except OSError:
        return {}
    return {command_name(p.stem): p for p in paths if p.is_file() and is_command_file(p)}


class CommandSource(NamedTuple):
    """Where a top-level command comes from: a module `commands/NAME.py`, a directory
    `commands/NAME/` whose command files are its verbs (`vocal NAME VERB`), or both.

    With both, the module's app is the group and the directory adds verbs to it (a verb the
    module defines wins over a file of the same name); if the module defines a single command
    rather than a group, the command cannot take verbs and the directory is ignored.
    """

    name: str
    path: Path | None = None
    directory: Path | None = None

    @property
    def stem(self) -> str:
        return (self.path or self.directory).stem  # type: ignore[union-attr]

    def summary(self) -> str:
        """The one line `vocal --help` shows, read from source text (nothing imported)."""
        if self.path is not None:
            return summary_of(self.path)
        assert self.directory is not None
        return summary_of(self.directory / "__init__.py") or f"The {self.name} commands."

    def verbs(self) -> dict[str, Path]:
        """The directory's verb modules (empty without a directory)."""
        return command_files(self.directory) if self.directory is not None else {}


def discover_commands(commands_dir: Path | None = None) -> dict[str, CommandSource]:
    """Every command on disk, from file and directory names only (nothing imported).

    `commands/NAME.py` is `vocal NAME`; a directory `commands/GROUP/` holding command files is
    the group `vocal GROUP` (help from `GROUP/__init__.py`'s docstring, or a default). Names
    starting with `_` or `.` are never commands. VOCAL_COMMANDS_ENABLED/DISABLED are not
    applied here (see `CommandFilter`).
    """
    return dict(_discover(COMMANDS_DIR if commands_dir is None else commands_dir))


@functools.lru_cache(maxsize=4)
def _discover(directory: Path) -> dict[str, CommandSource]:
    # Once per process: help and completion ask for every command's summary.
    files = command_files(directory)
    groups: dict[str, Path] = {}
    try:
        entries = sorted(directory.iterdir())
    except OSError:
        entries = []
    for entry in entries:
        if entry.is_dir() and entry.name[0] not in "_." and command_files(entry):
            groups[command_name(entry.name)] = entry
    return {
        name: CommandSource(name, files.get(name), groups.get(name))
        for name in sorted(set(files) | set(groups))
    }


def summary_of(path: Path) -> str:
    """The first line of a module's docstring, read from its source text."""
    try:
        with path.open(encoding="utf-8") as source:
            head = source.read(4096)
    except OSError:
        return ""
    match = _DOCSTRING.match(head)
    return match.group(2).strip().splitlines()[0].strip() if match else ""


def docstring_of(path: Path) -> str:
    """A module's whole docstring, read from its source text ("" without one)."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError:
        return ""
    match = _DOCSTRING.match(text)
    return inspect.cleandoc(match.group(2)) if match else ""


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


def _import_command_module(source: CommandSource, verb_stem: str | None = None) -> Any:
    """Import `vocal.commands.NAME` or, for a directory's verb, `vocal.commands.GROUP.VERB`.

    A verb of a directory that shares its name with a module `commands/GROUP.py` is loaded from
    its file: the module holds the name `vocal.commands.GROUP`, so the package is not
    importable (such verbs use absolute imports)."""
    if verb_stem is None:
        return importlib.import_module(f"vocal.commands.{source.stem}")
    assert source.directory is not None
    name = f"vocal.commands.{source.directory.name}.{verb_stem}"
    if source.path is None:
        return importlib.import_module(name)
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, source.directory / f"{verb_stem}.py")
    module = importlib.util.module_from_spec(spec)  # type: ignore[arg-type]
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)  # type: ignore[union-attr]
    except BaseException:
        del sys.modules[name]
        raise
    return module


def _command_of(module: Any, name: str) -> click.Command:
    command = typer.main.get_command(module.app)
    command.name = name
    if not command.help and module.__doc__:  # a group: its module docstring is its help
        command.help = module.__doc__.strip()
    return command


def _filter_verbs(group: click.Group, path: tuple[str, ...], rules: CommandFilter) -> None:
    for verb in list(group.commands):
        why = rules.why_not((*path, verb))
        if why is not None:
            group.commands[verb] = disabled_command((*path, verb), why)


class ListedGroup(TyperGroup):
    """A group whose help and completion list its commands with summaries read from source
    text (`summary`), instead of importing every command module to ask for its short help."""

    def summary(self, name: str) -> str:
        raise NotImplementedError

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


class DirectoryGroup(ListedGroup):
    """`vocal GROUP`: verbs from the file names in `commands/GROUP/` (plus those of a module
    `commands/GROUP.py`), each imported only when it runs or shows its own help."""

    def __init__(
        self, *args: Any, source: CommandSource, rules: CommandFilter, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.source = source
        self.rules = rules

    def list_commands(self, ctx: Any) -> list[str]:
        names = set(self.source.verbs()) | set(self.commands)
        return sorted(n for n in names if self.rules.why_not((self.source.name, n)) is None)

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        if cmd_name in self.commands:  # the module's own verbs (filtered when it was loaded)
            return self.commands[cmd_name]
        path = self.source.verbs().get(cmd_name)
        if path is None:
            return None
        why = self.rules.why_not((self.source.name, cmd_name))
        if why is not None:
            return disabled_command((self.source.name, cmd_name), why)
        command = _command_of(_import_command_module(self.source, path.stem), cmd_name)
        if isinstance(command, click.Group):
            _filter_verbs(command, (self.source.name, cmd_name), self.rules)
        return command

    def summary(self, name: str) -> str:
        if name in self.commands:  # the module's own verbs are loaded already
            return self.commands[name].get_short_help_str(limit=60)
        return summary_of(self.source.verbs()[name])


def load_command(source: CommandSource, rules: CommandFilter) -> click.Command:
    """The Click command for a discovered source, importing only what it needs."""
    if source.path is None:  # a directory group: nothing to import until a verb runs
        assert source.directory is not None
        return DirectoryGroup(
            name=source.name,
            help=docstring_of(source.directory / "__init__.py") or f"The {source.name} commands.",
            no_args_is_help=True,
            rich_markup_mode=None,
            context_settings={"help_option_names": ["-h", "--help"]},
            source=source,
            rules=rules,
        )
    command = _command_of(_import_command_module(source), source.name)
    if not isinstance(command, click.Group):
        return command  # a single command takes no verbs: a same-named directory is ignored
    _filter_verbs(command, (source.name,), rules)
    if source.directory is None:
        return command
    return DirectoryGroup(
        name=source.name,
        commands=command.commands,
        callback=command.callback,
        params=command.params,
        help=command.help,
        epilog=command.epilog,
        short_help=command.short_help,
        context_settings=command.context_settings,
        no_args_is_help=command.no_args_is_help,
        invoke_without_command=command.invoke_without_command,
        rich_markup_mode=None,
        source=source,
        rules=rules,
    )


class LazyGroup(ListedGroup):
    """A root group that lists commands from file names and imports one only to run it."""

    def list_commands(self, ctx: Any) -> list[str]:
        rules = CommandFilter.from_env()
        return [name for name in discover_commands() if rules.why_not((name,)) is None]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        source = discover_commands().get(cmd_name)
        if source is None:
            return None
        rules = CommandFilter.from_env()
        why = rules.why_not((cmd_name,))
        if why is not None:
            return disabled_command((cmd_name,), why)
        return load_command(source, rules)

    def summary(self, name: str) -> str:
        return discover_commands()[name].summary()


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
    "CommandSource",
    "EXIT_USAGE",
    "app",
    "discover_commands",
    "main",
    "summary_of",
]
