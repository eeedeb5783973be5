"""`budget.certify_horizon: search`: the gate arm's search and its certification share one pool,
and the search keeps back only what its champion needs (sil/run/horizon.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sil.contract.schema import load_contract
from sil.run.certify import certify_looks
from sil.run.context import RunContext
from sil.run.horizon import held_back
from sil.run.train import RunConfig, open_run
from sil.stats.fitness import RoundStat
from sil.stats.horizon import planned_power, reserved_looks
from sil.stats.judges import seed_count_scale
from tests.conftest import edit_contract

SIGMA = 0.5  # quiet enough that a champion with no harm needs fewer than 70 rounds at tolerance 0.5


def open_sized(root: Path, horizon: str = "search") -> RunContext:
    contract = root / "program.md"
    edit_contract(contract, "certify_random: true", "certify_random: false")
    edit_contract(contract, "certify_horizon: search", f"certify_horizon: {horizon}")  # program.md's is search
    cfg = RunConfig(
        repo_root=root, run_dir=root / "state" / "runs" / "h", policy_dir=root / "state" / "policies", on_event=print
    )
    rc = open_run(load_contract(contract), cfg, measurement_hash="m" * 64)
    rng = np.random.default_rng(5)
    dims = rc.contract.dimensions()
    for _ in range(40):  # the never arm's A/A pairs, without their audits
        diff = {d: float(SIGMA * rng.standard_normal()) for d in dims}
        rc.state.shared.pool.add_aa(RoundStat(diff=diff, n_seeds={d: 10 for d in dims}, se={d: None for d in dims}))
    return rc


def move_champion(rc: RunContext, effect: dict[str, float]) -> None:
    """The gate arm's first candidate made champion without an audit, its effect as estimated."""
    from tests.run.test_train import _gate_arm

    gate_arm, arm = _gate_arm(rc)
    gate_arm.propose(arm)
    assert arm.pending is not None
    arm.champion, arm.pending, arm.champion_effect = arm.pending.candidate, None, effect


def test_the_search_gets_the_pool_less_the_floor_until_it_keeps_something(workspace: Path) -> None:
    rc = open_sized(workspace)
    b = rc.contract.budget
    floor = held_back(rc.contract, rc.state, rc.measure, "gate")
    assert floor < b.certify_rounds  # a clear find needs fewer rounds than the fixed horizon
    assert rc.rounds.audits_left("gate") == b.arm_audits["gate"] + 2 * b.certify_rounds - 2 * floor
    assert rc.rounds.audits_left("never") == b.arm_audits["never"]  # an uncertified arm keeps its budget


def test_a_champion_near_its_tolerance_holds_back_more_and_the_certification_takes_what_is_left(
    workspace: Path,
) -> None:
    rc = open_sized(workspace)
    b = rc.contract.budget
    floor = held_back(rc.contract, rc.state, rc.measure, "gate")
    move_champion(rc, {"broken_tool_use": -0.8, "concerning": 0.3})
    near = held_back(rc.contract, rc.state, rc.measure, "gate")
    assert floor < near <= b.certify_rounds
    pool = b.arm_audits["gate"] + 2 * b.certify_rounds
    assert rc.rounds.audits_left("gate") == pool - 2 * near
    arm = rc.state.arms["gate"]
    arm.audits = pool - 2 * near  # the search stopped at its limit
    assert "held back to certify its champion" in (rc.rounds.budget_left("gate", 2) or "")
    assert certify_looks(rc, arm) == near
    arm.audits = 100  # a proposer that ran dry leaves the certification everything unspent
    assert certify_looks(rc, arm) == (pool - 100) // 2


def test_the_fixed_horizon_is_unchanged(workspace: Path) -> None:
    rc = open_sized(workspace, horizon="fixed")
    b = rc.contract.budget
    assert rc.rounds.audits_left("gate") == b.arm_audits["gate"]
    arm = rc.state.arms.get("gate")
    assert arm is None or certify_looks(rc, arm) == b.certify_rounds


def test_the_held_out_seeds_noise_widening_enters_the_size(workspace: Path) -> None:
    rc = open_sized(workspace)
    p, b, m = rc.contract.promotion, rc.contract.budget, rc.measure
    assert seed_count_scale(len(m.seed_ids), len(m.seeds_for(m.certify_on))) > 1  # 6 held-out seeds against 10
    unscaled = reserved_looks(p, rc.state.shared.pool.estimate(), None, b.certify_rounds, b.certify_power)
    assert held_back(rc.contract, rc.state, rc.measure, "gate") > unscaled


def test_under_a_project_budget_the_rounds_are_planned_at_the_certifications_own_level(workspace: Path) -> None:
    from sil.stats.holdout import rule_for

    rc = open_sized(workspace)
    move_champion(rc, {"broken_tool_use": -0.8, "concerning": 0.1})
    per_run = held_back(rc.contract, rc.state, rc.measure, "gate")
    cert = rc.contract.certification.model_copy(update={"project_alpha": 0.05, "project_certifications": 10})
    project = rc.contract.model_copy(update={"certification": cert})
    assert rule_for(project).step == pytest.approx(0.005)  # each certification's share
    budgeted = held_back(project, rc.state, rc.measure, "gate")
    assert per_run < budgeted <= rc.contract.budget.certify_rounds
    p, b, m = rc.contract.promotion, rc.contract.budget, rc.measure
    scale = seed_count_scale(len(m.seed_ids), len(m.seeds_for(m.certify_on)))
    noise = rc.state.shared.pool.estimate()
    effect = rc.state.arms["gate"].champion_effect
    assert planned_power(p, noise, effect, budgeted, scale, alpha=0.005) >= b.certify_power
    assert planned_power(p, noise, effect, per_run, scale, alpha=0.005) < b.certify_power


