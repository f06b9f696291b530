"""docs/design.md's table of chosen values says what the code says: each row naming constants
(`NAME`) with as many plain values ("1.25, 250 ms, 1000 ms") is checked against the modules
that define them, so the prose cannot drift from the code again (issue 38: `KEEP_BLOCKS` read
"94 (3 s)" there and 156 in the code)."""

from __future__ import annotations

import importlib
import math
import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
SRC = REPO / "src" / "vocal"
DESIGN = REPO / "docs" / "design.md"

#: A value as the table writes one: a number (spaces between thousands), or several joined by
#: "/" or "-" (a tuple), a unit, and maybe a note in brackets ("156 blocks (5 s)").
NUMBER = r"-?\d[\d ]*(?:\.\d+)?"
VALUE = re.compile(
    rf"({NUMBER}(?:[/-]{NUMBER})*)\s*(ms|s|min|dB|kHz|KiB|MiB|blocks|levels)?(?:\s*\(.*\))?"
)
UNIT_SCALE = {"min": 60, "kHz": 1000, "KiB": 1024, "MiB": 1 << 20}
NAME = re.compile(r"`([A-Z][A-Z0-9_]+)`")
DEFINED = re.compile(r"^([A-Z][A-Z0-9_]+)(?::[^=\n]*)?\s*=", re.M)


def defining_modules() -> dict[str, list[str]]:
    """Each module-level constant's name -> the modules (dotted) that assign it."""
    found: dict[str, list[str]] = {}
    for path in SRC.rglob("*.py"):
        module = ".".join(path.relative_to(SRC.parent).with_suffix("").parts)
        module = module.removesuffix(".__init__")
        for name in DEFINED.findall(path.read_text()):
            found.setdefault(name, []).append(module)
    return found


def table_rows() -> list[tuple[list[str], list[tuple[float, ...]]]]:
    """(constant names, values) of every row whose values are all plain numbers, one each."""
    rows = []
    for line in DESIGN.read_text().splitlines():
        cells = [cell.strip() for cell in line.split("|")]
        if len(cells) < 4 or not cells[1].startswith("`"):
            continue
        names = NAME.findall(cells[1].split("(")[0])
        parts = [part.strip() for part in cells[2].split(",")]
        matches = [VALUE.fullmatch(part) for part in parts]
        if not names or len(names) != len(parts) or not all(matches):
            continue
        values = []
        for match in matches:
            assert match is not None
            scale = UNIT_SCALE.get(match.group(2) or "", 1)
            numbers = re.split(r"(?<=\d)[/-]", match.group(1).replace(" ", ""))
            values.append(tuple(float(number) * scale for number in numbers))
        rows.append((names, values))
    return rows


def test_the_table_has_rows_to_check() -> None:
    # The parser still reads the table (a reworded table must not pass by checking nothing).
    assert len(table_rows()) >= 20


@pytest.mark.parametrize("names, values", table_rows(), ids=lambda v: str(v))
def test_a_documented_value_is_the_codes(names: list[str], values: list[tuple[float, ...]]) -> None:
    modules = defining_modules()
    for name, documented in zip(names, values, strict=True):
        if name.startswith("VOCAL_"):
            continue  # an environment variable, not a constant
        assert name in modules, f"{name} is named in docs/design.md but defined nowhere"
        for module in modules[name]:
            value = getattr(importlib.import_module(module), name)
            actual = tuple(value) if isinstance(value, tuple) else (value,)
            assert len(actual) == len(documented) and all(
                isinstance(a, int | float) and math.isclose(a, d, rel_tol=1e-9)
                for a, d in zip(actual, documented, strict=False)
            ), f"docs/design.md says {name} = {documented}; {module} says {value}"
