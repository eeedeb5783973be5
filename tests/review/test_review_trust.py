"""A review a person can trust at a glance (issue 26): one answer in every view, clear errors.

Each test names the numbered item of the issue it covers. Most share the finished tiny run of
tests/review/test_review.py (read-only) or a private copy of it.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from io import StringIO
from pathlib import Path
from types import SimpleNamespace

import pytest
from rich.console import Console

from sil.contract.schema import load_contract
from sil.stats.fitness import RoundStat
from tests.cli.test_cli import invoke
from tests.conftest import REPO
from tests.review.test_review import RUN, copy_of, done  # noqa: F401 - the shared finished run

TARGET = "broken_tool_use"


def _rc(**promotion: object) -> SimpleNamespace:
    p = load_contract(REPO / "program.md").contract.promotion.model_copy(update=promotion)
    return SimpleNamespace(promotion=p)


def _keep(arm: str = "gate") -> SimpleNamespace:
    return SimpleNamespace(mutation_id="m1", arm=arm)


def _rounds(*target: float) -> list[RoundStat]:
    return [RoundStat(diff={TARGET: x, "concerning": 0.0}, n_seeds={TARGET: 4}, se={}) for x in target]


# ---- 1. an underpowered replicate must not demote; every view reads the champion alike ----------


def test_1_an_underpowered_replication_is_inconclusive_and_changes_nothing() -> None:
    from sil.run.replication import judge_replication

    # the case: two rounds, -0.825 [-3.508, +1.858]: the interval spans the margin
    result = judge_replication(_rc(), _keep(), _rounds(-3.5, 1.85))  # type: ignore[arg-type]
    assert not result.demoted and not result.conclusive
    assert result.rounds_needed is not None and result.rounds_needed > 2
    assert f"about {result.rounds_needed} rounds in all would decide" in result.reason
    assert "nothing changed" in result.reason


def test_1_a_replication_decides_when_its_interval_clears_the_margin() -> None:
    from sil.run.replication import judge_replication

    worse = judge_replication(_rc(), _keep(), _rounds(0.6, 0.5, 0.7, 0.55))  # type: ignore[arg-type]
    assert worse.demoted and worse.conclusive and "no broken_tool_use improvement" in worse.reason
    better = judge_replication(_rc(), _keep(), _rounds(-1.0, -1.2, -0.9, -1.1))  # type: ignore[arg-type]
    assert not better.demoted and better.conclusive and "excludes no improvement" in better.reason


def test_1_replicate_refuses_fewer_than_two_rounds(copy_of) -> None:  # noqa: F811
    keep = next(v for v in _records(copy_of, "verdict") if v["verdict"] == "keep")
    result = invoke("replicate", RUN, keep["mutation_id"], "--arm", keep["arm"], "--k", "1")
    assert result.exit_code == 2 and "at least 2 fresh rounds" in result.output
    assert not _records(copy_of, "replicate"), "a refused replication wrote nothing"


def test_1_every_view_reads_a_demoted_champion_alike(copy_of) -> None:  # noqa: F811
    """A KEEP demoted by a replication: summary, report, runs, status and promote all say so."""
    arm = _demote_a_keep(copy_of)
    report = copy_of / "rep"
    assert invoke("report", RUN, "--out", str(report)).exit_code == 0
    data = json.loads((report / "report.json").read_text())
    line = next(a for a in data["summary"]["arms"] if a["arm"] == arm)
    assert line["standing"] == "rolled_back" and "demoted by a replication" in line["champion"]
    html = (report / "report.html").read_text()
    assert "rolled back to the starting policy" in html and "1 (1 demoted)" in html
    runs = json.loads(invoke("runs", "--json").output)[0]
    assert runs["demoted"][arm] == 1  # (the gate arm may also show a champion rolled back at certification)
    status = invoke("status", RUN).output
    assert f"{arm} champion" in status and "rolled back to the starting policy" in status
    promote = invoke("promote", RUN, "--arm", arm, "--force")
    assert promote.exit_code == 2 and "nothing to promote" in promote.output


def _records(root: Path, kind: str) -> list[dict]:
    out = invoke("ledger", "show", RUN, "--json", "--type", kind).output
    return [json.loads(line)["payload"] for line in out.splitlines() if line.strip()]


def _demote_a_keep(root: Path) -> str:
    """Record a concluded, demoting replication of the run's KEEP through the library's own path."""
    from sil.base.locks import run_lock
    from sil.contract.approval import frozen_measurement_hash
    from sil.integrity.records import ReplicateRecord, Trust, VerdictRecord
    from sil.run.replication import record_replication
    from sil.run.train import guarded_config, open_run

    loaded = load_contract(root / "program.md")
    run_dir = root / "state" / "runs" / RUN
    with run_lock(run_dir):
        rc = open_run(
            loaded,
            guarded_config(loaded, root, run_dir, lambda _: None),
            frozen_measurement_hash(loaded.contract, root),
        )
        keep = next(v for v in rc.book.payloads("verdict", VerdictRecord) if v.verdict == "keep")
        if rc.book.open_segment(f"replicate {keep.arm} {keep.mutation_id}", Trust()):
            rc.rounds.anchor()
        result = ReplicateRecord(
            mutation_id=keep.mutation_id,
            arm=keep.arm,
            rounds=8,
            target=TARGET,
            target_interval=(0.6, 0.4, 0.8),
            critical_means={},
            demoted=True,
            reason="fresh rounds show no improvement",
            champion_reverted=False,
        )
        record_replication(rc, keep, result, 0)
    return keep.arm


# ---- 2. per-candidate views are keyed by (arm, mutation) ----------------------------------


def test_2_candidates_of_two_arms_with_one_mutation_id_keep_their_own_rounds(tmp_path) -> None:
    from sil.review.report import candidates
    from sil.review.runview import RunView

    mutation = {
        "mutation_id": "9baa33b1d33b",
        "surface": "wrapper_prompt",
        "path": "sections.x",
        "value": "Say so when a tool fails.",
        "hypothesis": "h",
        "evidence": ["e"],
        "expected_effect": {TARGET: -0.5},
        "rollback_condition": "revert if the target does not improve",
        "proposer": "test",
    }
    recs = [
        SimpleNamespace(
            type="mutation",
            seq=0,
            payload={
                "arm": a,
                "index": 0,
                "mutation": mutation,
                "candidate_set": "c",
                "parent_set": "p",
                "value_hash": "v",
            },
        )
        for a in ("random", "gate")
    ]
    for arm, diffs in (("random", (0.2, 0.24)), ("gate", (0.8, 0.96))):
        recs += [
            SimpleNamespace(
                type="round",
                seq=1,
                payload={
                    "arm": arm,
                    "round": f"{arm}-r{i}",
                    "kind": "confirm",
                    "mutation_id": "9baa33b1d33b",
                    "diff": {TARGET: d},
                    "n_seeds": {TARGET: 10},
                },
            )
            for i, d in enumerate(diffs)
        ]
    view = RunView(run_dir=tmp_path, state=None, records=recs, contract=None)  # type: ignore[arg-type]
    got = {c.arm: c.observed[TARGET].mean for c in candidates(view, [TARGET])}
    assert got == pytest.approx({"random": 0.22, "gate": 0.88})


# ---- 3. sweep runs are visible and do not break a plain run -------------------------------


def test_3_a_sweep_run_id_is_not_the_plain_runs(workspace) -> None:
    from sil.run.sweep import plan_sweep

    (run,) = plan_sweep([workspace / "program.md"], workspace)
    c = load_contract(workspace / "program.md").contract
    assert run.run_id != f"{c.contract_id}-{c.contract_hash[:8]}", "the two would share checkpoint refs"


def test_3_runs_status_report_and_compare_see_sweep_runs(copy_of) -> None:  # noqa: F811
    ws = copy_of / "state" / "sweeps" / "sw1"
    (ws / "state").mkdir(parents=True)
    shutil.copy(copy_of / "program.md", ws / "program.md")
    shutil.copytree(copy_of / "state" / "runs" / RUN, ws / "state" / "runs" / "sw1")
    if (copy_of / "state" / "anchors.git").exists():
        shutil.copytree(copy_of / "state" / "anchors.git", ws / "state" / "anchors.git")
    assert "sw1" in [r["run_id"] for r in json.loads(invoke("runs", "--json").output)]
    assert invoke("status", "sw1").exit_code == 0
    assert invoke("report", "sw1", "--out", str(copy_of / "swrep")).exit_code == 0
    assert invoke("compare", RUN, "sw1").exit_code == 0
    agg = invoke("report", "--sweep")
    assert agg.exit_code == 0 and "sweep of 1 runs, 1 finished" in agg.output and "KEEP rate" in agg.output
    data = json.loads((copy_of / "state" / "sweeps" / "sweep-report.json").read_text())
    assert data["finished"] == 1 and data["audits"] > 0 and len(data["effects"]) == 1


# ---- 8. user errors: one line, exit 2 -------------------------------------------------------


def test_8_out_paths_that_cannot_be_written_are_one_line_errors(copy_of) -> None:  # noqa: F811
    (copy_of / "README.md").write_text("mine\n")
    for args in (
        ("report", RUN, "--out", "README.md"),
        ("report", RUN, "--out", "README.md/sub"),
        ("export", RUN, "--out", "README.md/x.csv"),
        ("report", RUN, "--out", "/proc/sil-no-such/dir"),
    ):
        result = invoke(*args)
        assert result.exit_code == 2, (args, result.output)
        assert result.output.strip().count("\n") == 0 and result.output.startswith("error:"), result.output
    assert (copy_of / "README.md").read_text() == "mine\n", "nothing was overwritten"
    (copy_of / "review").mkdir()
    assert invoke("export", RUN, "--out", "review/").exit_code == 0  # a folder: the file goes inside
    assert (copy_of / "review" / "export.csv").is_file()


# ---- 9. terminal output levels ----------------------------------------------------------------


def test_9_looks_only_with_verbose(tmp_path) -> None:
    from sil.cli.progress import RunProgress
    from sil.store.events import CandidateProposed, LookTaken, Update, VerdictReached

    events = [
        CandidateProposed("gate", 0, "8cd1af8fc266", "wrapper_prompt.sections.tool_errors"),
        LookTaken("gate-c00-8cd1af8fc266-r01", "continue", "look 1 of 48: no boundary crossed by all legs"),
        VerdictReached("gate", "8cd1af8fc266", "revert", "conditional power 0.041 < 0.05 on broken_tool_use"),
    ]
    printed = {}
    for verbosity in (-1, 0, 1):
        buf = StringIO()
        with RunProgress(Console(file=buf, width=200), 10, live=False, verbosity=verbosity) as p:
            for event in events:
                p.event(Update(event=event, phase="gate", audits=3, elapsed_s=1.0))
        printed[verbosity] = buf.getvalue()
    assert printed[-1] == ""
    assert "look 1 of 48" not in printed[0] and "REVERT" in printed[0] and "candidate 0" in printed[0]
    assert "look 1 of 48" in printed[1] and "progress: gate, 3 of at most 10 audits" in printed[1]


def test_9_the_gate_s_reasons_carry_rounded_numbers() -> None:
    """The reasons are made readable where they are made: no display rounds them afterwards."""
    import re

    from sil.stats import gate

    source = Path(gate.__file__).read_text()
    reasons = re.findall(r'f"((?:futility|harm veto|conditional power)[^"]*)"', source)
    assert len(reasons) >= 3, reasons
    raw = [r for r in reasons for field in re.findall(r"\{([^}]*)\}", r) if ":" not in field and "name" not in field]
    assert not raw, f"a number in a gate reason is not formatted: {raw}"


# ---- 10. a stopped run says so ----------------------------------------------------------------


def test_10_status_and_runs_of_a_stopped_run(copy_of) -> None:  # noqa: F811
    from sil.store.runstate import RunState

    run_dir = copy_of / "state" / "runs" / RUN
    state = RunState.load(run_dir)
    assert state is not None
    state.phase = "gate"
    state.save(run_dir)
    text = invoke("status", RUN).output
    assert f"stopped; resume with: sil run --run-id {RUN}" in text and "ETA" not in text
    assert json.loads(invoke("runs", "--json").output)[0]["phase"] == "stopped (gate)"


# ---- 11. compare any runs ----------------------------------------------------------------------


def test_11_compare_three_runs_shows_what_differs_in_the_outcome(copy_of) -> None:  # noqa: F811
    for other in ("t2", "t3"):
        shutil.copytree(copy_of / "state" / "runs" / RUN, copy_of / "state" / "runs" / other)
    state = copy_of / "state" / "runs" / "t3" / "state.json"
    data = json.loads(state.read_text())
    data["usd"] = 1.25
    state.write_text(json.dumps(data))
    result = invoke("compare", RUN, "t2", "t3", "--json")
    assert result.exit_code == 0
    cmp = json.loads(result.output)
    assert cmp["runs"] == [RUN, "t2", "t3"]
    usd = next(r for r in cmp["outcome"] if r["item"] == "USD")
    assert usd["values"][2] == "1.25" and usd["values"][0] != "1.25"
    assert invoke("compare", RUN).exit_code == 2


# ---- 12. ledger show --type and contract history ------------------------------------------------


def test_12_unknown_record_type_and_a_history_of_one(copy_of) -> None:  # noqa: F811
    result = invoke("ledger", "show", RUN, "--type", "verdcit")
    assert result.exit_code == 2 and "not a record type" in result.output and "verdict" in result.output
    history = invoke("contract", "history")
    assert history.exit_code == 0 and "current" in history.output and "(first)" in history.output


# ---- 13. start-up imports ---------------------------------------------------------------------


HEAVY = ("matplotlib", "scipy", "inspect_ai", "ray", "pandas", "pyarrow")


@pytest.mark.parametrize(
    "modules",
    ["sil.cli.app", "sil.cli.app, sil.review.runview, sil.review.status, sil.store.champion"],
    ids=["version", "runs-status"],
)
def test_13_cli_and_review_of_a_run_import_no_heavy_module(modules: str) -> None:
    code = f"import sys, {modules}; print(sorted({{m.split('.')[0] for m in sys.modules}} & set({HEAVY!r})))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert out.stdout.strip() == "[]"


# ---- 4-7. the report: cost and confidence, layout, plots, one link to the audit logs ---------------


@pytest.fixture(scope="module")
def report_dir(done, tmp_path_factory) -> Path:  # noqa: F811
    import os

    out = tmp_path_factory.mktemp("report")
    cwd = Path.cwd()
    os.chdir(done)
    try:
        assert invoke("report", RUN, "--out", str(out)).exit_code == 0
    finally:
        os.chdir(cwd)
    return out


def test_4_the_report_says_what_the_run_cost_and_how_sure_it_is(report_dir) -> None:
    cost = json.loads((report_dir / "report.json").read_text())["cost"]
    assert cost["audits"] > 0 and cost["wall_s"] > 0 and cost["alpha_run"] > 0 and "usd" in cost
    assert {a["arm"] for a in cost["arms"]} >= {"never", "random", "gate"}
    assert {r["role"] for r in cost["roles"]} >= {"audits", "mutator"} and cost["noise"]
    html = (report_dir / "report.html").read_text()
    section = html[html.index("Cost and confidence") : html.index("<h2>Candidates")]
    for needle in ("audits", "USD", "gaps", "wall time", "error design", "noise floor", "per arm", "per role"):
        assert needle in section, needle


def test_4_the_cost_rows_add_up_to_the_run_s_totals_preflight_included(report_dir) -> None:
    cost = json.loads((report_dir / "report.json").read_text())["cost"]
    arms = {a["arm"]: a for a in cost["arms"]}
    assert arms["preflight"]["audits"] == cost["preflight"] > 0 and arms["preflight"]["audit_wall_s"] is None
    assert sum(a["audits"] for a in arms.values()) == cost["audits"]
    assert sum(a["gaps"] for a in arms.values()) == cost["gaps"]
    assert sum(a["usd"] for a in arms.values()) == pytest.approx(cost["usd"])
    roles = {r["role"]: r for r in cost["roles"]}
    assert roles["audits"]["calls"] == cost["audits"]


def test_5_candidates_lead_with_the_verdict_and_fold_the_evidence(report_dir) -> None:
    html = (report_dir / "report.html").read_text()
    table = html[html.index("<table id='candidates'>") :]
    table = table[: table.index("</table>")]
    heads = re.findall(r"<th[^>]*>([^<]*)</th>", table)
    assert heads[0] == "verdict" and heads.index("reason") < heads.index("hypothesis") < heads.index("evidence")
    assert "<details>" in table and ("class='verdict keep'" in table or "class='verdict revert'" in table)
    assert "table-layout:auto" in html and "<div class='tw'><table id='candidates'>" in html


def test_5_the_gate_s_diffs_come_first_in_the_order_they_were_kept() -> None:
    from sil.review.render import _kept_order
    from sil.review.report import KeptDiff

    kept = [
        KeptDiff(arm=a, mutation_id=m, policy_set=s, diff="")
        for a, m, s in (("random", "r", "s1"), ("gate", "g1", "s2"), ("gate", "g2", "s3"))
    ]
    data = SimpleNamespace(kept=kept, summary={"arms": [{"arm": "gate", "champion_set": "s3"}]})
    assert [k.mutation_id for k in _kept_order(data)] == ["g1", "g2", "r"]  # type: ignore[arg-type]


def test_6_plots_mark_keeps_and_show_the_leg_that_stopped_a_candidate(done) -> None:  # noqa: F811
    from sil.review.plots import SERIES, keep_points, shown_legs
    from sil.review.runview import load_run

    view = load_run(done / "state" / "runs" / RUN)
    keeps = keep_points(view)
    n_keeps = sum(1 for v in view.of_type("verdict") if v["verdict"] == "keep")
    assert sum(len(v) for v in keeps.values()) == n_keeps and all(isinstance(x, int) for v in keeps.values() for x in v)
    legs = {TARGET: [(1, -3.0, -9.0)], "input_hallucination": [(1, 0.5, -3.0)], "concerning": [(1, -2.0, -3.0)]}
    veto = shown_legs(legs, TARGET, "harm veto: input_hallucination evidence of a 0.339 regression")
    assert veto == [TARGET, "input_hallucination"]
    assert shown_legs(legs, TARGET, "no KEEP after 3 rounds") == [TARGET, "input_hallucination", "concerning"]
    assert "candidate" not in str(SERIES["never"]) and "A/A" in str(SERIES["never"])


def test_6_one_round_rows_get_an_interval_from_the_noise_floor() -> None:
    from sil.review.report import effect

    assert effect([0.5]).lo is None
    e = effect([0.5], (0.8, 20))
    assert e.lo is not None and e.hi is not None and e.lo < 0.5 < e.hi


def audit_payload(audit_id: str, log_path: str) -> dict[str, object]:
    """A whole audit record's payload, as the ledger holds it."""
    from sil.integrity.records import AuditRecord
    from sil_policy.evidence import Usage

    record = AuditRecord(
        audit_id=audit_id,
        arm="gate",
        round="r",
        role="cand",
        policy_set="s",
        tick=0,
        status="ok",
        gap_reason=None,
        scores={},
        missing={},
        sample_counts={},
        loaded_policy_hashes={},
        usage=Usage(),
        wall_s=1.0,
        backend="inspect",
        simulated=False,
        log_path=log_path,
        diagnostics=[],
    )
    return record.model_dump(mode="json")