def test_the_outlook_warns_when_even_a_clean_champion_would_likely_be_rolled_back(workspace: Path) -> None:
    """After the calibration the run says what its certification can do for a clean champion, at
    the level it runs at and on its seeds; below certify_power the line warns and names the fix."""
    from sil.run.horizon import certify_outlook
    from sil.store.events import CertificationOutlook

    rc = open_sized(workspace)
    seen = certify_outlook(rc.contract, rc.state, rc.measure)
    assert seen is not None and seen.looks == rc.contract.budget.certify_rounds and not seen.short
    cert = rc.contract.certification.model_copy(update={"project_alpha": 0.001, "project_certifications": 10})
    strict = rc.contract.model_copy(update={"certification": cert})
    tight = certify_outlook(strict, rc.state, rc.measure)
    assert tight is not None and tight.power < seen.power  # a share of a small project alpha
    promo = rc.contract.promotion.model_copy(update={"harm_tolerance": 0.05})
    narrow = certify_outlook(rc.contract.model_copy(update={"promotion": promo}), rc.state, rc.measure)
    assert narrow is not None and narrow.short and narrow.needed is not None and narrow.needed > narrow.looks
    line = CertificationOutlook(words=narrow.words(), seeds="6 held-out", short=narrow.short).text()
    assert "WARNING" in line and "budget.certify_rounds" in line and f"about {narrow.needed} rounds" in line
    assert "WARNING" not in CertificationOutlook(words=seen.words(), seeds="6 held-out", short=False).text()
    from sil.run.horizon import outlook_event

    assert "seeds' spread" not in outlook_event(rc.contract, seen, rc.measure).text()
    fresh = rc.contract.certification.model_copy(update={"claim": "fresh"})
    said = outlook_event(rc.contract.model_copy(update={"certification": fresh}), seen, rc.measure).text()
    assert "round noise only" in said and "seeds' spread" in said  # a fresh-seed claim's power is lower
    from sil.stats.horizon import Outlook

    def fix(needed: int | None) -> str:
        short = Outlook(power=0.5, looks=70, goal=0.8, needed=needed)
        return outlook_event(rc.contract, short, rc.measure).text()

    assert "raise budget.certify_rounds" in fix(90) and "at most" not in fix(90)
    for hopeless in (101, None):  # past the longest certification a contract may ask for
        assert "raise budget.certify_rounds" not in fix(hopeless) and "at most 100 rounds" in fix(hopeless)
    uncertified = rc.contract.model_copy(update={"budget": rc.contract.budget.model_copy(update={"certify_rounds": 0})})
    assert certify_outlook(uncertified, rc.state, rc.measure) is None


def test_the_new_budget_fields_hash_only_when_set(workspace: Path) -> None:
    import json

    from sil.contract.schema import ContractError

    contract = workspace / "program.md"
    sized = load_contract(contract).contract
    edit_contract(contract, "certify_horizon: search", "certify_horizon: fixed")
    before = load_contract(contract).contract
    assert not {"certify_horizon", "certify_power"} & set(json.loads(before.canonical_json())["budget"])
    edit_contract(contract, "certify_horizon: fixed", "certify_horizon: search")
    assert sized.budget.certify_horizon == "search" and sized.contract_hash != before.contract_hash
    edit_contract(contract, "certify_horizon: search", "certify_horizon: auto")
    try:
        load_contract(contract)
    except ContractError as ex:
        assert "certify_horizon" in str(ex) and "search" in str(ex)
    else:
        raise AssertionError("an unknown certify_horizon was accepted")


@pytest.mark.slow  # a whole small run
def test_a_whole_run_with_a_search_sized_horizon_completes_verifies_and_records_its_horizon(workspace: Path) -> None:
    from sil.integrity import ledger
    from sil.run.horizon import pool_audits
    from tests.run.test_train import records, run_loop, shrink

    root = shrink(workspace)
    edit_contract(root / "program.md", "certify_rounds: 1", "certify_rounds: 8")  # program.md sizes by the search
    edit_contract(root / "program.md", "max_audits: 44", "max_audits: 60")
    rc = run_loop(root)
    assert rc.state.phase == "done", rc.state.halt_reason
    assert ledger.verify_file(rc.run_dir / "ledger.jsonl").ok
    gate = rc.state.arms["gate"]
    assert gate.audits <= pool_audits(rc.contract, "gate")
    for cert in [r.payload for r in records(rc) if r.type == "certify" and r.payload["arm"] == "gate"]:
        assert cert["looks"] == (pool_audits(rc.contract, "gate") - gate.audits) // 2
        assert cert["outlook"]["looks"] == cert["looks"]  # what that horizon could do for a clean champion
