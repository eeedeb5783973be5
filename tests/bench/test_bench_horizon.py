"""The benches take the certification's horizon rule from the contract (budget.certify_horizon)."""

from __future__ import annotations

from bench import proposers


def test_the_proposer_bench_sets_the_budgets_horizon_fields() -> None:
    contract = proposers.load_contract(proposers.ROOT / "examples" / "program-mutator-offline.md")
    over = proposers.with_overrides(contract, {"certify_horizon": "search", "certify_power": 0.9, "alpha_search": 0.3})
    b = over.contract.budget
    assert (b.certify_horizon, b.certify_power, over.contract.promotion.alpha_search) == ("search", 0.9, 0.3)
