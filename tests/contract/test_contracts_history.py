"""Contract history (issue point 8): revisions name a recorded parent; superseded contracts are refused."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from sil.base.errors import Refused
from sil.cli.app import app
from sil.contract.approval import ApprovalError, approve
from sil.contract.history import ContractHistory, LineageError, check_lineage, revise, with_lineage
from sil.contract.schema import load_contract

runner = CliRunner()


def draft(workspace: Path, old: str, new: str) -> Path:
    path = workspace / "draft.md"
    text = (workspace / "program.md").read_text()
    assert old in text
    path.write_text(text.replace(old, new))
    return path


def test_revise_names_the_parent_and_supersedes_it(workspace: Path) -> None:
    first = load_contract(workspace / "program.md").contract
    entry = revise(workspace, workspace / "program.md", draft(workspace, "max_audits: 500", "max_audits: 480"), "fewer")
    now = load_contract(workspace / "program.md").contract
    assert now.parent == first.contract_hash and now.revision_reason == "fewer"
    assert entry.contract_hash == now.contract_hash
    history = ContractHistory(workspace)
    assert history.superseded_by(first.contract_hash).contract_hash == now.contract_hash
    assert [e.contract_hash for e in history.chain(now.contract_hash)] == [now.contract_hash, first.contract_hash]
    assert (history.dir / f"{first.contract_hash}.md").exists()  # the old text is archived
    with pytest.raises(LineageError, match="superseded by"):
        check_lineage(first, workspace)
    check_lineage(now, workspace)


def test_a_second_revision_chains_and_the_old_file_cannot_be_revised_again(workspace: Path) -> None:
    old_text = (workspace / "program.md").read_text()
    revise(workspace, workspace / "program.md", draft(workspace, "max_audits: 500", "max_audits: 480"), "one")
    revise(workspace, workspace / "program.md", draft(workspace, "max_audits: 480", "max_audits: 470"), "two")
    chain = ContractHistory(workspace).chain(load_contract(workspace / "program.md").contract.contract_hash)
    assert [e.reason for e in chain] == ["two", "one", None]
    stale = workspace / "stale.md"
    stale.write_text(old_text)
    with pytest.raises(LineageError, match="already superseded"):
        revise(workspace, stale, draft(workspace, "max_audits: 470", "max_audits: 345"), "fork")


def test_a_made_up_parent_is_refused(workspace: Path) -> None:
    text = with_lineage((workspace / "program.md").read_text(), "ab" * 32, "invented")
    (workspace / "program.md").write_text(text)
    contract = load_contract(workspace / "program.md").contract
    with pytest.raises(LineageError, match="not in this repository.s contract history"):
        check_lineage(contract, workspace)
    with pytest.raises(ApprovalError, match="not in this repository.s contract history"):
        approve(contract, workspace, "alice@example.org")


def test_approving_a_superseded_contract_is_refused(workspace: Path) -> None:
    first = load_contract(workspace / "program.md").contract
    approve(first, workspace, "alice@example.org")  # allowed while it is current
    revise(workspace, workspace / "program.md", draft(workspace, "max_audits: 500", "max_audits: 480"), "fewer")
    with pytest.raises(ApprovalError, match="superseded"):
        approve(first, workspace, "alice@example.org")


def test_an_unchanged_draft_or_an_empty_reason_is_refused(workspace: Path) -> None:
    same = draft(workspace, "max_audits: 500", "max_audits: 500")
    with pytest.raises(Refused, match="does not change"):
        revise(workspace, workspace / "program.md", same, "nothing")
    with pytest.raises(Refused, match="needs a reason"):
        revise(workspace, workspace / "program.md", same, "  ")


def test_cli_revise_and_history(workspace: Path, monkeypatch) -> None:
    monkeypatch.chdir(workspace)
    d = draft(workspace, "max_audits: 500", "max_audits: 480")
    result = runner.invoke(app, ["contract", "revise", str(d), "--reason", "fewer audits"], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    result = runner.invoke(app, ["contract", "history"], catch_exceptions=False)
    assert result.exit_code == 0 and "current" in result.output and "superseded by" in result.output
    assert "fewer audits" in result.output
    stale = runner.invoke(app, ["contract", "revise", str(d), "--reason", "x", "--contract", str(d)])
    assert stale.exit_code == 2  # the draft's own lineage is unknown: refused, nothing written
