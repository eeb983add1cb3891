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
    units of the input. ``key_path`` is the argument list of
    :func:`dpm_jax.keys.derive_key` that re-derives the entry's random key.
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


class Ledger(tuple):
    """The privacy ledger of one run: a tuple of :class:`LedgerEntry`."""

    @property
    def total_epsilon(self) -> float:
        return math.fsum(e.epsilon for e in self)

    @property
    def total_delta(self) -> float:
        return math.fsum(e.delta for e in self)

    def table(self) -> str:
        """A plain-text table, one line per entry."""
        header = (
            f"{'entry':<16}{'mechanism':<18}{'epsilon':>10}{'delta':>11}{'sampler d':>11}  "
            f"{'sensitivity':<40}{'noise scale':>12}  key path"
        )
        lines = [header, "-" * len(header)]
        for e in self:
            scale = "-" if e.noise_scale is None else f"{e.noise_scale:.4g}"
            sens = f"{e.sensitivity:.6g} ({e.sensitivity_rule})"
            lines.append(
                f"{e.name:<16}{e.mechanism:<18}{e.epsilon:>10.5g}{e.delta:>11.3g}"
                f"{e.sampler_delta:>11.2g}  {sens:<40.40}{scale:>12}  {e.key_path}"
            )
        lines.append(f"{'total':<34}{self.total_epsilon:>10.5g}{self.total_delta:>11.3g}")
        return "\n".join(lines)

    def to_dicts(self) -> list[dict]:
        """JSON-ready list of entries."""
        return [dict(e._asdict(), key_path=list(e.key_path)) for e in self]

    def __repr__(self) -> str:
        return f"Ledger(total_epsilon={self.total_epsilon!r}, total_delta={self.total_delta!r}, entries={len(self)})"
