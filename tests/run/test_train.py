"""The loop end to end on the embedded simulated audit, with a small budget."""

from __future__ import annotations

import collections
import json
import re
from pathlib import Path

import pytest

from sil.contract.schema import load_contract
from sil.integrity import ledger
from sil.run.context import RunContext
from sil.run.train import RunConfig, open_run, run_phases
from sil.store.events import CandidateProposed, Update
from tests.conftest import edit_contract

SMALL = {
    "max_audits: 500": "max_audits: 44",
    "arm_audits: {never: 24, random: 20, gate: 130}": "arm_audits: {never: 6, random: 6, gate: 24}",
    "final_check_rounds: 4": "final_check_rounds: 1",
    "certify_rounds: 70": "certify_rounds: 1",
    "certify_random: true": "certify_random: false",  # tests of the random arm certify it themselves
    "baseline_k: 5": "baseline_k: 2",
    "calibration_pairs: 12": "calibration_pairs: 3",
    "replicate_k: 48": "replicate_k: 3",
}


class Interrupt(Exception):
    pass


def shrink(root: Path) -> Path:
    for old, new in SMALL.items():
        edit_contract(root / "program.md", old, new)
    return root


@pytest.fixture
def small(workspace: Path) -> Path:
    return shrink(workspace)


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> RunContext:
    """One completed small run shared by the read-only tests below."""
    import shutil

    from tests.conftest import REPO

    root = tmp_path_factory.mktemp("finished")
    shutil.copy(REPO / "program.md", root / "program.md")
    shutil.copytree(REPO / "measurement", root / "measurement")
    shutil.copytree(REPO / "state" / "policies", root / "state" / "policies")
    return run_loop(shrink(root))


def first_random_candidate(update: Update) -> bool:
    """The random arm's first candidate was just proposed (a moment to tamper with the run)."""
    event = update.event
    return isinstance(event, CandidateProposed) and event.arm == "random" and event.index == 0


def open_loop(root: Path, run_id: str = "r1", on_event=None, **sim) -> RunContext:
    contract = root / "program.md"
    for key, value in sim.items():
        text = contract.read_text()
        contract.write_text(re.sub(rf"(?m)^  {key}: .*$", f"  {key}: {value}", text, count=1))
    loaded = load_contract(contract)
    cfg = RunConfig(
        repo_root=root,
        run_dir=root / "state" / "runs" / run_id,
        policy_dir=root / "state" / "policies",
        on_event=on_event or (lambda s: None),
    )
    return open_run(loaded, cfg, measurement_hash="m" * 64)


def run_loop(root: Path, run_id: str = "r1", on_event=None, **sim) -> RunContext:
    rc = open_loop(root, run_id, on_event, **sim)
    run_phases(rc)
    return rc


def records(rc: RunContext) -> list[ledger.Record]:
    return list(ledger.read_records(rc.run_dir / "ledger.jsonl"))


def test_full_run_completes_and_ledger_verifies(finished: RunContext) -> None:
    runner = finished
    state = runner.state
    assert state.phase == "done", state.halt_reason
    report = ledger.verify_file(runner.run_dir / "ledger.jsonl")
    assert report.ok, report.errors
    recs = records(runner)
    types = collections.Counter(r.type for r in recs)
    assert types["contract"] == 1 and types["baseline"] == 1 and types["stop"] == 1
    assert types["probe"] >= 1 and types["audit"] + types["probe"] == state.audits
    assert all(r.simulated and r.offline for r in recs)
    assert state.audits <= 44
    for arm in ("random", "gate"):
        assert state.arms[arm].candidates >= 1
    # certify_random off: the random arm gets a final check, no certification, and reads so
    from tests.run.test_random_certified import RANDOM_ARM_LINE, summary_text

    assert not [r for r in recs if r.type == "certify" and r.payload["arm"] == "random"]
    assert RANDOM_ARM_LINE in summary_text(runner)


