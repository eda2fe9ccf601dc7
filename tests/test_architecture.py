"""The rules of docs/architecture.md, checked on the source: no import cycle anywhere (lazy,
function-level imports included), each package's layer rule (which libraries it may reach), one MLflow
writer, small modules, few top-level modules, one file name per module, no benchmark references, no
subclass of a concrete sptune class.

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


def _typing_only_imports(tree: ast.Module) -> set[int]:
    """Imports under ``if TYPE_CHECKING:``: they run for type checkers only, so they execute no module."""
    return {id(inner) for node in tree.body
            if isinstance(node, ast.If) and isinstance(node.test, ast.Name) and node.test.id == "TYPE_CHECKING"
            for inner in ast.walk(node)}


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
        typing_only = _typing_only_imports(tree)
        nodes = (n for n in (ast.walk(tree) if lazy else iter(tree.body)) if id(n) not in typing_only)
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


def package_of(module: str) -> str:
    """sptune.<package> for a module in a package; a top-level module (sptune.storage) is its own node."""
    return ".".join(module.split(".")[:2])


def package_edges(graph: dict[str, set[str]]) -> dict[tuple[str, str], list[str]]:
    """(importing package, imported package) -> the 'module -> module' imports that make that edge."""
    edges: dict[tuple[str, str], list[str]] = {}
    for module, imported in sorted(graph.items()):
        for target in sorted(imported):
            key = (package_of(module), package_of(target))
            if key[0] != key[1]:
                edges.setdefault(key, []).append(f"{module} -> {target}")
    return edges


def package_cycles() -> list[str]:
    """Each cycle among sptune's packages (lazy imports included), with the module imports that make it."""
    edges = package_edges(import_graph(lazy=True))
    graph: dict[str, set[str]] = {}
    for importer, imported in edges:
        graph.setdefault(importer, set()).add(imported)
    found = []
    for component in cycles(graph):
        inside = [f"  {line}" for (a, b), lines in sorted(edges.items()) if a in component and b in component
                  for line in lines]
        found.append("\n".join([" <-> ".join(component), *inside]))
    return found


def test_packages_import_one_way():
    """spec -> plan -> judging read downwards only (rules and tasks below them), preflight -> study: a package
    that imported its importer would tie the two into one layer (docs/architecture.md)."""
    assert package_edges(import_graph(lazy=True)), "no package imports another: the graph was not read"
    found = package_cycles()
    assert found == [], "packages that import each other:\n" + "\n".join(found)


def test_the_rules_import_nothing_of_sptune():
    """The bottom layer: the spec, the plan, judging, tuning and training all read it (sptune/rules/__init__.py)."""
    graph = import_graph(lazy=True)
    rules = [m for m in graph if m.startswith("sptune.rules.")]
    assert rules and {m: sorted(graph[m]) for m in rules if graph[m]} == {}


def _third_party_imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


# package -> libraries that neither its modules nor any sptune module they import (lazily too) may import.
LAYERS = {
    "sptune.training": ("ray", "mlflow"),  # pure PyTorch: runs the same in a plain loop, a trial or a benchmark
    "sptune.judging": ("torch", "ray"),  # the report and the driver judge without loading the trainers
    "sptune.spec": ("torch", "ray"),  # a bad spec is refused before anything heavy is imported
    "sptune.plan": ("torch", "ray"),  # --dry-run plans without them
    "sptune.tasks": ("ray", "mlflow"),  # data preparation runs outside any study
}
# The only packages that import MLflow: the driver's tracking and study, and the report (which reads runs
# and logs its own files). Everything else reaches MLflow through sptune.tracking.
MLFLOW_USERS = ("sptune.tracking", "sptune.study", "sptune.report")


def _within(module: str, packages: tuple[str, ...]) -> bool:
    return any(module == p or module.startswith(p + ".") for p in packages)


def _reachable(graph: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        module = todo.pop()
        if module not in seen:
            seen.add(module)
            todo.extend(graph.get(module, ()))
    return seen


def layer_violations() -> list[str]:
    """'module -> library (imported by module)' for every library a package's layer rule forbids."""
    files, graph = module_files(), import_graph(lazy=True)
    imports = {m: _third_party_imports(p) for m, p in files.items()}
    found = []
    for module in sorted(files):
        for package, forbidden in LAYERS.items():
            if not _within(module, (package,)):
                continue
            for reached in sorted(_reachable(graph, module)):
                found += [f"{module} -> {lib} (imported by {reached})" for lib in forbidden if lib in imports[reached]]
    return found


def test_each_package_reaches_only_the_libraries_its_layer_allows():
    assert layer_violations() == []


def test_only_tracking_study_and_report_import_mlflow():
    imports = {m: _third_party_imports(p) for m, p in module_files().items()}
    assert any("mlflow" in found for found in imports.values())
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


def test_at_most_eight_modules_at_the_top_of_sptune():
    top = sorted(path.name for path in PACKAGE_DIR.glob("*.py"))
    assert "sweep.py" in top and len(top) <= 8, top


def test_no_two_modules_share_a_file_name():
    by_name: dict[str, list[str]] = {}
    for module, path in module_files().items():
        if path.stem not in ("__init__", "__main__"):
            by_name.setdefault(path.name, []).append(module)
    assert {name: sorted(ms) for name, ms in by_name.items() if len(ms) > 1} == {}


def benchmark_mentions() -> list[str]:
    """'file:line' of every mention of the benchmarks in sptune/ (sources and the data files beside them)."""
    found = []
    for path in sorted(PACKAGE_DIR.rglob("*")):
        if not path.is_file() or "__pycache__" in path.parts:
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if "BENCHMARKS" in line or "benchmarks/" in line:
                found.append(f"{path.relative_to(PACKAGE_DIR.parent)}:{number}")
    return found


def test_sptune_never_mentions_the_benchmarks():
    assert benchmark_mentions() == []


# Bases a class may extend although sptune defines them: what they give is a type, not methods to reuse.
_NOT_CONCRETE = {"Protocol", "Enum", "IntEnum", "StrEnum", "Flag", "IntFlag", "ABC"}


def _classes() -> dict[tuple[str, str], ast.ClassDef]:
    found = {}
    for module, path in module_files().items():
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, ast.ClassDef):
                found[(module, node.name)] = node
    return found


