"""Checkpoints: anchored in a tool-owned git ref, signed when a key is set, verified against the ledger."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import pytest

from sil.base.sshsig import Signer, allowed_signers_line, generate_key
from sil.integrity import checkpoint as cpmod
from sil.integrity.checkpoint import (
    UNSIGNED_NOTE,
    CheckpointError,
    checkpoint_ref,
    read_checkpoints,
    verify_against_checkpoints,
    write_checkpoint,
)
from sil.integrity.ledger import Ledger
from sil.integrity.verify import verify_run_ledger


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True).stdout.strip()


def user_state(repo: Path) -> dict[str, str]:
    """Everything of the user's that a checkpoint must leave byte-identical."""
    return {
        "HEAD": (repo / ".git" / "HEAD").read_text(),
        "head_commit": git(repo, "rev-parse", "HEAD"),
        "branches": git(repo, "for-each-ref", "refs/heads", "refs/tags"),
        "index": hashlib.sha256((repo / ".git" / "index").read_bytes()).hexdigest(),
        "status": git(repo, "status", "--porcelain=v1", "--untracked-files=all"),
        "work": (repo / "notes.txt").read_text() + (repo / "draft.txt").read_text(),
    }


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    """A user's repo with a commit, a staged change and an untracked file."""
    repo = tmp_path / "repo"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    git(repo, "config", "user.email", "user@example.org")
    git(repo, "config", "user.name", "User")
    (repo / "notes.txt").write_text("v1\n")
    git(repo, "add", "notes.txt")
    git(repo, "commit", "-q", "-m", "user commit")
    (repo / "notes.txt").write_text("v2 staged\n")
    git(repo, "add", "notes.txt")
    (repo / "draft.txt").write_text("untracked\n")
    return repo


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict[str, object]:
    d = tmp_path_factory.mktemp("keys")
    alice = generate_key(d / "alice", "alice")
    bob = generate_key(d / "bob", "bob")
    mallory = generate_key(d / "mallory", "mallory")
    allowed = d / "allowed_signers"
    allowed.write_text(
        allowed_signers_line("alice@example.org", d / "alice.pub", ("sil-ledger", "sil-approval"))
        + allowed_signers_line("bob@example.org", d / "bob.pub", ("sil-ledger", "sil-approval"))
    )
    return {
        "alice": Signer(alice, "alice@example.org"),
        "bob": Signer(bob, "bob@example.org"),
        "mallory_as_alice": Signer(mallory, "alice@example.org"),
        "allowed": allowed,
    }


def _ledger(tmp_path: Path, n: int) -> tuple[Path, Ledger]:
    path = tmp_path / "runs" / "r1" / "ledger.jsonl"
    led = Ledger(path, offline=True, simulated=True)
    for i in range(n):
        led.append("verdict", {"i": i}, run_id="r1")
    return path, led


def test_unsigned_checkpoint_is_anchored_and_user_state_untouched(tmp_path: Path, repo: Path) -> None:
    path, led = _ledger(tmp_path, 3)
    before = user_state(repo)
    cp = write_checkpoint(path, repo, None)
    assert (cp.records, cp.seq, cp.size) == (3, 2, path.stat().st_size)
    assert cp.signature is None and cp.commit
    assert git(repo, "rev-parse", checkpoint_ref("r1")) == cp.commit
    led.append("verdict", {"i": 3}, run_id="r1")
    cp2 = write_checkpoint(path, repo, None)
    assert git(repo, "rev-parse", cp2.commit + "^") == cp.commit  # a chain of checkpoint commits
    assert user_state(repo) == before
    report = verify_against_checkpoints(path, repo, None)
    assert report.ok and report.checkpoints == 2
    assert UNSIGNED_NOTE in report.notes
    assert [c.records for c in read_checkpoints(repo, "r1")] == [3, 4]


def test_signed_checkpoint_verifies_with_allowed_signers(tmp_path: Path, repo: Path, keys) -> None:
    path, _ = _ledger(tmp_path, 2)
    before = user_state(repo)
    cp = write_checkpoint(path, repo, keys["alice"])
    assert cp.signer == "alice@example.org" and "BEGIN SSH SIGNATURE" in cp.signature
    stored = git(repo, "cat-file", "blob", f"{cp.commit}:checkpoint")
    assert stored.splitlines() == ["sil-ledger/r1", "2", str(cp.size), cp.head_hash]
    report = verify_against_checkpoints(path, repo, keys["allowed"])
    assert report.ok, report.errors
    assert report.notes == []
    assert user_state(repo) == before


