"""The package's import graph (rdmaq/ and bench/, shipped as rdmaq.bench) has no circle, counting
the imports inside functions too: a circle there is a layering that only import order keeps
working.  Read from the source (ast), so nothing is imported."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[0] == "bench":  # pyproject.toml: bench/ is the package rdmaq.bench
        parts = ["rdmaq", "bench", *parts[1:]]
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _sources() -> dict[str, Path]:
    # bench/device/ holds scripts run on the benchmark machine, not modules of the package
    files = [*(ROOT / "rdmaq").rglob("*.py"),
             *(f for f in (ROOT / "bench").rglob("*.py") if not f.is_relative_to(ROOT / "bench" / "device"))]
    return {_module_name(f): f for f in files}


def import_graph() -> dict[str, set[str]]:
    """Each module's imports of other modules of the package: ``from pkg import name`` counts
    as an import of ``pkg.name`` where that is a module, else of ``pkg``."""
    modules = _sources()
    graph: dict[str, set[str]] = {}
    for name, path in modules.items():
        package = name if path.name == "__init__.py" else name.rpartition(".")[0]
        edges: set[str] = set()
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                edges.update(a.name for a in node.names if a.name in modules)
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                for a in node.names:
                    if f"{source}.{a.name}" in modules:
                        edges.add(f"{source}.{a.name}")
                    elif source in modules:
                        edges.add(source)
        edges.discard(name)
        graph[name] = edges
    return graph


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_the_circle_finder_finds_a_circle_through_three_modules():
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert circles(graph) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_the_graph_sees_imports_inside_functions_and_each_benchmark():
    graph = import_graph()
    # bench/cli.py dispatches to each benchmark from inside main()
    assert {"rdmaq.bench.micro.main", "rdmaq.bench.serve.main", "rdmaq.bench.step.main"} <= graph["rdmaq.bench.cli"]
    assert "rdmaq.bench.common.children" in graph["rdmaq.bench.step.proc"]


def test_no_module_of_the_package_imports_itself_back():
    assert circles(import_graph()) == []


def test_no_subcommand_imports_the_command_that_loads_it():
    """rdmaq/cli.py loads each subcommand by name (importlib), so the graph has no edge back
    from a subcommand to it; what they share is rdmaq.command, which imports no subcommand."""
    graph = import_graph()
    assert [m for m, edges in graph.items() if "rdmaq.cli" in edges] == []
    assert graph["rdmaq.command"] == set()
    assert "rdmaq.command" in graph["rdmaq.demo"] and "rdmaq.command" in graph["rdmaq.bench.serve.main"]
