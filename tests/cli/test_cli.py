"""The `sil` command as a user runs it: exit codes, refusals that change nothing, review."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sil.base.errors import ExitCode
from sil.base.locks import LOCKED_EXIT_CODE, run_lock
from sil.cli.app import app
from tests.conftest import REPO, edit_contract
from tests.run.test_train import shrink

runner = CliRunner()


def invoke(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def make_workspace(root: Path) -> Path:
    shutil.copy(REPO / "program.md", root / "program.md")
    shutil.copytree(REPO / "measurement", root / "measurement")
    shutil.copytree(REPO / "state" / "policies", root / "state" / "policies")
    return shrink(root)


@pytest.fixture(scope="module")
def done(tmp_path_factory) -> Path:
    """A workspace with one finished tiny run (shared by the review tests)."""
    from tests.finished import finished_tiny_run

    return finished_tiny_run(tmp_path_factory, "cli")


@pytest.fixture
def in_dir(monkeypatch):
    def enter(path: Path) -> Path:
        monkeypatch.chdir(path)
        return path

    return enter


def test_check_and_dry_run_spend_nothing(workspace, in_dir) -> None:
    in_dir(shrink(workspace))
    assert invoke("check").exit_code == 0
    result = invoke("run", "--dry-run")
    assert result.exit_code == 0 and "worst-case cost at the audit limit: $0.00" in result.output
    assert not (workspace / "state" / "runs").exists()


def test_petri_dry_run_prices_the_run_without_calls(workspace, in_dir, monkeypatch) -> None:
    in_dir(workspace)
    monkeypatch.setenv("INSPECT_DISABLE_MODEL_API", "1")
    contract = workspace / "petri.md"
    shutil.copy(REPO / "examples" / "program-petri-offline.md", contract)
    edit_contract(
        contract,
        "target: {model: scripted/target}",
        "target: {model: anthropic/claude-x, credential_env: ANTHROPIC_API_KEY, "
        "price: {input_per_mtok: 3, output_per_mtok: 15}, context_tokens: 200000}",
    )
    result = invoke("run", "--contract", "petri.md", "--dry-run")
    assert result.exit_code == 0, result.output
    assert "REAL MODEL CALLS" in result.output and "worst-case cost at the audit limit: $" in result.output
    assert "$0.00" not in result.output
    assert not (workspace / "state" / "runs").exists()


def test_real_models_without_approval_are_refused_before_any_audit(workspace, in_dir) -> None:
    in_dir(workspace)
    contract = workspace / "petri.md"
    shutil.copy(REPO / "examples" / "program-petri-offline.md", contract)
    edit_contract(
        contract,
        "target: {model: scripted/target}",
        "target: {model: anthropic/claude-x, credential_env: ANTHROPIC_API_KEY, "
        "price: {input_per_mtok: 3, output_per_mtok: 15}, context_tokens: 200000}",
    )
    result = invoke("run", "--contract", "petri.md")
    assert result.exit_code == 2
    assert "approv" in result.output.lower()
    assert not list((workspace / "state").glob("runs/*/audits"))


def test_backend_flag_must_match_the_contract(workspace, in_dir) -> None:
    in_dir(workspace)
    result = invoke("run", "--backend", "petri")
    assert result.exit_code == 2 and "program-petri-offline" in result.output


def test_noise_refuses_a_backend_whose_judge_passes_it_cannot_read(workspace, in_dir) -> None:
    in_dir(workspace)
    result = invoke("noise")
    assert result.exit_code == 2 and "backend 'sim' simulates them or keeps no passes apart" in result.output
    assert not (workspace / "docs" / "results").exists()  # refused before any audit


def test_sim_backend_refuses_real_model_names(workspace, in_dir) -> None:
    in_dir(workspace)
    edit_contract(workspace / "program.md", "target: {model: sim/target}", "target: {model: anthropic/claude-x}")
    result = invoke("check")
    assert result.exit_code == 2 and "must be sim/<role>" in result.output


def test_bad_contract_is_a_clear_refusal(workspace, in_dir) -> None:
    in_dir(workspace)
    edit_contract(workspace / "program.md", "max_turns: 12", "max_turns: 12\n  temperature: 0.2")
    result = invoke("check")
    assert result.exit_code == 2 and "measurement.temperature" in result.output


def test_second_runner_is_locked_out(done, in_dir) -> None:
    in_dir(done)
    before = (done / "state" / "runs" / "t1" / "ledger.jsonl").read_bytes()
    with run_lock(done / "state" / "runs" / "t1"):
        result = invoke("run", "--run-id", "t1")
    assert result.exit_code == LOCKED_EXIT_CODE and "locked" in result.output.lower()
    assert (done / "state" / "runs" / "t1" / "ledger.jsonl").read_bytes() == before


def test_finished_run_is_not_rerun(done, in_dir) -> None:
    in_dir(done)
    before = (done / "state" / "runs" / "t1" / "ledger.jsonl").read_bytes()
    result = invoke("run", "--run-id", "t1")
    assert result.exit_code == 0 and "already complete" in result.output
    assert (done / "state" / "runs" / "t1" / "ledger.jsonl").read_bytes() == before


def test_ledger_show_and_verify(done, in_dir) -> None:
    in_dir(done)
    shown = invoke("ledger", "show", "t1", "--json")
    rows = [json.loads(line) for line in shown.output.splitlines()]
    assert rows[0]["type"] == "contract" and rows[-1]["type"] == "stop"
    assert invoke("ledger", "verify", "t1").exit_code == 0
    assert "verdict" in invoke("ledger", "show", "t1", "--type", "verdict").output


def test_tampered_ledger_fails_verify(done, in_dir, tmp_path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(done, copy)
    in_dir(copy)
    path = copy / "state" / "runs" / "t1" / "ledger.jsonl"
    lines = path.read_bytes().splitlines(keepends=True)
    lines[3] = lines[3].replace(b'"tick":0', b'"tick":9')
    path.write_bytes(b"".join(lines))
    result = invoke("ledger", "verify", "t1")
    assert result.exit_code == 1 and "line 4" in result.output


def test_promote_is_explicit_and_refuses_a_changed_tree(done, in_dir, tmp_path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(done, copy)
    in_dir(copy)
    policies = copy / "state" / "policies"
    before = {p.name: p.read_bytes() for p in policies.iterdir()}
    (policies / "reflection.json").write_bytes(before["reflection.json"] + b" ")
    refused = invoke("promote", "t1", "--arm", "random", "--force")
    assert refused.exit_code == 2 and "changed since the run started" in refused.output
    (policies / "reflection.json").write_bytes(before["reflection.json"])
    result = invoke("promote", "t1", "--arm", "random", "--force")
    assert result.exit_code == 0, result.output
    after = {p.name: p.read_bytes() for p in policies.iterdir()}
    assert after != before or "already holds" in result.output


def test_replicate_requires_a_keep(done, in_dir, tmp_path) -> None:
    copy = tmp_path / "copy"
    shutil.copytree(done, copy)
    in_dir(copy)
    rows = [json.loads(x) for x in invoke("ledger", "show", "t1", "--json", "--type", "verdict").output.splitlines()]
    reverted = next(r["payload"]["mutation_id"] for r in rows if r["payload"]["verdict"] == "revert")
    result = invoke("replicate", "t1", reverted, "--k", "1")
    assert result.exit_code == 2 and "was reverted, not kept" in result.output
    kept = [r["payload"]["mutation_id"] for r in rows if r["payload"]["verdict"] == "keep"]
    if kept:
        result = invoke("replicate", "t1", kept[0], "--k", "1")
        assert result.exit_code in (0, 2), result.output
        if result.exit_code == 0:
            assert "replication of" in result.output


def test_a_deleted_or_truncated_run_is_refused_before_any_audit(tmp_path: Path, in_dir) -> None:
    """Deleting state/runs/<id> (or cutting its ledger) and running again must not spend audits
    only to halt at the first checkpoint: the conflict with the run's checkpoints is found first."""
    root = in_dir(make_workspace(tmp_path))
    assert invoke("run", "--run-id", "t1").exit_code == 0
    run_dir = root / "state" / "runs" / "t1"
    ledger_file = run_dir / "ledger.jsonl"
    lines = ledger_file.read_bytes().splitlines(keepends=True)
    ledger_file.write_bytes(b"".join(lines[: len(lines) // 2]))
    cut = invoke("run", "--run-id", "t1")
    assert cut.exit_code == ExitCode.REFUSED, cut.output
    assert "does not extend its last checkpoint" in cut.output and "Nothing was started" in cut.output
    assert len(ledger_file.read_bytes().splitlines()) == len(lines) // 2  # nothing was appended
    shutil.rmtree(run_dir)
    again = invoke("run", "--run-id", "t1")
    assert again.exit_code == ExitCode.REFUSED, again.output
    assert "was checkpointed before" in again.output and "sil run --new" in again.output
    assert not run_dir.exists()  # a refusal leaves no run folder
