"""The privacy ledger: one line per mechanism and level, stated by the release itself.

Every DP output is made by a release (:mod:`dpm_jax.releases`) that holds the
parameters its noise is drawn with and states its line from them (``entry()``);
a run's ledger is the list of its releases' lines (:func:`dpm_jax.releases.ledger_of`;
DPM's in the order Algorithm 1 runs them, :meth:`dpm_jax.dpm_releases.DPMReleases.ledger`). Key paths name the stream of
:mod:`dpm_jax.keys` and the rows of its draw (heap layout: row i is tree node i).
"""

from __future__ import annotations

import math
from typing import NamedTuple

__all__ = ["LedgerEntry", "Ledger", "heap_rows"]


def heap_rows(level: int) -> str:
    """The rows of the nodes of ``level`` in a heap-layout draw: ``heap[2**l:2**(l+1)]``."""
    return "heap[1]" if level == 0 else f"heap[{2**level}:{2 ** (level + 1)}]"


class LedgerEntry(NamedTuple):
    """One mechanism applied at one level (to all disjoint nodes of that level).

    ``sensitivity`` is the bound on the change of the mechanism's exact integer
    input (a count, an integer score, a fixed-point sum), ``sensitivity_rule`` says
    what it is. ``sampler_epsilon`` and ``sampler_delta`` are the parts of
    ``epsilon`` and ``delta`` that pay for the exact sampler's proven distance from
    its ideal distribution (:mod:`dpm_jax.mechanisms`). ``noise_scale`` is in the
    units of the input: the Laplace scale of a count, none for the exponential mechanism,
    and for the leaf sums the discrete Gaussian's sigma per coordinate in units of 2**s
    fixed-point codes (one code is 2**-20 of the bounds' range;
    :attr:`dpm_jax.averaging.AveragingPlan.noise_std_unit_range` gives it as a share of the
    range). ``key_path`` is the argument list of :func:`dpm_jax.keys.derive_key` that
    re-derives the entry's random key.
    """

    name: str
    mechanism: str
    level: int | None
    epsilon: float
    delta: float
    sensitivity: float
    sensitivity_rule: str
    noise_scale: float | None
    key_path: tuple
    sampler_epsilon: float = 0.0
    sampler_delta: float = 0.0


_LEGEND = (
    "delta (sampler): the part of delta that pays for the exact sampler's proven distance from its ideal",
    "  distribution (included in delta). noise scale: in the units of the mechanism's exact integer input --",
    "  discrete_laplace: the scale 1/epsilon of a count; exponential: none (sensitivity is the score's);",
    "  discrete_gaussian: sigma of the noise on each coordinate of a leaf's fixed-point sum, in units of",
    "  2**s codes (s in the sensitivity rule; one code is 2**-20 of the bounds' range).",
    "key path: dpm_jax.derive_key(key, stream) and the rows of the draw (heap[i]: tree node i).",
)


class Ledger(tuple):
    """The privacy ledger of one run: a tuple of :class:`LedgerEntry`."""

    @property
    def total_epsilon(self) -> float:
        return math.fsum(e.epsilon for e in self)

    @property
    def total_delta(self) -> float:
        return math.fsum(e.delta for e in self)

    def table(self) -> str:
        """A plain-text table, one line per entry, with the total and a legend of the columns.

        Nothing is cut: the sensitivity's rule (free text) is the last column.
        """
        header = ("entry", "mechanism", "epsilon", "delta", "delta (sampler)", "noise scale", "sensitivity", "key path")
        rows = [
            (
                e.name,
                e.mechanism,
                f"{e.epsilon:.5g}",
                f"{e.delta:.3g}",
                f"{e.sampler_delta:.2g}",
                "-" if e.noise_scale is None else f"{e.noise_scale:.4g}",
                f"{e.sensitivity:.6g}: {e.sensitivity_rule}",
                "/".join(str(part) for part in e.key_path),
            )
            for e in self
        ]
        total = ("total", "", f"{self.total_epsilon:.5g}", f"{self.total_delta:.3g}", "", "", "", "")
        widths = [max(len(row[i]) for row in [header, *rows, total]) for i in range(len(header))]
        line = lambda row: "  ".join(
            cell.ljust(width) if i in (0, 1, 6, 7) else cell.rjust(width)
            for i, (cell, width) in enumerate(zip(row, widths))
        ).rstrip()
        rule = "-" * len(line(header))
        return "\n".join([line(header), rule, *map(line, rows), rule, line(total), *_LEGEND])

    def to_dicts(self) -> list[dict]:
        """JSON-ready list of entries."""
        return [dict(e._asdict(), key_path=list(e.key_path)) for e in self]

    def __repr__(self) -> str:
        return f"Ledger(total_epsilon={self.total_epsilon!r}, total_delta={self.total_delta!r}, entries={len(self)})"
