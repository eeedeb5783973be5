"""Reviewing and steering a run as its users do: runs, status, report, compare, export, guards."""

from __future__ import annotations

import base64
import csv
import json
import re
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from sil.contract import prepare
from sil.contract.schema import ContractError, load_contract, parse_contract
from sil.exec import measure
from sil.exec.startchecks import planned_audits
from sil.review.runview import load_run
from tests.cli.test_cli import invoke
from tests.conftest import REPO, edit_contract
from tests.finished import finished_tiny_run

RUN = "t1"
PETRI = REPO / "examples" / "program-petri-offline.md"


@pytest.fixture(scope="module")
def done(tmp_path_factory) -> Path:
    """One finished tiny run, shared read-only by the review tests."""
    return finished_tiny_run(tmp_path_factory, "review", RUN)


@pytest.fixture
def copy_of(done, tmp_path, monkeypatch):
    """A private copy of the finished workspace, as the current directory."""
    root = tmp_path / "ws"
    shutil.copytree(done, root)
    monkeypatch.chdir(root)
    return root


# ---- start-time checks -------------------------------------------------------------------


def test_check_and_run_refuse_a_dimension_not_in_the_rubric(workspace, monkeypatch) -> None:
    monkeypatch.chdir(workspace)
    edit_contract(
        workspace / "program.md", "target_dimensions: [broken_tool_use]", "target_dimensions: [broken_tool_usage]"
    )
    result = invoke("check")
    assert result.exit_code == 2
    assert "promotion.target_dimensions[0]" in result.output and "broken_tool_usage" in result.output
    as_json = invoke("check", "--json")
    assert as_json.exit_code == 2 and json.loads(as_json.stdout)["ok"] is False
    result = invoke("run")
    assert result.exit_code == 2 and "broken_tool_usage" in result.output
    assert not (workspace / "state" / "runs").exists(), "a refused run left a run folder behind"


def test_check_names_missing_sdk_credential_and_approval_of_a_real_contract(workspace, monkeypatch) -> None:
    monkeypatch.chdir(workspace)
    shutil.copy(PETRI, workspace / "real.md")
    edit_contract(
        workspace / "real.md",
        "target: {model: scripted/target}",
        "target: {model: anthropic/claude-x, credential_env: SIL_TEST_UNSET_KEY, "
        "price: {input_per_mtok: 3, output_per_mtok: 15}, context_tokens: 200000}",
    )
    monkeypatch.delenv("SIL_TEST_UNSET_KEY", raising=False)
    monkeypatch.delenv("SIL_ALLOWED_SIGNERS", raising=False)
    result = invoke("check", "--contract", "real.md")
    assert result.exit_code == 2, result.output
    text = " ".join(result.output.split())
    assert "SIL_TEST_UNSET_KEY" in text and "no approval for contract" in text
    assert "allowed_signers" in text
    import importlib.util

    if importlib.util.find_spec("anthropic") is None:
        assert "pip install -e '.[anthropic]'" in text
        run = invoke("run", "--contract", "real.md")
        assert run.exit_code == 2 and "anthropic" in run.output
        assert not (workspace / "state" / "runs").exists()


def test_dry_run_counts_every_audit_the_run_can_make() -> None:
    plan = planned_audits(load_contract(REPO / "program.md").contract)
    # preflight 1 + baseline 5 + arms 24+20+130 + certification 2x70 for each of the gate and the
    # random arm (budget.certify_random) + each held-out-certified champion's search-seed check 2x4
    assert (plan.preflight, plan.baseline, plan.certification, plan.final_checks) == (1, 5, 280, 0)
    assert plan.search_check == 16 and plan.total == 476


def test_an_uncertified_random_arm_is_planned_a_final_check_not_a_certification() -> None:
    contract = load_contract(REPO / "program.md").contract
    plain = contract.model_copy(update={"budget": contract.budget.model_copy(update={"certify_random": False})})
    plan = planned_audits(plain)
    assert (plan.certification, plan.final_checks, plan.search_check) == (140, 8, 8)
    assert plain.certified_arms() == ["gate"] and contract.certified_arms() == ["random", "gate"]


def test_dry_run_prints_the_full_count(workspace, monkeypatch) -> None:
    monkeypatch.chdir(workspace)
    result = invoke("run", "--dry-run")
    assert result.exit_code == 0 and "audits the run can make: 476" in result.output


