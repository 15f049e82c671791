"""The layers, as package prefixes: a module imports only its own layer and the ones below.

Every `import` counts, at module level, inside a function or under `TYPE_CHECKING`: a
deferred import is still a dependency. Modules are found by walking the folders, so a
new module is checked as soon as it exists, and a new sub-package must be given a layer
here before the test passes. `python tests/unit/test_layers.py` prints the graph, lowest
layer first.
"""

from __future__ import annotations

import ast
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
# Import name -> folder; the TUI is the package specrun_tui/ in the top-level folder tui/.
PACKAGES = {"specrun": ROOT / "specrun", "specrun_tui": ROOT / "tui" / "specrun_tui"}

# Lowest first. Packages that share a rank (the server and the TUI) may not import each
# other. `specrun` stands for the modules directly in specrun/: the library's entry.
LAYERS: tuple[tuple[str, ...], ...] = (
    ("specrun.errors",),
    ("specrun.system",),
    ("specrun.core",),
    ("specrun.llama",),
    ("specrun.models",),
    ("specrun.tools",),  # tool-call syntaxes, below the prompt that renders them
    ("specrun",),
    ("specrun.server", "specrun_tui", "specrun.training"),
    ("specrun.cli",),
    ("specrun.__main__",),  # `python -m specrun`
)
# Third-party packages a layer must not reach: the round loop runs against any model
# that keeps its protocol, and the library never needs a front end's framework.
FRONT_END_FRAMEWORKS = frozenset({"typer", "textual", "starlette", "uvicorn"})
# torch is an optional extra (`specrun[train]`): only the training package imports it.
NOT_THE_LIBRARY = FRONT_END_FRAMEWORKS | {"torch"}
FORBIDDEN_EXTERNAL = {
    "specrun.core": frozenset({"llama_cpp", "gguf", "huggingface_hub"}) | NOT_THE_LIBRARY,
    "specrun.errors": NOT_THE_LIBRARY,
    "specrun.system": NOT_THE_LIBRARY,
    "specrun.llama": NOT_THE_LIBRARY,
    "specrun.models": NOT_THE_LIBRARY,
    "specrun.tools": NOT_THE_LIBRARY,
    "specrun": NOT_THE_LIBRARY,
    "specrun.server": frozenset({"torch", "textual"}),
    "specrun_tui": frozenset({"torch", "starlette", "uvicorn"}),
    "specrun.training": FRONT_END_FRAMEWORKS,
    "specrun.cli": frozenset({"torch"}),
}


def modules(packages: dict[str, Path] = PACKAGES) -> dict[str, Path]:
    """Module name -> file, every .py below each package's folder."""
    found = {}
    for package, folder in packages.items():
        for path in folder.rglob("*.py"):
            parts = [package, *path.relative_to(folder).with_suffix("").parts]
            if parts[-1] == "__init__":
                parts.pop()
            found[".".join(parts)] = path
    return found


def imports_of(name: str, path: Path) -> set[str]:
    """Every module name `path` imports, relative imports resolved against `name`."""
    is_package = path.name == "__init__.py"
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = name.split(".")[: len(name.split(".")) - node.level + is_package]
                base = ".".join([*anchor, base] if base else anchor)
            names.add(base)
            names.update(f"{base}.{alias.name}" for alias in node.names)
    return names


def graph(packages: dict[str, Path] = PACKAGES) -> dict[str, set[str]]:
    """Module -> every name it imports: the project's modules and the third-party top levels."""
    known = modules(packages)
    return {name: imports_of(name, path) - {name} for name, path in known.items()}


def layer_of(module: str, packages: set[str]) -> str | None:
    """The LAYERS entry that holds `module`: the longest prefix, the bare `specrun` only for
    the modules directly in specrun/."""
    for prefix in sorted((p for rank in LAYERS for p in rank), key=len, reverse=True):
        if module == prefix or module.startswith(prefix + "."):
            if prefix == "specrun" and module.count(".") > 1 or module in packages - {prefix}:
                return None
            return prefix
    return None


def rank_of(layer: str) -> int:
    return next(i for i, rank in enumerate(LAYERS) if layer in rank)


def violations(edges: dict[str, set[str]], subpackages: set[str] = frozenset()) -> list[str]:
    """What breaks the layer rules in an import graph; empty where nothing does."""
    found = []
    for module, imported in sorted(edges.items()):
        layer = layer_of(module, subpackages)
        if layer is None:
            found.append(f"{module} is in no layer: give its package a place in LAYERS")
            continue
        for name in sorted(imported):
            top = name.split(".")[0]
            if top not in PACKAGES:
                if top in FORBIDDEN_EXTERNAL.get(layer, ()):
                    found.append(f"{module} ({layer}) imports {top}")
                continue
            if name in PACKAGES or name not in edges:  # a package's root, or a name inside a module
                continue
            target = layer_of(name, subpackages)
            if target is None or target == layer:
                continue
            if rank_of(target) > rank_of(layer):
                found.append(f"{module} ({layer}) imports {name} ({target}), a layer above it")
            elif rank_of(target) == rank_of(layer):
                found.append(f"{module} ({layer}) imports {name} ({target}), a layer beside it")
    return found


def subpackages_of(packages: dict[str, Path] = PACKAGES) -> set[str]:
    return {name for name, path in modules(packages).items() if path.name == "__init__.py"}