def _bindings(modules: dict[str, Path]) -> dict[str, dict[str, tuple[str, str | None]]]:
    """module -> local name -> (sptune module, name in it), or (sptune module, None) for a module alias."""
    bound: dict[str, dict[str, tuple[str, str | None]]] = {}
    for module, path in modules.items():
        names = bound.setdefault(module, {})
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and node.level == 0 and (node.module or "").startswith("sptune"):
                for alias in node.names:
                    sub = f"{node.module}.{alias.name}"
                    names[alias.asname or alias.name] = (sub, None) if sub in modules else (node.module, alias.name)
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    if alias.asname and alias.name in modules:
                        names[alias.asname] = (alias.name, None)
    return bound


def _resolve(module: str, base: ast.expr, bound: dict, classes: dict) -> tuple[str, str] | str:
    """The sptune class (module, name) a base names, following re-exports; else the base's own name."""
    if isinstance(base, ast.Attribute) and isinstance(base.value, ast.Name):
        target = bound.get(module, {}).get(base.value.id)
        if target is None or target[1] is not None:
            return base.attr
        module, name = target[0], base.attr
    elif isinstance(base, ast.Name):
        name = base.id
    else:
        return ast.unparse(base)
    for _ in range(10):  # a re-export chain (a package's __init__ naming a submodule's class) is short
        if (module, name) in classes:
            return module, name
        target = bound.get(module, {}).get(name)
        if target is None or target[1] is None:
            return name
        module, name = target
    return name


def _is_abstract(node: ast.ClassDef) -> bool:
    """Declares a method it leaves to subclasses (@abstractmethod, or a body that only raises NotImplementedError)."""
    for item in node.body:
        if not isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            continue
        if any(ast.unparse(d).endswith("abstractmethod") for d in item.decorator_list):
            return True
        body = [s for s in item.body if not (isinstance(s, ast.Expr) and isinstance(s.value, ast.Constant))]
        if len(body) == 1 and isinstance(body[0], ast.Raise) and "NotImplementedError" in ast.unparse(body[0]):
            return True
    return False


def concrete_subclasses() -> list[str]:
    """'module.Class(Base)' for every class whose base is a concrete sptune class with methods to reuse:
    not an exception, Protocol, Enum or abstract class, and defining at least one method (a base holding
    only settings, like the spec's pydantic `Strict`, passes on no behaviour)."""
    modules, classes = module_files(), _classes()
    bound = _bindings(modules)

    def lineage(key: tuple[str, str], depth: int = 0) -> set[str]:
        """Every base name up the chain, sptune's resolved and the outside world's as written."""
        names = set()
        for base in classes[key].bases:
            target = _resolve(key[0], base, bound, classes)
            if isinstance(target, tuple) and depth < 20:
                names |= {target[1]} | lineage(target, depth + 1)
            else:
                names.add(target.rsplit(".", 1)[-1])
        return names

    def reusable(key: tuple[str, str]) -> bool:
        node, up = classes[key], lineage(key) | {key[1]}
        if up & _NOT_CONCRETE or any(n.endswith(("Error", "Exception")) for n in up) or _is_abstract(node):
            return False
        return any(isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)) for item in node.body)

    found = []
    for (module, name), node in sorted(classes.items()):
        for base in node.bases:
            target = _resolve(module, base, bound, classes)
            if isinstance(target, tuple) and reusable(target):
                found.append(f"{module}.{name}({target[0]}.{target[1]})")
    return found


def test_no_class_subclasses_a_concrete_sptune_class():
    assert concrete_subclasses() == []


if __name__ == "__main__":
    full = import_graph(lazy=True)
    scope = {m: sorted(e) for m, e in full.items() if m.startswith(IN_SCOPE)}
    for module, edges in sorted(scope.items()):
        print(f"{module} -> {', '.join(e.removeprefix('sptune.') for e in edges) or '-'}")
    every = cycles(full)
    print(f"cycles in sptune (lazy imports included): {every or 'none'}")
    sys.exit(1 if any(any(m.startswith(IN_SCOPE) for m in c) for c in every) else 0)
