"""`quick_check` passes a ledger exactly where `verify_chain_and_checkpoints` does, with its counts.

It is the check `sil runs` shows as "ok"; a ledger it does not pass is verified in full, so the
one direction that matters is: never a pass where the full check fails.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from sil.integrity import ledger
from sil.integrity.adoption import adopt_project
from sil.integrity.checkpoint import PROJECT_REF, checkpoint_ref, project_id, write_checkpoint
from sil.integrity.quickcheck import quick_check
from sil.integrity.records import RunRecord
from sil.integrity.verify import verify_chain_and_checkpoints


def _project(root: Path, run_id: str = "r1", project: str | None = None) -> Path:
    """A project (its own git repo) with one run of 8 records, checkpointed twice."""
    root.mkdir(parents=True, exist_ok=True)
    subprocess.run(["git", "init", "-q", str(root)], check=True)
    pid = project or project_id(root)
    path = root / "state" / "runs" / run_id / "ledger.jsonl"
    led = ledger.Ledger(path, offline=True, simulated=True)
    led.append("contract", _run_record(pid), run_id=run_id)
    for i in range(7):
        led.append("verdict", {"arm": "gate", "mutation_id": f"m{i}", "verdict": "keep", "reason": ""}, run_id=run_id)
        if i in (2, 5):
            write_checkpoint(path, root, None)
    return path


def _run_record(project: str) -> RunRecord:
    return RunRecord(
        contract_id="c",
        contract_hash="0" * 64,
        measurement_hash="0" * 64,
        manifest_hash="0" * 64,
        backend="sim",
        models={},
        arms=["gate"],
        seed=0,
        replicate_k=4,
        approval="none",
        note="",
        project=project,
    )


def _relink(lines: list[bytes]) -> bytes:
    out, prev = [], ledger.GENESIS
    for n, line in enumerate(lines):
        fields = {k: v for k, v in json.loads(line).items() if k != "hash"}
        fields.update(seq=n, prev=prev)
        fields["hash"] = prev = ledger.record_hash(fields)
        out.append(ledger.canonical(fields) + b"\n")
    return b"".join(out)


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(root), *args], check=True, capture_output=True)


def _same(path: Path, root: Path) -> None:
    """Where the quick check passes a ledger, the full one passes it with the same counts."""
    full = verify_chain_and_checkpoints(path, root)
    quick = quick_check(path, root)
    if quick is not None:
        assert full.ok and (quick.records, quick.checkpoints) == (full.records, full.checkpoints), full.errors


def test_a_checkpointed_ledger_passes_with_the_full_checks_counts(tmp_path: Path) -> None:
    path = _project(tmp_path / "p")
    quick = quick_check(path, tmp_path / "p")
    assert quick is not None and (quick.records, quick.checkpoints) == (8, 2)
    _same(path, tmp_path / "p")


def _cut(path: Path, root: Path) -> None:
    path.write_bytes(b"".join(path.read_bytes().splitlines(keepends=True)[:4]))


def _recomputed(path: Path, root: Path) -> None:
    lines = path.read_bytes().splitlines()
    path.write_bytes(_relink([lines[0], lines[1].replace(b"keep", b"kept"), *lines[2:]]))


def _recomputed_after_the_last_checkpoint(path: Path, root: Path) -> None:
    lines = path.read_bytes().splitlines()
    path.write_bytes(_relink([*lines[:-1], lines[-1].replace(b"keep", b"kept")]))


def _refs_deleted(path: Path, root: Path) -> None:
    _git(root, "update-ref", "-d", checkpoint_ref("r1"))


def _another_projects_id(path: Path, root: Path) -> None:
    _git(root, "update-ref", "-d", PROJECT_REF)
    adopt_project(root, new=True)  # a new, different id (made only on request while runs name the old one)


def _project_ref_missing(path: Path, root: Path) -> None:
    _git(root, "update-ref", "-d", PROJECT_REF)


def _torn_tail(path: Path, root: Path) -> None:
    with open(path, "ab") as fh:
        fh.write(b'{"seq":')


def _checkpoint_ref_on_a_blob(path: Path, root: Path) -> None:
    blob = (
        subprocess.run(
            ["git", "-C", str(root), "hash-object", "-w", "--stdin"], input=b"x", capture_output=True, check=True
        )
        .stdout.decode()
        .strip()
    )
    _git(root, "update-ref", checkpoint_ref("r1"), blob)


def _appended_after_the_checkpoint(path: Path, root: Path) -> None:
    ledger.Ledger(path, offline=True, simulated=True).append("stop", {"reason": "budget"}, run_id="r1")


CHANGES: dict[str, Callable[[Path, Path], None]] = {
    "cut behind its checkpoints": _cut,
    "recomputed from an edited record": _recomputed,
    "recomputed after the last checkpoint": _recomputed_after_the_last_checkpoint,
    "checkpoint refs deleted": _refs_deleted,
    "another project's id": _another_projects_id,
    "the project ref missing": _project_ref_missing,
    "a torn tail": _torn_tail,
    "a checkpoint ref on a blob": _checkpoint_ref_on_a_blob,
    "appended after the checkpoint": _appended_after_the_checkpoint,
}


@pytest.mark.parametrize("name", CHANGES)
def test_a_changed_project_or_ledger_gets_the_full_checks_answer(tmp_path: Path, name: str) -> None:
    root = tmp_path / "p"
    path = _project(root)
    CHANGES[name](path, root)
    _same(path, root)
    # what no checkpoint covers cannot be checked, by either (a ref on a blob is no checkpoint)
    unanchored = ("checkpoint refs deleted", "a checkpoint ref on a blob", "recomputed after the last checkpoint")
    assert (quick_check(path, root) is not None) == (name in (*unanchored, "appended after the checkpoint")), name


def test_a_ledger_of_another_run_or_project_does_not_pass(tmp_path: Path) -> None:
    path = _project(tmp_path / "p")
    moved = path.parent.parent / "r2" / "ledger.jsonl"
    moved.parent.mkdir()
    shutil.copy(path, moved)
    assert quick_check(moved, tmp_path / "p") is None
    _same(moved, tmp_path / "p")
    other = _project(tmp_path / "q", project="someone-else")
    assert quick_check(other, tmp_path / "q") is None
    _same(other, tmp_path / "q")
    outside = tmp_path / "nogit" / "state" / "runs" / "r1" / "ledger.jsonl"  # no repository: no project id
    outside.parent.mkdir(parents=True)
    shutil.copy(path, outside)
    assert quick_check(outside, tmp_path / "nogit") is None
    _same(outside, tmp_path / "nogit")
