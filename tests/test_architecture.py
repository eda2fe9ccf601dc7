"""The rules of docs/architecture.md, checked on the source: no import cycle anywhere (lazy,
function-level imports included), training code knows no Ray, one MLflow writer, small modules.

The graph is read from the source with `ast`, so nothing is imported to build it. An import of
``sptune.tasks.x`` from outside the package also runs ``sptune/tasks/__init__.py``, so it counts
as an edge to the package too. The registry's ``importlib`` load of the task modules by name is
a plugin load, not a static import, and is deliberately not an edge.

Run as a script to print every cycle in ``sptune``: ``python tests/test_architecture.py``.
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parents[1] / "sptune"
IN_SCOPE = ("sptune.tasks", "sptune.data")


def module_files() -> dict[str, Path]:
    files = {}
    for path in PACKAGE_DIR.rglob("*.py"):
        parts = path.relative_to(PACKAGE_DIR.parent).with_suffix("").parts
        name = ".".join(parts[:-1] if parts[-1] == "__init__" else parts)
        files[name] = path
    return files


def _imported_names(node: ast.AST) -> list[str]:
    """Dotted names an import statement may load (a ``from`` import may name a submodule)."""
    if isinstance(node, ast.Import):
        return [alias.name for alias in node.names]
    if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
        return [node.module] + [f"{node.module}.{alias.name}" for alias in node.names]
    return []


def _targets(importer: str, name: str, modules: set[str]) -> set[str]:
    """The sptune modules executed by importing ``name`` from ``importer``."""
    parts = name.split(".")
    found = set()
    for i in range(1, len(parts) + 1):
        prefix = ".".join(parts[:i])
        # A package the importer lives in is already initialising: importing it again runs nothing.
        if prefix in modules and prefix != "sptune" and not importer.startswith(prefix + "."):
            found.add(prefix)
    return found


def import_graph(lazy: bool = True) -> dict[str, set[str]]:
    """module -> sptune modules it imports (at module level, plus inside functions when ``lazy``)."""
    files = module_files()
    modules = set(files)
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        tree = ast.parse(path.read_text())
        nodes = ast.walk(tree) if lazy else iter(tree.body)
        edges = set()
        for node in nodes:
            for name in _imported_names(node):
                edges |= _targets(module, name, modules)
        graph[module] = edges - {module}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for succ in sorted(graph.get(node, ())):
            if succ not in index:
                visit(succ)
                low[node] = min(low[node], low[succ])
            elif succ in stack:
                low[node] = min(low[node], index[succ])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_import_cycle_through_tasks_or_the_data_cli():
    graph = import_graph(lazy=True)
    assert any(m.startswith("sptune.tasks.") for m in graph) and "sptune.data" in graph
    touching = [c for c in cycles(graph) if any(m.startswith(IN_SCOPE) for m in c)]
    assert touching == []


def test_no_import_cycle_anywhere():
    assert cycles(import_graph(lazy=True)) == []


def _third_party_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


# Pure-PyTorch training code: no Ray (and so it runs the same in a plain loop, a trial or a benchmark).
TRAINING_CODE = ("sptune.training.loops", "sptune.training.objectives", "sptune.training.variants", "sptune.training.models", "sptune.training.device",
                 "sptune.training.device_data", "sptune.training.model_configs", "sptune.tasks", "sptune.spec", "sptune.judging.ranking", "sptune.judging.stats")
# The only writers to MLflow: the driver's tracker and study, the launcher; the report only reads.
MLFLOW_USERS = ("sptune.tracking.mlflow_tracker", "sptune.tracking.mlflow_db", "sptune.study", "sptune.study.launch", "sptune.report")


def _within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def test_training_code_knows_no_ray_and_only_the_driver_talks_to_mlflow():
    imports = {m: _third_party_imports(p) for m, p in module_files().items()}
    assert [m for m, found in imports.items() if _within(m, TRAINING_CODE) and "ray" in found] == []
    assert [m for m, found in imports.items() if "mlflow" in found and not _within(m, MLFLOW_USERS)] == []


def test_modules_and_functions_stay_small():
    """One screen per function, one job per module (docs/architecture.md)."""
    long_modules, long_functions = [], []
    for module, path in module_files().items():
        text = path.read_text()
        if len(text.splitlines()) > 400:
            long_modules.append(module)
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= 60:
                long_functions.append(f"{module}.{node.name}")
    assert (long_modules, long_functions) == ([], [])


def test_task_modules_never_import_the_cli():
    graph = import_graph(lazy=True)
    importers = sorted(m for m, edges in graph.items() if m.startswith("sptune.tasks") and "sptune.data" in edges)
    assert importers == []


if __name__ == "__main__":
    full = import_graph(lazy=True)
    scope = {m: sorted(e) for m, e in full.items() if m.startswith(IN_SCOPE)}
    for module, edges in sorted(scope.items()):
        print(f"{module} -> {', '.join(e.removeprefix('sptune.') for e in edges) or '-'}")
    every = cycles(full)
    print(f"cycles in sptune (lazy imports included): {every or 'none'}")
    sys.exit(1 if any(any(m.startswith(IN_SCOPE) for m in c) for c in every) else 0)
