"""The project's error budget on one held-out set: the level of its k-th certification (pure).

A held-out set serves every certification of every run on one measurement. Each certification
runs on fresh audits, so given everything before it (the user's revisions included) its test
keeps its level; P(some certification on the set passes a champion that is worse) is then at
most the sum of their levels, however the user adapts between runs (Bonferroni's inequality,
the alpha-spending view of Lan & DeMets 1983 and of online testing, Foster & Stine 2008).
So the project's alpha is spread evenly over a fixed number of certifications that deliver
(the gate arm's), and the set is spent when they are used up: a new measurement version (a new
held-out set, a new contract) starts a new budget. Unset, each run keeps its own guarantee at
`alpha_certify` and the set has no limit (the figures are then for the record only).

    rule = SpendingRule(project_alpha=0.05, certifications=10, alpha_certify=0.05)
    rule.level(spent=0.015)     # 0.005: the level of the 4th delivering certification
    rule.remaining(spent=0.05)  # 0: `sil check` refuses the next run (rule.level raises HoldoutSpent)
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from sil.contract.schema import Contract

SLACK = 1e-9  # relative: K levels of alpha/K add up to alpha despite rounding


class HoldoutSpent(ValueError):
    """The held-out set's project budget is used up: no further certification may run on it."""


@dataclass(frozen=True)
class SpendingRule:
    """How the error of one held-out set is spent over its certifications."""

    project_alpha: float | None  # None: today's per-run guarantee, no project budget
    certifications: int  # how many delivering certifications the set may serve (project budget only)
    alpha_certify: float  # the per-run level when there is no project budget

    def __post_init__(self) -> None:
        if self.project_alpha is not None and not 0 < self.project_alpha < 1:
            raise ValueError(f"project_alpha must be in (0, 1), got {self.project_alpha}")
        if self.certifications < 1:
            raise ValueError(f"certifications must be >= 1, got {self.certifications}")

    @property
    def bounded(self) -> bool:
        """Whether the set has a project budget (a limit on its certifications)."""
        return self.project_alpha is not None

    @property
    def step(self) -> float:
        """The level of each delivering certification."""
        return self.alpha_certify if self.project_alpha is None else self.project_alpha / self.certifications

    def level(self, spent: float) -> float:
        """The level of the next delivering certification when `spent` of the set's error is
        used (the sum of the levels before it); HoldoutSpent when it would not fit the budget."""
        if self.project_alpha is not None and self.remaining(spent) == 0:
            raise HoldoutSpent(
                f"the held-out set's error is spent: {spent:.4g} of project alpha {self.project_alpha:g} "
                f"(a certification takes {self.step:.4g})"
            )
        return self.step

    def remaining(self, spent: float) -> int | None:
        """Delivering certifications the set can still serve (None: no limit)."""
        if self.project_alpha is None:
            return None
        return max(0, math.floor((self.project_alpha - spent) / self.step + SLACK))


def rule_for(contract: Contract) -> SpendingRule:
    """The contract's spending rule (its `certification` section and `alpha_certify`)."""
    c = contract.certification
    return SpendingRule(c.project_alpha, c.project_certifications, contract.promotion.alpha_certify)
