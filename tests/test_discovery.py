"""Discovered commands: files dropped into `commands/` or one of its topic folders become
commands, without being listed.

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
    package.add("roll_call.py", "Call the roll.", word="present")
    for excluded in ("_private.py", "shout_helpers.py", "types.py"):
        package.poison(excluded)
    return package


def test_a_new_file_appears_in_help(copy: Copy) -> None:
    origin = subprocess.run([sys.executable, "-c", "import vocal; print(vocal.__file__)"],
                            capture_output=True, text=True, env={**os.environ,
                            "PYTHONPATH": str(copy.root)})  # fmt: skip
    assert origin.stdout.strip() == str(copy.root / "vocal" / "__init__.py")  # the copy runs
    out = copy.help()
    assert "hello Say hello from a file nobody listed." in out
    assert "roll-call Call the roll." in out
    assert "speak" in out and "conch" in out  # the existing commands are all still there
    assert "HIDDEN" not in out and "private" not in out and "types" not in out
    assert "shout" not in out


def test_discovered_commands_run_and_import_only_themselves(copy: Copy) -> None:
    ran = copy.run("hello", "Ada")
    assert (ran.returncode, ran.stdout) == (0, "hello Ada\n"), ran.stderr
    assert copy.run("roll-call", "Bo").stdout == "present Bo\n"
    modules = copy.modules("roll-call", "Bo")
    assert "vocal.commands.roll_call" in modules
    assert not {"vocal.commands.hello", "vocal.commands.speak"} & modules
    for excluded in (["types"], ["private"], ["shout-helpers"]):
        result = copy.run(*excluded)
        assert result.returncode == 2 and "No such command" in result.stderr, excluded
        assert "must never be imported" not in result.stderr


def test_help_and_completion_import_nothing_heavy_and_no_command(copy: Copy) -> None:
    modules = copy.modules("--help")
    assert not {name.split(".")[0] for name in modules} & HEAVY
    commands = {name for name in modules if name.startswith("vocal.commands.")}
    assert not commands, commands
    assert {"hello", "roll-call", "speak", "conch"} <= set(copy.complete())
    assert (
        "--session"
        in copy.run(
            _VOCAL_COMPLETE="complete_bash", COMP_WORDS="vocal conch wait --", COMP_CWORD="3"
        ).stdout
    )


def test_a_topic_folder_holds_commands_and_is_none(copy: Copy) -> None:
    topic = copy.commands / "greetings"
    topic.mkdir()
    (topic / "__init__.py").write_text('"""HIDDEN topic: greetings."""\n')
    copy.add("greetings/wave.py", "Wave from a topic folder.", word="wave")
    never = ["greetings/_shared.py", "greetings/deeper/__init__.py", "greetings/deeper/nod.py"]
    never += ["loose/shrug.py", "_private_topic/__init__.py", "_private_topic/bow.py"]
    for relative in never:
        copy.poison(relative)
    out = copy.help()
    assert "wave Wave from a topic folder." in out and "hello Say hello" in out
    assert "HIDDEN" not in out and "greetings" not in out
    assert not {"nod", "shrug", "bow", "shared"} & set(out.split())
    assert "wave" in copy.complete()
    ran = copy.run("wave", "Ada")
    assert (ran.returncode, ran.stdout) == (0, "wave Ada\n"), ran.stderr
    modules = copy.modules("wave", "Ada")
    assert "vocal.commands.greetings.wave" in modules and "vocal.commands.hello" not in modules
    for not_a_command in ("greetings", "nod", "shrug", "bow"):
        result = copy.run(not_a_command)
        assert result.returncode == 2 and "No such command" in result.stderr, not_a_command


def test_two_files_making_one_command_are_an_error(copy: Copy) -> None:
    (copy.commands / "greetings").mkdir()
    (copy.commands / "greetings" / "__init__.py").write_text('"""Greetings."""\n')
    copy.add("greetings/hello.py", "Say hello twice.")
    result = copy.run("--help")
    assert result.returncode == 1
    assert "two modules make `vocal hello`" in result.stderr and "Traceback" not in result.stderr


def test_enabled_list_narrows_help_completion_and_running(copy: Copy) -> None:
    only = {"VOCAL_COMMANDS_ENABLED": "converse, conch status,hello"}
    out = copy.help(**only)
    commands = out.split("Commands:")[1].split("Exit codes")[0]
    assert "conch The floor" in commands and "hello Say hello" in commands
    assert "converse One agent turn" in commands
    assert "speak Speak" not in commands and "roll-call" not in commands
    assert set(copy.complete(**only)) == {"converse", "conch", "hello"}
    assert copy.complete("conch", **only) == ["status"]
    refused = copy.run("speak", "hi", "--voice", "x", **only)
    assert refused.returncode == 2
    assert refused.stderr == "vocal: error: `vocal speak` is disabled here " \
                             "(not in VOCAL_COMMANDS_ENABLED)\n"  # fmt: skip
    assert copy.run("conch", "bump", **only).returncode == 2
    assert copy.run("conch", "status", **only).returncode == 0
    assert copy.run("hello", "Cy", **only).stdout == "hello Cy\n"


def test_disabled_list_removes_commands_and_verbs(copy: Copy) -> None:
    off = {"VOCAL_COMMANDS_DISABLED": "speak,roll-call,conch bump"}
    out = copy.help(**off)
    assert "speak Speak" not in out and "roll-call" not in out and "hello Say" in out
    assert not {"speak", "roll-call"} & set(copy.complete(**off))
    assert "bump" not in copy.help("conch", **off) and "bump" not in copy.complete("conch", **off)
    for args in (["speak", "--help"], ["roll-call", "Bo"], ["conch", "bump", "--json"]):
        result = copy.run(*args, **off)
        assert result.returncode == 2, args
        assert "is disabled here (in VOCAL_COMMANDS_DISABLED)" in result.stderr
    assert copy.run("hello", **off).stdout == "hello world\n"
    whole = {"VOCAL_COMMANDS_DISABLED": "conch"}
    assert "conch" not in copy.complete(**whole)
    assert copy.run("conch", "status", **whole).returncode == 2
