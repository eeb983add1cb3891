"""The accountant across calls (dpm_jax.accountant): basic composition, refusal before data is read."""

import json
import math

import jax
import pytest

import dpm_jax
from dpm_jax import Accountant, Budget, BudgetExceededError

pytestmark = pytest.mark.filterwarnings("ignore::dpm_jax.InsufficientBudgetWarning")


class Untouchable:
    """An array-like that fails the test if anyone reads it."""

    shape = (600, 3)

    def __array__(self, *args, **kwargs):
        raise AssertionError("the data was read")


def test_basic_composition_sums_epsilons_and_deltas_exactly():
    """Ten releases of epsilon 0.1 fit a total of 1.0 (math.fsum: exactly 1.0, not 0.9999999999999999 or
    1.0000000000000002); the eleventh is refused. A delta overrun is refused on its own."""
    acc = Accountant(Budget(1.0, 1e-5))
    for i in range(10):
        acc.spend(Budget(0.1, 1e-7), f"release {i}")
    assert acc.spent_epsilon == 1.0 and math.isclose(acc.spent_delta, 1e-6)
    with pytest.raises(BudgetExceededError, match="has epsilon = 0, "):
        acc.check(Budget(1e-9, 1e-9))
    deltas = Accountant(Budget(10.0, 2e-6))
    deltas.spend(Budget(1.0, 1.5e-6), "first")
    with pytest.raises(BudgetExceededError):
        deltas.spend(Budget(1.0, 1e-6), "second")
    assert len(deltas.charges) == 1  # a refused release is not charged


@pytest.mark.slow
def test_cluster_charges_and_is_refused_before_reading_the_data(small_blobs, key):
    # Long because: compiles the default clustering (11 s in the fast loop, 2 cores at load 9).
    acc = Accountant(Budget(2.5, 1e-5))
    with acc:
        first = dpm_jax.cluster(key, small_blobs.points, Budget(1.0, 1e-6), small_blobs.bounds)
        dpm_jax.cluster(key, small_blobs.points, Budget(1.0, 1e-6), small_blobs.bounds)
        with pytest.raises(BudgetExceededError, match="Nothing was read"):
            dpm_jax.cluster(key, Untouchable(), Budget(1.0, 1e-6), small_blobs.bounds)
    assert [c.what for c in acc.charges] == ["cluster", "cluster"]
    assert first.ledger.total_epsilon <= acc.charges[0].epsilon
    # outside the block nothing is charged
    dpm_jax.cluster(key, small_blobs.points, Budget(1.0, 1e-6), small_blobs.bounds)
    assert len(acc.charges) == 2


@pytest.mark.slow
def test_cluster_stream_and_fit_charge_too(small_blobs, key):
    # Long because: compiles cluster_stream and the estimator's fit (40 s, 2 cores at load 7).
    sklearn = pytest.importorskip("sklearn")  # noqa: F841
    from dpm_jax.sklearn import DPMClustering

    passes = []
    chunks = lambda: (passes.append(1), [small_blobs.points])[1]
    acc = Accountant(Budget(1.5, 1e-5))
    with acc:
        dpm_jax.cluster_stream(key, chunks, Budget(1.0, 1e-6), small_blobs.bounds)
        read = len(passes)
        with pytest.raises(BudgetExceededError):
            dpm_jax.cluster_stream(key, chunks, Budget(1.0, 1e-6), small_blobs.bounds)
        assert len(passes) == read  # refused before the first pass
        model = DPMClustering(epsilon=0.5, delta=1e-6, bounds=small_blobs.bounds, seed=0)
        model.fit(small_blobs.points)
        with pytest.raises(BudgetExceededError):
            model.fit(small_blobs.points)
    assert [c.what for c in acc.charges] == ["cluster_stream", "cluster"]
    assert acc.spent_epsilon == 1.5


def test_a_traced_call_inside_an_accountant_is_refused(small_blobs):
    acc = Accountant(Budget(100.0, 1e-3))
    run = jax.vmap(lambda k: dpm_jax.cluster(k, small_blobs.points, Budget(1.0, 1e-6), small_blobs.bounds).k)
    with acc, pytest.raises(ValueError, match="cannot count the releases"):
        run(jax.random.split(jax.random.key(0), 3))
    assert acc.charges == []


def test_the_state_file_round_trips_and_records_every_charge(tmp_path):
    path = tmp_path / "budget.json"
    acc = Accountant(Budget(1.0, 1e-6), path=path)
    acc.save(path)
    acc.spend(Budget(0.25, 1e-7), "cli")
    restored = Accountant.load(path)
    assert restored.total == acc.total and restored.charges == acc.charges
    assert json.loads(path.read_text())["charges"][0]["epsilon"] == 0.25
    restored.spend(Budget(0.75, 1e-7), "cli")
    with pytest.raises(BudgetExceededError):
        Accountant.load(path).spend(Budget(1e-3, 1e-9), "cli")
    path.write_text("{not json")
    with pytest.raises(ValueError, match="cannot read the accountant state file"):
        Accountant.load(path)
