"""Candidate identity includes the arm (issue point 6), and the run-level defects of point 7."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest

from sil.base.errors import Halt
from sil.contract.schema import Promotion, load_contract
from sil.integrity import ledger
from sil.integrity.records import VerdictRecord
from sil.run.arms import CandidateArm, NeverArm, arm_state
from sil.run.baseline import baseline_phase
from sil.run.replication import judge_replication
from sil.run.train import RunConfig, open_run
from sil.search.proposers import Proposal, ProposalRequest, ProposerBase, make_proposer
from sil.search.proposers.catalogue import CatalogueProposer
from sil.stats.fitness import RoundStat
from sil.stats.judges import GateJudge, Outcome
from sil.store.policyrefs import candidate_ref, champion_ref
from tests.run.test_train import open_loop, records, run_loop, shrink

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}


def git(root: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV}
    return subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True, text=True, env=env).stdout


def open_with_git(root: Path, run_id: str):
    git(root, "init", "-q", "-b", "main")
    cfg = RunConfig(
        repo_root=root,
        run_dir=root / "state" / "runs" / run_id,
        policy_dir=root / "state" / "policies",
        on_event=lambda s: None,
        policy_repo=root,
    )
    return open_run(load_contract(root / "program.md"), cfg, measurement_hash="m" * 64)


class SameEdit(ProposerBase):
    """A proposer that proposes one fixed mutation, whatever the arm."""

    def __init__(self, mutation) -> None:
        self.mutation = mutation

    def propose(self, req: ProposalRequest) -> Proposal:
        return Proposal(mutation=self.mutation)


def settle_as(rc, name: str, proposer) -> None:
    """Propose, apply and revert one candidate in arm `name`."""
    cand = CandidateArm(rc, name, GateJudge(rc.promotion), proposer)
    arm = arm_state(rc, name)
    rc.store.init_working(name, arm.champion)
    cand.propose(arm)
    cand.apply(arm)
    cand.decide(arm, Outcome(verdict="revert", reason="test", kind="confirm"))
    cand.settle(arm)


@pytest.fixture
def small(workspace: Path) -> Path:
    return shrink(workspace)


# ---------------------------------------------------------------- 6. the same edit in two arms


def test_the_same_edit_in_two_arms_is_two_candidates(small: Path) -> None:
    rc = open_with_git(small, "twice")
    c = rc.contract
    probe = CatalogueProposer(c.search_space.surfaces, c.promotion.target_dimensions)  # any fixed edit will do
    first = probe.propose(
        ProposalRequest(rc.store.documents(rc.state.origin), set(), np.random.default_rng(0), 0, 0, arm="random")
    ).mutation
    for name in ("random", "gate"):
        settle_as(rc, name, SameEdit(first))
    verdicts = list(rc.book.payloads("verdict", VerdictRecord))
    assert sorted(v.arm for v in verdicts if v.mutation_id == first.mutation_id) == ["gate", "random"]
    for name in ("random", "gate"):
        assert git(small, "rev-parse", candidate_ref(rc.state.run_id, name, first.mutation_id)).strip()
    assert ledger.verify_file(rc.run_dir / "ledger.jsonl").ok


# ---------------------------------------------------------------- 7. run-level defects


def test_a_baseline_without_one_usable_audit_halts_after_its_k_audits(small: Path) -> None:
    rc = open_loop(small, "nobase", p_crash=1.0)
    with pytest.raises(Halt, match="baseline has no usable audit"):
        baseline_phase(rc)
    assert rc.state.audits == rc.promotion.baseline_k  # not one audit more
    assert rc.state.gaps == rc.promotion.baseline_k


def test_gap_count_after_a_preflight_halt_is_the_number_of_gapped_probes(small: Path) -> None:
    rc = run_loop(small, "pfhalt", p_crash=1.0)
    assert rc.state.phase == "halted" and "preflight could not run" in rc.state.halt_reason
    probes = [r for r in records(rc) if r.type == "probe"]
    assert len(probes) == rc.contract.stop.max_consecutive_gaps
    assert rc.state.gaps == len(probes) == rc.state.audits


def test_a_certification_roll_back_moves_the_champion_ref_to_the_origin(small: Path, monkeypatch) -> None:
    from sil.run import certify
    from sil.stats import gate as gates

    rc = open_with_git(small, "rollback")
    NeverArm(rc).run()
    gate_arm = CandidateArm(rc, "gate", GateJudge(rc.promotion), make_proposer(rc.loaded))
    arm = arm_state(rc, "gate")
    rc.store.init_working("gate", arm.champion)
    gate_arm.propose(arm)
    gate_arm.apply(arm)
    decision = gates.GateDecision(verdict="keep", stage="confirm", look=1, reason="t", legs=[], alpha=0.01)
    monkeypatch.setattr("sil.run.arms.should_promote", lambda d: True)
    gate_arm.decide(arm, Outcome(verdict="keep", reason="t", kind="confirm", decision=decision))
    gate_arm.settle(arm)
    ref = champion_ref(rc.state.run_id, "gate")
    kept = git(small, "rev-parse", ref).strip()
    assert kept == arm.champion_commit
    revert = gates.GateDecision(verdict="revert", stage="certify", look=1, reason="t", legs=[], alpha=0.05)
    monkeypatch.setattr(certify, "certify", lambda *a, **_: revert)
    certify.final_phase(rc)
    origin = rc.refs.origin_commit(rc.state.origin, rc.record_time("contract", "run"))
    assert git(small, "rev-parse", ref).strip() == origin != kept
    assert arm.champion == rc.state.origin


def stat(x: float) -> RoundStat:
    return RoundStat(diff={"t": x, "c": 0.0}, n_seeds={"t": 10, "c": 10}, se={"t": None, "c": None})


def test_replicate_is_inconclusive_when_its_interval_crosses_zero() -> None:
    """Issue 26: an interval that spans the margin decides nothing; only one wholly past it demotes."""
    promotion = Promotion(
        target_dimensions=["t"], critical_dimensions=["c"], superiority_margin=0.0, critical_margin=0.5
    )
    rc = SimpleNamespace(promotion=promotion)
    keep = SimpleNamespace(mutation_id="m1", arm="gate")
    crossing = judge_replication(rc, keep, [stat(-1.0), stat(0.6), stat(-0.8)])  # mean < 0, interval spans 0
    assert crossing.target_interval[0] < 0 < crossing.target_interval[2]
    assert not crossing.demoted and not crossing.conclusive and "would decide" in crossing.reason
    worse = judge_replication(rc, keep, [stat(0.5), stat(0.6), stat(0.7)])
    assert worse.demoted and worse.target_interval[1] > 0
    holding = judge_replication(rc, keep, [stat(-1.0), stat(-0.9), stat(-1.1)])
    assert not holding.demoted and holding.target_interval[2] < 0
