"""dpm_jax.diagnostics: public per-level budget arithmetic, no data."""

import inspect
import dataclasses
import math
import pathlib
import warnings

import jax
import numpy as np
import pytest

import dpm_jax
from dpm_jax import diagnostics
from dpm_jax.budget import allocate


def test_plan_reads_no_data():
    """Only public numbers go in: the signature has no data argument."""
    assert list(inspect.signature(diagnostics.plan).parameters) == ["n", "d", "budget", "config"]


def test_levels_follow_the_allocation_and_lemma_5():
    budget, config = dpm_jax.Budget(1.0, 1e-6), dpm_jax.DPMConfig(tau_r=5)
    plan = diagnostics.plan(50_000, 4, budget, config)
    allocation = allocate(budget, config, 4)
    assert len(plan.levels) == config.tau_r
    slope = config.t / config.q + config.alpha
    for level in plan.levels:
        n_l = 50_000 / 2**level.level
        assert level.nodes == 2**level.level and level.node_size == n_l
        assert level.split_epsilon == allocation.split_epsilons[level.level]
        assert level.count_offset == allocation.count_offsets[level.level]
        assert math.isclose(level.score_sensitivity, slope / max(n_l - level.count_offset, 1.0))
        assert math.isclose(level.exponent_scale, level.split_epsilon / (2 * level.score_sensitivity))


def test_signal_shrinks_with_depth_and_grows_with_n_and_epsilon():
    small = diagnostics.plan(20_000, 2, dpm_jax.Budget(1.0, 1e-6))
    large = diagnostics.plan(200_000, 2, dpm_jax.Budget(1.0, 1e-6))
    richer = diagnostics.plan(20_000, 2, dpm_jax.Budget(10.0, 1e-6))
    scales = [level.exponent_scale for level in small.levels]
    assert scales[0] > scales[3]  # deeper nodes are smaller: less signal
    assert large.useful_depth >= small.useful_depth and richer.useful_depth >= small.useful_depth
    assert small.useful_depth < small.config.tau_r <= large.useful_depth
    # near random means: even the largest score gap cannot beat the other candidates
    for level in small.levels:
        assert level.near_random == (
            level.exponent_scale * (small.config.t + small.config.alpha) < math.log(small.candidates)
        )


def test_report_names_the_levels_and_recommends_a_depth():
    text = str(diagnostics.plan(20_000, 2, dpm_jax.Budget(1.0, 1e-6)))
    assert "near random" in text and "informative" in text and "tau_r = " in text
    assert "recommendation" in text


@pytest.mark.parametrize("n, d", [(0, 2), (-5, 2), (math.inf, 2), ("100", 2), (100, 0), (100, 2.5)])
def test_bad_public_sizes_are_rejected(n, d):
    with pytest.raises(ValueError):
        diagnostics.plan(n, d, dpm_jax.Budget(1.0, 1e-6))


def test_recommended_depth_is_the_deepest_fully_informative_one():
    budget = dpm_jax.Budget(1.0, 1e-6)
    best = diagnostics.recommended_tau_r(20_000, 2, budget)
    assert 1 <= best < 7  # the default depth starves this size (benchmarks/diagnostics.py)
    at_best = diagnostics.plan(20_000, 2, budget, dpm_jax.DPMConfig(tau_r=best))
    deeper = diagnostics.plan(20_000, 2, budget, dpm_jax.DPMConfig(tau_r=best + 1))
    assert at_best.useful_depth == best and deeper.useful_depth < best + 1
    assert diagnostics.recommended_tau_r(100, 2, dpm_jax.Budget(0.01, 1e-6)) == 0
    assert diagnostics.recommended_tau_r(10**7, 2, budget) >= 7


def _plan(n=100_000, epsilon=1.0, d=10, **config):
    """The plan of the default config with the paper's tau_e = n~ / 2**depth (leaf_slack=0: the
    halting models' numbers below and in docs/diagnostics.md), unless ``config`` says otherwise."""
    config = {"leaf_slack": 0} | config
    return diagnostics.plan(n, d, dpm_jax.Budget(epsilon, n**-1.5), dpm_jax.DPMConfig(**config))


@pytest.mark.parametrize(
    "alpha, depth, grid",
    [
        (1.0, 6, "paper"),
        (2.0, 6, "paper"),
        (5.0, 0, "paper"),
        (10.0, 0, "paper"),
        (5.0, 6, "cell"),
        (10.0, 5, "cell"),
        (20.0, 0, "cell"),
    ],
)
def test_one_gaussian_halting_depth(alpha, depth, grid):
    """Equation 21 with fresh dimensions. Paper's grid (beta = sigma / 2): 2**6 leaves at alpha 1 and 2, the
    root halts from alpha ~4.99 on. Cell grid with a window of one half-bin per side (as measured in
    docs/diagnostics.md), sd 5 % of the range: beta = range / 128 is narrower, the central split emptier
    (e_c(0) ~ .94), and the root halts only from alpha ~15.9 on."""
    window = dict(split_window=1) if grid == "cell" else {}
    halting = _plan(alpha=alpha, split_grid=grid, **window).single_cluster_halting()
    assert halting.depth == depth and halting.leaves == 2**depth
    assert halting.halts_at_root == (alpha > halting.alpha_needed_at_root)
    assert halting.depth == next((i for i, m in enumerate(halting.margins) if m > 0), 7)
    # all splits in one dimension (the paper's model): denser nodes, larger margins, never deeper
    assert halting.depth_one_dimension <= halting.depth
    assert all(a <= b + 1e-12 for a, b in zip(halting.margins, halting.margins_one_dimension))


