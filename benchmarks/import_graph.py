"""Import graph of the dpm_jax package: circles and imports that climb the layers.

    python benchmarks/import_graph.py

Runtime imports only (``if TYPE_CHECKING:`` blocks are left out; an import inside a
function is a lazy dependency, still an arrow). A circle is a strongly connected set of
more than one module. A climb is an import of a module in a higher layer (:data:`LAYERS`).
Exit status 1 when there is either, or a module no layer names.
"""

from __future__ import annotations

import ast
import functools
import pathlib
import sys
from typing import NamedTuple

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


# The package's layers, lowest first; a module may import its own layer and those below.
# base: exact arithmetic, samplers, the ledger, keys, release types, config and budget, and
# leaf utilities.
# engine: one algorithm's mechanisms and level arithmetic. entry: the public entry points,
# and the planning arithmetic at a public size whose warnings the entry points raise.
# tools: reports, command line, estimator, evaluation, synthesis front ends.
LAYERS: tuple[tuple[str, frozenset[str]], ...] = (
    ("base", frozenset({
        "_arrays", "exact", "mechanisms", "ledger", "keys", "releases", "config", "budget",
        "cache", "files", "tables", "sharding", "rows",
    })),
    ("engine", frozenset({
        "histogram", "scoring", "structure", "merge", "interval", "tree", "tree_passes", "averaging", "depth",
        "dpm_releases", "bounds",
        "synth.cells", "synth.depth_search", "synth.implicit", "synth.kdtree", "synth.plan", "synth.privtree",
        "synth.result",
        "synth.refine", "synth.threshold",
        "greedy.nets", "greedy.select", "greedy.histogram", "greedy.lift", "greedy.order",
    })),
    ("entry", frozenset({
        "api", "stream", "entry", "accountant", "assign", "bounds_api", "greedy.api",
        "diagnostics.theory", "diagnostics.separation", "diagnostics.plan",
    })),
    ("tools", frozenset({
        "", "__main__", "testing", "sklearn", "diagnostics", "diagnostics.explain", "cli", "eval", "synth",
        "synth.api", "synth.from_dpm", "greedy", "greedy.sklearn",
    })),
)  # fmt: skip
PACKAGES_IN_A_LAYER = {"cli": "tools", "eval": "tools"}  # every module under these


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of a dpm_jax module; KeyError for a module no layer names."""
    short = module.removeprefix("dpm_jax").removeprefix(".")
    for index, (name, members) in enumerate(LAYERS):
        if short in members or PACKAGES_IN_A_LAYER.get(short.split(".")[0]) == name:
            return index
    raise KeyError(f"{module} is in no layer of benchmarks/import_graph.py LAYERS")


def climbs(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """(importer, imported) for every import of a module in a higher layer than the importer's."""
    return sorted((a, b) for a, targets in graph.items() for b in targets if layer_of(b) > layer_of(a))


# Modules of the base and engine layers that users import by name (docs/scaling.md, README):
# their __all__ is public surface, not only what the package uses.
PUBLIC_LOW_MODULES = frozenset({"dpm_jax.cache", "dpm_jax.sharding"})


def exports(path: pathlib.Path) -> list[str] | None:
    """The names in a module's ``__all__`` (None when it has none)."""
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "__all__" for t in node.targets):
            return [element.value for element in node.value.elts]
    return None


class _Uses(NamedTuple):
    imported: frozenset[tuple[str, str, str]]  # (module, name, bound as) of every ``from module import name``
    attributes: frozenset[tuple[str, str]]  # (dotted value, attribute) of every ``a.b.attr``


@functools.lru_cache(maxsize=None)
def _uses(path: pathlib.Path) -> _Uses:
    imported, attributes = set(), set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            imported.update((node.module or "", a.name, a.asname or a.name) for a in node.names)
        elif isinstance(node, ast.Import):
            imported.update(("", a.name, a.asname or a.name) for a in node.names)
        elif isinstance(node, ast.Attribute) and isinstance(node.value, (ast.Name, ast.Attribute)):
            attributes.add((ast.unparse(node.value), node.attr))
    return _Uses(frozenset(imported), frozenset(attributes))


def used_names(target: str) -> set[str]:
    """Names of module ``target`` that other dpm_jax modules use: ``from target import name``, or
    ``alias.name`` where alias is ``target`` imported as a module."""
    parent, _, leaf = target.rpartition(".")
    used = set()
    for name, path in modules().items():
        if name == target:
            continue
        uses = _uses(path)
        used.update(imported for module, imported, _ in uses.imported if module == target)
        aliases = {target} | {
            bound for module, imported, bound in uses.imported if (module, imported) in {(parent, leaf), ("", target)}
        }
        used.update(attribute for value, attribute in uses.attributes if value in aliases)
    return used


def unused_exports() -> dict[str, list[str]]:
    """For every internal module (base and engine layers, less :data:`PUBLIC_LOW_MODULES`), the names
    of its ``__all__`` that no other module of the package uses."""
    found = {}
    for name, path in sorted(modules().items()):
        names = exports(path)
        if names is None or name in PUBLIC_LOW_MODULES or layer_of(name) > 1:
            continue
        unused = [export for export in names if export not in used_names(name)]
        if unused:
            found[name] = unused
    return found


def main() -> int:
    graph = package_graph()
    found = circles(graph)
    for component in found:
        print("circle:", " <-> ".join(component))
    unnamed = [m for m in graph if _unnamed(m)]
    for module in unnamed:
        print("in no layer:", module)
    up = [] if unnamed else climbs(graph)
    for importer, imported in up:
        print(
            f"climb: {importer} ({LAYERS[layer_of(importer)][0]}) imports {imported} ({LAYERS[layer_of(imported)][0]})"
        )
    unused = {} if unnamed else unused_exports()
    for module, names in unused.items():
        print(f"exported, used by no other module: {module}: {', '.join(names)}")
    if not (found or unnamed or up or unused):
        print(f"no import circle, no climb and no unused export among {len(graph)} modules in {len(LAYERS)} layers")
    return 1 if found or unnamed or up or unused else 0


def _unnamed(module: str) -> bool:
    try:
        layer_of(module)
    except KeyError:
        return True
    return False


if __name__ == "__main__":
    sys.exit(main())
