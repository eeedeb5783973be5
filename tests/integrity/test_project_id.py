"""A project that lost its id (refs/sil/project) never mints a new one while its runs are here (issue 40.2).

A plain `git clone` does not fetch refs/sil/*, and a ref can be deleted; a new id made then
turned every earlier genuine run into "copied from another project". Now `sil run` refuses
and says how to fetch the refs, and `sil project adopt` restores the id the runs name (once
they verify) or, with --new, makes a new one, recorded in the ref's commit.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sil.cli.app import app
from sil.integrity import ledger as ledger_mod
from sil.integrity.adoption import AdoptionRefused, adopt_project
from sil.integrity.checkpoint import PROJECT_REF, checkpoint_ref, write_checkpoint
from sil.integrity.projectid import ADOPTION_FILE, ProjectIdLost, project_id
from sil.integrity.records import RunRecord, Trust
from sil.integrity.verify import verify_run_ledger
from tests.cli.test_cli import make_workspace
from tests.tamper.test_tamper_attacks import _run_record as tamper_run_record


def _project(root: Path, run_id: str = "r1", project: str | None = None) -> Path:
    """A project (its own git repo) with one run of 8 records, checkpointed twice."""
    root.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    pid = project or project_id(root)
    path = root / "state" / "runs" / run_id / "ledger.jsonl"
    led = ledger_mod.Ledger(path, offline=True, simulated=True)
    led.append("contract", _run_record(pid), run_id=run_id)
    for i in range(7):
        led.append("verdict", {"arm": "gate", "mutation_id": f"m{i}", "verdict": "keep", "reason": ""}, run_id=run_id)
        if i in (2, 5):
            write_checkpoint(path, root, None)
    return path


def _run_record(project: str) -> RunRecord:
    return tamper_run_record(Trust(), project)


runner = CliRunner()
FETCH = "git fetch origin 'refs/sil/*:refs/sil/*'"


def git(root: Path, *args: str) -> str:
    identity = ["-c", "user.name=t", "-c", "user.email=t@example.org", "-c", "commit.gpgsign=false"]
    proc = subprocess.run(["git", "-C", str(root), *identity, *args], capture_output=True, text=True, check=True)
    return proc.stdout.strip()


def sil(*args: str):
    return runner.invoke(app, list(args), catch_exceptions=False)


def published(tmp_path: Path, make_run) -> tuple[Path, Path]:
    """A project with a run and a remote it was pushed to (branch and refs/sil/*), and a plain
    `git clone` of it: the runs travel with the branch, their refs do not."""
    (tmp_path / "first").mkdir()
    first = make_workspace(tmp_path / "first")
    git(first, "init", "-q")
    make_run(first)
    git(first, "add", "-A")
    git(first, "commit", "-qm", "project with a run")
    subprocess.run(["git", "init", "-q", "--bare", str(tmp_path / "origin.git")], check=True)
    git(first, "remote", "add", "origin", str(tmp_path / "origin.git"))
    git(first, "push", "-q", "origin", "HEAD:refs/heads/main", "refs/sil/*:refs/sil/*")
    clone = tmp_path / "clone"
    subprocess.run(["git", "clone", "-q", "-b", "main", str(tmp_path / "origin.git"), str(clone)], check=True)
    return first, clone


def refused_then_fetched(clone: Path, monkeypatch) -> None:
    """`sil run` in the clone refuses with the fetch command, makes nothing; then the fetch."""
    monkeypatch.chdir(clone)
    refused = sil("run", "--run-id", "t2")
    assert refused.exit_code == 2, refused.output
    assert FETCH in " ".join(refused.output.split()) and "sil project adopt" in refused.output
    assert git(clone, "for-each-ref", "refs/sil/") == ""  # no id was made: the fetch is not rejected
    assert not (clone / "state" / "runs" / "t2").exists()
    git(clone, "fetch", "-q", "origin", "refs/sil/*:refs/sil/*")


def test_a_clone_without_the_refs_refuses_to_run_and_its_run_verifies_after_the_fetch(
    tmp_path: Path, monkeypatch
) -> None:
    """The issue's reproduction, with a run written by the ledger's own code (fast)."""
    first, clone = published(tmp_path, lambda root: _project(root, "t1"))
    refused_then_fetched(clone, monkeypatch)
    assert sil("ledger", "verify", "t1").exit_code == 0
    assert project_id(clone) == project_id(first)  # what the next run names


@pytest.mark.slow
def test_a_clone_of_a_real_run_refuses_then_verifies_and_runs_after_the_fetch(tmp_path: Path, monkeypatch) -> None:
    """The same with `sil run` itself, before and after the clone."""

    def real_run(root: Path) -> None:
        monkeypatch.chdir(root)
        assert sil("run", "--run-id", "t1").exit_code == 0

    first, clone = published(tmp_path, real_run)
    refused_then_fetched(clone, monkeypatch)
    assert sil("ledger", "verify", "t1").exit_code == 0
    assert sil("run", "--run-id", "t2").exit_code == 0
    assert sil("ledger", "verify", "t2").exit_code == 0
    assert git(clone, "rev-parse", PROJECT_REF) == git(first, "rev-parse", PROJECT_REF)


def test_a_deleted_project_ref_is_restored_from_the_runs_once_they_verify(tmp_path: Path, monkeypatch) -> None:
    root = tmp_path / "p"
    ledger = _project(root)
    pid = project_id(root)
    git(root, "update-ref", "-d", PROJECT_REF)
    with pytest.raises(ProjectIdLost, match=f"r1 names project {pid}"):
        project_id(root)
    assert project_id(root, create=False) is None  # readers are not refused, they see no id

    monkeypatch.chdir(root)
    adopted = sil("project", "adopt")
    assert adopted.exit_code == 0 and f"restored project id {pid} (runs verified: r1)" in adopted.output
    assert project_id(root) == pid
    assert verify_run_ledger(ledger, root).ok
    record = json.loads(git(root, "cat-file", "blob", f"{PROJECT_REF}:{ADOPTION_FILE}"))
    assert record["adopted"] == "restored" and record["runs"] == ["r1"]
    assert "restored by `sil project adopt`" in git(root, "log", "-1", "--format=%B", PROJECT_REF)
    again = sil("project", "adopt")
    assert again.exit_code == 2 and "nothing to adopt" in again.output


def test_an_id_named_only_by_a_ledger_that_does_not_verify_is_not_restored(tmp_path: Path) -> None:
    root = tmp_path / "p"
    ledger = _project(root)
    git(root, "update-ref", "-d", PROJECT_REF)
    lines = ledger.read_bytes().splitlines(keepends=True)
    ledger.write_bytes(b"".join(lines[:2]))  # cut below its checkpoints
    with pytest.raises(AdoptionRefused, match="r1: "):
        adopt_project(root, new=False)
    assert git(root, "for-each-ref", PROJECT_REF) == ""


def test_ledgers_naming_two_ids_are_refused_and_a_new_id_is_made_only_on_request(tmp_path: Path) -> None:
    root = tmp_path / "p"
    _project(root, "r1", project="a" * 32)
    _project(root, "r2", project="b" * 32)
    with pytest.raises(AdoptionRefused, match="name 2 project ids"):
        adopt_project(root, new=False)
    made = adopt_project(root, new=True)
    assert made.how == "new" and made.project not in ("a" * 32, "b" * 32) and made.runs == ["r1", "r2"]
    assert project_id(root) == made.project
    assert json.loads(git(root, "cat-file", "blob", f"{PROJECT_REF}:{ADOPTION_FILE}"))["adopted"] == "new"


def test_checkpoints_of_a_run_whose_ledger_is_not_here_also_keep_the_id_from_being_remade(tmp_path: Path) -> None:
    root = tmp_path / "p"
    ledger = _project(root)
    git(root, "update-ref", "-d", PROJECT_REF)
    ledger.unlink()
    with pytest.raises(ProjectIdLost, match="r1 has checkpoints here"):
        project_id(root)
    assert git(root, "rev-parse", checkpoint_ref("r1"))


def test_a_new_project_and_ledgers_that_name_no_project_still_get_an_id(tmp_path: Path) -> None:
    root = tmp_path / "p"
    root.mkdir()
    git(root, "init", "-q")
    old = root / "state" / "runs" / "old" / "ledger.jsonl"
    led = ledger_mod.Ledger(old, offline=True, simulated=True)
    led.append("contract", _run_record(""), run_id="old")  # written before runs named their project
    write_checkpoint(old, root, None)
    made = project_id(root)
    assert made and project_id(root) == made
