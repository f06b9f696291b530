"""Discovered commands: files dropped into `commands/` become commands, without being listed.

Each test works on its own copy of the `vocal` package (put first on PYTHONPATH), adds command
files to it, and runs `python -m vocal` on the copy, so the real package is never touched.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import vocal
from harness.imports import HEAVY, loaded_modules

COMMAND = '''"""{summary}"""

from __future__ import annotations

import typer

from vocal.commands._app import command_app

app = command_app()


@app.command()
def {function}(name: str = typer.Argument("world")) -> None:
    """{summary}"""
    print("{word}", name)
'''

#: A module that must never be imported: importing it fails loudly.
POISON = '''"""{summary}"""

raise RuntimeError("{name} must never be imported as a command")
'''


class Copy:
    """A copy of the vocal package that tests add command files to."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.commands = root / "vocal" / "commands"
        shutil.copytree(Path(vocal.__file__).parent, root / "vocal",
                        ignore=shutil.ignore_patterns("__pycache__"))  # fmt: skip

    def add(self, relative: str, summary: str, word: str = "hello") -> None:
        path = self.commands / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        function = path.stem.replace("-", "_")
        path.write_text(COMMAND.format(summary=summary, function=function, word=word))

    def poison(self, relative: str) -> None:
        path = self.commands / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(POISON.format(summary=f"HIDDEN {relative}", name=relative))

    def run(self, *args: str, **env: str) -> subprocess.CompletedProcess:
        full_env = {**os.environ, "PYTHONPATH": str(self.root), **env}
        return subprocess.run([sys.executable, "-m", "vocal", *args],
                              capture_output=True, text=True, env=full_env, timeout=60)  # fmt: skip

    def modules(self, *args: str) -> set[str]:
        """The modules `vocal ARGS` loaded (tests/test_startup.py)."""
        return loaded_modules(list(args), {"PYTHONPATH": str(self.root)})

    def help(self, *args: str, **env: str) -> str:
        result = self.run(*args, "--help", **env)
        assert result.returncode == 0, result.stderr
        return " ".join(result.stdout.split())

    def complete(self, *words: str, **env: str) -> list[str]:
        """What bash completion offers after `vocal WORDS `."""
        line = " ".join(["vocal", *words, ""])
        result = self.run(_VOCAL_COMPLETE="complete_bash", COMP_WORDS=line,
                          COMP_CWORD=str(len(words) + 1), **env)  # fmt: skip
        assert result.returncode == 0, result.stderr
        return result.stdout.split()


@pytest.fixture
def copy(tmp_path: Path) -> Copy:
    package = Copy(tmp_path / "pkg")
    package.add("hello.py", "Say hello from a file nobody listed.")
    package.add("team/greet.py", "Greet a teammate by name.", word="hi")
    package.add("team/roll_call.py", "Call the roll of the team.", word="present")
    (package.commands / "team" / "__init__.py").write_text('"""Team chores for the tests."""\n')
    package.add("crew/muster.py", "Muster the crew.", word="mustered")  # no __init__.py
    for excluded in ("_private.py", "shout_helpers.py", "types.py", "team/_shared.py",
                     "team/team_helpers.py", "team/types.py"):  # fmt: skip
        package.poison(excluded)
    return package


def test_a_new_file_and_a_directory_group_appear_in_help(copy: Copy) -> None:
    origin = subprocess.run([sys.executable, "-c", "import vocal; print(vocal.__file__)"],
                            capture_output=True, text=True, env={**os.environ,
                            "PYTHONPATH": str(copy.root)})  # fmt: skip
    assert origin.stdout.strip() == str(copy.root / "vocal" / "__init__.py")  # the copy runs
    out = copy.help()
    assert "hello Say hello from a file nobody listed." in out
    assert "team Team chores for the tests." in out
    assert "crew The crew commands." in out  # no __init__.py: the default help
    assert "speak" in out and "conch" in out  # the existing commands are all still there
    assert "HIDDEN" not in out and "private" not in out and "types" not in out
    assert "shout" not in out
    team = copy.help("team")
    assert "greet Greet a teammate by name." in team and "roll-call Call the roll" in team
    assert "Team chores for the tests." in team and "HIDDEN" not in team
    assert "shared" not in team and "types" not in team