def test_uniform_data_is_flagged_at_the_default_tau_e():
    default = _plan().uniform_halting()
    assert default.flagged and default.on_boundary and default.depth == 7
    # the default under "auto": tau_e = n~ / 2**min(depth + 1, max_depth), below the boundary at depth 6
    slack = _plan(n=20_000, leaf_slack=1).uniform_halting()
    assert slack.flagged and not slack.on_boundary
    assert _plan(leaf_slack=1).uniform_halting() == default  # at max_depth the paper's tau_e
    larger = _plan(tau_e=100_000 / 8).uniform_halting()  # children below tau_e after three halvings
    assert not larger.flagged and larger.depth == 3
    smaller = _plan(tau_e=100.0).uniform_halting()
    assert smaller.flagged and not smaller.on_boundary
    assert _plan(tau_e=0.0).uniform_halting().flagged  # every child is large enough
    assert _plan(tau_e=60_000.0).uniform_halting().depth == 0  # no child reaches tau_e: the root halts


def test_reliable_k_and_the_epsilon_it_needs_agree():
    plan = _plan(n=20_000)
    reliable = plan.max_reliable_k()
    assert plan.separates(reliable) and not plan.separates(reliable + 1)
    assert _plan(n=20_000, epsilon=5.0).max_reliable_k() > reliable
    needed = plan.min_n_epsilon(reliable + 1) / plan.n  # epsilon at which one more cluster is separated
    assert needed > plan.budget.epsilon
    at = lambda epsilon: plan._replace(budget=dpm_jax.Budget(epsilon, plan.budget.delta))
    assert at(needed * 1.001).separates(reliable + 1) and not at(needed * 0.99).separates(reliable + 1)
    assert plan.min_n_epsilon(1) == 0.0 and plan.min_n_epsilon(2**7 + 1) == math.inf


def test_alpha_window_is_where_the_separator_wins_by_the_margin():
    plan = _plan(n=1_000_000)
    xi, inside = 0.002, diagnostics.theory.central_emptiness(0)
    window = plan.alpha_window(xi)
    assert not window.empty and plan.config.alpha in window
    threshold = plan.root_threshold
    for alpha in np.linspace(0.1, 2 * window.high if math.isfinite(window.high) else 50, 400):
        separator = 1.0 + alpha * (1 - xi)
        wins = (
            separator >= threshold + alpha + window.margin - 1e-9
            and separator >= 1 + alpha * inside + window.margin - 1e-9
        )
        assert wins == (alpha in window), alpha
    assert _plan(n=2_000).alpha_window(xi).empty  # too little signal: no alpha separates with the margin
    plain = _plan(n=2_000).alpha_window(xi, margin=0.0)  # the paper's score comparison alone
    assert not plain.empty and plain.margin == 0.0
    with pytest.raises(ValueError):
        plan.alpha_window(1.5)


@pytest.mark.slow
def test_report_tells_when_two_clusters_cannot_be_separated():
    # Long because: compiles a starved clustering (12 s, 2 cores at load 10).
    starved = diagnostics.plan(1_000, 2, dpm_jax.Budget(1.0, 1e-6))
    assert starved.max_reliable_k() == 1
    assert "cannot separate even two clusters" in str(starved)
    assert "one Gaussian cluster: halts at the root" in str(_plan(split_grid="paper"))
    text = str(_plan())  # the cell grid and its split window, the defaults: the engine gives k = 1 there
    assert "one Gaussian cluster (sd 5 % of the range): halts at the root" in text and "uniform data" in text
    narrow = str(_plan(split_window=1))
    assert "one Gaussian cluster (sd 5 % of the range): splits into about 64 leaves" in narrow


def test_bad_budget_and_config_are_rejected():
    with pytest.raises(TypeError):
        diagnostics.plan(100, 2, (1.0, 1e-6))


def test_the_plan_of_an_automatic_depth_is_that_of_the_depth_it_picks():
    """tau_r='auto': the plan at the depth the rule picks for this n, on the budget its count leaves."""
    from dpm_jax.depth import depth_rule, plan_depth

    budget, auto = dpm_jax.Budget(1.0, 1e-6), dpm_jax.DPMConfig(tau_r="auto")
    remaining = plan_depth(budget, auto, 2).remaining
    for n in (500, 20_000, 10**6):
        depth = depth_rule(n, 2, remaining, auto)
        run_tau_e = n / 2 ** min(depth + auto.leaf_slack, auto.max_depth)  # the run's (DPMConfig.leaf_slack)
        run = dataclasses.replace(auto.at_depth(depth), tau_e=run_tau_e)
        assert diagnostics.plan(n, 2, budget, auto) == diagnostics.plan(n, 2, remaining, run)
    assert len(diagnostics.plan(500, 2, budget, auto).levels) < len(diagnostics.plan(10**6, 2, budget, auto).levels)


