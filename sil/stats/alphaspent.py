"""The share of a run's error budget its confirmations used (no pydantic: `sil status` reads it).

`gate.ErrorBudget.spent` is this function of the budget's fields.
"""

from __future__ import annotations

import math
from collections.abc import Sequence


def alpha_spent(
    mode: str, alpha_run: float, max_confirmations: int, tested: Sequence[float], kept: Sequence[bool], recycle: bool
) -> float:
    """elond: the share of the gamma sequence used; fixed: the sum of the levels used, for the
    record only; fwer: the levels charged (a recycled KEEP's is returned), at most alpha_run."""
    if mode == "elond":
        return alpha_run * len(tested) / max_confirmations
    if mode == "fixed":
        return math.fsum(tested)
    charged = [a for a, k in zip(tested, kept, strict=True) if not (k and recycle)]
    return min(math.fsum(charged), alpha_run)
