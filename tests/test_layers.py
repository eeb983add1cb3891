"""The package's import graph has no circle (benchmarks/import_graph.py), and importing it
pulls in neither test tooling nor scikit-learn."""

import pathlib
import subprocess
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]


def test_no_import_circle_among_the_packages_modules():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    try:
        import import_graph
    finally:
        sys.path.remove(str(ROOT / "benchmarks"))
    graph = import_graph.package_graph()
    assert import_graph.circles(graph) == []
    # the check finds a circle when there is one
    graph["dpm_jax.keys"] = graph["dpm_jax.keys"] | {"dpm_jax.api"}
    assert import_graph.circles(graph) != []


def test_import_pulls_in_no_test_tooling_and_no_scikit_learn():
    code = "import sys, dpm_jax; print(sorted(m for m in ('pytest', 'hypothesis', 'sklearn') if m in sys.modules))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip() == "[]"
