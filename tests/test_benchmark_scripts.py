"""Every script in benchmarks/ still starts: it imports and its command line parses.

No test runs the benchmarks themselves (they take minutes to hours), so a script that imports
a name the package no longer has, or whose parser no longer builds, would go unseen until
someone re-runs it for a table: ``benchmarks/selection.py`` did, for a whole stop. Here every
script is imported as a module (which runs its top level and imports) and its ``main`` is
called with ``--help``, which builds the parser and exits 0 without running anything.
"""

import contextlib
import importlib.util
import inspect
import io
import sys
from pathlib import Path

import pytest

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
SCRIPTS = sorted(path.stem for path in BENCHMARKS.glob("*.py"))
# Scripts without a command line of their own: the worker helper shared by the A/B scripts, and
# the import graph check (no options; tests/test_layers.py runs it).
NO_COMMAND_LINE = {"workers", "import_graph"}


def _load(name: str):
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))  # the scripts import their siblings (workers) by name
    spec = importlib.util.spec_from_file_location(f"benchmark_script_{name}", BENCHMARKS / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up while the script runs
    spec.loader.exec_module(module)
    return module


def test_the_scripts_are_found():
    assert {"table2", "zoo", "mutations", "scale", "synth_kdtree", "greedy"} <= set(SCRIPTS)


@pytest.mark.parametrize("name", SCRIPTS)
def test_every_benchmark_script_imports_and_its_help_parses(name):
    module = _load(name)
    if name in NO_COMMAND_LINE:
        return
    main = module.main
    assert "argv" in inspect.signature(main).parameters, f"benchmarks/{name}.py: main should take argv"
    out = io.StringIO()
    with contextlib.redirect_stdout(out), pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0, f"benchmarks/{name}.py --help exited with {exit_info.value.code}"
    assert "usage:" in out.getvalue()
