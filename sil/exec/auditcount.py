"""How many audits each phase of a run can make, from the contract's numbers (no pydantic:
`sil status` reads it; `startchecks.planned_audits` is this on a `Contract`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import NamedTuple

PREFLIGHT_AUDITS = 1


class PlanCounts(NamedTuple):
    preflight: int
    baseline: int
    arms: dict[str, int]
    certification: int
    final_checks: int
    max_audits: int
    search_check: int = 0  # the gate champion certified on held-out seeds, re-measured on the search seeds

    @property
    def total(self) -> int:
        planned = self.preflight + self.baseline + sum(self.arms.values()) + self.certification + self.final_checks
        return min(planned + self.search_check, self.max_audits + self.preflight)


def plan_counts(
    arms: Sequence[str],
    arm_audits: Mapping[str, int],
    baseline_k: int,
    certify_rounds: int,
    final_check_rounds: int,
    max_audits: int,
    certify_on: str,
    certified: Sequence[str],
) -> PlanCounts:
    """`certified`: the arms whose champion is certified (contract.certifies); the others' get a final check."""
    checked_only = [a for a in ("random", "gate") if a in arms and a not in certified]
    return PlanCounts(
        preflight=PREFLIGHT_AUDITS,
        baseline=baseline_k,
        arms={a: n for a, n in arm_audits.items() if a in arms},
        certification=2 * certify_rounds * len(certified),
        final_checks=2 * final_check_rounds * len(checked_only),
        max_audits=max_audits,
        # an upper bound: `auto` certifies on the search seeds when the measurement has no held-out ones
        search_check=(certify_on != "search") * 2 * final_check_rounds * len(certified),
    )
