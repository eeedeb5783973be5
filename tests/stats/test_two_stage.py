"""The two-stage error design: a search stage at a fixed level, a certification that carries the guarantee."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import pytest

from sil.contract.schema import ContractError, Promotion, load_contract, parse_contract
from sil.stats.fitness import NoiseEstimate, RoundStat
from sil.stats.gate import ErrorBudget, make_certify_gate

ROOT = Path(__file__).resolve().parents[2]
DIMS = ["t", "c1", "c2"]
NOISE = NoiseEstimate(sigma={d: 0.7 for d in DIMS}, df={d: 40 for d in DIMS}, n_pairs=40)


def promo(**over) -> Promotion:
    return Promotion(target_dimensions=["t"], critical_dimensions=["c1", "c2"], **over)


def test_fixed_search_budget_never_runs_out_and_holds_its_level():
    b = ErrorBudget.from_promotion(promo(error_design="two_stage", alpha_search=0.1, max_confirmations=3))
    assert b.mode == "fixed"
    for i in range(10):  # far more confirmations than max_confirmations: the search is not capped
        assert b.next_alpha(expected_remaining=1.0) == 0.1
        b = b.record(0.1, kept=i % 2 == 0)
    assert b.confirmations == 10 and b.spent == pytest.approx(1.0)
    with pytest.raises(ValueError, match="search stage's level"):
        b.record(0.05, kept=False)


def test_fwer_design_is_unchanged_by_default():
    b = ErrorBudget.from_promotion(promo())
    assert b.mode == "fwer" and b.alpha_run == 0.1


def test_two_stage_certification_tests_every_critical_dimension_at_its_tolerance_and_alpha_certify():
    p = promo(error_design="two_stage", harm_tolerance=0.3, alpha_certify=0.05)
    legs = {leg.name: leg for leg in make_certify_gate(p, NOISE, rounds=20).legs}
    assert legs["t"].alpha == 0.05 and legs["t"].null == 0.0
    for c in ("c1", "c2"):  # the claim itself: delta_c < tolerance, at the certification's level
        assert legs[c].alpha == 0.05 and legs[c].null == pytest.approx(0.3)
    fwer = {leg.name: leg for leg in make_certify_gate(promo(harm_tolerance=0.3), NOISE, rounds=20).legs}
    assert fwer["c1"].alpha == 0.2  # today's design keeps its NI legs at alpha_noninferiority


def test_two_stage_certification_leaves_the_auxiliary_composite_to_the_search():
    noise = NoiseEstimate(sigma={d: 0.7 for d in [*DIMS, "a"]}, df={d: 40 for d in [*DIMS, "a"]}, n_pairs=40)
    two = promo(error_design="two_stage", auxiliary_dimensions=["a"])
    assert [leg.kind for leg in make_certify_gate(two, noise, rounds=5).legs] == ["target", "critical", "critical"]
    fwer = promo(auxiliary_dimensions=["a"])
    assert "auxiliary" in [leg.kind for leg in make_certify_gate(fwer, noise, rounds=5).legs]


@pytest.mark.parametrize("bad_dim", ["t", "c1"])
def test_certification_passes_a_champion_at_the_edge_of_the_claim_at_most_alpha_certify(bad_dim):
    """The guarantee, by Monte Carlo: a champion exactly at the boundary of the claim (no better
    than the start on the target, or exactly at the tolerance on a critical dimension) is
    certified with probability <= alpha_certify, whatever the other dimensions do."""
    p = promo(error_design="two_stage", harm_tolerance=0.3, alpha_certify=0.05)
    rng = np.random.default_rng(7)
    truth = {"t": -1.0, "c1": 0.0, "c2": 0.0}
    truth[bad_dim] = 0.0 if bad_dim == "t" else 0.3
    reps, passed = 1200, 0
    gate = make_certify_gate(p, NOISE, rounds=20)
    for _ in range(reps):
        rounds: list[RoundStat] = []
        for _ in range(20):
            diff = {d: float(truth[d] + 0.7 * rng.standard_normal()) for d in DIMS}
            rounds.append(RoundStat(diff=diff, n_seeds={d: 10 for d in DIMS}, se={d: None for d in DIMS}))
            d = gate.confirm(rounds)
            if d.verdict != "continue":
                break
        passed += d.verdict == "keep"
    rate = passed / reps
    assert rate <= 0.05 + 3 * math.sqrt(0.05 * 0.95 / reps)


def test_new_fields_at_their_defaults_leave_the_contract_hash_alone():
    loaded = load_contract(ROOT / "examples" / "program-mini-runtime.md")  # fwer, written out
    data = json.loads(loaded.contract.canonical_json())
    assert "error_design" not in data["promotion"] and "alpha_search" not in data["promotion"]
    two = loaded.contract.model_copy(
        update={"promotion": loaded.contract.promotion.model_copy(update={"error_design": "two_stage"})}
    )
    assert json.loads(two.canonical_json())["promotion"]["error_design"] == "two_stage"
    assert (
        two.contract_hash
        != loaded.contract.model_copy(
            update={"promotion": loaded.contract.promotion.model_copy(update={"error_design": "fwer"})}
        ).contract_hash
    )


def test_two_stage_without_a_certification_is_refused(tmp_path: Path):
    text = (ROOT / "program.md").read_text()
    text = text.replace("certify_rounds: 70", "certify_rounds: 0")
    assert "certify_rounds: 0" in text
    if "error_design: two_stage" not in text:
        text = text.replace("promotion:\n", "promotion:\n  error_design: two_stage\n", 1)
    with pytest.raises((ContractError, ValueError), match="certify_rounds >= 1"):
        parse_contract(text, str(ROOT / "program.md"))


def test_summary_says_how_to_read_the_random_arm_and_where_the_error_went():
    from rich.console import Console

    from sil.review.summary import ArmLine, Summary, render

    arm = ArmLine(
        arm="random", audits=20, candidates=10, keeps=5, reverts=5, changed=True,
        target_change=(-1.0, -1.5, -0.5), worst_critical=None, stop_reason="arm budget",
    )  # fmt: skip
    s = Summary(
        run_id="r1", phase="done", halt_reason=None, backend="sim", note="", target="broken_tool_use",
        baseline_mean=None, never_mean=None, drift=None, noise_sigma={}, noise_df={}, aa_mean_diff=None,
        arms=[arm], audits=20, gaps=0, usd=0.0, elapsed_s=1.0, alpha_run=0.1, alpha_spent=0.5,
        confirmations=5, error_design="two_stage", alpha_search=0.25, alpha_certify=0.05,
    )  # fmt: skip
    console = Console(record=True, width=300)
    render(s, console)
    text = console.export_text()
    lines = [line for line in text.splitlines() if line.startswith("random arm:")]
    assert len(lines) == 1 and "coin flip" in lines[0] and "no guarantee" in lines[0]
    assert "two-stage" in text and "α_search=0.25" in text and "α_certify=0.05" in text
    assert "of α_run" not in text  # the FWER budget line would misread a two-stage run
