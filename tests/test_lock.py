"""The lock: constraints.txt, what scripts/setup installs on Linux, pins every requirement of
vocal and its extras (as they apply on this platform) to one version inside pyproject.toml's
range, so a fresh CI machine runs the versions the suite last passed with. scripts/lock
rewrites it; a dependency added to pyproject.toml without a new lock fails here."""

from __future__ import annotations

import sys
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - tomli is a dependency on 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parent.parent


def locked(text: str) -> dict[str, Version]:
    """constraints.txt's pins by canonical name; raises on anything but `name==version`."""
    pins: dict[str, Version] = {}
    for line in text.splitlines():
        if not line.strip() or line.startswith("#"):
            continue
        name, sep, version = line.partition("==")
        assert sep and name and version, f"not a pin: {line!r}"
        key = canonicalize_name(name)
        assert key not in pins, f"{name} is locked twice"
        pins[key] = Version(version)
    return pins


def requirements_here() -> list[Requirement]:
    """pyproject.toml's dependencies and every extra's, those whose markers hold here."""
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    found = [(line, "") for line in project["dependencies"]]
    for extra, lines in project["optional-dependencies"].items():
        found += [(line, extra) for line in lines]
    requirements = []
    for line, extra in found:
        requirement = Requirement(line)
        if requirement.marker is None or requirement.marker.evaluate({"extra": extra}):
            requirements.append(requirement)
    return requirements


def test_every_requirement_is_locked_inside_its_range() -> None:
    pins = locked((REPO / "constraints.txt").read_text(encoding="utf-8"))
    requirements = requirements_here()
    assert len(requirements) > 20
    for requirement in requirements:
        key = canonicalize_name(requirement.name)
        assert key in pins, f"{requirement.name} is not in constraints.txt: run scripts/lock"
        assert requirement.specifier.contains(pins[key], prereleases=True), (
            f"constraints.txt locks {requirement.name} {pins[key]}, outside {requirement}"
        )


def test_a_pin_outside_the_range_or_a_line_that_is_no_pin_is_caught() -> None:
    assert not Requirement("typer>=0.24,<0.26").specifier.contains(locked("typer==0.26.0")["typer"])
    for bad in ("numpy>=2", "numpy==2.0\nNumPy==2.1"):
        try:
            locked(bad)
        except AssertionError:
            continue
        raise AssertionError(f"{bad!r} was accepted")
