"""The hierarchy of grid nets and the balls' values ("Making Old Things New: A Unified
Algorithm for Differentially Private Clustering", Section 3, Modification 1; Definition 3.1).

The space is the unit cube [0, 1]^m of the working coordinates (the data mapped by its
public bounds, and projected when m < d: :mod:`dpm_jax.greedy.api`). Level i is the grid
of the 2**(i m) cell centres (j + 1/2) 2**-i, j in {0 .. 2**i - 1}^m; its covering radius
is the cells' half-diagonal sqrt(m) 2**-i / 2, and the balls of level i have that radius,
r_i = sqrt(m) 2**-(i + 1) (the covering radius is rho r_i with rho = 1). Level 0 is one
ball that holds the whole cube.

Constants, in units of the level's radius (the paper's symbols were lost; reconstructed
from the proofs' constraints, see docs/greedy.md):
  * children: the level-(i + 1) centres within C_CHILD r_i of the ball's centre. Every
    point x of B(p, r_i) is within rho r_(i+1) of some level-(i + 1) centre q, and
    |q - p| <= r_i + rho r_i / 2, so C_CHILD >= 1 + rho / 2 puts x in a child
    (Lemma D.7); C_CHILD = 1.5.
  * forbidden: a ball B(p, r_i) is forbidden by a centre c when |p - c| <= C_FORBID r_i.
    A child q of an available ball (|p - c| > C_FORBID r_i) has |q - c| > (C_FORBID -
    C_CHILD) r_i >= C_FORBID r_(i+1) when C_CHILD <= C_FORBID / 2 (Lemma D.5), so the
    descent never meets a forbidden child; C_FORBID = 2 C_CHILD = 3, the smallest that
    allows (a smaller radius lets the greedy start near an earlier centre at a coarser
    level: two blobs 6 sigma apart are found at level 6 instead of 8 in 2-d, where a
    ball's value is below the selection's noise). Lemma D.2 asks C_FORBID >= 2 + 2 rho
    so that every level-0 ball is forbidden after the first centre; here level 0 is one
    ball whose centre is within r_0 of every point of the cube, so any C_FORBID >= 1
    forbids it.
  The Gupta et al. style privacy proof (Lemma F.2) would need C_FORBID >= 3 + 4 C_CHILD;
  the privacy here does not use it (zCDP composition of every selection instead).

The value of a ball (Mettu and Plaxton): sum over its points x of (r - |x - p|)^z, here
in integer units: each point adds floor(2**VALUE_BITS (1 - |x - p| / r)_+^z), an integer
in [0, 2**VALUE_BITS] (the value / r^z, up to the floor). One point changes every ball's
value by at most 2**VALUE_BITS: the sensitivity of every selection's scores. The
per-point integers are a per-record map (their floating-point evaluation only decides
which integer in [0, 2**VALUE_BITS] a point adds), and the sums are int32 scatter-adds
and reductions of integers, exact while n 2**VALUE_BITS < 2**31: maximum n MAX_POINTS.
"""

from __future__ import annotations

import functools
import itertools
import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from dpm_jax._arrays import power_of_two, rounded_square

__all__ = [
    "C_FORBID",
    "VALUE_BITS",
    "MAX_POINTS",
    "NetPlan",
    "plan_nets",
    "radius",
    "child_offsets",
    "start_candidates",
    "contributions",
    "start_values",
    "level_values",
    "cell_centers",
]

C_CHILD = 1.5
C_FORBID = 3.0
VALUE_BITS = 8
MAX_POINTS = 2 ** (31 - VALUE_BITS) - 1
MAX_START_CANDIDATES = 2**17  # the start selection's candidates: every ball of levels 0 .. start_levels


class NetPlan(NamedTuple):
    """The public parameters of the nets: working dimension m, last level L, start levels S, z."""

    dim: int
    levels: int
    start_levels: int
    z: int


def plan_nets(dim: int, levels: int, z: int) -> NetPlan:
    """Start levels: the most levels 0 .. S whose balls together number at most MAX_START_CANDIDATES."""
    start = 0
    while start + 1 <= levels and sum(2 ** (i * dim) for i in range(start + 2)) <= MAX_START_CANDIDATES:
        start += 1
    return NetPlan(dim, levels, start, z)


def radius(level, dim: int):
    """r_i = sqrt(m) 2**-(i + 1): the covering radius of level i's grid."""
    return math.sqrt(dim) * 2.0 ** (-jnp.asarray(level, jnp.float32) - 1.0)


