"""benchmarks/mutations.py stays applicable: every pattern still names one place in the code, every
designed test still exists. A refactor that moves a mutated line otherwise turns its mutation into a
crash of the mutation run (or, before the run checked, into a silent no-op)."""

import importlib
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from mutations import _FAILURES_PLUGIN, MUTATIONS, RELEASE_MUTATIONS, classify_failures, transform_of  # noqa: E402


@pytest.mark.parametrize("mutation", MUTATIONS, ids=lambda m: m.name[:60])
def test_every_pattern_occurs_exactly_once(mutation):
    changes = [(mutation.file, old) for old, _ in mutation.replacements] + [(f, o) for f, o, _ in mutation.extra]
    for file, old in changes:
        assert (ROOT / file).read_text().count(old) == 1, f"{old!r} in {file}"


@pytest.mark.parametrize("mutation", MUTATIONS + RELEASE_MUTATIONS, ids=lambda m: m.name[:60])
def test_every_designed_test_exists(mutation):
    assert mutation.tests
    for node in mutation.tests:
        file, _, name = node.partition("::")
        function = re.sub(r"\[.*\]$", "", name)
        assert re.search(rf"^def {re.escape(function)}\(", (ROOT / file).read_text(), re.M), node


def _builder_examples():
    """Real, cheap calls of every builder a ReleaseMutation wraps (args, kwargs): enough of them
    that every transform has a release to change (the interval needs the paper grid, the
    structure tests and the merge the cell grid, the selection's sensitivity the "exponential" method, ...)."""
    from dpm_jax import Budget, DPMConfig, PrivateBounds
    from dpm_jax.averaging import leaf_sums_release
    from dpm_jax.budget import allocate
    from dpm_jax.greedy.nets import NetPlan
    from dpm_jax.synth.plan import SynthConfig

    budget = Budget(1.0, 1e-6)
    configs = (DPMConfig(tau_r=3), DPMConfig(split_grid="paper", tau_r=3), DPMConfig(tau_r=3, merge_share=0.1))

    def dpm_call(config):
        allocation = allocate(budget, config, 2)
        return (allocation, config, 2, leaf_sums_release(allocation.average_epsilon, allocation.average_delta, 2))

    return {
        "dpm_jax.dpm_releases:dpm_releases": [dpm_call(c) for c in configs],
        "dpm_jax.budget:allocate": [(budget, c, 2) for c in configs],
        "dpm_jax.greedy.api:plan_greedy": [(budget, 4, 2, 2, 6, 2, 0, m) for m in ("exponential", "histogram")],
        "dpm_jax.greedy.histogram:histogram_release": [(0.6, 4e-7, NetPlan(2, 6, 3, 2))],
        "dpm_jax.synth.plan:plan_synthesis": [
            (budget, SynthConfig(decisions=4, max_rows=300), m, 2) for m in ("grid", "kdtree", "privtree", "refine")
        ],
        "dpm_jax.bounds:plan_bounds": [(budget, 2, PrivateBounds(noise=n)) for n in ("laplace", "gaussian")],
        "dpm_jax.bounds:split_for_bounds": [(budget, PrivateBounds(), 2)],
    }


@pytest.mark.parametrize("mutation", RELEASE_MUTATIONS, ids=lambda m: m.name[:60])
def test_every_release_mutation_wraps_an_importable_builder_and_changes_a_real_release(mutation):
    """A renamed or moved builder fails here (not silently at mutation time), and every transform
    evaluates against real outputs of its builder and changes at least one of them."""
    builder = getattr(importlib.import_module(mutation.module), mutation.function, None)
    assert callable(builder), f"{mutation.builder} is not a function of the engine"
    calls = _builder_examples()[mutation.builder]
    transform = transform_of(mutation)
    changed = 0
    for args in calls:
        output = builder(*args)
        broken = transform(output, *args) if mutation.with_arguments else transform(output)
        assert type(broken) is type(output)
        changed += broken != output
    assert changed, f"{mutation.name}: the transform changes none of {mutation.builder}'s example outputs"


def test_a_mutation_counts_as_caught_only_by_a_failed_assertion(tmp_path):
    """The failures plugin, run by pytest on four tiny tests: a failed assert and a pytest.raises
    that did not raise are catches; a NameError (a mutation that no longer fits the code) and a
    fixture error are only crashes; a passing test is neither."""
    (tmp_path / "test_kinds.py").write_text(
        "import pytest\n"
        "def test_assertion():\n    assert 1 == 2\n"
        "def test_did_not_raise():\n    with pytest.raises(ValueError):\n        pass\n"
        "def test_crash():\n    tau_r\n"
        "@pytest.fixture\ndef broken():\n    raise TypeError('no')\n"
        "def test_setup(broken):\n    pass\n"
        "def test_passes():\n    pass\n"
    )
    (tmp_path / "_failures_plugin.py").write_text(_FAILURES_PLUGIN)
    failures = tmp_path / "failures.jsonl"
    env = {"PATH": "", "PYTHONPATH": str(tmp_path), "DPM_MUTATION_FAILURES": str(failures)}
    command = [sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", "-p", "_failures_plugin"]
    subprocess.run([*command, "test_kinds.py"], cwd=tmp_path, env=env, capture_output=True, check=False)
    caught, crashed = classify_failures(failures.read_text().splitlines())
    assert caught == ["test_kinds.py::test_assertion", "test_kinds.py::test_did_not_raise"]
    assert crashed == ["test_kinds.py::test_crash (call: NameError)", "test_kinds.py::test_setup (setup: TypeError)"]