def test_yaml_errors_count_lines_of_the_file() -> None:
    text = (REPO / "program.md").read_text().replace("  max_turns: 12", "  max_turns: [12", 1)
    line = next(i for i, t in enumerate(text.splitlines(), 1) if "max_turns: [12" in t)
    with pytest.raises(ContractError) as ex:
        parse_contract(text)
    found = [int(n) for n in re.findall(r"line (\d+)", str(ex.value))]
    assert found and min(abs(n - line) for n in found) <= 1, (line, str(ex.value))


def test_error_text_with_brackets_is_printed_verbatim(workspace, monkeypatch) -> None:
    monkeypatch.chdir(workspace)
    edit_contract(workspace / "program.md", "contract_id: sil-default-sim", "contract_id: '[bold]x'")
    result = invoke("check")
    assert result.exit_code == 2 and "[a-z0-9._-]{0,63}" in result.output  # rich would eat [a-z0-9._-]


def test_seed_path_typo_does_not_advise_refreezing(workspace) -> None:
    with pytest.raises(prepare.MeasurementError) as ex:
        prepare.verify(workspace / "measuremnt")
    assert "does not exist" in str(ex.value) and "--write" not in str(ex.value)


def test_prepare_refuses_unknown_options() -> None:
    with pytest.raises(SystemExit) as ex:
        prepare.main(["--bogus"])
    assert ex.value.code == 2


# ---- review commands ---------------------------------------------------------------------


def test_runs_and_status_json(done, monkeypatch) -> None:
    monkeypatch.chdir(done / "measurement")  # any folder inside the project
    runs = json.loads(invoke("runs", "--json").output)
    assert [r["run_id"] for r in runs] == [RUN]
    assert runs[0]["phase"] == "done" and runs[0]["verified"] and runs[0]["backend"] == "sim"
    status = json.loads(invoke("status", RUN, "--json").output)
    assert status["phase"] == "done" and not status["running"]
    assert status["audits"] == runs[0]["audits"] > 0 and status["audits_planned"] >= status["audits"]
    assert status["alpha_run"] == 0.1 and status["last_verdicts"]
    text = invoke("status", RUN).output  # says what each number is: no bare "369/476" beside "limit 500"
    assert f"audits {status['audits']} of {status['audits_planned']} planned (limit {status['max_audits']})" in text
    assert f"USD {status['usd']:.2f} of {status['max_usd']:.2f}" in text


def test_runs_flags_a_ledger_cut_behind_its_checkpoints(copy_of) -> None:
    path = copy_of / "state" / "runs" / RUN / "ledger.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[: len(lines) // 2]))  # a valid chain, shorter than its checkpoints
    (run,) = json.loads(invoke("runs", "--json").output)
    assert not run["verified"] and "checkpoint" in run["verify_note"]
    assert "FAILS" in invoke("runs").output


def test_status_names_the_running_candidate_from_a_saved_state(done, copy_of) -> None:
    from sil.store.runstate import RunState

    run_dir = copy_of / "state" / "runs" / RUN
    state = RunState.load(run_dir)
    mutation = json.loads(invoke("ledger", "show", RUN, "--json", "--type", "mutation").output.splitlines()[-1])
    from sil.policies.mutation import Mutation
    from sil.store.runstate import Pending

    m = Mutation.model_validate(mutation["payload"]["mutation"])
    arm = state.arms["gate"]
    arm.pending = Pending(index=0, mutation=m, parent=arm.champion, candidate=arm.champion)
    state.phase, state.audits = "gate", 10
    state.save(run_dir)
    st = json.loads(invoke("status", RUN, "--json").output)
    assert st["arm"] == "gate" and st["candidate"].startswith(m.mutation_id)
    assert st["stopped"] and st["eta_s"] is None, "no process runs it: stopped, not an ETA"


def test_report_writes_a_self_contained_page_with_every_plot(done, copy_of, tmp_path) -> None:
    out = tmp_path / "rep"
    result = invoke("report", RUN, "--out", str(out))
    assert result.exit_code == 0, result.output
    page = (out / "report.html").read_text()
    imgs = re.findall(r"<img class='plot' id='plot-(\w+)' alt='\w+' src='data:image/png;base64,([^']+)'>", page)
    assert {name for name, _ in imgs} == {"trajectories", "noise", "sequential", "forest"}
    for _, b64 in imgs:
        assert base64.b64decode(b64)[:8] == b"\x89PNG\r\n\x1a\n"
    assert not re.search(r"(src|href)=['\"]?(https?:)?//", page), "the page must load nothing from the network"
    data = json.loads((out / "report.json").read_text())
    assert data["run_id"] == RUN and data["trust"]["ledger_ok"]
    verdicts = json.loads(
        "[" + ",".join(invoke("ledger", "show", RUN, "--json", "--type", "verdict").output.split()) + "]"
    )
    assert len([c for c in data["candidates"] if c["verdict"]]) == len(verdicts)
    md = (out / "report.md").read_text()
    assert "## Candidates" in md and "plots/forest.png" in md and (out / "plots" / "forest.png").is_file()
    assert data["conclusion"] in page