@pytest.mark.parametrize(
    ("signer", "message"),
    [
        ("mallory_as_alice", "not in"),
        ("bob", "signed by bob@example.org, not by 'alice@example.org'"),
    ],
)
def test_wrong_signer_is_rejected(tmp_path: Path, repo: Path, keys, signer: str, message: str) -> None:
    path, _ = _ledger(tmp_path, 2)
    cp = write_checkpoint(path, repo, keys[signer])
    if signer == "bob":  # claim alice's identity on bob's signature
        meta = git(repo, "cat-file", "blob", f"{cp.commit}:checkpoint.json")
        _replace_blob(repo, cp.commit, "checkpoint.json", meta.replace("bob@", "alice@") + "\n")
    report = verify_against_checkpoints(path, repo, keys["allowed"])
    assert not report.ok
    assert any(message in e for e in report.errors), report.errors


def _replace_blob(repo: Path, commit: str, name: str, text: str) -> None:
    """An attacker with write access rewrites one file of the checkpoint commit and the ref."""
    blob = subprocess.run(
        ["git", "-C", str(repo), "hash-object", "-w", "--stdin"], input=text, capture_output=True, text=True, check=True
    ).stdout.strip()
    entries = []
    for line in git(repo, "ls-tree", commit).splitlines():
        meta, fname = line.split("\t")
        mode, kind, sha = meta.split()
        entries.append(f"{mode} {kind} {blob if fname == name else sha}\t{fname}\n")
    tree = subprocess.run(
        ["git", "-C", str(repo), "mktree"], input="".join(entries), capture_output=True, text=True, check=True
    ).stdout.strip()
    new = git(repo, "commit-tree", tree, "-m", "forged")
    git(repo, "update-ref", checkpoint_ref("r1"), new)


def test_forged_unsigned_note_fails_signature_check(tmp_path: Path, repo: Path, keys) -> None:
    path, led = _ledger(tmp_path, 3)
    write_checkpoint(path, repo, keys["alice"])
    cp = read_checkpoints(repo, "r1")[-1]
    # Replace the signed note by one for a different head, keeping the old signature.
    forged = cp.note().decode().replace(cp.head_hash, "f" * 64)
    _replace_blob(repo, cp.commit, "checkpoint", forged)
    report = verify_against_checkpoints(path, repo, keys["allowed"])
    assert not report.ok
    assert any("edited after signing" in e for e in report.errors), report.errors


def test_unsigned_checkpoints_fail_when_signatures_are_required(tmp_path: Path, repo: Path, keys) -> None:
    path, _ = _ledger(tmp_path, 2)
    write_checkpoint(path, repo, None)
    report = verify_against_checkpoints(path, repo, keys["allowed"])
    assert not report.ok and "unsigned but signatures are required" in report.errors[0]


def test_signed_checkpoints_without_allowed_signers_say_so(tmp_path: Path, repo: Path, keys) -> None:
    path, _ = _ledger(tmp_path, 2)
    write_checkpoint(path, repo, keys["alice"])
    report = verify_against_checkpoints(path, repo, None)
    assert report.ok and any("not checked" in n for n in report.notes)


def test_refuses_to_anchor_a_broken_or_rewritten_ledger(tmp_path: Path, repo: Path) -> None:
    path, led = _ledger(tmp_path, 3)
    write_checkpoint(path, repo, None)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:2]))  # truncated, then the run goes on
    led.append("verdict", {"i": "new"}, run_id="r1")
    with pytest.raises(CheckpointError, match="does not extend the last checkpoint"):
        write_checkpoint(path, repo, None)
    path.write_bytes(lines[1] + lines[0])
    with pytest.raises(CheckpointError, match="refusing to anchor"):
        write_checkpoint(path, repo, None)
    assert len(read_checkpoints(repo, "r1")) == 1


def test_no_checkpoint_is_reported(tmp_path: Path, repo: Path) -> None:
    path, _ = _ledger(tmp_path, 2)
    report = verify_against_checkpoints(path, repo, None)
    assert report.ok and report.checkpoints == 0
    assert any("no checkpoint" in n for n in report.notes)


def test_deleted_ledger_is_detected_by_run_id(tmp_path: Path, repo: Path) -> None:
    path, _ = _ledger(tmp_path, 2)
    write_checkpoint(path, repo, None)
    path.write_bytes(b"")
    report = verify_against_checkpoints(path, repo, None, run_id="r1")
    assert not report.ok and "truncated" in report.errors[0]
    path.unlink()
    assert not verify_against_checkpoints(path, repo, None).ok  # run id from the run directory


