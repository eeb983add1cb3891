"""Budget allocation and the ledger (Algorithm 1 lines 4-6, Equation 2, Theorem 1)."""

import math
import re

import numpy as np
import pytest

import dpm_jax
from dpm_jax import Budget, DPMConfig
from dpm_jax.averaging import leaf_sums_release
from dpm_jax.scoring import score_coefficients
from dpm_jax.dpm_releases import dpm_releases
from dpm_jax.budget import allocate, heap_count_epsilons, level_weights
from dpm_jax.interval import utility_sensitivity
from dpm_jax.mechanisms import EM_EPSILON_MARGIN, count_offset, count_sampler_tv, em_sampler_tv
from conftest import USERS_COMPILER_OPTIONS

D = 10


def ledger_of(budget, config, d=D):
    allocation = allocate(budget, config, d)
    averaging = leaf_sums_release(allocation.average_epsilon, allocation.average_delta, d)
    return allocation, dpm_releases(allocation, config, d, averaging).ledger()


CONFIGS = [
    DPMConfig(tau_r=7),
    DPMConfig(split_grid="paper", tau_r=7),
    DPMConfig(tau_r=1),
    DPMConfig(tau_r=3, epsilon_shares=(0.1, 0.3, 0.3, 0.3), delta_shares=(0.5, 0.5)),
    DPMConfig(tau_r=10, epsilon_shares=(0.01, 0.09, 0.4, 0.5)),
]
BUDGETS = [Budget(1.0, 1e-6), Budget(0.1, 1e-9), Budget(7.3, 0.01), Budget(1e-2, 0.5)]


@pytest.mark.parametrize("config", CONFIGS)
@pytest.mark.parametrize("budget", BUDGETS)
def test_ledger_adds_up_exactly_to_the_budget(config, budget):
    allocation, ledger = ledger_of(budget, config)
    assert math.isclose(ledger.total_epsilon, budget.epsilon, rel_tol=1e-12)
    assert math.isclose(ledger.total_delta, budget.delta, rel_tol=1e-12)
    # one count entry per count level (tau_r + 1), one split entry per split level (tau_r)
    names = [e.name for e in ledger]
    assert sum(n.startswith("count/") for n in names) == config.tau_r + 1
    assert sum(n.startswith("split/") for n in names) == config.tau_r
    assert names.count("interval_size") == (config.split_grid == "paper") and names.count("leaf_sums") == 1
    # every entry's sampler share is inside its own epsilon / delta
    for entry in ledger:
        assert 0 <= entry.sampler_epsilon < entry.epsilon and 0 <= entry.sampler_delta <= entry.delta


@pytest.mark.slow
def test_float_rounding_never_makes_the_ledger_spend_more_than_the_budget():
    # Long because: 300 allocations and their ledgers (18 s, 2 cores at load 10).
    """Over many budgets (where the parts' rounding goes up as often as down) the ledger's lines,
    summed exactly, never exceed the budget and fall short of it by at most a few ulps: the
    averaging takes what is left, rounded down (budget.allocate)."""
    rng = np.random.default_rng(0)
    for epsilon, delta in zip(rng.uniform(0.05, 3.0, 150), 10.0 ** rng.uniform(-7, -3, 150)):
        budget = Budget(float(epsilon), float(delta))
        for config in (DPMConfig(tau_r=7), DPMConfig(tau_r=4, split_grid="paper")):
            _, ledger = ledger_of(budget, config)
            assert ledger.total_epsilon <= budget.epsilon and ledger.total_delta <= budget.delta
            assert ledger.total_epsilon >= budget.epsilon * (1 - 1e-14)
            assert ledger.total_delta >= budget.delta * (1 - 1e-14)


