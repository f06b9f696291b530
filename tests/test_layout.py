"""The package layout stays readable (issue 18): no import circle among vocal's modules, no
module past ~500 lines, at most 12 modules at the top of `src/vocal/`.

Read from the source with `ast` (nothing is imported), so it runs in milliseconds. Every import
counts, the ones inside functions and under `TYPE_CHECKING` too: a circle through a function-level
import is still a circle a reader has to untangle. The layer order itself is import-linter's
contract in pyproject.toml (`lint-imports`).
"""

from __future__ import annotations

import ast
from pathlib import Path

SRC = Path(__file__).resolve().parent.parent / "src" / "vocal"
#: ~500 lines is what a newcomer reads in a few screens (docs/design.md, "The stages and the
#: package map"); a little slack for a module that is just over.
MAX_MODULE_LINES = 520
MAX_TOP_LEVEL_MODULES = 12
#: A package's modules, `__init__.py` included: past this a package holds several concepts and
#: is split into sub-packages named after them (issue 38: `duplex/` had grown to 20).
MAX_PACKAGE_MODULES = 14


def module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def modules() -> dict[str, Path]:
    return {module_name(path): path for path in sorted(SRC.rglob("*.py"))}


def imports_of(name: str, path: Path, known: set[str]) -> set[str]:
    """The vocal modules `name` imports (a `from PACKAGE import MODULE` names the module)."""
    found: set[str] = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                child = f"{module}.{alias.name}"
                found.add(child if child in known else module)
    return {module for module in found if module in known and module != name}


def import_graph() -> dict[str, set[str]]:
    found = modules()
    return {name: imports_of(name, path, set(found)) for name, path in found.items()}


def find_cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import circle as a list of modules (first == last), or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(node: str) -> list[str] | None:
        state[node] = 1
        path.append(node)
        for target in sorted(graph[node]):
            if state.get(target) == 1:
                return path[path.index(target) :] + [target]
            if target not in state and (cycle := visit(target)):
                return cycle
        path.pop()
        state[node] = 2
        return None

    for node in sorted(graph):
        if node not in state and (cycle := visit(node)):
            return cycle
    return None


def test_no_import_circle_among_vocal_modules() -> None:
    cycle = find_cycle(import_graph())
    assert cycle is None, "import circle: " + " -> ".join(cycle or [])


def test_the_cycle_finder_finds_a_circle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert find_cycle(graph) == ["a", "b", "c", "a"]
    assert find_cycle({"a": {"b"}, "b": set()}) is None


def test_no_module_over_the_line_limit() -> None:
    too_long = {
        str(path.relative_to(SRC.parent)): count
        for path in SRC.rglob("*.py")
        if (count := len(path.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES
    }
    assert not too_long, f"modules over {MAX_MODULE_LINES} lines (split them by job): {too_long}"


def test_the_top_level_holds_few_modules() -> None:
    top = sorted(path.name for path in SRC.glob("*.py"))
    assert len(top) <= MAX_TOP_LEVEL_MODULES, f"{len(top)} modules in src/vocal/: {top}"


def test_no_package_holds_more_than_a_few_modules() -> None:
    crowded = {
        str(package.relative_to(SRC.parent)): count
        for package in (path.parent for path in SRC.rglob("__init__.py"))
        if package != SRC and (count := len(list(package.glob("*.py")))) > MAX_PACKAGE_MODULES
    }
    assert not crowded, f"packages over {MAX_PACKAGE_MODULES} modules (split by concept): {crowded}"