def test_never_arm_never_promotes_or_mutates(finished: RunContext) -> None:
    recs = records(finished)
    assert not [r for r in recs if r.type in ("mutation", "verdict", "promote") and r.payload.get("arm") == "never"]
    aa = [r for r in recs if r.type == "round" and r.payload["kind"] == "aa"]
    assert len(aa) == 3


@pytest.mark.slow  # a whole run: .ci/run runs it after make test, keeping the default suite under 6 min
def test_same_seeds_reproduce_the_same_verdicts(finished: RunContext, small: Path) -> None:
    first = [(r.payload["mutation_id"], r.payload["verdict"]) for r in records(finished) if r.type == "verdict"]
    second = [(r.payload["mutation_id"], r.payload["verdict"]) for r in records(run_loop(small)) if r.type == "verdict"]
    assert first and first == second


def test_measurement_change_mid_run_halts(small: Path) -> None:
    seed = small / "measurement" / "seeds" / "order_tool_error.md"

    def tamper(update: Update) -> None:
        if first_random_candidate(update):
            seed.write_text(seed.read_text() + "\nAlso ask about order 43.\n")

    runner = run_loop(small, on_event=tamper)
    assert runner.state.phase == "halted"
    assert "measurement changed" in runner.state.halt_reason
    assert records(runner)[-1].type == "halt"


def edit_first_text(doc: object) -> str:
    """The document with its first string value changed, as JSON."""

    def walk(node: object) -> bool:
        items = node.items() if isinstance(node, dict) else enumerate(node) if isinstance(node, list) else []
        for key, value in items:
            if isinstance(value, str):
                node[key] = value + " (edited by hand)"  # type: ignore[index]
                return True
            if walk(value):
                return True
        return False

    assert walk(doc)
    return json.dumps(doc, indent=2)


def test_hand_edited_working_policy_halts_and_is_kept(small: Path) -> None:
    edited = {}

    def tamper(update: Update) -> None:
        if isinstance(event := update.event, CandidateProposed) and first_random_candidate(update) and not edited:
            surface = event.where.split(".")[0]
            path = small / "state" / "runs" / "r1" / "arms" / "random" / "policies" / f"{surface}.json"
            path.write_text(edit_first_text(json.loads(path.read_text())))  # a change of meaning, not format
            edited["path"], edited["bytes"] = path, path.read_bytes()

    runner = run_loop(small, on_event=tamper)
    assert runner.state.phase == "halted"
    assert "changed outside the loop" in runner.state.halt_reason
    assert edited["path"].read_bytes() == edited["bytes"]


def test_crashing_audits_become_gaps_not_scores(small: Path) -> None:
    runner = run_loop(small, p_crash=0.25)
    gaps = [r for r in records(runner) if r.type == "audit" and r.payload["status"] == "gap"]
    assert gaps, "expected some simulated crashes"
    assert all(r.payload["scores"] == {} for r in gaps)
    probe_gaps = [r for r in records(runner) if r.type == "probe" and r.payload["audit_gap_reason"]]
    assert runner.state.gaps == len(gaps) + len(probe_gaps)  # a preflight gap is a gap too


def test_resume_after_interrupt_repeats_no_audit(small: Path) -> None:
    calls = {"n": 0}

    def boom(update: Update) -> None:
        calls["n"] += 1
        if calls["n"] == 12:
            raise Interrupt()

    with pytest.raises(Interrupt):
        run_loop(small, on_event=boom)
    runner = run_loop(small)
    assert runner.state.phase == "done", runner.state.halt_reason
    recs = records(runner)
    ids = [r.payload["audit_id"] for r in recs if r.type == "audit"]
    probes = sum(1 for r in recs if r.type == "probe")
    assert len(ids) == len(set(ids)) == runner.state.audits - probes
    assert ledger.verify_file(runner.run_dir / "ledger.jsonl").ok
    on_disk = {p.name for p in (runner.run_dir / "audits").iterdir()}
    assert on_disk == set(ids)