def test_warns_exactly_when_two_clusters_cannot_be_separated():
    budget = dpm_jax.Budget(1.0, 1e-6)
    FIXED = dpm_jax.DPMConfig(tau_r=7)  # a fixed depth: the boundary below moves with the budget under "auto"
    with pytest.warns(diagnostics.InsufficientBudgetWarning, match="cannot separate even two clusters"):
        assert diagnostics.warn_if_insufficient(1_000, 2, budget, FIXED, "the declared size n")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not diagnostics.warn_if_insufficient(100_000, 2, budget, FIXED, "the declared size n")
    # the boundary is plan's: two clusters are separated from min_n_epsilon(2) on
    epsilon = diagnostics.plan(2_000, 2, budget, FIXED).min_n_epsilon(2) / 2_000
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert not diagnostics.warn_if_insufficient(
            2_000, 2, dpm_jax.Budget(epsilon * 1.01, 1e-6), FIXED, "the declared size n"
        )
    with pytest.warns(diagnostics.InsufficientBudgetWarning):
        diagnostics.warn_if_insufficient(2_000, 2, dpm_jax.Budget(epsilon * 0.99, 1e-6), FIXED, "the declared size n")


def test_the_cell_grids_halting_needs_a_public_spread():
    cell = _plan(split_grid="cell", split_window=1)
    assert cell.single_cluster_halting(sigma=0.05).alpha_needed_at_root > 15
    # the default window (6 half-bins per side) holds more of the cluster: the root halts from alpha ~2.7
    assert 2 < _plan(split_grid="cell").single_cluster_halting(sigma=0.05).alpha_needed_at_root < 5
    wide, narrow = cell.single_cluster_halting(sigma=0.2), cell.single_cluster_halting(sigma=0.01)
    assert wide.alpha_needed_at_root > narrow.alpha_needed_at_root  # a wider cluster: emptier central split
    paper = _plan(split_grid="paper")  # beta follows sigma there: the guess does not matter
    assert paper.single_cluster_halting(sigma=0.2) == paper.single_cluster_halting(sigma=0.01)
    with pytest.raises(ValueError):
        cell.single_cluster_halting(sigma=0.0)


@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::dpm_jax.InsufficientBudgetWarning")
def test_single_cluster_prediction_matches_the_default_engine():
    """One Gaussian (sd 5 % of the range, 20,000 points, epsilon = 1): the plan of the default engine
    (cell grid, split window 6, automatic depth) predicts that the root halts (k = 1), and with a window
    of one half-bin per side that the tree splits to depth 5. Measured on keys 0-2, the median log2 k
    must be within 1 level of the predicted depth (the tolerance docs/diagnostics.md states); measured
    when written: k = 1, 1, 1 and 19, 24, 24 (log2 4.6 against 5). The halting model assumes the
    paper's tau_e = n~ / 2**depth (leaf_slack=0, as the other halting-model tests): with the leaf
    slack it predicts 6 against a measured log2 k of 4.7 (k = 20, 28, 26), a gap the model does not
    yet cover."""
    n, d = 20_000, 2
    points = np.random.default_rng(0).normal(0.0, 10.0, (n, d))
    budget = dpm_jax.Budget(1.0, 1e-6)
    for config in (dpm_jax.DPMConfig(leaf_slack=0), dpm_jax.DPMConfig(split_window=1, leaf_slack=0)):
        predicted = diagnostics.plan(n, d, budget, config).single_cluster_halting()
        ks = [
            int(dpm_jax.cluster(jax.random.key(s), points, budget, (-100.0, 100.0), config=config).k) for s in range(3)
        ]
        assert abs(np.log2(np.median(ks)) - predicted.depth) <= 1.0, (config.split_window, predicted.depth, ks)
    assert diagnostics.plan(n, d, budget).single_cluster_halting().halts_at_root


def test_readme_and_docs_state_the_plans_numbers():
    """The numbers quoted in README.md and docs/diagnostics.md are what plan gives (n = 20,000, d = 10)."""
    root = pathlib.Path(__file__).resolve().parents[1]
    p = diagnostics.plan(n=20_000, d=10, budget=dpm_jax.Budget(1.0, 1e-6))
    window, halting = p.alpha_window(xi=0.002), p.single_cluster_halting()
    common = [
        f"{round(p.min_n_epsilon(64), -3):,.0f}",
        f"{'1 leaf' if halting.leaves == 1 else f'{halting.leaves} leaves'}",
        f"alpha {halting.alpha_needed_at_root:.3g}",
        f"({window.low:.3g} .. {window.high:.4g})",
    ]
    quoted = {"README.md": f"(here {p.max_reliable_k()})", "docs/diagnostics.md": f"# {p.max_reliable_k()}:"}
    for name, reliable in quoted.items():
        text = (root / name).read_text()
        for fragment in [reliable, *common]:
            assert fragment in text, (name, fragment)
