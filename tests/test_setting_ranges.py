"""Every setting and every numeric flag has a range (issue 37).

`stt_beam_size = 100000` grew past 6 GB and 0 ended in "unexpected ValueError"; a
`--max-seconds` of 1e300 or 10**30 in "unexpected OverflowError". Now each field of `Settings`
is a bool or has a range in vocal.config (a test fails when a field is added without
one), each numeric option of every command has both bounds, and a value far outside is one
`vocal: error:` line, exit 2, before anything runs: through `VOCAL_*` for every field, and
through the flags the issue named.

`vocal conch status` is the cheapest command that resolves the settings (~0.15 s), so every
field goes through the CLI under run_hostile's 4 GB cap.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

import click
import pytest
import typer

from harness.hostile import assert_one_line_error, run_hostile
from vocal.cli import app
from vocal.config import (
    SETTING_CHOICES,
    SETTING_MAX_CHARS,
    SETTING_RANGES,
    Settings,
    env_name,
    load_settings,
)
from vocal.errors import UsageError

FIELDS = dataclasses.fields(Settings)
#: A cheap command that loads the settings.
CHEAP = ("conch", "status")
#: Every hostile value here ends within this (start-up and one settings read).
DEADLINE_S = 30.0


def base_type(f: dataclasses.Field) -> str:
    return str(f.type).replace("| None", "").strip()


def far_out(f: dataclasses.Field) -> list[str]:
    """Values of field `f` far outside its range, as its environment variable would hold."""
    kind = base_type(f)
    if kind == "bool":
        return ["maybe", "2"]
    if kind in ("int", "float"):
        low, _high = SETTING_RANGES[f.name]
        values = ["1" + "0" * 30, "-1" + "0" * 30]
        if kind == "float":
            values += ["1e300", "-1e300"]
        if low > 0:
            values.append("0")
        return values
    values = ["x" * (SETTING_MAX_CHARS[f.name] + 1)]
    if f.name in SETTING_CHOICES:
        values.append("bogus")
    return values


def test_every_setting_has_a_range() -> None:
    """A new field needs its range in vocal.config (and so in the docs)."""
    missing = []
    for f in FIELDS:
        kind = base_type(f)
        if kind in ("int", "float"):
            ok = f.name in SETTING_RANGES
        elif kind in ("str", "Path"):
            ok = f.name in SETTING_MAX_CHARS
        else:
            ok = kind == "bool"
        if not ok:
            missing.append(f"{f.name} ({f.type})")
    assert not missing, f"settings without a range in vocal.config: {missing}"
    names = {f.name for f in FIELDS}
    for table in (SETTING_RANGES, SETTING_MAX_CHARS, SETTING_CHOICES):
        assert set(table) <= names, set(table) - names


def test_every_default_lies_in_its_range() -> None:
    defaults = Settings()
    for f in FIELDS:
        value = getattr(defaults, f.name)
        if value is None or isinstance(value, bool):
            continue
        if f.name in SETTING_RANGES:
            low, high = SETTING_RANGES[f.name]
            assert low <= value <= high, f.name
        if f.name in SETTING_MAX_CHARS:
            assert len(str(value)) <= SETTING_MAX_CHARS[f.name], f.name
        if f.name in SETTING_CHOICES:
            assert value in SETTING_CHOICES[f.name], f.name


@pytest.mark.parametrize("f", FIELDS, ids=lambda f: f.name)
def test_far_out_of_range_values_are_usage_errors(
    f: dataclasses.Field, monkeypatch: pytest.MonkeyPatch
) -> None:
    variable = "VOCAL_HOME" if f.name == "home" else env_name(f)
    for value in far_out(f):
        monkeypatch.setenv(variable, value)
        with pytest.raises(UsageError) as info:
            load_settings()
        message = str(info.value)
        assert variable in message and "\n" not in message and len(message) < 300, message


@pytest.mark.parametrize("f", FIELDS, ids=lambda f: f.name)
def test_far_out_of_range_through_the_cli(f: dataclasses.Field, tmp_path: Path) -> None:
    variable = "VOCAL_HOME" if f.name == "home" else env_name(f)
    result = run_hostile(*CHEAP, env={variable: far_out(f)[0]}, timeout_s=DEADLINE_S * 2)
    assert_one_line_error(result, 2, variable, within_s=DEADLINE_S)


@pytest.mark.parametrize(
    ("variable", "value"),
    [
        ("VOCAL_STT_BEAM_SIZE", "100000"),
        ("VOCAL_STT_BEAM_SIZE", "0"),
        ("VOCAL_MAX_SECONDS", "1e300"),
        ("VOCAL_HISTORY_SIZE", "-1"),
    ],
)
def test_the_cases_of_the_issue(variable: str, value: str) -> None:
    result = run_hostile(*CHEAP, env={variable: value}, timeout_s=DEADLINE_S * 2)
    assert_one_line_error(result, 2, variable, "between", within_s=DEADLINE_S)


def test_a_range_in_config_toml_names_the_file_key(vocal_home: Path) -> None:
    vocal_home.mkdir(parents=True)
    (vocal_home / "config.toml").write_text("stt_beam_size = 100000\n")
    result = run_hostile(*CHEAP, timeout_s=DEADLINE_S * 2)
    assert_one_line_error(result, 2, "'stt_beam_size'", "between 1 and 16", within_s=DEADLINE_S)


def test_values_at_the_edges_are_taken(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, (low, high) in SETTING_RANGES.items():
        f = next(f for f in FIELDS if f.name == name)
        # One at a time: some pairs (fast chunks <= chunks) are checked where they are used.
        for edge in (low, high):
            monkeypatch.setenv(env_name(f), str(edge))
            assert getattr(load_settings(), name) == edge
        monkeypatch.delenv(env_name(f))


# -- flags ---------------------------------------------------------------------------------------
def numeric_options() -> list[tuple[str, click.Parameter]]:
    """(command path, parameter) for every int or float option and argument of every command."""
    found: list[tuple[str, click.Parameter]] = []

    def walk(command: click.Command, path: list[str], ctx: click.Context) -> None:
        if isinstance(command, click.Group):
            for name in command.list_commands(ctx):
                sub = command.get_command(ctx, name)
                assert sub is not None
                walk(sub, [*path, name], click.Context(sub, parent=ctx, info_name=name))
            return
        for param in command.params:
            if isinstance(param.type, (click.types.IntParamType, click.types.FloatParamType)):
                found.append((" ".join(path), param))

    root = typer.main.get_command(app)
    walk(root, [], click.Context(root, info_name="vocal"))
    return found


def test_every_numeric_flag_has_both_bounds() -> None:
    options = numeric_options()
    assert len(options) > 20
    unbounded = [
        f"{path} {param.opts or param.name}"
        for path, param in options
        if getattr(param.type, "min", None) is None or getattr(param.type, "max", None) is None
    ]
    assert not unbounded, f"numeric options without a range: {unbounded}"


@pytest.mark.parametrize(
    "args",
    [
        ["listen", "--max-seconds", "1e300"],
        ["listen", "--max-seconds", "1" + "0" * 30],
        ["converse", "--max-seconds", "1e300", "hi"],
        ["listen", "--no-vad", "--seconds", "1e300"],
        ["listen", "--silence-ms", "1" + "0" * 30],
        ["conch", "wait", "--session", "s", "--timeout", "1e300"],
        ["focus", "hold", "--seconds", "1e300"],
        ["control", "status", "--pid", "1" + "0" * 30],
        ["replay", "1" + "0" * 30],
        ["volume", "--", "-1"],
    ],
)
def test_huge_flags_are_one_line_usage_errors(args: list[str]) -> None:
    result = run_hostile(*args, timeout_s=DEADLINE_S * 2)
    assert_one_line_error(result, 2, "not in the range", within_s=DEADLINE_S)
