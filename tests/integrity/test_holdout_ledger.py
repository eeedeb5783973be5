"""The project holdout ledger at refs/sil/_holdout: appended once per key, admitted under the
project's lock, verified like a run ledger, and a tampered one fails verification."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from sil.integrity.gitrefs import Git
from sil.integrity.holdout import (
    HOLDOUT_FILE,
    HOLDOUT_REF,
    append_holdout,
    holdout_records,
    holdout_uses,
    spend_key,
    verify_holdout,
)
from sil.integrity.ledger import Record
from sil.integrity.records import HoldoutResultRecord, HoldoutSpendRecord
from sil.stats.holdout import HoldoutSpent, SpendingRule


def spend(run: str, arm: str = "gate", level: float = 0.01) -> HoldoutSpendRecord:
    return HoldoutSpendRecord(
        seed_set="heldout",
        set_hash="a" * 64,
        seeds=["s1", "s2"],
        run_id=run,
        contract_id="c",
        contract_hash="b" * 64,
        arm=arm,
        policy_set=f"champ-{run}",
        against="origin",
        level=level,
        delivers=arm == "gate",
        claim="heldout",
        project_alpha=0.02,
    )


def certify(root: Path, run: str, arm: str = "gate", admit=None) -> None:  # type: ignore[no-untyped-def]
    key = spend_key(run, arm, f"champ-{run}")
    append_holdout(root, spend(run, arm), key=key, simulated=True, admit=admit)
    result = HoldoutResultRecord(run_id=run, arm=arm, policy_set=f"champ-{run}", certified=run == "r1", reason="x")
    append_holdout(root, result, key=key, simulated=True)


@pytest.fixture
def project(tmp_path: Path) -> Path:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    return tmp_path


def test_two_runs_show_their_certifications_and_the_error_spent(project: Path) -> None:
    for run in ("r1", "r2"):
        certify(project, run, "random")
        certify(project, run, "gate")
    use = holdout_uses(holdout_records(project))["a" * 64]
    assert (use.certifications, use.delivering, use.certified, use.runs) == (4, 2, 2, ["r1", "r2"])
    assert use.spent == pytest.approx(0.02)  # the random arm's certifications deliver nothing, spend nothing
    report = verify_holdout(project)
    assert report.ok and report.records == 8, report.errors


def test_writing_a_key_again_writes_nothing(project: Path) -> None:
    certify(project, "r1")
    certify(project, "r1")  # a resumed run
    assert len(holdout_records(project)) == 2


def test_a_spent_set_admits_no_certification_and_writes_nothing(project: Path) -> None:
    rule = SpendingRule(project_alpha=0.02, certifications=2, alpha_certify=0.05)

    def admit(records: list[Record]) -> None:
        use = holdout_uses(records).get("a" * 64)
        rule.level(use.spent if use else 0.0)

    certify(project, "r1", admit=admit)
    certify(project, "r2", admit=admit)
    with pytest.raises(HoldoutSpent):
        certify(project, "r3", admit=admit)
    assert len(holdout_records(project)) == 4


def rewrite_tip(project: Path, edit) -> None:  # type: ignore[no-untyped-def]
    """Replace the ref's tip by a commit (same parent) whose ledger is `edit(ledger)`."""
    git = Git(project)
    tip = git.resolve(HOLDOUT_REF)
    assert tip is not None
    data = git.out("cat-file", "blob", f"{tip}:{HOLDOUT_FILE}").encode() + b"\n"
    parents = git.out("rev-list", "--parents", "-n", "1", tip).split()[1:]
    made = git.commit(git.tree({HOLDOUT_FILE: edit(data)}), "tampered", parents)
    git.out("update-ref", HOLDOUT_REF, made)


def test_an_edited_record_fails_verification(project: Path) -> None:
    certify(project, "r1")
    certify(project, "r2")
    rewrite_tip(project, lambda data: data.replace(b'"level":0.01', b'"level":0.0', 1))
    report = verify_holdout(project)
    assert not report.ok and any("hash does not match" in e for e in report.errors), report.errors


def test_a_deleted_record_fails_verification(project: Path) -> None:
    """Dropping a spend (to win back its error) breaks the records' chain."""
    certify(project, "r1")
    certify(project, "r2")
    git = Git(project)
    first = git.out("rev-list", "--max-parents=0", HOLDOUT_REF)
    # a new history from the first commit: the ledger of its first record, then the last record alone
    data = git.out("cat-file", "blob", f"{git.resolve(HOLDOUT_REF)}:{HOLDOUT_FILE}").encode() + b"\n"
    lines = data.splitlines(keepends=True)
    made = git.commit(git.tree({HOLDOUT_FILE: lines[0] + lines[3]}), "tampered", [first])
    git.out("update-ref", HOLDOUT_REF, made)
    report = verify_holdout(project)
    assert not report.ok and any("chain broken" in e for e in report.errors), report.errors


def test_a_commit_that_rewrites_earlier_records_fails_verification(project: Path) -> None:
    """Every commit of the ref must only add one line to its parent's ledger."""
    certify(project, "r1")
    rewrite_tip(project, lambda data: data + data.splitlines(keepends=True)[0])
    report = verify_holdout(project)
    assert not report.ok and any("does not append exactly one record" in e for e in report.errors), report.errors


def test_a_project_without_certifications_verifies_empty(project: Path) -> None:
    report = verify_holdout(project)
    assert report.ok and report.records == 0 and holdout_records(project) == []


def _record(run: str, type_: str, payload: dict[str, object]) -> Record:
    return Record(seq=0, prev="", ts="", run_id=run, type=type_, offline=True, simulated=True, payload=payload, hash="")


@pytest.mark.parametrize(
    "certify, manifest, kind, counts",
    [
        ({"arm": "gate", "rounds": 12, "seed_set": "heldout"}, "m1", "heldout", True),
        ({"arm": "gate", "rounds": 0, "seed_set": "heldout"}, "m1", "heldout", False),  # refused: no round ran
        ({"arm": "random", "rounds": 12, "seed_set": "heldout"}, "m1", "heldout", False),  # delivers nothing
        ({"arm": "gate", "rounds": 12, "seed_set": "heldout"}, "m2", "heldout", False),  # another measurement
        ({"arm": "gate", "rounds": 12, "seed_set": "search"}, "m1", "heldout", False),  # another seed set
        ({"arm": "gate", "rounds": 12}, "m1", "search", True),  # ledgers before seed_set was recorded: search
    ],
)
def test_a_run_counts_as_having_spent_on_a_set_only_for_a_delivering_certification_there(
    certify: dict[str, object], manifest: str, kind: str, counts: bool
) -> None:
    from sil.exec.holdoutcheck import spent_on_set

    records = [_record("r1", "contract", {"manifest_hash": manifest}), _record("r1", "certify", certify)]
    assert spent_on_set(records, "m1", kind) is counts  # type: ignore[arg-type]