def project_edges(edges: dict[str, set[str]]) -> dict[str, set[str]]:
    """The graph less third-party names and package roots (whose __init__ may re-export)."""
    return {
        m: {n for n in imported if n in edges and n not in PACKAGES}
        for m, imported in edges.items()
    }


def cycle(edges: dict[str, set[str]]) -> list[str] | None:
    try:
        list(TopologicalSorter(project_edges(edges)).static_order())
    except CycleError as error:
        return list(error.args[1])
    return None


def test_no_import_cycle():
    found = cycle(graph())
    assert found is None, f"import cycle: {' -> '.join(found or [])}"


def test_every_module_keeps_to_its_layer():
    assert violations(graph(), subpackages_of()) == []


def test_every_package_is_read_from_its_folder():
    """A folder that moved would leave its package out of the graph, and every rule kept."""
    edges = graph()
    for package, folder in PACKAGES.items():
        assert (folder / "__init__.py").is_file(), f"{package}: no package at {folder}"
        imported = set().union(*(edges[m] for m in edges if m.startswith(package + ".")))
        assert any(name.startswith("specrun.") for name in imported), package


def test_the_rules_catch_an_import_upward_beside_or_of_a_framework():
    edges = {
        "specrun.core.loop": {"specrun.llama.model", "llama_cpp", "numpy"},
        "specrun.llama.model": {"specrun.core.loop"},
        "specrun.engine": {"specrun.server.app", "textual"},
        "specrun.server.app": {"specrun_tui.app", "starlette"},
        "specrun_tui.app": set(),
        "specrun.cli.app": {"specrun.server.app", "specrun_tui.app", "typer"},
    }
    assert violations(
        edges, {"specrun.core", "specrun.llama", "specrun.server", "specrun.cli"}
    ) == [
        "specrun.core.loop (specrun.core) imports llama_cpp",
        (
            "specrun.core.loop (specrun.core) imports specrun.llama.model (specrun.llama), "
            "a layer above it"
        ),
        "specrun.engine (specrun) imports specrun.server.app (specrun.server), a layer above it",
        "specrun.engine (specrun) imports textual",
        (
            "specrun.server.app (specrun.server) imports specrun_tui.app (specrun_tui), "
            "a layer beside it"
        ),
    ]
    assert cycle(edges) is not None


def test_a_planted_bad_import_in_a_real_tree_fails(tmp_path):
    """The whole path, files to verdict: a relative import upward, a new unplaced sub-package."""
    (tmp_path / "specrun" / "core").mkdir(parents=True)
    (tmp_path / "specrun" / "llama").mkdir()
    (tmp_path / "specrun" / "extras").mkdir()
    for folder in ("specrun", "specrun/core", "specrun/llama", "specrun/extras"):
        (tmp_path / folder / "__init__.py").write_text("")
    (tmp_path / "specrun" / "llama" / "model.py").write_text("import ctypes\n")
    (tmp_path / "specrun" / "core" / "loop.py").write_text(
        "def later():\n    from ..llama.model import Model\n    return Model\n"
    )
    (tmp_path / "specrun" / "extras" / "thing.py").write_text("")
    packages = {"specrun": tmp_path / "specrun"}
    found = violations(graph(packages), subpackages_of(packages))
    assert found == [
        (
            "specrun.core.loop (specrun.core) imports specrun.llama.model (specrun.llama), "
            "a layer above it"
        ),
        "specrun.extras is in no layer: give its package a place in LAYERS",
        "specrun.extras.thing is in no layer: give its package a place in LAYERS",
    ]


def test_the_tuis_imports_of_specrun_are_held_to_its_layer(tmp_path):
    """The TUI, read from its own folder: it may use the library, not the CLI, the server or
    torch."""
    for folder in ("specrun", "specrun/cli", "specrun/server", "specrun/core"):
        (tmp_path / folder).mkdir(parents=True)
        (tmp_path / folder / "__init__.py").write_text("")
    for module in ("cli/app", "server/app", "core/loop"):
        (tmp_path / "specrun" / f"{module}.py").write_text("")
    tui = tmp_path / "tui" / "specrun_tui"
    tui.mkdir(parents=True)
    (tui / "__init__.py").write_text("from specrun_tui.app import App\n")
    (tui / "app.py").write_text(
        "import torch\n"
        "from specrun.core.loop import Round\n"
        "from specrun.server.app import build\n"
        "from .screens import Chat\n"
        "def later():\n    from specrun.cli.app import main\n    return main\n"
    )
    (tui / "screens.py").write_text("from specrun_tui.app import App\n")
    packages = {"specrun": tmp_path / "specrun", "specrun_tui": tui}
    assert violations(graph(packages), subpackages_of(packages)) == [
        "specrun_tui.app (specrun_tui) imports specrun.cli.app (specrun.cli), a layer above it",
        (
            "specrun_tui.app (specrun_tui) imports specrun.server.app (specrun.server), "
            "a layer beside it"
        ),
        "specrun_tui.app (specrun_tui) imports torch",
    ]


if __name__ == "__main__":
    edges = project_edges(graph())
    for name in TopologicalSorter(edges).static_order():
        print(f"{name:<30} <- {', '.join(sorted(edges[name])) or '-'}")
    sys.exit(0)