def test_export_has_one_row_per_audit_round_and_verdict(done, copy_of, tmp_path) -> None:
    view = load_run(copy_of / "state" / "runs" / RUN)
    counts = {k: len(view.of_type(k)) for k in ("audit", "round", "verdict")}
    assert invoke("export", RUN, "--format", "csv", "--out", str(tmp_path / "x.csv")).exit_code == 0
    with open(tmp_path / "x.csv") as fh:
        rows = list(csv.DictReader(fh))
    assert {k: sum(r["record"] == k for r in rows) for k in counts} == counts
    assert invoke("export", RUN, "--format", "json", "--out", str(tmp_path / "x.json")).exit_code == 0
    assert len(json.loads((tmp_path / "x.json").read_text())) == len(rows)
    assert invoke("export", RUN, "--format", "xml").exit_code == 2


def test_compare_same_family_and_another(done, copy_of) -> None:
    shutil.copytree(copy_of / "state" / "runs" / RUN, copy_of / "state" / "runs" / "t2")
    result = invoke("compare", RUN, "t2", "--json")
    assert result.exit_code == 0
    cmp = json.loads(result.output)
    assert cmp["setup"] == [] and cmp["same_family"]
    assert {a["item"] for a in cmp["arms"]} == {"never", "random", "gate"} and cmp["edits"]
    snap = copy_of / "state" / "runs" / "t2" / "contract.json"
    data = json.loads(snap.read_text())
    data["contract_id"] = "other"
    snap.write_text(json.dumps(data))
    result = invoke("compare", RUN, "t2")  # a snapshot the ledger does not record: not compared
    assert result.exit_code != 0 and "contract.json is not the contract the ledger records" in result.output
    _as_run_of_its_contract(copy_of / "state" / "runs" / "t2")
    result = invoke("compare", RUN, "t2")  # another contract: compared, and said so
    assert result.exit_code == 0 and "different contracts" in result.output and "contract_id" in result.output


def _as_run_of_its_contract(run_dir: Path) -> None:
    """The run's ledger and state rewritten to name the contract its snapshot now holds (a run of
    another contract, without checkpoints of its own)."""
    from sil.contract.schema import Contract
    from sil.integrity.ledger import GENESIS, canonical, record_hash

    digest = Contract.model_validate_json((run_dir / "contract.json").read_bytes()).contract_hash
    state = json.loads((run_dir / "state.json").read_text())
    state["contract_hash"] = digest
    (run_dir / "state.json").write_text(json.dumps(state))
    out, prev = [], GENESIS
    for n, line in enumerate((run_dir / "ledger.jsonl").read_bytes().splitlines()):
        fields = {k: v for k, v in json.loads(line).items() if k != "hash"}
        fields.update(seq=n, prev=prev, run_id=run_dir.name)
        if n == 0:
            fields["payload"]["contract_hash"] = digest
        fields["hash"] = prev = record_hash(fields)
        out.append(canonical(fields) + b"\n")
    (run_dir / "ledger.jsonl").write_bytes(b"".join(out))


def test_ledger_show_leads_with_target_and_critical_dimensions(done, copy_of) -> None:
    lines = invoke("ledger", "show", RUN, "--type", "baseline").output
    assert "broken_tool_use=" in lines and "concerning=" in lines and "admirable" not in lines
    assert not re.search(r"\d\.\d{3,}", lines), "figures are rounded"


def test_version() -> None:
    result = invoke("--version")
    assert result.exit_code == 0 and re.match(r"sil \d+\.\d+", result.output)


# ---- guards ------------------------------------------------------------------------------


def test_promote_refuses_control_arms_unless_forced(done, copy_of) -> None:
    before = {p.name: p.read_bytes() for p in (copy_of / "state" / "policies").glob("*.json")}
    refused = invoke("promote", RUN, "--arm", "random")
    assert refused.exit_code == 2 and "coin-flip" in refused.output and "--force" in refused.output
    assert {p.name: p.read_bytes() for p in (copy_of / "state" / "policies").glob("*.json")} == before
    assert invoke("promote", RUN, "--arm", "never").exit_code == 2
    forced = invoke("promote", RUN, "--arm", "random", "--force")
    assert forced.exit_code == 0, forced.output
    assert "git commit" in forced.output or "already holds" in forced.output


