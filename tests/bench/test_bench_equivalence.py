"""A bench run is a `sil run`: the same contract and world record the same decisions.

The bench (bench/looprun.py) runs the product's own phases and arms with its audits computed
in-process; the loop run here spawns the `sim` backend's audit processes as `sil run` does.
Every round's statistic (and every gap), every verdict with its reason and error budget, and
every certification must come out the same.
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from bench.looprun import LoopRun
from bench.proposers import finished
from sil.contract.schema import load_contract
from sil.integrity import ledger
from sil.integrity.records import CertifyRecord, RoundRecord, VerdictRecord, parse_payload
from tests.conftest import REPO, edit_contract
from tests.run.test_train import run_loop

EDITS = {
    "max_audits: 500": "max_audits: 1000",
    "arm_audits: {never: 24, random: 20, gate: 130}": "arm_audits: {never: 12, random: 8, gate: 60}",
    "final_check_rounds: 4": "final_check_rounds: 1",
    "certify_rounds: 70": "certify_rounds: 6",
    "baseline_k: 5": "baseline_k: 2",
    "calibration_pairs: 12": "calibration_pairs: 6",
    "replicate_k: 48": "replicate_k: 4",
}
DECISIONS = {
    "round": (RoundRecord, ("arm", "round", "kind", "mutation_id", "diff", "n_seeds", "gap_reason", "coin")),
    "verdict": (VerdictRecord, ("arm", "mutation_id", "verdict", "reason", "rounds", "alpha", "error_budget")),
    "certify": (CertifyRecord, ("arm", "policy_set", "certified", "rounds", "looks", "reason", "seed_set")),
}


def decisions(path: Path) -> dict[str, list[dict[str, Any]]]:
    """Each kind of decision record, in ledger order, with the fields a decision consists of."""
    out: dict[str, list[dict[str, Any]]] = {kind: [] for kind in DECISIONS}
    for r in ledger.read_records(path):
        if r.type in DECISIONS:
            model, fields = DECISIONS[r.type]
            payload = parse_payload(r.type, r.payload)
            assert isinstance(payload, model)
            row = payload.model_dump(include=set(fields))
            if row.get("gap_reason"):  # a process's exit is worded from its stderr: that a gap came is the decision
                row["gap_reason"] = "gap"
            out[r.type].append(row)
    return out


@pytest.fixture(scope="module")
def both(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    root: Path = tmp_path_factory.mktemp("equivalence")
    shutil.copy(REPO / "program.md", root / "program.md")
    shutil.copytree(REPO / "measurement", root / "measurement")
    shutil.copytree(REPO / "state" / "policies", root / "state" / "policies")
    for old, new in EDITS.items():
        edit_contract(root / "program.md", old, new)
    rc = run_loop(root)
    assert rc.state.phase == "done", rc.state.halt_reason
    with LoopRun(load_contract(root / "program.md")) as bench:
        finished(bench)
        in_bench = decisions(bench.rc.run_dir / "ledger.jsonl")
    return decisions(rc.run_dir / "ledger.jsonl"), in_bench


@pytest.mark.slow  # one small run with audit processes, one in-process
def test_a_bench_run_records_the_decisions_of_sil_run(both: tuple[dict[str, Any], dict[str, Any]]) -> None:
    loop, bench = both
    gate = [v for v in loop["verdict"] if v["arm"] == "gate"]
    assert any(v["error_budget"] for v in gate), "no gate candidate was confirmed: the test would prove little"
    assert {v["arm"] for v in loop["verdict"]} == {"random", "gate"}
    assert loop["certify"], "no champion was certified: the test would prove little"
    for kind in DECISIONS:
        assert bench[kind] == loop[kind], kind
