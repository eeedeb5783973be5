"""The project's spending rule on one held-out set, the fresh-seed claim's variance, and the
contract's `certification` section (docs/statistics.md §3, "A project, not a run")."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from scipy import stats

from sil.contract.schema import Contract, Promotion, load_contract
from sil.stats.fitness import NoiseEstimate, RoundStat
from sil.stats.gate import for_fresh_seeds, make_certify_gate, seed_sampling_var
from sil.stats.holdout import HoldoutSpent, SpendingRule, rule_for
from tests.conftest import REPO, edit_contract


def test_without_a_project_budget_every_certification_keeps_the_runs_own_level() -> None:
    rule = SpendingRule(project_alpha=None, certifications=10, alpha_certify=0.05)
    assert not rule.bounded
    assert [rule.level(spent) for spent in (0.0, 0.5, 5.0)] == [0.05, 0.05, 0.05]
    assert rule.remaining(5.0) is None


def test_the_project_alpha_is_split_over_a_fixed_count_and_then_refused() -> None:
    rule = SpendingRule(project_alpha=0.05, certifications=4, alpha_certify=0.05)
    spent, levels = 0.0, []
    while rule.remaining(spent):
        levels.append(rule.level(spent))
        spent += levels[-1]
    assert levels == [0.0125] * 4 and math.isclose(spent, 0.05)
    assert rule.remaining(spent) == 0
    with pytest.raises(HoldoutSpent, match="spent"):
        rule.level(spent)
    # what earlier contracts with another split spent counts: 0.04 of 0.05 leaves no 0.0125
    assert rule.remaining(0.04) == 0 and rule.remaining(0.0374) == 1


def rounds_with(per_seed: list[float], n: int) -> list[RoundStat]:
    """`n` rounds whose per-seed target differences are `per_seed` (no audit noise), and no
    change on the critical dimension."""
    mean = sum(per_seed) / len(per_seed)
    return [
        RoundStat(
            diff={"t": mean, "c": 0.0},
            n_seeds={"t": len(per_seed), "c": len(per_seed)},
            se={"t": None, "c": None},
            seed_diff={"t": list(per_seed), "c": [0.0] * len(per_seed)},
        )
        for _ in range(n)
    ]


def promotion() -> Promotion:
    return Promotion(target_dimensions=["t"], critical_dimensions=["c"], error_design="two_stage", harm_tolerance=0.5)


NOISE = NoiseEstimate(sigma={"t": 0.5, "c": 0.5}, df={"t": 40, "c": 40}, n_pairs=40)


def test_a_fresh_seed_claim_counts_the_effects_spread_between_seeds() -> None:
    """Half the seeds improve a lot, half get worse: clear on these seeds, not on seeds never used."""
    rounds = rounds_with([-2.5, -2.5, -2.5, 1.5, 1.5, 1.5], n=30)
    gate = make_certify_gate(promotion(), NOISE, 30)
    assert gate.confirm(rounds).verdict == "keep"
    fresh = for_fresh_seeds(gate, rounds)
    target = next(leg for leg in fresh.legs if leg.kind == "target")
    # sample variance 4.8 of the seed means, over 6 seeds, widened for 5 degrees of freedom
    few = (stats.t.ppf(1 - target.alpha, 5) / stats.norm.ppf(1 - target.alpha)) ** 2
    assert few > 1 and math.isclose(target.seed_var, few * 4.8 / 6)
    assert fresh.confirm(rounds).verdict != "keep"
    # the same mean effect on every seed: nothing to add, the fresh claim certifies too
    even = rounds_with([-0.5] * 6, n=30)
    assert for_fresh_seeds(gate, even).confirm(even).verdict == "keep"


def test_a_fresh_seed_claim_without_per_seed_data_claims_nothing() -> None:
    rounds = [r.model_copy(update={"seed_diff": {}}) for r in rounds_with([-1.0] * 6, n=10)]
    target = next(leg for leg in make_certify_gate(promotion(), NOISE, 10).legs if leg.kind == "target")
    assert seed_sampling_var(target, rounds) == math.inf


def test_the_certification_section_is_hashed_only_when_set(workspace: Path) -> None:
    default = load_contract(REPO / "program.md").contract
    assert "certification" not in default.canonical_json()
    assert rule_for(default).project_alpha is None and rule_for(default).step == default.promotion.alpha_certify
    path = workspace / "program.md"
    edit_contract(
        path, "arms: [never, random, gate]", "arms: [never, random, gate]\ncertification: {project_alpha: 0.05}"
    )
    budgeted = load_contract(path).contract
    assert budgeted.contract_hash != default.contract_hash
    assert rule_for(budgeted).step == 0.005  # 0.05 over the default 10 certifications


def test_a_project_budget_under_the_fwer_design_is_refused() -> None:
    data = load_contract(REPO / "program.md").contract.model_dump()
    data["promotion"]["error_design"] = "fwer"
    data["certification"] = {"project_alpha": 0.05}
    with pytest.raises(ValueError, match="error_design two_stage"):
        Contract.model_validate(data)


def test_a_fresh_seed_claim_certified_on_the_search_seeds_is_refused() -> None:
    data = load_contract(REPO / "program.md").contract.model_dump()
    data["measurement"]["certify_on"] = "search"
    data["certification"] = {"claim": "fresh"}
    with pytest.raises(ValueError, match="needs held-out seeds"):
        Contract.model_validate(data)