def test_approve_needs_key_or_unsigned(workspace, monkeypatch) -> None:
    monkeypatch.chdir(workspace)
    result = invoke("approve", "--by", "alice@example.org")
    assert result.exit_code == 2 and "--unsigned" in result.output
    assert not (workspace / "state" / "approvals").exists()


def test_an_unsigned_approval_never_replaces_a_signed_one(workspace, tmp_path) -> None:
    from sil.base.sshsig import generate_key
    from sil.contract.approval import ApprovalError, approve

    key = generate_key(tmp_path / "k", "alice@example.org")
    contract = load_contract(PETRI).contract
    approve(contract, workspace, "alice@example.org", 1.0, key)
    with pytest.raises(ApprovalError, match="never replaces it"):
        approve(contract, workspace, "alice@example.org", 1.0, None)


def test_ctrl_c_prints_how_to_resume(workspace, monkeypatch) -> None:
    from sil.run import train

    monkeypatch.chdir(workspace)

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(train, "execute_run", interrupted)
    result = invoke("run", "--run-id", "r9")
    assert result.exit_code == 130 and "sil run --contract program.md --run-id r9" in " ".join(result.output.split())


def test_gap_reason_carries_the_audit_output_with_secrets_redacted(tmp_path, monkeypatch) -> None:
    from types import SimpleNamespace

    monkeypatch.setenv("SIL_TEST_KEY", "supersecretvalue123")
    (tmp_path / "stderr.log").write_text("")
    (tmp_path / "stdout.log").write_text(
        "starting\nusing supersecretvalue123 and sk-ant-0123456789abcdef\nModuleNotFoundError: No module named 'anthropic'\n"
    )
    role = SimpleNamespace(credential_env="SIL_TEST_KEY")
    ctx = SimpleNamespace(
        contract=SimpleNamespace(models=SimpleNamespace(auditor=role, target=role, judge=role, mutator=role))
    )
    tail = measure._stderr_tail(SimpleNamespace(audit_dir=tmp_path), ctx)
    assert "No module named 'anthropic'" in tail and "stdout.log" in tail
    assert "supersecretvalue123" not in tail and "sk-ant-0123456789" not in tail


def test_progress_prints_plain_lines_when_piped(done, copy_of) -> None:
    from sil.cli.progress import RunProgress

    console = Console(record=True, width=200, force_terminal=False)
    from sil.store.events import CandidateProposed, Update

    with RunProgress(console, 50, live=False) as p:
        p.event(Update(event=CandidateProposed("gate", 0, "[x]", "s.p"), phase="done", audits=7, elapsed_s=1.0))
    text = console.export_text()
    assert "gate: candidate 0 [x] s.p" in text and "progress: done, 7 of at most 50 audits" in text


def test_halt_lines_say_what_to_do_next() -> None:
    from sil.review.summary import Summary, render

    s = Summary(
        run_id="r",
        phase="halted",
        halt_reason="repeated gaps [x]",
        backend="sim",
        note="",
        target="broken_tool_use",
        baseline_mean=None,
        never_mean=None,
        drift=None,
        noise_sigma={},
        noise_df={},
        aa_mean_diff=None,
        arms=[],
        audits=3,
        gaps=3,
        usd=0.0,
        elapsed_s=1.0,
        alpha_run=0.1,
        alpha_spent=0.0,
        confirmations=0,
    )
    console = Console(record=True, width=200)
    render(s, console)
    text = console.export_text()
    assert "repeated gaps [x]" in text and "run the same `sil run` command again" in text
    assert "lower is better" in text


@pytest.mark.slow
def test_status_json_parses_while_a_run_is_running(workspace) -> None:
    import subprocess
    import sys
    import time

    from tests.run.test_train import shrink

    shrink(workspace)
    sil = Path(sys.executable).parent / "sil"
    proc = subprocess.Popen(
        [str(sil), "run", "--run-id", "live"], cwd=workspace, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    seen = []
    try:
        deadline = time.monotonic() + 300
        while proc.poll() is None and time.monotonic() < deadline:
            res = subprocess.run([str(sil), "status", "live", "--json"], cwd=workspace, capture_output=True, text=True)
            if res.returncode == 0:
                seen.append(json.loads(res.stdout))
            time.sleep(0.5)
    finally:
        proc.wait(timeout=600)
    assert proc.returncode == 0
    assert any(s["running"] for s in seen), "status never saw the run running"
    runs = subprocess.run([str(sil), "runs", "--json"], cwd=workspace, capture_output=True, text=True)
    assert [r["run_id"] for r in json.loads(runs.stdout)] == ["live"]
