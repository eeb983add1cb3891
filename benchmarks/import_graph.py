"""Import graph of the dpm_jax package: circles and imports that climb the layers.

    python benchmarks/import_graph.py

Runtime imports only (``if TYPE_CHECKING:`` blocks and imports inside functions are
listed apart: a function-level import is a lazy dependency, still an arrow). A circle
is a strongly connected set of more than one module. Exit status 1 when there is one.
"""

from __future__ import annotations

import ast
import pathlib
import sys

PACKAGE = pathlib.Path(__file__).resolve().parents[1] / "dpm_jax"


def modules() -> dict[str, pathlib.Path]:
    found = {}
    for path in PACKAGE.rglob("*.py"):
        parts = path.relative_to(PACKAGE).with_suffix("").parts
        name = ".".join(("dpm_jax",) + tuple(p for p in parts if p != "__init__"))
        found[name] = path
    return found


def imports(path: pathlib.Path, known: set[str]) -> tuple[set[str], set[str]]:
    """(top-level imports, imports inside functions) of one module, as dpm_jax module names."""
    top, lazy = set(), set()

    def targets(node) -> list[str]:
        if isinstance(node, ast.Import):
            return [a.name for a in node.names if a.name in known]
        base = node.module or ""
        named = [f"{base}.{a.name}" for a in node.names if f"{base}.{a.name}" in known]
        return named or ([base] if base in known else [])

    def visit(node, in_function: bool, in_type_checking: bool) -> None:
        for child in ast.iter_child_nodes(node):
            function = in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef))
            type_only = in_type_checking or (isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test))
            if isinstance(child, (ast.Import, ast.ImportFrom)) and not type_only:
                (lazy if function else top).update(targets(child))
            visit(child, function, type_only)

    visit(ast.parse(path.read_text()), False, False)
    return top, lazy


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def connect(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph[v]:
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    sys.setrecursionlimit(10_000)
    for v in graph:
        if v not in index:
            connect(v)
    return found


def package_graph() -> dict[str, set[str]]:
    """Every module's imports of other dpm_jax modules (top-level and lazy). The package's
    __init__ re-exports the public surface: an arrow into it is not a layer, and is left out."""
    known = modules()
    graph = {}
    for name, path in known.items():
        top, lazy = imports(path, set(known))
        graph[name] = (top | lazy) - {name, "dpm_jax"}
    return graph


def main() -> int:
    graph = package_graph()
    found = circles(graph)
    for component in found:
        print("circle:", " <-> ".join(component))
    if not found:
        print(f"no import circle among {len(graph)} modules")
    return 1 if found else 0


if __name__ == "__main__":
    sys.exit(main())