def test_not_a_git_repo(tmp_path: Path) -> None:
    path, _ = _ledger(tmp_path, 1)
    (tmp_path / "plain").mkdir()
    with pytest.raises(CheckpointError, match="not a git repository"):
        write_checkpoint(path, tmp_path / "plain", None)


def test_signing_failure_writes_no_checkpoint(tmp_path: Path, repo: Path) -> None:
    path, _ = _ledger(tmp_path, 1)
    with pytest.raises(CheckpointError, match="cannot sign"):
        write_checkpoint(path, repo, Signer(tmp_path / "missing_key", "alice@example.org"))
    assert read_checkpoints(repo, "r1") == []


def test_git_environment_of_the_caller_is_ignored(tmp_path: Path, repo: Path, monkeypatch) -> None:
    """A GIT_INDEX_FILE or GIT_DIR set by a hook must not redirect the plumbing."""
    path, _ = _ledger(tmp_path, 1)
    before = user_state(repo)
    with monkeypatch.context() as m:
        m.setenv("GIT_INDEX_FILE", str(repo / ".git" / "index"))
        m.setenv("GIT_DIR", str(tmp_path / "elsewhere"))
        write_checkpoint(path, repo, None)
    assert user_state(repo) == before
    assert cpmod.read_checkpoints(repo, "r1")[0].records == 1


def test_anchor_repo_is_the_project_repo_or_a_bare_fallback(tmp_path: Path, repo: Path) -> None:
    assert cpmod.anchor_repo(repo) == repo
    plain = tmp_path / "plain"
    plain.mkdir()
    assert cpmod.anchor_repo(plain, create=False) is None
    bare = cpmod.anchor_repo(plain)
    assert bare == plain / "state" / "anchors.git"
    assert git(bare, "rev-parse", "--is-bare-repository") == "true"


def test_verify_run_ledger(tmp_path: Path, keys, monkeypatch) -> None:
    """`sil ledger verify` on a project without git: chain only, then the bare fallback."""
    monkeypatch.delenv("SIL_ALLOWED_SIGNERS", raising=False)
    root = tmp_path / "project"
    path, led = _ledger(root / "state", 3)
    report = verify_run_ledger(path, root)
    assert report.ok and "no checkpoint repository" in report.notes[0]
    write_checkpoint(path, cpmod.anchor_repo(root), None)
    assert verify_run_ledger(path, root).ok
    strict = verify_run_ledger(path, root, require_signed=True)
    assert not strict.ok and any("no allowed_signers file outside the repository" in e for e in strict.errors)
    led.append("verdict", {}, run_id="r1")
    write_checkpoint(path, cpmod.anchor_repo(root), keys["alice"])
    unchecked = verify_run_ledger(path, root)
    assert unchecked.ok and any("not checked" in n for n in unchecked.notes)
    # an allowed_signers inside the repository is ignored unless named, and then it warns
    inside = root / "state" / "allowed_signers"
    inside.write_text(keys["allowed"].read_text())
    ignored = verify_run_ledger(path, root)
    assert ignored.ok and any(n.startswith("ignored state/allowed_signers") for n in ignored.notes)
    named = verify_run_ledger(path, root, inside)
    assert any("inside the repository" in n for n in named.notes)
    assert not named.ok and "checkpoint 1 (seq 2) is unsigned" in named.errors[-1]
    outside = verify_run_ledger(path, root, keys["allowed"])
    assert not outside.ok and "checkpoint 1 (seq 2) is unsigned" in outside.errors[-1]
    path.write_bytes(b"".join(path.read_bytes().splitlines(keepends=True)[:3]))
    assert not verify_run_ledger(path, root).ok


def test_start_conflict_only_when_the_ledger_no_longer_extends_the_last_checkpoint(tmp_path: Path, repo: Path) -> None:
    path, led = _ledger(tmp_path, 3)
    assert cpmod.start_conflict(path, None, "r1") is None  # no repository: nothing anchored
    assert cpmod.start_conflict(path, repo, "r1") is None  # never anchored
    write_checkpoint(path, repo, None)
    led.append("verdict", {"i": 3}, run_id="r1")
    assert cpmod.start_conflict(path, repo, "r1") is None  # grown since: fine to resume
    assert cpmod.start_conflict(tmp_path / "elsewhere.jsonl", repo, "other") is None
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:2]))
    assert "does not extend its last checkpoint" in cpmod.start_conflict(path, repo, "r1")
    path.unlink()
    missing = cpmod.start_conflict(path, repo, "r1")
    assert "was checkpointed before" in missing and "covers 3 ledger records" in missing
