"""Hyper-parameters of DPM with the paper's defaults.

Every number here is *public*: it must not be read from the private data. The
defaults are those of Section 6.1 of the DPM paper ("DPM: Clustering Sensitive Data through Separation"):
tau_e = n~ / 2**tau_r, t = 0.3, q = 1/12, alpha = 5 (Section 5.2),
epsilon = 0.04 eps_int + 0.18 eps_cnt + 0.18 eps_exp + 0.6 eps_avg and
delta = 0.2 delta_cnt + 0.8 delta_avg. Two defaults are not the paper's (measured in
docs/evaluation.md): the depth tau_r is chosen from a noisy count of the points, up to
the paper's 7 (``tau_r="auto"``, :mod:`dpm_jax.depth`; ``tau_r=7`` is the paper's fixed
depth), and the split candidates follow each node's own cell (``split_grid="cell"``),
with a split interval of ``split_window`` half-bins on each side. ``split_grid="paper"``
with ``tau_r=7`` is the published design, bit for bit.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Callable, NamedTuple

import numpy as np

__all__ = ["DPMConfig", "AUTO_DEPTH", "is_real_number"]

AUTO_DEPTH = "auto"  # DPMConfig(tau_r=AUTO_DEPTH): the depth chosen by dpm_jax.depth
PAPER_GRID = "paper"  # one global grid of interval size beta from Algorithm 2 (the paper)
CELL_GRID = "cell"  # a grid relative to every node's own cell (dpm_jax.histogram.cell_grid)
SPLIT_GRIDS = (PAPER_GRID, CELL_GRID)
_DEFAULT_MAX_DEPTH = 7  # DPMConfig.max_depth: the paper's tau_r, so "auto" keeps its shapes
_DEFAULT_SPLIT_WINDOW = 6  # DPMConfig.split_window; chosen on benchmarks/split_grid.py and benchmarks/zoo.py
_DEFAULT_LEAF_SLACK = 1  # DPMConfig.leaf_slack; chosen on benchmarks/zoo.py and benchmarks/split_grid.py (issue 27)
_DEFAULT_STRUCTURE_SHARE = 1 / 12  # DPMConfig.structure_share: 0.05 of epsilon with the default shares (issue 27)
_DEFAULT_MERGE_SHARE = 1 / 12  # DPMConfig.merge_share: 0.05 of epsilon with the default shares (issue 27)


def is_real_number(value) -> bool:
    """A Python or NumPy int or float (not a bool): what a numeric hyper-parameter may be."""
    return isinstance(value, (int, float, np.integer, np.floating)) and not isinstance(value, bool)


class PaperGridShape(NamedTuple):
    """The public numbers of ``split_grid="paper"``: Algorithm 1's one global grid, its interval size
    beta chosen by Algorithm 2 (which runs and spends its epsilon share), ``max_splits`` candidates per
    dimension at most. :func:`dpm_jax.tree.split_grid_of` builds the grid's array code from it."""

    max_splits: int  # DPMConfig.max_splits_per_dim
    finest_interval: float  # DPMConfig.finest_interval
    estimates_interval = True  # Algorithm 2 runs

    @property
    def candidates_per_dim(self) -> int:
        """Static length of a node's candidate axis per dimension."""
        return self.max_splits

    @property
    def drawable_per_dim(self) -> int:
        """An upper bound on the candidates a node draws from per dimension: the grid at its finest beta."""
        return min(math.ceil(1.0 / self.finest_interval - 1e-6), self.max_splits)


class CellGridShape(NamedTuple):
    """The public numbers of ``split_grid="cell"``: 2 max_splits half-bins of every node's own cell, a
    candidate at each inner boundary; no interval size is estimated (Algorithm 2 does not run)."""

    max_splits: int  # DPMConfig.max_splits_per_dim
    window: int  # DPMConfig.split_window
    estimates_interval = False

    @property
    def candidates_per_dim(self) -> int:
        """Static length of a node's candidate axis per dimension (one per half-bin; the last never used)."""
        return 2 * self.max_splits

    @property
    def drawable_per_dim(self) -> int:
        """The candidates a node draws from per dimension: the inner half-bin boundaries."""
        return 2 * self.max_splits - 1


def depth(text: str) -> int | str:
    """``tau_r`` from text: an integer depth or 'auto' (:mod:`dpm_jax.depth`)."""
    return AUTO_DEPTH if text == AUTO_DEPTH else int(text)


def floats(text: str) -> tuple[float, ...]:
    """A tuple of numbers from comma-separated text, e.g. ``epsilon_shares`` "0.04,0.18,0.18,0.6"."""
    return tuple(float(part) for part in text.split(","))


