"""``--bounds LO HI`` or ``--bounds private`` (with ``--bounds-share``): the bounds of a CLI run."""

from __future__ import annotations

import math
from typing import Sequence

from dpm_jax.bounds import PRIVATE, PrivateBounds

__all__ = ["parse_bounds", "released_bounds"]


class BoundsOptionError(ValueError):
    """A bad --bounds / --bounds-share; the message names the option."""


def parse_bounds(values: Sequence[str] | None, share: float | None, default: PrivateBounds = PrivateBounds()):
    """(lo, hi) floats, or a :class:`dpm_jax.PrivateBounds` for ``--bounds private`` (the command's
    ``default`` request, at ``share`` when given)."""
    if values is None:
        raise BoundsOptionError(
            "--bounds LO HI is required: the public range of the data, fixed without looking at it "
            "(reading it from the data would void the privacy guarantee); or --bounds private to "
            "estimate it under DP with a share of the budget (--bounds-share)"
        )
    if list(values) == [PRIVATE]:
        request = default if share is None else default._replace(share=share)
        request.check()
        return request
    if share is not None:
        raise BoundsOptionError("--bounds-share applies only to --bounds private")
    if len(values) != 2:
        raise BoundsOptionError(f"--bounds takes LO HI or the word private, got {' '.join(values)}")
    try:
        lower, upper = (float(v) for v in values)
    except ValueError:
        raise BoundsOptionError(f"--bounds LO HI must be numbers, got {' '.join(values)}") from None
    if not (math.isfinite(lower) and math.isfinite(upper) and lower < upper):
        raise BoundsOptionError(f"--bounds needs finite LO < HI, got {lower} {upper}")
    return lower, upper


def released_bounds(bounds, result) -> tuple:
    """What the release records: the given (lo, hi), or the DP estimate per dimension (lists)."""
    if isinstance(bounds, PrivateBounds):
        return tuple([float(v) for v in b] for b in result.bounds)
    return bounds
