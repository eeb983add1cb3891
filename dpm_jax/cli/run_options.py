"""The arguments every one-release sub-command but ``cluster`` shares (``kmeans``, ``synthesize``):
INPUT, the budget, ``--bounds LO HI`` or ``--bounds private`` with ``--bounds-share``, and the seed.

``cluster`` has more ways to give bounds (one pair per column, ``--bounds-file``) and parses them
in :mod:`dpm_jax.cli.main`; all three read ``--bounds`` through :func:`dpm_jax.cli.bounds_option.parse_bounds`.
"""

from __future__ import annotations

import argparse

from dpm_jax.bounds import PrivateBounds
from dpm_jax.budget import Budget
from dpm_jax.cli.bounds_option import parse_bounds

__all__ = ["add_run_command", "budget_and_bounds"]


def add_run_command(
    commands, name: str, seed_type, help: str, description: str, private_default: PrivateBounds = PrivateBounds()
) -> argparse.ArgumentParser:
    """Register the sub-command ``name`` on ``commands`` with INPUT, --epsilon, --delta, --bounds,
    --bounds-share and --seed; the caller adds its own options and cli.main its handler.
    ``private_default``: what ``--bounds private`` asks for in this command's algorithm."""
    parser = commands.add_parser(name, help=help, description=description)
    parser.set_defaults(private_default=private_default)
    parser.add_argument("input", metavar="INPUT", help="an (n, d) table: .npy, .csv (header optional), .parquet")
    parser.add_argument("--epsilon", type=float, required=True, help="total privacy budget epsilon > 0")
    parser.add_argument("--delta", type=float, required=True, help="total delta in (0, 1)")
    parser.add_argument(
        "--bounds",
        nargs="+",
        metavar="BOUND",
        default=None,
        help="LO HI: the public range of the data, fixed without looking at it; or the word private: "
        "estimated under DP with a share of the budget (--bounds-share), its line first in the ledger",
    )
    parser.add_argument(
        "--bounds-share",
        type=float,
        default=None,
        help="with --bounds private: the share of epsilon (and delta) spent on the bounds "
        f"(default {private_default.share})",
    )
    parser.add_argument("--seed", type=seed_type, default=None, help="integer seed (keep it secret); default: fresh")
    return parser


def budget_and_bounds(args: argparse.Namespace) -> tuple[Budget, tuple[float, float] | PrivateBounds]:
    """The run's :class:`dpm_jax.Budget` and bounds ((lo, hi) or a checked :class:`dpm_jax.PrivateBounds`);
    a ValueError naming the option for a bad one, before any data is read."""
    bounds = parse_bounds(args.bounds, args.bounds_share, args.private_default)
    return Budget(epsilon=args.epsilon, delta=args.delta), bounds
