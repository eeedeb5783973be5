"""The bench's loop procedure and the loop reach the same verdicts from the same rounds.

The loop runs on the embedded simulated audit; its never and gate rounds are then rebuilt from
the audit records in its ledger (with the loop's own `fitness` code) and replayed, in order,
through the bench's driver (`bench.procedures.drive_candidate_arm`). Every verdict, reason and
the run's error budget must match, and the driver must ask for exactly the rounds the loop ran.
"""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path

import pytest

from bench.procedures import ArmFeed, drive_candidate_arm
from sil.integrity import ledger
from sil.integrity.records import AuditRecord, MutationRecord, RoundRecord, VerdictRecord, parse_payload
from sil.stats import fitness
from sil.stats.judges import GateJudge, JudgeState, Outcome
from tests.conftest import edit_contract
from tests.run.test_train import run_loop

GATE_AUDITS = 60
EDITS = {
    "max_audits: 500": "max_audits: 1000",
    "arm_audits: {never: 24, random: 20, gate: 130}": f"arm_audits: {{never: 12, gate: {GATE_AUDITS}}}",
    "final_check_rounds: 4": "final_check_rounds: 1",
    "certify_rounds: 70": "certify_rounds: 1",
    "certify_random: true": "certify_random: false",  # tests of the random arm certify it themselves
    "baseline_k: 5": "baseline_k: 2",
    "calibration_pairs: 12": "calibration_pairs: 6",
    "replicate_k: 48": "replicate_k: 4",
    "arms: [never, random, gate]": "arms: [never, gate]",
}


def rebuilt_rounds(records: list[ledger.Record], rc) -> dict[str, fitness.RoundStat | None]:
    """Each round's statistic recomputed from its two audit records (None for a gap round)."""
    audits: dict[str, dict[str, AuditRecord]] = defaultdict(dict)
    for r in records:
        if r.type == "audit":
            a = parse_payload(r.type, r.payload)
            assert isinstance(a, AuditRecord)
            if a.seed_set == "search":  # the certification's held-out rounds are not search rounds
                audits[a.round][a.role] = a
    out: dict[str, fitness.RoundStat | None] = {}
    for label, pair in audits.items():
        if set(pair) != {"cand", "champ"}:
            continue
        if pair["cand"].status != "ok" or pair["champ"].status != "ok":
            out[label] = None
            continue
        seeds, dims = rc.measure.seed_ids, rc.measure.dimensions
        out[label] = fitness.paired_round(
            fitness.score_matrix(pair["cand"].scores, seeds, dims),
            fitness.score_matrix(pair["champ"].scores, seeds, dims),
            dims,
            rc.contract.promotion.min_seed_coverage,
        ).labelled(label)
    return out


@pytest.fixture(scope="module")
def loop_run(tmp_path_factory):
    import shutil

    from tests.conftest import REPO

    root: Path = tmp_path_factory.mktemp("equivalence")
    shutil.copy(REPO / "program.md", root / "program.md")
    shutil.copytree(REPO / "measurement", root / "measurement")
    shutil.copytree(REPO / "state" / "policies", root / "state" / "policies")
    for old, new in EDITS.items():
        edit_contract(root / "program.md", old, new)
    rc = run_loop(root)
    return rc, list(ledger.read_records(rc.run_dir / "ledger.jsonl"))


def test_bench_driver_reaches_the_loops_verdicts(loop_run) -> None:
    rc, records = loop_run
    stats = rebuilt_rounds(records, rc)
    rounds = [
        p for r in records if r.type == "round" and isinstance(p := parse_payload(r.type, r.payload), RoundRecord)
    ]
    index_of = {
        m.mutation.mutation_id: m.index
        for r in records
        if r.type == "mutation"
        and isinstance(m := parse_payload(r.type, r.payload), MutationRecord)
        and m.arm == "gate"
    }
    per_candidate: dict[int, list[str]] = defaultdict(list)
    for label in stats:  # ledger order is round order
        if label.startswith("gate-c"):
            per_candidate[int(label[len("gate-c") : len("gate-c") + 3])].append(label)
    loop_verdicts = [
        v
        for r in records
        if r.type == "verdict" and isinstance(v := parse_payload(r.type, r.payload), VerdictRecord) and v.arm == "gate"
    ]
    assert any(len(labels) > 1 for labels in per_candidate.values()), "no candidate reached confirmation"

    shared = JudgeState.start(rc.promotion)
    for r in rounds:
        if r.arm == "never" and r.kind == "aa" and (stat := stats[r.round]) is not None:
            shared.pool.add_aa(stat)
    spent = 0
    asked: dict[int, int] = defaultdict(int)
    decided: list[tuple[int, Outcome]] = []

    def measure(index: int) -> fitness.RoundStat | None:
        nonlocal spent
        label = per_candidate[index][asked[index]]  # IndexError: the bench asks for a round the loop never ran
        asked[index] += 1
        spent += 2
        return stats[label]

    feed = ArmFeed(measure, lambda: GATE_AUDITS - spent, lambda: spent, lambda i, o: decided.append((i, o)))
    final, _ = drive_candidate_arm(
        GateJudge(rc.promotion), shared, len(index_of) + 5, feed, rc.contract.stop.max_candidates_per_arm
    )

    assert [i for i, _ in decided] == [index_of[v.mutation_id] for v in loop_verdicts]
    assert [o.verdict for _, o in decided] == [v.verdict for v in loop_verdicts]
    assert [o.reason for _, o in decided] == [v.reason for v in loop_verdicts]
    assert dict(asked) == {i: len(labels) for i, labels in per_candidate.items()}
    budgets = [v.error_budget for v in loop_verdicts if v.error_budget is not None]
    assert budgets, "no candidate spent alpha: the test would prove little"
    assert final.budget == budgets[-1]
