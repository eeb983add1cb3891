"""dpm_jax.diagnostics.theory: the stopping analysis of the theory paper, errata corrected."""

import math
from statistics import NormalDist

import numpy as np
import pytest

from dpm_jax.diagnostics import theory

PAPER_SHIFTS = (0.0, 0.6744, 1.15, 1.53, 1.86, 2.13, 2.41)  # z_i as printed (Section 2.2.2)
PAPER_EMPTINESS = (0.80258, 0.6831, 0.5868, 0.49816, 0.41968, 0.3155, 0.26528)  # e_i^c as printed


def test_central_emptiness_reproduces_the_papers_arithmetic_with_its_rounded_shifts():
    for level, (shift, printed) in enumerate(zip(PAPER_SHIFTS, PAPER_EMPTINESS)):
        assert abs(theory.central_emptiness(level, shift=shift) - printed) < 0.0015, level


def test_corrected_shifts_and_exact_table():
    """z_i = Phi^-1(1 - 2^-(i+1)): the paper's z_i except its z_5 (2.13 for 2.154), hence e_5 .349 not .3155."""
    exact = [NormalDist().inv_cdf(1 - 2.0 ** -(i + 1)) for i in range(7)]
    for level, (z, printed) in enumerate(zip(exact, PAPER_SHIFTS)):
        assert (abs(z - printed) < 0.01) == (level != 5), level
    table = theory.central_emptiness_table(7)
    for value, expected in zip(table, (0.803, 0.684, 0.587, 0.501, 0.423, 0.349, 0.278)):
        assert abs(value - expected) < 0.001
    assert all(a > b for a, b in zip(table, table[1:]))  # deeper outermost nodes are denser per point


def test_equation_21_margins():
    """m = t_tau(i) + alpha - 1 - alpha e_c: positive exactly when alpha > (1 - t_tau) / (1 - e_c)."""
    threshold = 2 / 128  # 2 tau_e / n~ with the default tau_e = n~ / 2**7
    e0 = theory.central_emptiness(0)
    edge = (1 - threshold) / (1 - e0)
    assert 4.98 < edge < 4.99
    assert (
        theory.halting_margin(0, edge * 1.001, threshold, e0)
        > 0
        > theory.halting_margin(0, edge * 0.999, threshold, e0)
    )
    # Figure 3 (m = 0): the lower bound (1 + (e_c(i) - 1) alpha) / 2**i on t_tau is negative for alpha = 5
    # from level 1 on, and positive at every level for alpha = 1.
    table = theory.central_emptiness_table(7)
    assert all((1 + (table[i] - 1) * 5) / 2**i < 0 for i in range(1, 7))
    assert all((1 + (table[i] - 1) * 1) / 2**i > 0 for i in range(7))
    assert theory.halting_threshold(10, threshold) == 1.0  # a centreness never exceeds 1


def _generated_node(rng, grid=32):
    """A 1-D node from a random mixture: scores of its candidates as DPM computes them (Definitions 5-6)."""
    n = int(rng.integers(50, 2000))
    parts = int(rng.integers(1, 4))
    centres, widths = rng.uniform(0.1, 0.9, parts), rng.uniform(0.01, 0.2, parts)
    which = rng.integers(0, parts, n)
    points = np.clip(rng.normal(centres[which], widths[which]), 0, 1 - 1e-9)
    edges = np.arange(grid + 1) / grid
    counts = np.histogram(points, edges)[0]
    ranks = np.searchsorted(np.sort(points), (np.arange(grid) + 0.5) / grid)  # points below the candidate
    t, q = 0.3, 1 / 12
    c = np.array([theory.centreness(r / n, t, q) for r in ranks])
    e = 1 - counts / n
    tau_e = n * rng.uniform(0.005, 0.08)  # below n q: t_tau < t
    return c, e, theory.centreness(tau_e / n, t, q), t


def _summary(c, e, threshold, t):
    halting, inner = c <= threshold, (c >= t) & (c > threshold)
    return theory.NodeSummary(
        int(halting.sum()),
        int((~halting & ~inner).sum()),
        int(inner.sum()),
        threshold,
        float(e.min()),
        float(e[inner].max()) if inner.any() else 0.0,
    )


def test_lemma_bounds_bracket_the_exact_softmax_on_1000_generated_nodes():
    """Lemma 2.4 <= P[halt] <= 1 - Lemma 2.7 and Lemma 2.5 <= P[t'-central], exactly (no statistics)."""
    rng = np.random.default_rng(0)
    checked = 0
    for _ in range(1000):
        c, e, threshold, t = _generated_node(rng)
        alpha, scale = rng.uniform(0.2, 10), math.exp(rng.uniform(math.log(0.1), math.log(200)))
        f = c + alpha * e
        weights = np.exp(scale * (f - f.max()))
        probability = lambda mask: weights[mask].sum() / weights.sum()
        node = _summary(c, e, threshold, t)
        p_halt = probability(c <= threshold)
        assert theory.halt_lower_bound(node, scale, alpha, t) <= p_halt * (1 + 1e-9)
        assert p_halt <= 1 - theory.continue_lower_bound(node, scale, alpha, t) + 1e-9
        above = np.sort(c[c > threshold])
        if above.size:
            t_prime = float(rng.choice(above))
            central, between = int((c >= t_prime).sum()), int(((c > threshold) & (c < t_prime)).sum())
            bound = theory.central_split_lower_bound(node, scale, alpha, t, t_prime, central, between)
            assert bound <= probability(c >= t_prime) * (1 + 1e-9)
            checked += 1
    assert checked > 900


def test_lemma_2_4_as_printed_fails_for_alpha_below_1():
    """A node where the corrected bound is exact and the printed e^{e_min B} numerator overshoots it."""
    alpha, scale, t = 0.5, 20.0, 0.3
    # one halting candidate at its minimum score (c = 0, e = e_min), one inner at its maximum (c = 1, e = e_QI)
    node = theory.NodeSummary(1, 0, 1, 0.0, 0.4, 0.4)
    exact = math.exp(scale * alpha * 0.4) / (math.exp(scale * alpha * 0.4) + math.exp(scale * (1 + alpha * 0.4)))
    corrected = theory.halt_lower_bound(node, scale, alpha, t)
    assert corrected <= exact
    printed = math.exp(scale * 0.4) / (math.exp(scale * alpha) + math.exp(scale * (1 + alpha * 0.4)))
    assert printed > exact


def _exact_halting(halt, depth):
    """P[every node halted by depth j] when every node of level l halts with probability halt[l], independently."""
    done = halt[depth]
    for level in reversed(range(depth)):
        done = halt[level] + (1 - halt[level]) * done**2
    return done


@pytest.mark.parametrize("seed", range(5))
def test_reindexed_theorem_is_a_lower_bound_of_the_branching_process(seed):
    rng = np.random.default_rng(seed)
    halt = rng.uniform(0, 1, 6)
    for depth in range(6):
        bound = theory.halting_bound(halt, 1 - halt, depth)
        assert bound <= _exact_halting(halt, depth) + 1e-12
    # halting certainly at level 1: the bound is exact
    assert math.isclose(theory.halting_bound([0.3, 1.0], [0.7], 1), _exact_halting([0.3, 1.0], 1))
    with pytest.raises(ValueError):
        theory.halting_bound(halt, 1 - halt, 6)
