"""A candidate's screen against the champion's recent audits (`promotion.screen_reference`).

The screen audits the candidate alone and compares it, seed by seed, with the mean of the
champion's last unselected audits on the search seeds; confirmations stay paired. Checked on a
small run of the default contract: what each screen audited, what it compared with, and that the
statistic is that comparison.
"""

from __future__ import annotations

import collections
import re
from pathlib import Path

import numpy as np
import pytest

from sil.exec.measure import AuditResult
from sil.integrity import ledger
from sil.review.describe import describe
from sil.run.context import RunContext
from sil.store.journal import RESULT_FILE
from tests.conftest import edit_contract
from tests.run.test_train import records, run_loop, shrink

SCREEN_LINE = "  screen_reference: 8"


def with_reference(root: Path, n: int) -> Path:
    shrink(root)
    contract = root / "program.md"
    text = contract.read_text()
    line = f"  screen_reference: {n}"
    if "screen_reference:" in text:
        contract.write_text(re.sub(r"(?m)^  screen_reference: .*$", line, text, count=1))
    else:
        edit_contract(contract, "  alpha_search: 0.4\n", f"  alpha_search: 0.4\n{line}\n")
    return root


def audits_by_round(rc: RunContext) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = collections.defaultdict(list)
    for r in records(rc):
        if r.type == "audit":
            out[r.payload["round"]].append(r.payload)
    return out


def gate_screens(rc: RunContext) -> list[dict]:
    return [
        r.payload
        for r in records(rc)
        if r.type == "round" and r.payload["arm"] == "gate" and r.payload["kind"] == "screen"
    ]


def scores(rc: RunContext, audit_id: str) -> np.ndarray:
    path = rc.run_dir / "audits" / audit_id / RESULT_FILE
    return rc.measure.matrix(AuditResult.model_validate_json(path.read_bytes()).scores)


def test_the_default_contract_screens_with_one_audit(workspace: Path) -> None:
    text = (workspace / "program.md").read_text()
    assert SCREEN_LINE in text, "program.md sets the single-audit screen (bench/README.md measures it)"


def test_a_screen_audits_the_candidate_alone_against_the_champions_audits(workspace: Path) -> None:
    rc = run_loop(with_reference(workspace, 4))
    assert rc.state.phase == "done", rc.state.halt_reason
    assert ledger.verify_file(rc.run_dir / "ledger.jsonl").ok
    by_round, screens = audits_by_round(rc), gate_screens(rc)
    single = [s for s in screens if s["reference"]]
    assert single, "with A/A rounds of the start behind it, the gate's first screen is a single audit"
    audit_of = {a["audit_id"]: a for rows in by_round.values() for a in rows}
    mutation_parent = {
        r.payload["mutation"]["mutation_id"]: r.payload["parent_set"] for r in records(rc) if r.type == "mutation"
    }
    target = rc.contract.promotion.target_dimensions[0]
    col = list(rc.measure.dimensions).index(target)
    for s in single:
        (own,) = by_round[s["round"]]  # one audit: the candidate's
        assert own["role"] == "cand"
        assert 2 <= len(s["reference"]) <= 4
        for ref in s["reference"]:
            a = audit_of[ref]
            assert a["policy_set"] == mutation_parent[s["mutation_id"]], "the reference is the champion's"
            assert a["seed_set"] == "search"
            assert a["role"] == "champ" or a["arm"] == "never", "no audit a selection looked at"
        reference = np.nanmean(np.stack([scores(rc, ref) for ref in s["reference"]]), axis=0)
        expected = np.nanmean(scores(rc, own["audit_id"])[:, col] - reference[:, col])
        assert s["diff"][target] == pytest.approx(expected)
    shown = [describe(r) for r in records(rc) if r.type == "round" and r.payload["round"] == single[0]["round"]]
    assert f"candidate alone vs the champion's last {len(single[0]['reference'])} audits" in shown[0]
    for r in by_round:  # confirmations stay paired
        if "-r01-" in r and r.startswith("gate-"):
            assert len(by_round[r]) == 2


@pytest.mark.slow  # a whole run: .ci/run runs it after make test, keeping the default suite under 6 min
def test_without_a_reference_every_screen_is_a_pair(workspace: Path) -> None:
    rc = run_loop(with_reference(workspace, 0))
    assert rc.state.phase == "done", rc.state.halt_reason
    by_round = audits_by_round(rc)
    screens = gate_screens(rc)
    assert screens and all(not s["reference"] and len(by_round[s["round"]]) == 2 for s in screens)
    assert rc.state.references == {}


@pytest.mark.slow  # a whole run: .ci/run runs it after make test, keeping the default suite under 6 min
def test_the_reference_is_the_last_n_unselected_audits(workspace: Path) -> None:
    from sil.base.errors import Halt
    from sil.run.screening import mean_scores, note_paired, reference_for
    from sil.store.runstate import PlannedRound

    rc = run_loop(with_reference(workspace, 2))
    kept = rc.state.references
    assert kept and all(len(ids) <= 2 for ids in kept.values())
    origin_id = rc.state.origin.set_id
    aa = [a for r, rows in audits_by_round(rc).items() if r.startswith("never-") for a in rows]
    assert set(kept[origin_id]) <= {a["audit_id"] for a in aa} | {
        a["audit_id"] for rows in audits_by_round(rc).values() for a in rows if a["role"] == "champ"
    }
    # a resumed screen keeps its planned reference; a resumed round is noted once
    state, origin = rc.state, rc.state.origin
    state.planned = PlannedRound(label="gate-c009-r00-t99", tick=99, kind="screen", reference=["p-1", "p-2"])
    assert reference_for(state, 2, "gate-c009-r00-t99", origin) == ["p-1", "p-2"]
    assert reference_for(state, 2, "gate-c010-r00-t99", origin) == state.references[origin.set_id]
    assert reference_for(state, 0, "gate-c010-r00-t99", origin) == []
    gone = state.references[origin.set_id][0]
    (rc.run_dir / "audits" / gone / RESULT_FILE).unlink()  # a run folder that lost a result
    with pytest.raises(Halt, match=f"audits {gone}.*cannot be read.*start a new run with --new"):
        mean_scores(rc.measure, rc.run_dir, state.references[origin.set_id])
    note_paired(state, 2, "never-aa099-t99", origin, aa=True)
    note_paired(state, 2, "never-aa099-t99", origin, aa=True)  # resumed: noted once
    assert state.references[origin.set_id] == ["never-aa099-t99-champ", "never-aa099-t99-cand"]


def test_the_dry_run_plan_says_what_a_screen_costs() -> None:
    from sil.cli.commands import screen_plan

    assert screen_plan(0, 48).startswith("gate: screen round + up to 48 confirmation rounds")
    assert "candidate's audit alone against the champion's last 8 audits" in screen_plan(8, 48)
    assert "alone" not in screen_plan(1, 48), "one reference audit is not enough: the screen stays paired"
