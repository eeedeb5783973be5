"""The benches take the certification's horizon rule from the contract (budget.certify_horizon)."""

from __future__ import annotations

import numpy as np
import pytest

from bench import proposers
from bench.procedures import HeldBack, LoopGateSettings
from sil.contract.schema import Promotion
from sil.stats.fitness import RoundStat
from sil.stats.judges import JudgeState, Outcome, Trial

DIMS = ["t", "c1", "c2"]


def stat(**diff: float) -> RoundStat:
    return RoundStat(diff=dict(diff), n_seeds={d: 10 for d in diff}, se={d: None for d in diff})


def calibrated(promo: Promotion) -> JudgeState:
    shared = JudgeState.start(promo)
    rng = np.random.default_rng(1)
    for _ in range(30):
        shared.pool.add_aa(stat(**{d: float(0.5 * rng.standard_normal()) for d in DIMS}))
    return shared


def test_the_gate_bench_holds_back_what_the_champion_needs_under_a_search_sized_horizon() -> None:
    promo = Promotion(target_dimensions=["t"], critical_dimensions=["c1", "c2"], error_design="two_stage")
    shared = calibrated(promo)
    fixed = HeldBack(LoopGateSettings(promo, 140), shared)
    sized = HeldBack(LoopGateSettings(promo, 140, "search", 0.8), shared)
    assert fixed.audits() == 140 and 0 < sized.audits() < 140  # before a KEEP: the floor only
    floor = sized.audits()
    near = Trial(screen=stat(t=-1.0, c1=0.0, c2=0.0), confirm=[stat(t=-0.8, c1=0.25, c2=0.0)] * 3)
    sized.closed(near, Outcome(verdict="keep", reason="kept", kind="confirm"), shared)
    assert sized.audits() > floor  # a champion near its tolerance needs a longer certification
    sized.closed(Trial(), Outcome(verdict="revert", reason="no", kind="screen"), shared)
    assert sized.effect == pytest.approx({"t": -0.8, "c1": 0.25, "c2": 0.0})  # a REVERT leaves it alone


def test_the_proposer_bench_sets_the_budgets_horizon_fields() -> None:
    contract = proposers.load_contract(proposers.ROOT / "examples" / "program-mutator-offline.md")
    over = proposers.with_overrides(contract, {"certify_horizon": "search", "certify_power": 0.9, "alpha_search": 0.3})
    b = over.contract.budget
    assert (b.certify_horizon, b.certify_power, over.contract.promotion.alpha_search) == ("search", 0.9, 0.3)