@pytest.mark.parametrize("config", CONFIGS)
def test_shares_and_per_level_weights(config):
    budget = Budget(2.0, 1e-5)
    a = allocate(budget, config, D)
    eps_int, eps_cnt, eps_exp, eps_avg = (budget.epsilon * s for s in config.epsilon_shares)
    if config.split_grid == "cell":  # no interval size: its share goes to the split choices
        eps_int, eps_exp = 0.0, eps_int + eps_exp
    eps_str = eps_avg * config.structure_share if config.tests_structure else 0.0  # from the averaging
    eps_merge = eps_avg * config.merge_share if config.merges_leaves else 0.0  # from the averaging too
    eps_avg -= eps_str + eps_merge
    assert math.isclose(math.fsum(a.structure_epsilons), eps_str, rel_tol=1e-12)
    assert math.isclose(math.fsum(a.merge_epsilons), eps_merge, rel_tol=1e-12)
    assert math.isclose(a.interval_epsilon, eps_int)
    assert math.isclose(math.fsum(a.count_epsilons), eps_cnt, rel_tol=1e-12)
    assert math.isclose(math.fsum(a.split_epsilons), eps_exp, rel_tol=1e-12)
    assert math.isclose(a.average_epsilon, eps_avg, rel_tol=1e-12)
    # Equation 2: eps_i proportional to sqrt(2**i), so consecutive ratios are sqrt(2); the
    # "no structure" tests halve per level (their theta does: the root must get the most).
    for parts, ratio in (
        (a.count_epsilons, math.sqrt(2)),
        (a.split_epsilons, math.sqrt(2)),
        (a.structure_epsilons, 0.5),
    ):
        for low, high in zip(parts, parts[1:]):
            assert math.isclose(high / low, ratio, rel_tol=1e-9)
    # the merge's grow as l + 1 (its deeper statistics decide as much as its root's)
    for level, part in enumerate(a.merge_epsilons):
        assert math.isclose(part / a.merge_epsilons[0], level + 1, rel_tol=1e-9)
    # delta: 0.2 for the counts (the offsets, split evenly over the tau_r + 1 count
    # levels, plus every exact sampler's delta), 0.8 for the averaging.
    samplers = math.fsum(
        a.count_sampler_deltas
        + a.split_sampler_deltas
        + (a.interval_sampler_delta,)
        + a.structure_sampler_deltas
        + a.merge_sampler_deltas
    )
    assert math.isclose(math.fsum(a.count_deltas) + samplers, budget.delta * config.delta_shares[0], rel_tol=1e-12)
    assert len(set(a.count_deltas)) <= 2  # equal parts (the last absorbs rounding)
    # the sampler deltas are the proven total-variation bounds times (1 + e^epsilon)
    for delta, e in zip(a.count_sampler_deltas, a.count_epsilons):
        assert delta == count_sampler_tv(e) * (1 + math.exp(e))
    for delta, e in zip(a.split_sampler_deltas, a.split_epsilons):
        assert delta == em_sampler_tv(D * config.candidates_per_dim) * (1 + math.exp(e))
    for delta, e in zip(a.merge_sampler_deltas, a.merge_epsilons):  # sensitivity 2: two draws' worth at e / 2
        assert math.isclose(delta, 2 * count_sampler_tv(e / 2) * (1 + math.exp(e)), rel_tol=1e-12)
    assert math.isclose(a.average_delta, budget.delta * config.delta_shares[1])
    # Equation 1 offsets, through the count mechanism's own offset rule.
    for offset, e, d in zip(a.count_offsets, a.count_epsilons, a.count_deltas):
        assert offset == count_offset(e, d) and offset > 0


def test_level_weights_double_every_two_levels():
    for levels in (1, 2, 8, 17):
        weights = level_weights(levels)
        assert len(weights) == levels and weights[0] == 1.0
        assert all(math.isclose(w**2, 2.0**i) for i, w in enumerate(weights))


def test_heap_count_epsilons_follow_the_levels():
    config = DPMConfig(tau_r=3)
    a = allocate(Budget(1.0, 1e-6), config, D)
    per_node = heap_count_epsilons(a)
    assert len(per_node) == 2 ** (config.tau_r + 1)
    for node in range(1, len(per_node)):
        assert per_node[node] == a.count_epsilons[node.bit_length() - 1]


@pytest.mark.parametrize(
    "epsilon, delta, error",
    [
        (0.0, 1e-6, ValueError),
        (-1.0, 1e-6, ValueError),
        (1.0, 0.0, ValueError),
        (1.0, 1.0, ValueError),
        (float("inf"), 1e-6, ValueError),
        (float("nan"), 1e-6, ValueError),
        ("1", 1e-6, TypeError),
        (1.0, None, TypeError),
    ],
)
def test_invalid_budget(epsilon, delta, error):
    with pytest.raises(error):
        Budget(epsilon, delta)


def test_ledger_table_and_dicts():
    config = DPMConfig(tau_r=2, split_grid="paper")
    allocation, ledger = ledger_of(Budget(1.0, 1e-6), config)
    text = ledger.table()
    assert "leaf_sums" in text and "split/level1" in text and "total" in text
    rows = ledger.to_dicts()
    assert math.isclose(sum(r["epsilon"] for r in rows), 1.0)
    averaging = leaf_sums_release(allocation.average_epsilon, allocation.average_delta, D)
    assert rows[-1]["noise_scale"] == averaging.sigma and rows[-1]["sensitivity"] == averaging.sensitivity
    split_sensitivity = score_coefficients(config.t, config.q, config.alpha).sensitivity
    assert rows[2]["sensitivity"] == split_sensitivity and rows[2]["sampler_epsilon"] == EM_EPSILON_MARGIN
    # Lemma 1, d' = D: 2 D gap counts, stated in the integer utility's units of 2**-10 it draws with
    assert rows[1]["sensitivity"] == utility_sensitivity(D) == 2 * D * 2**10 and "2**-10" in rows[1]["sensitivity_rule"]
    # key paths name the stream and the heap rows each line's noise is drawn from
    assert [r["key_path"] for r in rows[:4]] == [
        ["count", "heap[1]"],
        ["interval"],
        ["split", "heap[1]"],
        ["count", "heap[2:4]"],
    ]
    assert isinstance(ledger, dpm_jax.Ledger)


