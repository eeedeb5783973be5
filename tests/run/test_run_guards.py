"""Every caller spends audits under the run's guards, and the run's design is fixed at its start.

Regression tests for defects that came from reusing the run loop as a toolbox: `sil replicate`
skipped the approval re-check, the budgets and the anchoring; `sil promote` wrote the default
offline/simulated flags on any run; resuming with another `--replicate` changed the design
mid-candidate; the proposer never saw the programme prose.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from sil.base.errors import Halt, Refused
from sil.contract.schema import load_contract
from sil.integrity import ledger
from sil.run import arms
from sil.run.replication import replicate
from sil.run.train import RunConfig, open_run
from sil.store.release import promote_to_user
from tests.cli.test_cli import invoke
from tests.conftest import edit_contract
from tests.run.test_train import records, run_loop, shrink

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def done(tmp_path_factory) -> Path:
    """A finished small run with at least one KEEP (the random arm's coin keeps about half)."""
    root = tmp_path_factory.mktemp("guards")
    shutil.copy(REPO / "program.md", root / "program.md")
    shutil.copytree(REPO / "measurement", root / "measurement")
    shutil.copytree(REPO / "state" / "policies", root / "state" / "policies")
    shrink(root)
    edit_contract(root / "program.md", "max_audits: 44", "max_audits: 60")  # room left for replication
    rc = run_loop(root)
    assert any(r.type == "verdict" and r.payload["verdict"] == "keep" for r in records(rc)), "no KEEP to replicate"
    return root


@pytest.fixture
def copy(done: Path, tmp_path: Path) -> Path:
    out = tmp_path / "copy"
    shutil.copytree(done, out)
    return out


class Counting:
    """A guard that counts its calls and can be told to fail at call N."""

    def __init__(self, fail_at: int | None = None) -> None:
        self.calls = 0
        self.fail_at = fail_at

    def __call__(self) -> None:
        self.calls += 1
        if self.fail_at is not None and self.calls >= self.fail_at:
            raise Halt("approval no longer valid (test)")


def reopen(root: Path, before_audits=None, anchor=None, replicate_k: int | None = None):
    cfg = RunConfig(
        repo_root=root,
        run_dir=root / "state" / "runs" / "r1",
        policy_dir=root / "state" / "policies",
        replicate_k=replicate_k,
        on_event=lambda s: None,
        before_audits=before_audits or (lambda: None),
        anchor=anchor or (lambda: None),
    )
    return open_run(load_contract(root / "program.md"), cfg, measurement_hash="m" * 64)


def a_keep(rc) -> tuple[str, str]:
    keep = next(r.payload for r in records(rc) if r.type == "verdict" and r.payload["verdict"] == "keep")
    return keep["mutation_id"], keep["arm"]


def test_replicate_rechecks_the_approval_before_every_batch_and_anchors(copy: Path) -> None:
    guard, anchor = Counting(), Counting()
    rc = reopen(copy, guard, anchor)
    mutation_id, arm = a_keep(rc)
    result = replicate(rc, mutation_id, arm, k=3)
    assert result.rounds + sum(1 for r in records(rc) if r.type == "round" and r.payload.get("gap_reason")) >= 1
    assert guard.calls == 3  # one batch per fresh paired round
    assert anchor.calls >= 1
    assert any(r.type == "replicate" for r in records(rc))


def test_replicate_stops_when_the_approval_lapses_mid_way(copy: Path) -> None:
    rc = reopen(copy, Counting(fail_at=2))
    mutation_id, arm = a_keep(rc)
    audits_before = rc.state.audits
    with pytest.raises(Halt, match="approval no longer valid"):
        replicate(rc, mutation_id, arm, k=3)
    assert rc.state.audits == audits_before + 2  # the first round ran, the second never started
    assert not any(r.type == "replicate" for r in records(rc))


def test_replicate_obeys_the_audit_and_wall_budgets(copy: Path) -> None:
    rc = reopen(copy)
    mutation_id, arm = a_keep(rc)
    audits_before = rc.state.audits
    with pytest.raises(Refused, match="run budget"):
        replicate(rc, mutation_id, arm, k=rc.contract.budget.max_audits)
    rc.state.elapsed_s = rc.contract.budget.max_wall_s + 1
    rc.save()
    rc = reopen(copy)
    with pytest.raises(Refused, match="wall-time budget"):
        replicate(rc, mutation_id, arm, k=1)
    assert rc.state.audits == audits_before


def test_replicate_obeys_the_usd_budget(copy: Path, monkeypatch) -> None:
    rc = reopen(copy)
    mutation_id, arm = a_keep(rc)
    monkeypatch.setattr(rc.rounds, "cost_bound", rc.contract.budget.max_usd + 1.0)
    with pytest.raises(Refused, match="USD budget"):
        replicate(rc, mutation_id, arm, k=1)


def test_resuming_with_another_replicate_k_is_refused(copy: Path) -> None:
    stored_k = reopen(copy).state.replicate_k
    with pytest.raises(Refused, match=f"--replicate {stored_k}"):
        reopen(copy, replicate_k=stored_k + 2)
    assert reopen(copy, replicate_k=stored_k).promotion.replicate_k == stored_k
    assert reopen(copy).promotion.replicate_k == stored_k


def test_cli_resume_with_another_replicate_is_exit_2(copy: Path, monkeypatch) -> None:
    monkeypatch.chdir(copy)
    state = json.loads((copy / "state" / "runs" / "r1" / "state.json").read_text())
    result = invoke("run", "--run-id", "r1", "--replicate", str(state["replicate_k"] + 1))
    assert result.exit_code == 2, result.output
    assert "would change the design" in result.output


def rewrite_flags(ledger_path: Path, offline: bool, simulated: bool) -> None:
    """The same records re-chained under other run flags (as a real-model run would have them)."""
    old = list(ledger.read_records(ledger_path))
    ledger_path.unlink()
    new = ledger.Ledger(ledger_path, offline=offline, simulated=simulated)
    for r in old:
        new.append(r.type, r.payload, run_id=r.run_id)


def test_promote_writes_the_runs_own_flags(copy: Path) -> None:
    run_dir = copy / "state" / "runs" / "r1"
    rewrite_flags(run_dir / "ledger.jsonl", offline=False, simulated=False)
    arm = next(a for a in ("gate", "random") if a_keep_in(run_dir, a))
    promote_to_user(run_dir, copy / "state" / "policies", arm)
    written = list(ledger.read_records(run_dir / "ledger.jsonl"))[-2:]
    assert [r.type for r in written] == ["intent", "user_promote"]
    assert all(r.offline is False and r.simulated is False for r in written)


def a_keep_in(run_dir: Path, arm: str) -> bool:
    state = json.loads((run_dir / "state.json").read_text())
    return state["arms"].get(arm, {}).get("champion") != state["origin"]


def test_the_proposer_receives_the_programme_prose(workspace: Path, monkeypatch) -> None:
    seen = []

    def capture(loaded):
        seen.append(loaded.programme)
        raise Halt("captured")

    monkeypatch.setattr(arms, "make_proposer", capture)
    rc = reopen(shrink(workspace))
    with pytest.raises(Halt, match="captured"):
        arms.candidate_phase(rc, "gate")
    assert seen and "Research programme" in seen[0]