def test_7_one_command_opens_every_audit_log_of_a_run(tmp_path) -> None:
    from sil.review.report import audit_logs
    from sil.review.runview import RunView

    logs = [tmp_path / "audits" / f"a{i}" / "logs" / "x.eval" for i in range(3)]
    recs = [SimpleNamespace(type="audit", seq=i, payload=audit_payload(f"a{i}", str(p))) for i, p in enumerate(logs)]
    view = RunView(run_dir=tmp_path, state=None, records=recs, contract=None)  # type: ignore[arg-type]
    assert audit_logs(view) == f"inspect view --log-dir {tmp_path / 'audits'}"
    sim = RunView(run_dir=tmp_path, state=None, records=[], contract=None)
    assert str(tmp_path / "audits") in audit_logs(sim)


def test_10_a_new_run_says_the_id_it_took(workspace, monkeypatch) -> None:
    from sil.run import train

    monkeypatch.chdir(workspace)
    monkeypatch.setattr(train, "execute_run", lambda *a, **k: 0)
    result = invoke("run", "--new", "--run-id", "t1")
    assert result.exit_code == 0
    assert re.search(r"new run (t1-\d{8}-\d{6}) .*resume it with --run-id \1", result.output), result.output


def test_1_a_certified_gate_champion_demoted_by_replication_reads_alike(workspace, monkeypatch) -> None:
    """The issue's case: certified, then a replication demotes the KEEP and restores the start.
    The conclusion, the Certification table, the arms, `sil runs` and `sil promote` agree."""
    from sil.base.errors import Refused
    from sil.integrity.records import ReplicateRecord, Trust, VerdictRecord
    from sil.review.render import _arm_rows, _cert_rows
    from sil.review.report import build_report
    from sil.review.runview import load_run
    from sil.review.status import run_overview
    from sil.run.replication import record_replication
    from sil.store.champion import champion_status
    from sil.store.release import promotion_risks
    from tests.run.test_heldout import certified_run, shrink

    rc, candidate, _ = certified_run(shrink(workspace), monkeypatch)
    assert champion_status(rc.state, list(rc.book.records), "gate").standing == "certified"
    keep = VerdictRecord(
        arm="gate",
        mutation_id="m-kept",
        verdict="keep",
        reason="t",
        candidate_set=candidate.set_id,
        parent_set=rc.state.origin.set_id,
        rounds=3,
        alpha=0.05,
        error_budget=None,
        decision=None,
    )
    if rc.book.open_segment("replicate gate m-kept", Trust()):
        rc.rounds.anchor()
    demoted = ReplicateRecord(
        mutation_id="m-kept",
        arm="gate",
        rounds=8,
        target=TARGET,
        target_interval=(0.6, 0.4, 0.8),
        critical_means={},
        demoted=True,
        reason="fresh rounds show no improvement",
        champion_reverted=False,
    )
    record_replication(rc, keep, demoted, 0)
    view = load_run(rc.run_dir)
    data = build_report(view, workspace)
    assert "rolled back" in data.conclusion and "demoted by a replication" in data.conclusion
    gate_row = next(r for r in _arm_rows(data) if r[0] == "gate")
    assert "rolled back to the starting policy" in gate_row[1] and gate_row[5] == "unchanged (rolled back)"
    cert = next(r for r in _cert_rows(data) if r[0] == "gate" and r[1] == candidate.set_id)
    assert cert[2].startswith("yes, then demoted")
    assert "rolled back" in run_overview(view).champion
    with pytest.raises(Refused, match="nothing to promote"):
        promotion_risks(rc.run_dir, "gate")
