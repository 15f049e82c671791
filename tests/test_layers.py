"""Imports run one way, from the front ends down to the runtime, with no cycle.

Every `import` counts, at module level or inside a function: a deferred import is
still a dependency. `python tests/test_layers.py` prints the graph, lowest layer first.
"""

from __future__ import annotations

import ast
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = {"specrun": ROOT / "specrun", "specrun_tui": ROOT / "tui"}
# The engine is a library: none of it may reach up into a front end.
FRONT_ENDS = {"specrun.cli", "specrun.chat_cli", "specrun.models_cli", "specrun.commands"}
LIBRARY = {
    "specrun.runtime",
    "specrun.sampling",
    "specrun.speculative",
    "specrun.gamma",
    "specrun.stats",
    "specrun.drafting",
    "specrun.engine",
    "specrun.prompt",
    "specrun.backend",
}


def modules() -> dict[str, Path]:
    found = {}
    for package, folder in PACKAGES.items():
        for path in folder.glob("*.py"):
            found[package if path.stem == "__init__" else f"{package}.{path.stem}"] = path
    return found


def imports_of(path: Path, known: set[str]) -> set[str]:
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return {name for name in names if name in known}


def graph() -> dict[str, set[str]]:
    """Module -> the project modules it imports (a package's __init__ re-exports are left out)."""
    known = modules()
    return {
        name: imports_of(path, set(known)) - {name, "specrun", "specrun_tui"}
        for name, path in known.items()
    }


def test_no_import_cycle():
    try:
        list(TopologicalSorter(graph()).static_order())
    except CycleError as cycle:
        raise AssertionError(f"import cycle: {' -> '.join(cycle.args[1])}") from None


def test_the_library_never_imports_a_front_end():
    for name, imported in graph().items():
        if name in LIBRARY:
            assert not imported & (
                FRONT_ENDS | {m for m in imported if m.startswith("specrun_tui")}
            ), name


if __name__ == "__main__":
    edges = graph()
    for name in TopologicalSorter(edges).static_order():
        print(f"{name:<24} <- {', '.join(sorted(edges[name])) or '-'}")
    sys.exit(0)