def _option(default, parse: Callable[[str], object], help: str):
    """A DPMConfig field with its one-line help and its parser of text: the command line
    (:mod:`dpm_jax.cli.main`) and the estimator (:mod:`dpm_jax.sklearn`) take every field from here."""
    return dataclasses.field(default=default, metadata={"parse": parse, "help": help})


@dataclasses.dataclass(frozen=True)
class DPMConfig:
    """All hyper-parameters of DPM (Algorithm 1 and 2).

    Attributes:
      tau_r: maximum recursion depth; at most ``2**tau_r`` clusters (Section 6.1).
        ``"auto"``: chosen inside the program from a noisy count of the points, paid
        for in the ledger, between 1 and ``max_depth`` (:mod:`dpm_jax.depth`).
      max_depth: the deepest tau_r ``"auto"`` may choose; the padded tree always has
        ``2**max_depth`` slots, so it fixes the program's shapes (only with ``"auto"``).
      tau_e: minimum noisy size of both children for a split to be applied
        (Algorithm 1, line 18). ``None`` means the paper's default
        ``n~ / 2**tau_r`` computed from the noisy total count (with ``"auto"``,
        ``n~ / 2**min(depth + leaf_slack, max_depth)``).
      leaf_slack: with ``tau_r="auto"`` and ``tau_e=None``, the default tau_e is
        n~ / 2**min(depth + leaf_slack, max_depth): a depth below ``max_depth`` is where the
        budget's levels stop being near random, which says nothing about the size of the
        clusters, and the paper's n~ / 2**tau_r would forbid any leaf smaller than the average
        leaf of a full tree of that depth (64 blobs of n / 64 points at depth 6 then cannot be
        isolated). At ``max_depth`` (the slots, not the budget, bound the depth) it is the
        paper's n~ / 2**max_depth: there the slack over-split (100 clusters on a grid, n =
        100,000, epsilon = 2: k = 104, docs/evaluation.md). Public arithmetic on released
        values (n~ and the depth); 0 is the paper's rule.
      alpha: weight of the emptiness in the score (Definition 7, Section 5.2).
      t, q: centreness parameters (Definition 6); need ``t >= 2q > 0``, ``q < 1/2``.
      epsilon_shares: fractions of epsilon for (interval size, counts, split
        choices, averaging); must sum to 1 (Section 6.1).
      delta_shares: fractions of delta for (counts, averaging); must sum to 1.
      percentile: the percentile of neighbour gaps used by Algorithm 2 (65).
      sigma_step, num_sigmas: the candidate sigmas of Algorithm 2 ("sigmas") are
        sigma_step * (1, 2, ..., num_sigmas), as fractions of each dimension's
        public range. The authors' code uses sigma in {0.5, 1.0, ..., 29.5} on data
        of range 200, i.e. the defaults 0.0025 and 59.
      interval_factor: beta = interval_factor * sigma* (Section 3.5: 1/2).
      max_splits_per_dim: cap on the number of split candidates per dimension
        (Algorithm 1, line 9: numSplits = range / beta); beta is raised to
        range / max_splits_per_dim where Algorithm 2 picks a smaller one. It fixes
        the static size of the per-level histograms, so it bounds memory and time
        (a cap on the number of candidates). The authors' grid alone would
        allow 800.
      interval_max_dims: Algorithm 2 sorts every dimension; above this many
        dimensions it uses this many, drawn uniformly at random with the interval
        key (data-independent, so privacy is unaffected). ``None``: all of them.
      split_grid: where the split candidates of a node lie. ``"paper"``: the paper's
        one global grid of interval size beta chosen by Algorithm 2 (bit-identical to
        the published design, for reproducing Table 2). ``"cell"``: 2 max_splits_per_dim
        equal half-bins spanning each node's own cell (its public box, fixed by the
        released splits above it), a candidate at every inner half-bin boundary, so
        the grid refines as the tree descends and no interval size is estimated:
        Algorithm 2 does not run and its epsilon share goes to the split choices
        (:mod:`dpm_jax.histogram`, docs/privacy.md).
      lattice_step: ``None``, or the public step h (data units, every dimension) of
        a lattice the data lie on, e.g. 1 for integer features (only with
        ``split_grid="cell"``; ``bounds`` must then be lattice values). The cells
        then end half-way between lattice values and every half-bin holds whole
        lattice values, so a candidate lies between two values and its emptiness
        counts the points of its neighbouring values, where a grid finer than h
        would find every candidate between two values empty. Measured on UCI Letters
        (benchmarks/split_grid.py) it does worse than the default: the emptiest lattice
        values are the marginals' tails, so with the paper's alpha the splits go there
        (k = 2). Without it (the default) every candidate strictly between two values is
        empty, so the draw among the gaps between values follows the centreness alone
        (balanced splits); see docs/privacy.md.
      split_window: the split interval of a cell-grid candidate (only with
        ``split_grid="cell"``): the ``split_window`` half-bins on each side of its
        boundary, i.e. split_window / max_splits_per_dim of the node's cell (6/128 =
        3/64 by default), clipped to the cell. Its emptiness is what makes DPM stop:
        a node holding one cluster stops only when the emptiest candidates are in the
        cluster's tails (a split there leaves a child below tau_e), i.e. when the
        window at the centre holds more than about 1/alpha of the node's points
        (Definition 7). With one half-bin per side (1/128 of the cell) it holds ~1%,
        the central cut wins once n~ resolves the difference, and the tree splits one
        Gaussian of 100,000 points into k = 75 clusters; wider windows stop there
        (k = 1) but merge clusters whose gap is narrower than the window. Measured in
        docs/evaluation.md (benchmarks/zoo.py, benchmarks/split_grid.py).
      structure_share: the fraction of the averaging's epsilon share spent instead on the
        "no structure" test of every node (only with ``split_grid="cell"``, :mod:`dpm_jax.structure`;
        1/12: 0.05 of epsilon with the default shares): a noisy minimum, over the windows in the
        middle three quarters of the node's cell, of the window's count minus half its count under
        uniformity; a node with no window emptier than that becomes a leaf. 0 turns the test off
        (the engine before it, bit for bit).
      merge_share: the fraction of the averaging's epsilon share spent instead on the merge
        (only with ``split_grid="cell"``, :mod:`dpm_jax.merge`; 1/12: 0.05 of epsilon with the
        default shares): a noisy "valley" statistic of every drawn split, and afterwards the leaves
        under a node whose split, and every split below it, cut no valley become one cluster.
        0 turns it off (the engine before it, bit for bit).
    """

    tau_r: int | str = _option(
        AUTO_DEPTH,
        depth,
        "maximum recursion depth (at most 2**tau_r clusters), or 'auto': chosen in the program "
        "from a noisy count of the rows, paid for in the ledger",
    )
    max_depth: int = _option(
        _DEFAULT_MAX_DEPTH, int, "with tau_r 'auto': the deepest depth it may choose (2**max_depth cluster slots)"
    )
    tau_e: float | None = _option(
        None,
        float,
        "minimum noisy child size for a split (default n~ / 2**tau_r; 'auto': see leaf_slack)",
    )
    leaf_slack: int = _option(
        _DEFAULT_LEAF_SLACK,
        int,
        "with tau_r 'auto' and the default tau_e: tau_e = n~ / 2**min(depth + leaf_slack, max_depth)",
    )
    alpha: float = _option(5.0, float, "weight of emptiness in the split score (Definition 7)")
    t: float = _option(0.3, float, "centreness parameter t (Definition 6)")
    q: float = _option(1.0 / 12.0, float, "centreness parameter q (Definition 6)")
    epsilon_shares: tuple[float, float, float, float] = _option(
        (0.04, 0.18, 0.18, 0.6),
        floats,
        "fractions of epsilon for the interval size, counts, split choices and averaging, comma-separated; sum 1",
    )
    delta_shares: tuple[float, float] = _option(
        (0.2, 0.8), floats, "fractions of delta for counts and averaging, comma-separated; sum 1"
    )
    percentile: float = _option(65.0, float, "percentile of neighbour gaps for the split interval size (Algorithm 2)")
    sigma_step: float = _option(
        0.0025, float, "Algorithm 2's candidate sigmas are sigma_step * (1..num_sigmas) of the range"
    )
    num_sigmas: int = _option(59, int, "number of candidate sigmas of Algorithm 2")
    interval_factor: float = _option(0.5, float, "split interval size = interval_factor * sigma* (Section 3.5)")
    interval_max_dims: int | None = _option(16, int, "Algorithm 2 uses at most this many randomly chosen dimensions")
    max_splits_per_dim: int = _option(128, int, "cap on the split candidates per dimension (beta >= range / cap)")
    split_grid: str = _option(
        CELL_GRID,
        str,
        "where a node's split candidates lie: 'cell' (its own cell, default) or 'paper' (Algorithm 2's global grid)",
    )
    lattice_step: float | None = _option(
        None, float, "public lattice step of the data (e.g. 1 for integer features; cell grid only)"
    )
    split_window: int = _option(
        _DEFAULT_SPLIT_WINDOW,
        int,
        "half-bins on each side of a candidate in its split interval (cell grid only; 1 for many small clusters)",
    )

    structure_share: float = _option(
        _DEFAULT_STRUCTURE_SHARE,
        float,
        "fraction of the averaging's epsilon share for the per-node 'no structure' test (cell grid; 0: off)",
    )
    merge_share: float = _option(
        _DEFAULT_MERGE_SHARE,
        float,
        "fraction of the averaging's epsilon share for merging leaves no valley separates (cell grid; 0: off)",
    )

    def __post_init__(self):
        if isinstance(self.tau_r, str):
            if self.tau_r != AUTO_DEPTH:
                raise ValueError(f"tau_r must be an integer or {AUTO_DEPTH!r}, got {self.tau_r!r}")
        elif not isinstance(self.tau_r, (int, np.integer)) or isinstance(self.tau_r, bool):
            raise TypeError(f"tau_r must be an integer or {AUTO_DEPTH!r}, got {type(self.tau_r).__name__}")
        elif self.tau_r < 1:
            raise ValueError(f"tau_r must be >= 1, got {self.tau_r}")
        elif self.tau_r > 16:
            raise ValueError(f"tau_r must be <= 16 (2**tau_r padded clusters), got {self.tau_r}")
        self._check_auto_depth_option(
            "max_depth",
            1,
            " (2**max_depth padded clusters)",
            _DEFAULT_MAX_DEPTH,
            f"max_depth bounds tau_r={AUTO_DEPTH!r}; with a fixed tau_r={self.tau_r} leave it at its default",
        )
        self._check_auto_depth_option(
            "leaf_slack",
            0,
            "",
            _DEFAULT_LEAF_SLACK,
            f"leaf_slack is for tau_r={AUTO_DEPTH!r} (a fixed tau_r keeps the paper's tau_e = n~ / 2**tau_r); "
            f"with tau_r={self.tau_r} leave it at its default",
        )
        for name in ("alpha", "t", "q", "percentile", "interval_factor", "sigma_step"):
            value = getattr(self, name)
            if not is_real_number(value) or not math.isfinite(value):
                raise TypeError(f"{name} must be a finite real number, got {value!r}")
        if self.tau_e is not None and (not is_real_number(self.tau_e) or not math.isfinite(self.tau_e)):
            raise TypeError(f"tau_e must be None or a finite real number, got {self.tau_e!r}")
        if self.alpha <= 0:
            raise ValueError(f"alpha must be > 0 (Definition 7), got {self.alpha}")
        if not 0 < self.q < 0.5:
            raise ValueError(f"q must satisfy 0 < q < 1/2 (Definition 6), got {self.q}")
        if self.t < 2 * self.q:
            raise ValueError(
                f"t must satisfy t >= 2q (Definition 6: valid centreness parameters), got t={self.t}, q={self.q}"
            )
        if self.t > 1:
            raise ValueError(f"t must be <= 1 (minimum inner centreness is 1 - t), got {self.t}")
        if not 0 < self.percentile < 100:
            raise ValueError(f"percentile must be in (0, 100), got {self.percentile}")
        if self.interval_factor <= 0:
            raise ValueError(f"interval_factor must be > 0, got {self.interval_factor}")
        if self.split_grid not in SPLIT_GRIDS:
            raise ValueError(f"split_grid must be one of {SPLIT_GRIDS}, got {self.split_grid!r}")
        if self.lattice_step is not None:
            if not is_real_number(self.lattice_step) or not math.isfinite(self.lattice_step) or self.lattice_step <= 0:
                raise ValueError(f"lattice_step must be None or a positive finite number, got {self.lattice_step!r}")
            if self.split_grid != CELL_GRID:
                raise ValueError(
                    f"lattice_step needs split_grid={CELL_GRID!r} (the paper's grid has one "
                    "global interval size), got split_grid={self.split_grid!r}"
                )
        _check_shares("epsilon_shares", self.epsilon_shares, 4)
        _check_shares("delta_shares", self.delta_shares, 2)
        for name in ("structure_share", "merge_share"):
            share = getattr(self, name)
            if not is_real_number(share) or not 0 <= share < 1:
                raise ValueError(f"{name} must be a number in [0, 1) (of the averaging's share), got {share!r}")
        if self.structure_share + self.merge_share >= 1:
            raise ValueError(
                f"structure_share + merge_share must be below 1 (the averaging keeps the rest), got "
                f"{self.structure_share!r} + {self.merge_share!r}"
            )
        if self.sigma_step <= 0:
            raise ValueError(f"sigma_step must be > 0, got {self.sigma_step}")
        for name in ("num_sigmas", "interval_max_dims", "max_splits_per_dim", "split_window"):
            value = getattr(self, name)
            if value is None and name == "interval_max_dims":
                continue
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}")
        if self.split_window != _DEFAULT_SPLIT_WINDOW and self.split_grid != CELL_GRID:
            raise ValueError(
                f"split_window needs split_grid={CELL_GRID!r} (the paper's split interval is beta, from "
                f"Algorithm 2), got split_window={self.split_window} with split_grid={self.split_grid!r}"
            )

    @property
    def tests_structure(self) -> bool:
        """The per-node "no structure" test runs (:mod:`dpm_jax.structure`): on the cell grid, share > 0."""
        return self.structure_share > 0 and self.split_grid == CELL_GRID

    @property
    def merges_leaves(self) -> bool:
        """The merge of leaves no valley separates runs (:mod:`dpm_jax.merge`): on the cell grid, share > 0."""
        return self.merge_share > 0 and self.split_grid == CELL_GRID

    @property
    def padded_depth(self) -> int:
        """The depth of the padded tree: tau_r, or ``max_depth`` with ``tau_r="auto"``."""
        return self.max_depth if self.tau_r == AUTO_DEPTH else self.tau_r

    @property
    def max_clusters(self) -> int:
        """Padded number of clusters: ``2**padded_depth`` leaf slots."""
        return 2**self.padded_depth

    @property
    def tau_e_halvings(self) -> int:
        """How many halvings of the root's n~ beyond the depth give the default tau_e: ``leaf_slack``
        under ``tau_r="auto"``, 0 (the paper's n~ / 2**tau_r) with a fixed tau_r."""
        return self.leaf_slack if self.tau_r == AUTO_DEPTH else 0

    def _check_auto_depth_option(self, name: str, low: int, range_note: str, default: int, fixed_error: str) -> None:
        """An integer option of ``tau_r="auto"`` in [low, 16]; with a fixed tau_r it must keep its default."""
        value = getattr(self, name)
        if not isinstance(value, (int, np.integer)) or isinstance(value, bool):
            raise TypeError(f"{name} must be an integer, got {type(value).__name__}")
        if not low <= value <= 16:
            raise ValueError(f"{name} must be in [{low}, 16]{range_note}, got {value}")
        if value != default and self.tau_r != AUTO_DEPTH:
            raise ValueError(fixed_error)

    def at_depth(self, depth: int) -> "DPMConfig":
        """This config with the fixed tau_r = ``depth`` (what ``"auto"`` runs once it has chosen)."""
        return dataclasses.replace(self, tau_r=int(depth), max_depth=_DEFAULT_MAX_DEPTH, leaf_slack=_DEFAULT_LEAF_SLACK)

    @property
    def sigma_grid(self) -> np.ndarray:
        """The candidate sigmas of Algorithm 2, fractions of the range."""
        return self.sigma_step * np.arange(1, self.num_sigmas + 1)

    @property
    def grid_shape(self) -> PaperGridShape | CellGridShape:
        """The split grid's public numbers: the one place ``split_grid`` is told apart (budget, releases,
        depth rule and diagnostics read this object; :func:`dpm_jax.tree.split_grid_of` its array code)."""
        if self.split_grid == CELL_GRID:
            return CellGridShape(self.max_splits_per_dim, self.split_window)
        return PaperGridShape(self.max_splits_per_dim, self.finest_interval)

    @property
    def candidates_per_dim(self) -> int:
        """Split candidates per dimension of a node: the static length of its candidate axis."""
        return self.grid_shape.candidates_per_dim

    @property
    def finest_interval(self) -> float:
        """The smallest split interval size beta (a fraction of the range) DPM uses."""
        return max(self.interval_factor * self.sigma_step, 1.0 / self.max_splits_per_dim)


def _check_shares(name, shares, length):
    if not isinstance(shares, tuple) or len(shares) != length:
        raise ValueError(f"{name} must be a tuple of {length} numbers, got {shares!r}")
    if not all(is_real_number(s) and math.isfinite(s) and s > 0 for s in shares):
        raise ValueError(f"{name} must all be positive finite numbers, got {shares!r}")
    if not math.isclose(math.fsum(shares), 1.0, rel_tol=0, abs_tol=1e-9):
        raise ValueError(f"{name} must sum to 1, got {shares!r} (sum {math.fsum(shares)!r})")
