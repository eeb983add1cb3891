"""The package's import graph has no circle and no import from a lower layer to a higher one
(benchmarks/import_graph.py LAYERS), importing it pulls in neither test tooling nor scikit-learn, and
no function of it is longer than 80 lines."""

import ast
import pathlib
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]


def _import_graph():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import import_graph
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    return import_graph


def test_no_import_circle_among_the_packages_modules():
    import_graph = _import_graph()
    graph = import_graph.package_graph()
    assert import_graph.circles(graph) == []
    # the check finds a circle when there is one
    graph["dpm_jax.keys"] = graph["dpm_jax.keys"] | {"dpm_jax.api"}
    assert import_graph.circles(graph) != []


def test_every_module_has_a_layer_and_none_imports_from_a_higher_one():
    import_graph = _import_graph()
    graph = import_graph.package_graph()
    layers = {module: import_graph.layer_of(module) for module in graph}  # KeyError: a module in no layer
    assert [layers[m] for m in ("dpm_jax.exact", "dpm_jax.tree", "dpm_jax.api", "dpm_jax.cli.main")] == [0, 1, 2, 3]
    assert import_graph.climbs(graph) == []
    # the check finds a climb when there is one: the engine reading the report module, the base reading the engine
    graph["dpm_jax.tree"] = graph["dpm_jax.tree"] | {"dpm_jax.diagnostics.explain"}
    graph["dpm_jax.budget"] = graph["dpm_jax.budget"] | {"dpm_jax.depth"}
    assert import_graph.climbs(graph) == [
        ("dpm_jax.budget", "dpm_jax.depth"),
        ("dpm_jax.tree", "dpm_jax.diagnostics.explain"),
    ]
    with pytest.raises(KeyError, match="in no layer"):
        import_graph.layer_of("dpm_jax.new_module")


def test_import_pulls_in_no_test_tooling_and_no_scikit_learn():
    code = "import sys, dpm_jax; print(sorted(m for m in ('pytest', 'hypothesis', 'sklearn') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"


def test_internal_modules_export_only_what_other_modules_use():
    import_graph = _import_graph()
    assert import_graph.unused_exports() == {}
    # the check sees a use through either import form, and none where there is none
    assert {"Budget", "allocate"} <= import_graph.used_names("dpm_jax.budget")  # from dpm_jax.budget import ...
    assert "derive_key" in import_graph.used_names("dpm_jax.keys")
    assert "to_float32" in import_graph.used_names("dpm_jax.exact")  # exact.to_float32 after from dpm_jax import exact
    assert "widen" not in import_graph.used_names("dpm_jax.exact")


def test_no_function_of_the_package_is_longer_than_80_lines():
    # Issue 22's invariant: functions short enough to hold in one's head (docstrings included).
    package = ROOT / "dpm_jax"
    long = [
        f"{path.relative_to(package)}:{node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path in sorted(package.rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno + 1 > 80
    ]
    assert not long, long