@functools.lru_cache(maxsize=8)
def child_offsets(dim: int) -> np.ndarray:
    """(C, m) int32 t: the children of the level-i centre of cell j are the level-(i+1) cells 2j + 1 + t.

    Level i's centre (j + 1/2) 2**-i is (2j + 1) 2**-(i+1); the child 2j + 1 + t lies at
    offset (t + 1/2) 2**-(i+1), within C_CHILD r_i = C_CHILD sqrt(m) 2**-(i+1) when
    |t + 1/2| <= C_CHILD sqrt(m).
    """
    reach = int(math.floor(C_CHILD * math.sqrt(dim) + 0.5))
    grid = np.array(list(itertools.product(range(-reach - 1, reach + 1), repeat=dim)), dtype=np.int32)
    keep = np.linalg.norm(grid + 0.5, axis=1) <= C_CHILD * math.sqrt(dim)
    return grid[keep]


@functools.lru_cache(maxsize=8)
def start_candidates(plan: NetPlan) -> tuple[np.ndarray, np.ndarray]:
    """(levels (M,), cells (M, m)) of every ball of levels 0 .. S, level by level, cells in C order."""
    levels, cells = [], []
    for level in range(plan.start_levels + 1):
        side = 2**level
        grid = np.indices((side,) * plan.dim, dtype=np.int32).reshape(plan.dim, -1).T
        levels.append(np.full(grid.shape[0], level, np.int32))
        cells.append(grid)
    return np.concatenate(levels), np.concatenate(cells)


def cell_centers(cells: jax.Array, level) -> jax.Array:
    """Centres (j + 1/2) 2**-i of level-i cells j."""
    return (cells.astype(jnp.float32) + 0.5) * power_of_two(-jnp.asarray(level))[..., None]


def contributions(points_t: jax.Array, centers: jax.Array, r: jax.Array, z: int) -> jax.Array:
    """(C, n) int32 floor(2**VALUE_BITS (1 - |x - p| / r)_+^z) in [0, 2**VALUE_BITS] for points x, centres p.

    ``points_t``: the points as (m, n) (coordinate-major: every operation runs along n).
    """
    squared = sum(rounded_square(points_t[j][None, :] - centers[:, j][:, None]) for j in range(points_t.shape[0]))
    return _value_code(jnp.sqrt(squared), r, z)


def _value_code(distance: jax.Array, r: jax.Array, z: int) -> jax.Array:
    closeness = jnp.clip(1.0 - distance / r, 0.0, 1.0) ** z
    return jnp.clip(jnp.floor(closeness * 2.0**VALUE_BITS), 0, 2**VALUE_BITS).astype(jnp.int32)


def touch_offsets(dim: int) -> np.ndarray:
    """(T, m) int32 o: a point of level-i cell j can only be within r_i of the centres of cells j + o.

    |x - p| <= r_i = sqrt(m) 2**-(i+1) needs |x_k - p_k| <= r_i per coordinate, so the cell
    offsets are at most (sqrt(m) + 1) / 2 per coordinate. The values below add a point to
    the balls of these offsets only, so a point adds to at most T balls per level.
    """
    reach = int(math.floor((math.sqrt(dim) + 1.0) / 2.0))
    return np.array(list(itertools.product(range(-reach, reach + 1), repeat=dim)), dtype=np.int32)


def start_values(points_t: jax.Array, point_mask: jax.Array, plan: NetPlan) -> jax.Array:
    """(M,) int32 values of every start candidate (:func:`start_candidates` order), exact."""
    return level_values(points_t, point_mask, plan, plan.start_levels)


def level_values(points_t: jax.Array, point_mask: jax.Array, plan: NetPlan, last: int) -> jax.Array:
    """int32 values of every ball of levels 0 .. ``last``, level by level, cells in C order, exact.

    One scatter-add per offset of :func:`touch_offsets` and level.
    """
    offsets = touch_offsets(plan.dim)
    return jnp.concatenate([_level_values(points_t, point_mask, level, offsets, plan) for level in range(last + 1)])


def _level_values(points_t, point_mask, level: int, offsets: np.ndarray, plan: NetPlan) -> jax.Array:
    side = 2**level
    cells = jnp.clip(jnp.floor(points_t * side).astype(jnp.int32), 0, side - 1)  # (m, n)
    values = jnp.zeros(side**plan.dim, jnp.int32)
    r = radius(level, plan.dim)
    for offset in offsets:
        neighbour = [cells[j] + int(offset[j]) for j in range(plan.dim)]
        inside = point_mask
        squared, flat = 0.0, 0
        for j, cell in enumerate(neighbour):
            inside = inside & (cell >= 0) & (cell < side)
            squared = squared + rounded_square(points_t[j] - (cell.astype(jnp.float32) + 0.5) / side)
            flat = flat * side + jnp.clip(cell, 0, side - 1)
        values = values.at[flat].add(jnp.where(inside, _value_code(jnp.sqrt(squared), r, plan.z), 0))
    return values