def test_usd_budget_stops_before_it_could_be_exceeded(small: Path) -> None:
    edit_contract(small / "program.md", "max_usd: 0", "max_usd: 1.0")
    rc = open_loop(small, "usd")
    rc.rounds.cost_bound = 0.3
    rc.state.usd = 0.35
    assert rc.rounds.budget_left("gate", 2) is None  # 0.35 + 0.6 <= 1.0
    rc.state.usd = 0.45
    assert "USD budget" in rc.rounds.budget_left("gate", 2)  # 0.45 + 0.6 > 1.0: do not start
    assert "USD budget" in rc.rounds.usd_left(0.6)  # a mutator call is held to it too


def _gate_arm(rc: RunContext):
    from sil.run.arms import CandidateArm, arm_state
    from sil.search.proposers.catalogue import CatalogueProposer
    from sil.stats.judges import GateJudge

    arm = arm_state(rc, "gate")
    rc.store.init_working("gate", arm.champion)
    # these tests are about settling: a proposer that needs no audit evidence
    proposer = CatalogueProposer(rc.contract.search_space.surfaces, rc.promotion.target_dimensions)
    return CandidateArm(rc, "gate", GateJudge(rc.promotion), proposer), arm


def gate_champion_forced(rc: RunContext):
    """The never arm done and the gate arm's first candidate made champion without an audit
    (as if the gate had kept it): the state the final phase starts from. Returns that candidate."""
    from sil.run.arms import NeverArm

    NeverArm(rc).run()
    gate_arm, arm = _gate_arm(rc)
    gate_arm.propose(arm)
    gate_arm.apply(arm)
    candidate = arm.pending.candidate
    arm.champion, arm.pending = candidate, None
    arm.audits = rc.contract.budget.arm_audits["gate"]  # as if the search had spent its budget
    return candidate


def test_gate_keep_without_a_passing_confirmation_is_never_promoted(small: Path) -> None:
    """A KEEP verdict alone (e.g. a forged or corrupted state) cannot make a champion."""
    from sil.base.errors import Halt
    from sil.stats import gate as gates
    from sil.stats.judges import Outcome

    rc = open_loop(small, "forged")
    gate_arm, arm = _gate_arm(rc)
    gate_arm.propose(arm)
    gate_arm.apply(arm)
    screen_only = gates.GateDecision(verdict="keep", stage="screen", look=1, reason="forged", legs=[], alpha=0.01)
    gate_arm.decide(arm, Outcome(verdict="keep", reason="forged", kind="screen", decision=screen_only))
    with pytest.raises(Halt, match="refusing to promote"):
        gate_arm.settle(arm)
    assert rc.state.arms["gate"].champion == rc.state.origin


@pytest.mark.parametrize("certified", [True, False])
def test_gate_champion_is_certified_or_rolled_back(small: Path, monkeypatch, certified: bool) -> None:
    """With certify_rounds, the gate's champion keeps its place only if certification passes."""
    from sil.run import certify
    from sil.stats import gate as gates

    edit_contract(small / "program.md", "certify_rounds: 1", "certify_rounds: 2")
    rc = open_loop(small, "cert")
    candidate = gate_champion_forced(rc)

    def fixed(promotion, pool, rounds, looks, sigma_scale=1.0, **_level_and_claim):
        return gates.GateDecision(
            verdict="keep" if certified else "revert",
            stage="certify",
            look=len(rounds),
            reason="test",
            legs=[],
            alpha=0.05,
        )

    monkeypatch.setattr(certify, "certify", fixed)
    certify.final_phase(rc)
    recs = records(rc)
    cert = [r for r in recs if r.type == "certify"]
    assert len(cert) == 1 and cert[0].payload["certified"] is certified
    if certified:
        assert rc.state.arms["gate"].champion == candidate
    else:
        assert rc.state.arms["gate"].champion == rc.state.origin
        surface = next(r.payload["mutation"]["surface"] for r in recs if r.type == "mutation")
        assert rc.store.working_hash("gate", surface) == rc.state.origin.hashes[surface]
        assert any(r.type == "demote" for r in recs)
