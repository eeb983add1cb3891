"""``dpm-jax accountant FILE``: create or show an accountant's state file (:class:`dpm_jax.Accountant`),
which ``dpm-jax cluster --accountant FILE`` charges before it reads the data."""

from __future__ import annotations

import argparse
import os

from dpm_jax.accountant import Accountant
from dpm_jax.budget import Budget

__all__ = ["add_accountant_command", "open_accountant"]


def open_accountant(path: str | None) -> Accountant | None:
    """The accountant saved in ``path`` (None: no accountant); a clear error when the file is missing."""
    if path is None:
        return None
    if not os.path.isfile(path):
        raise ValueError(
            f"accountant state file {path} does not exist: create it with "
            f"dpm-jax accountant {path} --epsilon TOTAL --delta TOTAL"
        )
    return Accountant.load(path)


def _run_accountant(args: argparse.Namespace) -> int:
    if args.epsilon is not None or args.delta is not None:
        if args.epsilon is None or args.delta is None:
            raise ValueError("give both --epsilon and --delta (the total budget) to create an accountant")
        if os.path.exists(args.file):
            raise ValueError(f"{args.file} exists: an accountant's record is never overwritten (remove it first)")
        Accountant(Budget(args.epsilon, args.delta)).save(args.file)
    accountant = Accountant.load(args.file)
    epsilon, delta = accountant.remaining
    print(
        f"total epsilon = {accountant.total.epsilon:g}, delta = {accountant.total.delta:g}; "
        f"{len(accountant.charges)} releases spent epsilon = {accountant.spent_epsilon:g}, "
        f"delta = {accountant.spent_delta:g}; left: epsilon = {epsilon:g}, delta = {delta:g} (basic composition)"
    )
    for charge in accountant.charges:
        print(f"  {charge.what}: epsilon = {charge.epsilon:g}, delta = {charge.delta:g}")
    return 0


def add_accountant_command(commands) -> None:
    """Register ``accountant`` on the sub-command parsers ``commands``."""
    parser = commands.add_parser(
        "accountant",
        help="create or show a total budget that cluster --accountant FILE charges",
        description="With --epsilon and --delta: create FILE holding a total budget. Without: show what "
        "it has spent. Every 'dpm-jax cluster --accountant FILE' charges its budget to FILE before it reads "
        "the data, and is refused when the total would be exceeded (basic composition: epsilons and deltas add).",
    )
    parser.add_argument("file", metavar="FILE", help="the accountant's state file (JSON)")
    parser.add_argument("--epsilon", type=float, default=None, help="total epsilon (creates FILE)")
    parser.add_argument("--delta", type=float, default=None, help="total delta (creates FILE)")
    parser.set_defaults(handler=_run_accountant)
