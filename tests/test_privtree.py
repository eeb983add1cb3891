"""The "privtree" synthesis: PrivTree's biased-count decisions, discrete (dpm_jax.synth.privtree)."""

import itertools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from dpm_jax import keys
from dpm_jax.budget import Budget
from dpm_jax.mechanisms import count_noise
from dpm_jax.synth.api import synthesize
from dpm_jax.synth.cells import cell_boxes, cell_codes
from dpm_jax.synth.kdtree import decision_capacities
from dpm_jax.synth.plan import SynthConfig, plan_synthesis
from dpm_jax.synth.privtree import calibrate, clamp_gap, privacy_loss, split_probability
from conftest import USERS_COMPILER_OPTIONS

BOUNDS = (0.0, 16.0)


def _blobs(n_per=400, seed=0):
    rng = np.random.default_rng(seed)
    centres = np.array([[3.0, 3.0], [12.0, 11.0], [4.0, 13.0]])
    sizes = (n_per, n_per // 2, n_per // 4)
    return np.concatenate([rng.normal(c, 0.8, (m, 2)) for c, m in zip(centres, sizes)]).astype(np.float32)


# --- the privacy statement itself, on every tree of a small domain -------------------------


def _trees(counts, depth, index, levels, split):
    """All trees below node (depth, index) of a 1-D binary domain: [(shape, probability)]."""
    width = len(counts) >> depth
    count = int(counts[index * width : (index + 1) * width].sum())
    if depth == levels:
        return [("leaf", 1.0)]
    p = float(split(count, depth))
    out = [("leaf", 1.0 - p)] if p < 1.0 else []
    if p > 0.0:
        left = _trees(counts, depth + 1, 2 * index, levels, split)
        right = _trees(counts, depth + 1, 2 * index + 1, levels, split)
        out += [((a, b), p * pa * pb) for (a, pa), (b, pb) in itertools.product(left, right)]
    return out


def _worst(counts_a, counts_b, levels, split):
    """(max ln P_B(T) / P_A(T) over T with P_A(T) > 0, P_B[T with P_A(T) = 0])."""
    a = dict(_trees(counts_a, 0, 0, levels, split))
    b = dict(_trees(counts_b, 0, 0, levels, split))
    loss, lost = -math.inf, 0.0
    for shape, pb in b.items():
        pa = a.get(shape, 0.0)
        if pa > 0.0:
            loss = max(loss, math.log(pb / pa)) if pb > 0 else loss
        else:
            lost += pb
    return loss, lost


@pytest.mark.parametrize("gap_levels", [1, 2, 3])
def test_loss_bound_covers_every_tree_on_small_domains(gap_levels):
    """Exhaustive check of docs/privacy.md's theorem on a 1-D domain with 4 decision levels
    (677 trees): for data sets A and B = A plus or minus one record, every tree's log-ratio
    is at most privacy_loss(alpha, kappa, bias), and the trees impossible under A (a split
    of an empty cell) have probability at most P[Z >= kappa] under B. 300 random count
    vectors around the thresholds plus the worst case, where the bound's first 4 terms are
    met exactly (the bound is not loose where a path can reach)."""
    alpha, levels = 0.6, 4
    kappa = clamp_gap(alpha, 0.02)
    bias, theta = -(-kappa // gap_levels), kappa + 1
    claim = privacy_loss(alpha, kappa, bias)
    tail = math.exp(-alpha * kappa) / (1 + math.exp(-alpha))
    assert tail <= 0.02 and claim >= alpha

    def split(count, depth):
        return split_probability(count, depth, alpha, kappa, bias, theta)

    rng = np.random.default_rng(0)
    cases = []
    for _ in range(300):
        counts = rng.poisson(rng.uniform(0.2, (theta + levels * bias) / 4), 16)
        counts[rng.random(16) < 0.4] = 0
        cell = rng.integers(16)
        plus = counts.copy()
        plus[cell] += 1
        cases += [(counts, plus), (plus, counts)]
    for counts_a, counts_b in cases:
        loss, lost = _worst(counts_a, counts_b, levels, split)
        assert loss <= claim + 1e-9
        assert lost <= tail * (1 + 1e-9)
    # The worst path: one cell holding theta - kappa + (levels - 1) bias records, B one more.
    counts = np.zeros(16, int)
    counts[5] = theta - kappa + (levels - 1) * bias
    plus = counts.copy()
    plus[5] += 1
    loss, _ = _worst(counts, plus, levels, split)
    first = sum(math.log(split(counts[5] + 1, i) / split(counts[5], i)) for i in range(levels))
    assert loss == pytest.approx(first, rel=1e-9)
    assert first >= 0.9 * claim  # the series is dominated by its first terms


def test_calibration_states_its_bound_and_the_one_point_delta():
    """The calibrated release's epsilon covers the bound, its delta the one-point cell's split
    (and the sampler), and its alpha is the largest such up to the integer roundings. A record alone
    in a cell sits on the clamp at every depth (theta = kappa + 1): it splits with probability
    P[Z >= kappa], the delta charged for it (with theta = kappa it would split more often)."""
    for epsilon, gap_levels in ((1.2, 4), (0.3, 1), (0.015, 2)):  # 1.2 first: it calibrates even when theta = kappa
        release = calibrate("t", "s", epsilon, 1e-6, 12, gap_levels)
        assert privacy_loss(release.alpha, release.kappa, release.bias) <= epsilon
        one_point = split_probability(1, np.arange(12), release.alpha, release.kappa, release.bias, release.theta)
        r = np.exp(-release.alpha)
        np.testing.assert_allclose(one_point, r**release.kappa / (1 + r), rtol=1e-12)
        assert one_point.max() <= release.offset_delta
        assert release.offset_delta + release.sampler_delta <= 1e-6
        assert release.offset_delta + release.sampler_delta == pytest.approx(1e-6, rel=1e-9)
        bigger = calibrate("t", "s", epsilon * 1.05, 1e-6, 12, gap_levels)
        assert bigger.alpha > release.alpha
        assert release.alpha >= epsilon / (gap_levels + 2)  # about one alpha per gap level, plus the tail


# --- the code path: decisions re-derived from the keyed noise ------------------------------


def _numpy_leaves(codes, h, decisions, total, key, alpha, tau, bias, floor, branch_on="released"):
    """PrivTree on sorted codes, independently of dpm_jax.synth.kdtree: (start, depth, count) per leaf.

    Row ``row``'s noise: ``key`` folded with the row, then with the index of the smallest of
    decision_capacities(n) that holds every cell the released tree can reach (2**h at the
    first row, twice the previous row's splits below), that many draws; the reached cells take
    them in code order. ``branch_on="reached"``: the rule that timed the unreleased number of
    non-empty cells (for the test that tells the two apart)."""
    n = codes.size
    depth = np.full(n, h + decisions)
    alive = np.ones(n, bool)
    most_reached = 2**h
    for row in range(decisions):
        at = h + row
        _, slot, counts = np.unique(codes >> (total - at), return_inverse=True, return_counts=True)
        reached = np.zeros(counts.size, bool)
        reached[slot[alive]] = True
        bound = most_reached if branch_on == "released" else reached.sum()
        tier, size = next((i, c) for i, c in enumerate(decision_capacities(n)) if bound <= c)
        draws = _noise(jax.random.fold_in(jax.random.fold_in(key, row), tier), (size,), alpha)
        noise = np.zeros(counts.size, np.int64)
        noise[reached] = draws[: reached.sum()]
        biased = np.maximum(counts - row * bias, floor)
        split = reached & (biased + noise >= tau)
        most_reached = 2 * int(split.sum())
        stop = alive & ~split[slot]
        depth[stop] = at
        alive &= ~stop
    start = (codes >> (total - depth)) << (total - depth)
    leaves, count = np.unique(np.stack([start, depth]), axis=1, return_counts=True)
    return leaves[0], leaves[1], count


def _noise(key, shape, epsilon):
    value = count_noise(key, np.full(shape, epsilon))
    return np.asarray(value.limbs[0]).astype(np.int64) + (np.asarray(value.limbs[1]).astype(np.int64) << 30)


@pytest.mark.slow
@pytest.mark.parametrize("levels, background", [(4, True), (9, True), (9, False)])
def test_decisions_are_rederived_from_the_tree_stream(levels, background):
    # Long because: compiles a PrivTree synthesis (about 10 s, 2 cores at load 6).
    """Every released cell that holds data is a leaf of PrivTree grown in NumPy from the noise
    of derive_key(key, "synth_tree") folded with 1 (discrete Laplace of the release's alpha,
    per decision level, one draw per reached cell: _numpy_leaves), with
    biased counts max(c - row bias, theta - kappa) against theta, and its weight is its count
    plus the leaf noise. A dropped bias, a halved noise scale or another clamp grows another tree.
    With the background in one corner at 9 levels, fewer cells hold data than the smallest
    capacity while 2**9 are released: the number of draws must follow the released tree, not
    the non-empty cells (a timing channel), and that case grows another tree under the other rule."""
    key = jax.random.key(4)
    config = SynthConfig(levels=levels, decisions=6)  # 9: 2**9 first-level cells exceed the smallest capacity
    budget = Budget(2.0, 1e-6)
    theta = plan_synthesis(budget, config, "privtree", 2).decisions.theta
    # a uniform background of about theta points per level-4 cell: many decisions near theta,
    # where the noise decides (a wrong noise scale grows another tree)
    rng = np.random.default_rng(1)
    if background:
        uniform = rng.uniform(0.0, 16.0, (16 * theta, 2))
    else:  # about theta points in each of 32 level-9 cells: few non-empty cells, decided by the noise
        uniform = rng.uniform((8.0, 0.0), (16.0, 4.0), (32 * theta, 2))
    X = np.concatenate([_blobs(1500), uniform.astype(np.float32)])
    result = synthesize(key, X, budget, bounds=BOUNDS, method="privtree", config=config)
    plan = plan_synthesis(budget, config, "privtree", 2)
    release = plan.decisions
    assert (plan.tau, plan.bias, plan.floor) == (release.theta, release.bias, release.theta - release.kappa)
    total = plan.total_depth
    codes = np.sort(np.asarray(cell_codes(jnp.asarray(X), jnp.zeros(2), jnp.full(2, 16.0), total)).astype(np.int64))
    tree_key = jax.random.fold_in(keys.derive_key(key, keys.SYNTH_TREE), 1)
    start, depth, count = _numpy_leaves(
        codes, levels, 6, total, tree_key, release.alpha, plan.tau, plan.bias, plan.floor
    )
    _, first = np.unique(codes >> (total - levels), return_counts=True)
    if levels == 4:
        assert np.sum(np.abs(first - plan.tau) <= 2.0 / release.alpha) >= 5  # decisions the noise decides
    elif background:
        assert first.size > decision_capacities(X.shape[0])[0]
    else:
        assert first.size <= decision_capacities(X.shape[0])[0] < 2**levels
        timed = _numpy_leaves(
            codes, levels, 6, total, tree_key, release.alpha, plan.tau, plan.bias, plan.floor, branch_on="reached"
        )
        assert {(a, b) for a, b in zip(*timed[:2])} != {(a, b) for a, b in zip(start, depth)}
    assert len(set(depth.tolist())) >= 3  # the decisions matter: leaves at several depths
    leaf_noise = _noise(
        jax.random.fold_in(keys.derive_key(key, keys.SYNTH_LEAF), 0), (X.shape[0],), plan.leaves.epsilon
    )
    kept = count + leaf_noise[: count.size] >= plan.leaves.thresholds[0]
    lo, hi = cell_boxes(
        jnp.asarray(start[kept], jnp.uint32), jnp.asarray(depth[kept]), jnp.zeros(2), jnp.full(2, 16.0), total
    )
    expected = {
        (tuple(np.round(a, 4)), tuple(np.round(b, 4)), int(w))
        for a, b, w in zip(np.asarray(lo), np.asarray(hi), (count + leaf_noise[: count.size])[kept])
    }
    valid = np.asarray(result.valid)
    lower, upper, weights = (np.asarray(a)[valid] for a in (result.lower, result.upper, result.weights))
    held = ((X[None] >= lower[:, None]) & (X[None] < upper[:, None])).all(2).sum(1)
    released = {
        (tuple(np.round(a, 4)), tuple(np.round(b, 4)), int(w))
        for a, b, w, c in zip(lower, upper, weights, held)
        if c > 0
    }
    assert released == expected
    assert len(expected) >= 8


@pytest.mark.slow
def test_ledger_adds_up_and_names_the_privtree_line():
    # Long because: compiles a PrivTree synthesis (about 8 s, 2 cores at load 6).
    budget = Budget(0.8, 1e-6)
    result = synthesize(jax.random.key(0), _blobs(), budget, bounds=BOUNDS, method="privtree")
    ledger = result.ledger
    assert [e.name for e in ledger] == ["synth size", "synth depth", "synth decisions", "synth leaves"]
    assert budget.epsilon - 4e-16 * budget.epsilon <= math.fsum(e.epsilon for e in ledger) <= budget.epsilon
    assert math.fsum(e.delta for e in ledger) <= budget.delta
    assert math.fsum(e.delta for e in ledger) == pytest.approx(budget.delta, rel=1e-12)
    plan = plan_synthesis(budget, SynthConfig(), "privtree", 2)
    line = [e for e in ledger if e.name == "synth decisions"][0]
    assert line.mechanism == "privtree_discrete_laplace"
    assert line.noise_scale == pytest.approx(1.0 / plan.decisions.alpha)
    assert privacy_loss(plan.decisions.alpha, plan.decisions.kappa, plan.decisions.bias) <= line.epsilon


@pytest.mark.slow
def test_auditor_on_the_privtree_decision_stays_at_or_below_the_claim():
    # Long because: the empirical auditor's many runs (about 15 s, 2 cores at load 6).
    """The empirical auditor drives synthesize on constructed neighbours that differ in one
    record of a cell whose biased count sits just below theta (A: theta - 1, B: theta), at
    the first decision level. Event: that cell was split (its data are released in a smaller
    box). The split probabilities are r / (1 + r) and 1 / (1 + r), a ratio e^alpha: the bound
    (95% simultaneous confidence) must stay at or below the claim and see most of alpha."""
    from dpm_jax.eval.audit import audit

    budget, config = Budget(4.0, 1e-6), SynthConfig(levels=2, decisions=3, max_cells=32)  # 2**2 * 2**3 leaves
    plan = plan_synthesis(budget, config, "privtree", 2)
    theta = plan.decisions.theta
    n = theta  # A: theta - 1 records in one cell, B: theta
    points = np.full((n, 2), 1.0, np.float32)  # all in level 2's cell [0, 8) x [0, 8)
    mask_b = np.ones(n, bool)
    mask_a = mask_b.copy()
    mask_a[-1] = False

    def mechanism(key, data):
        return synthesize(key, data[0], budget, bounds=BOUNDS, method="privtree", config=config, point_mask=data[1])

    def split_first(result):
        holds = result.valid & (result.lower[:, 0] <= 1.0) & (result.upper[:, 0] > 1.0)
        holds = holds & (result.lower[:, 1] <= 1.0) & (result.upper[:, 1] > 1.0)
        area = (result.upper[:, 0] - result.lower[:, 0]) * (result.upper[:, 1] - result.lower[:, 1])
        return jnp.min(jnp.where(holds, area, jnp.inf)) < 64.0  # below the level-2 cell's: split

    claim = mechanism(jax.random.key(0), (points, mask_a)).ledger
    found = audit(
        jax.random.key(1),
        mechanism,
        (points, mask_a),
        (points, mask_b),
        {"split": split_first},
        20000,
        delta=claim.total_delta,
        compiler_options=USERS_COMPILER_OPTIONS,
    )
    assert found.epsilon_lower_bound <= claim.total_epsilon
    assert found.epsilon_lower_bound >= 0.5 * plan.decisions.alpha


@pytest.mark.slow
def test_cli_synthesize_with_method_privtree(tmp_path):
    # Long because: one CLI synthesis (about 8 s, 2 cores at load 6).
    from dpm_jax.cli.main import main

    data = tmp_path / "x.npy"
    np.save(data, _blobs(100))
    out = tmp_path / "s.csv"
    args = [str(data), "--epsilon", "1", "--delta", "1e-6", "--bounds", "0", "16", "--rows", "40", "--out", str(out)]
    # a stated capacity near the data's size: the default (2**24 rows) raises the thresholds past 100 points
    assert main(["synthesize", *args, "--seed", "3", "--method", "privtree", "--max-rows", "1000"]) == 0
    rows = np.loadtxt(out, delimiter=",", skiprows=1)
    assert rows.shape == (40, 2) and np.all((rows >= 0) & (rows <= 16))


def test_a_budget_the_calibration_cannot_cover_is_refused_with_a_value_error():
    """Its conditions are checked with a ValueError naming the one that fails (they were asserts: an
    AssertionError, and nothing at all under python -O)."""
    with pytest.raises(ValueError, match="PrivTree cannot be calibrated at epsilon .*the remove side's leaf"):
        plan_synthesis(Budget(1e-4, 1e-3), SynthConfig(), "privtree", 2)
