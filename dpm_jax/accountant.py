"""A privacy budget across calls: :class:`Accountant` (basic sequential composition).

Every call of :func:`dpm_jax.cluster`, :func:`dpm_jax.cluster_stream`,
``DPMClustering.fit`` and ``dpm-jax cluster`` is one release whose ledger adds up to
its :class:`dpm_jax.Budget`. An accountant holds a total budget; while it is active
(``with accountant:``, or the CLI's ``--accountant FILE``) every such call charges its
budget to it *before any data is read*, and a call that would take the spent total
above the accountant's total is refused with :class:`BudgetExceededError`.

Composition rule (basic composition, Dwork & Roth, "The Algorithmic Foundations of
Differential Privacy", Theorem 3.16): releases that are (epsilon_i, delta_i)-DP on the
same data are together (sum epsilon_i, sum delta_i)-DP. The sums are taken with
:func:`math.fsum` and compared with the total in float64; a charge is accepted only when
both sums stay at or below the total. A call charges its whole budget (its ledger adds up
to at most the budget, :attr:`dpm_jax.Ledger.total_epsilon`); a call that fails after it
started still counts, since its error may depend on the data.
"""

from __future__ import annotations

import contextvars
import json
import math
import os
from typing import NamedTuple

from dpm_jax.budget import Budget

__all__ = ["Accountant", "BudgetExceededError", "Charge", "active_accountant"]

_ACTIVE: contextvars.ContextVar[Accountant | None] = contextvars.ContextVar("dpm_jax_accountant", default=None)


class BudgetExceededError(RuntimeError):
    """A release would take the spent budget above the accountant's total; nothing was read or released."""


class Charge(NamedTuple):
    """One release charged to an accountant."""

    what: str
    epsilon: float
    delta: float


class Accountant:
    """A total (epsilon, delta) budget and the releases charged to it (basic composition).

        acc = dpm_jax.Accountant(dpm_jax.Budget(3.0, 1e-5))
        with acc:
            dpm_jax.cluster(key, X, dpm_jax.Budget(1.0, 1e-6), bounds)   # charged: 1.0, 1e-6
        acc.remaining   # Budget(2.0, 9e-06)

    ``path``: a JSON state file (:meth:`load`, :meth:`save`); every charge is written to it.
    """

    def __init__(self, total: Budget, charges: tuple[Charge, ...] = (), path: str | os.PathLike | None = None):
        if not isinstance(total, Budget):
            raise TypeError(f"total must be a dpm_jax.Budget, got {type(total).__name__}")
        self.total = total
        self.charges = list(charges)
        self.path = path
        self._tokens: list[contextvars.Token] = []

    @property
    def spent_epsilon(self) -> float:
        return math.fsum(c.epsilon for c in self.charges)

    @property
    def spent_delta(self) -> float:
        return math.fsum(c.delta for c in self.charges)

    @property
    def remaining(self) -> tuple[float, float]:
        """(epsilon, delta) left: the total minus the spent sums (float64, never below 0)."""
        return (
            max(0.0, math.fsum([self.total.epsilon, -self.spent_epsilon])),
            max(0.0, math.fsum([self.total.delta, -self.spent_delta])),
        )

    def check(self, budget: Budget) -> None:
        """Raise :class:`BudgetExceededError` unless ``budget`` fits in what is left (reads nothing)."""
        epsilon = math.fsum([*(c.epsilon for c in self.charges), budget.epsilon])
        delta = math.fsum([*(c.delta for c in self.charges), budget.delta])
        if epsilon > self.total.epsilon or delta > self.total.delta:
            left_epsilon, left_delta = self.remaining
            raise BudgetExceededError(
                f"this release needs epsilon = {budget.epsilon:g}, delta = {budget.delta:g}, but the accountant has "
                f"epsilon = {left_epsilon:g}, delta = {left_delta:g} left of its total (epsilon = "
                f"{self.total.epsilon:g}, delta = {self.total.delta:g}; {len(self.charges)} releases charged). "
                "Nothing was read or released."
            )

    def spend(self, budget: Budget, what: str) -> None:
        """Charge ``budget`` for the release ``what`` (after :meth:`check`); saved to ``path`` if set."""
        self.check(budget)
        self.charges.append(Charge(what, float(budget.epsilon), float(budget.delta)))
        if self.path is not None:
            self.save(self.path)

    def save(self, path: str | os.PathLike) -> None:
        """Write the total and the charges as JSON to ``path`` (replaced atomically)."""
        state = dict(
            total=dict(epsilon=self.total.epsilon, delta=self.total.delta),
            charges=[c._asdict() for c in self.charges],
        )
        temporary = f"{os.fspath(path)}.tmp"
        with open(temporary, "w") as file:
            json.dump(state, file, indent=1)
        os.replace(temporary, path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> Accountant:
        """The accountant saved in ``path``; later charges are written back to it."""
        try:
            with open(path) as file:
                state = json.load(file)
            total = Budget(float(state["total"]["epsilon"]), float(state["total"]["delta"]))
            charges = tuple(Charge(str(c["what"]), float(c["epsilon"]), float(c["delta"])) for c in state["charges"])
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise ValueError(f"cannot read the accountant state file {os.fspath(path)!r}: {error}") from error
        return cls(total, charges, path)

    def __enter__(self) -> Accountant:
        self._tokens.append(_ACTIVE.set(self))
        return self

    def __exit__(self, *exc_info) -> None:
        _ACTIVE.reset(self._tokens.pop())

    def __repr__(self) -> str:
        return (
            f"Accountant(total={self.total}, spent=(epsilon={self.spent_epsilon:g}, delta={self.spent_delta:g}), "
            f"releases={len(self.charges)})"
        )


def active_accountant() -> Accountant | None:
    """The accountant of the innermost ``with accountant:`` block, or None."""
    return _ACTIVE.get()