def test_discovered_commands_run_and_import_only_themselves(copy: Copy) -> None:
    ran = copy.run("hello", "Ada")
    assert (ran.returncode, ran.stdout) == (0, "hello Ada\n"), ran.stderr
    assert copy.run("team", "roll-call", "Bo").stdout == "present Bo\n"
    modules = copy.modules("team", "roll-call", "Bo")
    assert "vocal.commands.team.roll_call" in modules
    assert not {"vocal.commands.team.greet", "vocal.commands.hello"} & modules
    assert copy.run("crew", "muster").stdout == "mustered world\n"
    for excluded in (
        ["types"],
        ["private"],
        ["shout-helpers"],
        ["team", "types"],
        ["team", "shared"],
    ):
        result = copy.run(*excluded)
        assert result.returncode == 2 and "No such command" in result.stderr, excluded
        assert "must never be imported" not in result.stderr


def test_help_and_completion_import_nothing_heavy_and_no_command(copy: Copy) -> None:
    for args in (["--help"], ["team", "--help"]):
        modules = copy.modules(*args)
        assert not {name.split(".")[0] for name in modules} & HEAVY
        commands = {name for name in modules if name.startswith("vocal.commands.")}
        assert commands <= {"vocal.commands", "vocal.commands.team"}, commands
    assert {"hello", "team", "crew", "speak"} <= set(copy.complete())
    assert copy.complete("team") == ["greet", "roll-call"]
    assert (
        "--session"
        in copy.run(
            _VOCAL_COMPLETE="complete_bash", COMP_WORDS="vocal conch wait --", COMP_CWORD="3"
        ).stdout
    )


def test_a_directory_beside_a_module_adds_verbs_to_its_group(copy: Copy) -> None:
    copy.add("conch/extra.py", "An extra verb for the conch.", word="extra")
    copy.add("play/ignored.py", "Never a verb: play is a single command.")
    conch = copy.help("conch")
    assert "extra An extra verb for the conch." in conch
    assert "status Who holds the floor" in conch and "heartbeat" in conch
    assert copy.run("conch", "extra").stdout == "extra world\n"
    assert copy.run("conch", "status").stdout.strip() == "the floor is free"
    assert "ignored" not in copy.help("play")


def test_enabled_list_narrows_help_completion_and_running(copy: Copy) -> None:
    only = {"VOCAL_COMMANDS_ENABLED": "converse, conch status,team"}
    out = copy.help(**only)
    commands = out.split("Commands:")[1].split("Exit codes")[0]
    assert "conch The floor" in commands and "team Team chores" in commands
    assert "converse One agent turn" in commands
    assert "speak Speak" not in commands and "hello Say" not in commands
    assert set(copy.complete(**only)) == {"converse", "conch", "team"}
    assert copy.complete("conch", **only) == ["status"]
    assert copy.complete("team", **only) == ["greet", "roll-call"]
    refused = copy.run("speak", "hi", "--voice", "x", **only)
    assert refused.returncode == 2
    assert refused.stderr == "vocal: error: `vocal speak` is disabled here " \
                             "(not in VOCAL_COMMANDS_ENABLED)\n"  # fmt: skip
    assert copy.run("conch", "bump", **only).returncode == 2
    assert copy.run("conch", "status", **only).returncode == 0
    assert copy.run("team", "greet", "Cy", **only).stdout == "hi Cy\n"


def test_disabled_list_removes_commands_and_verbs(copy: Copy) -> None:
    off = {"VOCAL_COMMANDS_DISABLED": "speak,team greet,conch bump"}
    out = copy.help(**off)
    assert "speak Speak" not in out and "team Team chores" in out and "hello Say" in out
    assert "speak" not in copy.complete(**off)
    assert copy.complete("team", **off) == ["roll-call"]
    assert "greet" not in copy.help("team", **off)
    assert "bump" not in copy.help("conch", **off) and "bump" not in copy.complete("conch", **off)
    for args in (["speak", "--help"], ["team", "greet"], ["conch", "bump", "--json"]):
        result = copy.run(*args, **off)
        assert result.returncode == 2, args
        assert "is disabled here (in VOCAL_COMMANDS_DISABLED)" in result.stderr
    assert copy.run("team", "roll-call", **off).stdout == "present world\n"
    whole = {"VOCAL_COMMANDS_DISABLED": "team"}
    assert (
        "team" not in copy.complete(**whole) and copy.run("team", "greet", **whole).returncode == 2
    )