@pytest.mark.parametrize(
    "budget, config, message",
    [
        # per-level count epsilons near 45: e^epsilon times the sampler's deviation is not small
        (Budget(1000.0, 1e-6), DPMConfig(tau_r=1), "degenerate budget"),
        # split epsilons per level below the exact sampler's margin
        (Budget(1e-5, 1e-6), DPMConfig(tau_r=7), "too small for the exact"),
        (Budget(1.0, 1e-6), DPMConfig(tau_r=7, max_splits_per_dim=128), "split candidates per node"),
    ],
)
def test_degenerate_budgets_are_refused(budget, config, message):
    d = 4096 if "candidates" in message else D
    with pytest.raises(ValueError, match=message):
        allocate(budget, config, d)


def test_a_delta_too_small_for_the_samplers_is_refused_with_the_least_delta_that_works():
    # 10^7 x 100 at the DPM paper's delta 1/(n sqrt n) = 3.2e-11 (found by benchmarks/accelerator.py)
    config = DPMConfig(tau_r=7)
    with pytest.raises(ValueError, match="raise delta to at least") as refused:
        allocate(Budget(1.0, 3.2e-11), config, 100)
    least = float(re.search(r"at least ([0-9.e+-]+),", str(refused.value)).group(1))
    allocate(Budget(1.0, least), config, 100)  # the delta as printed is enough
    with pytest.raises(ValueError, match="degenerate budget"):
        allocate(Budget(1.0, least * 0.98), config, 100)  # and it is within 2 % of the least


@pytest.mark.slow
def test_the_noise_actually_added_has_the_ledgers_scales():
    # Long because: 4,000 keys, for a spread test with a stated error rate (~11 s).
    """Over 4,000 keys on fixed data and a fixed one-leaf tree, the released root count
    and the released centre spread as the ledger's entries say: Var Z = 2r/(1-r)^2 with
    r = e^-epsilon of count/level0, and the centre's standard deviation is the leaf_sums
    sigma (in units of 2**s codes) times 2**s / 2**20 of the range, over the leaf's size.
    Tolerances: 15% on the variance and 6% on the standard deviation are more than 5
    standard errors (false-failure probability < 1e-6); halving a scale changes them by
    a factor 4 or 2."""
    import jax
    import numpy as np

    rng = np.random.default_rng(0)
    n, d = 2000, 2
    points = rng.uniform(-1, 1, (n, d)).astype(np.float32)
    budget, config = Budget(1.0, 1e-6), DPMConfig(tau_r=1, tau_e=1e9)
    keys = jax.random.split(jax.random.key(9), 4000)
    one = lambda k: dpm_jax.cluster(k, points, budget, bounds=(-1.0, 1.0), config=config)  # noqa: E731
    results = jax.jit(jax.vmap(one), compiler_options=USERS_COMPILER_OPTIONS)(keys)  # run-bound: XLA's defaults
    ledger = results.ledger
    entries = {e.name: e for e in ledger}
    root_noise = np.asarray(results.tree.noisy_count[:, 1], np.float64) - n
    r = math.exp(-entries["count/level0"].epsilon)
    assert entries["count/level0"].noise_scale == 1 / entries["count/level0"].epsilon
    assert abs(root_noise.var() / (2 * r / (1 - r) ** 2) - 1) < 0.15
    slot = int(np.argmax(np.asarray(results.valid[0])))
    centres = np.asarray(results.centers[:, slot, 0], np.float64)
    averaging = leaf_sums_release(
        allocate(budget, config, d).average_epsilon, allocate(budget, config, d).average_delta, d
    )
    leaf = entries["leaf_sums"]
    assert leaf.noise_scale == averaging.sigma
    expected_std = leaf.noise_scale * 2.0**averaging.coarse_shift / 2**20 * 2.0 / n  # range 2
    assert abs(centres.std() / expected_std - 1) < 0.06


def test_the_cell_grid_gives_the_interval_share_to_the_split_choices():
    budget = Budget(1.0, 1e-6)
    paper = allocate(budget, DPMConfig(split_grid="paper", tau_r=7), D)
    cell, ledger = ledger_of(budget, DPMConfig(split_grid="cell", tau_r=7))
    assert cell.interval_epsilon == 0.0 and cell.interval_sampler_delta == 0.0
    assert math.isclose(
        math.fsum(cell.split_epsilons), math.fsum(paper.split_epsilons) + paper.interval_epsilon, rel_tol=1e-12
    )
    assert cell.count_epsilons == paper.count_epsilons
    # the paper's grid runs no structure test and no merge; the cell grid's take their shares from the averaging
    taken = math.fsum(cell.structure_epsilons + cell.merge_epsilons)
    assert math.isclose(cell.average_epsilon + taken, paper.average_epsilon, rel_tol=1e-12)
    assert not any(entry.name == "interval_size" for entry in ledger)
