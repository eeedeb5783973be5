"""An attacker who can write the repository but not the signing key (issue 11): every attack of
the table is detected by `sil ledger verify` (exit 1), given the trust the run declared at its
start, an allowed_signers file outside the repository, and (for rollback) the outside witness
or a pinned head. One signed ledger is built once; each test attacks its own copy of it. The
slow test makes a real signed run with `sil run` and checks what it declared and witnessed."""

from __future__ import annotations

import json
import resource
import shutil
import subprocess
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sil.base.sshsig import Signer, allowed_signers_line, fingerprint, generate_key
from sil.cli.app import app
from sil.integrity import checkpoint as cpmod
from sil.integrity import ledger
from sil.integrity.ledger import Ledger, LedgerError, RecordBook
from sil.integrity.records import HaltRecord, Keys, RunRecord, StopRecord, Trust
from sil.integrity.witness import FileWitness
from tests.cli.test_cli import make_workspace

RUN = "t1"
FAST_S = 5.0  # CPU seconds: verification is CPU-bound, its wall time depends on the machine's load
runner = CliRunner()


@pytest.fixture(scope="module")
def outside(tmp_path_factory) -> dict[str, Path | Signer]:
    """Keys, the trusted allowed_signers and the witness folder, all outside the project."""
    d = tmp_path_factory.mktemp("outside")
    alice = generate_key(d / "alice", "alice")
    mallory = generate_key(d / "mallory", "mallory")
    allowed = d / "allowed_signers"
    allowed.write_text(allowed_signers_line("alice@example.org", d / "alice.pub", ("sil-ledger",)))
    forged = d / "mallory_allowed_signers"
    forged.write_text(allowed_signers_line("alice@example.org", d / "mallory.pub", ("sil-ledger",)))
    witness = d / "witness"
    witness.mkdir()
    return {
        "alice": Signer(alice, "alice@example.org"),
        "mallory": Signer(mallory, "alice@example.org"),
        "allowed": allowed,
        "forged": forged,
        "witness": witness,
    }


def _run_record(trust: Trust, project: str = "") -> RunRecord:
    return RunRecord(
        contract_id="c",
        contract_hash="0" * 64,
        measurement_hash="0" * 64,
        manifest_hash="0" * 64,
        backend="sim",
        models={},
        arms=["gate"],
        seed=1,
        replicate_k=1,
        approval="not required",
        note="synthetic",
        trust=trust,
        project=project,
    )


@pytest.fixture(scope="module")
def signed_run(tmp_path_factory, outside) -> Path:
    """A finished run's ledger as the loop writes it: declared trust, records, a signed checkpoint
    (and witness entry) after each step, and the stop covered by the last one."""
    root = tmp_path_factory.mktemp("signed")
    path = root / "state" / "runs" / RUN / "ledger.jsonl"
    book = RecordBook(Ledger(path, offline=True, simulated=True), RUN)
    alice = outside["alice"]
    trust = Trust(signed=True, signer=alice.identity, key_fingerprints=[fingerprint(alice.key_path)])
    witness, anchors = FileWitness(outside["witness"]), cpmod.anchor_repo(root)
    book.once(Keys.RUN, _run_record(trust, cpmod.project_id(root) or ""))
    for i in range(6):
        book.once(Keys.halt(i), HaltRecord(reason=f"step {i}"))
        cpmod.write_checkpoint(path, anchors, alice, witness=witness)
    book.once(Keys.STOP, StopRecord(reason="completed", audits=0, gaps=0, usd=0.0, elapsed_s=0.0))
    cpmod.write_checkpoint(path, anchors, alice, witness=witness)
    return root


@pytest.fixture
def attacked(signed_run: Path, outside, tmp_path: Path, monkeypatch) -> Path:
    """A private copy of the signed run (and of its witness), entered, with a clean environment."""
    root = tmp_path / "project"
    shutil.copytree(signed_run, root, symlinks=True)
    witness = tmp_path / "witness"
    shutil.copytree(outside["witness"], witness)
    monkeypatch.chdir(root)
    for var in ("SIL_SIGNING_KEY", "SIL_SIGNER", "SIL_ALLOWED_SIGNERS", "SIL_WITNESS"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("SIL_ALLOWED_SIGNERS", str(outside["allowed"]))
    return root


def cpu_time() -> float:
    """CPU seconds of this process and its finished children (ssh-keygen, git)."""
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return time.process_time() + children.ru_utime + children.ru_stime


def verify(*extra: str):
    start = cpu_time()
    result = runner.invoke(app, ["ledger", "verify", RUN, *extra], catch_exceptions=False)
    assert cpu_time() - start < FAST_S
    return result


def ledger_path(root: Path) -> Path:
    return root / "state" / "runs" / RUN / "ledger.jsonl"


def repo(root: Path) -> Path:
    return cpmod.anchor_repo(root, create=False)


def git(root: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo(root)), *args], check=True, capture_output=True, text=True).stdout


def truncate_to(root: Path, records: int) -> None:
    path = ledger_path(root)
    path.write_bytes(b"".join(path.read_bytes().splitlines(keepends=True)[:records]))


def append_forged(root: Path, type_: str, payload: dict) -> None:
    """A correctly chained record, as anyone who can write the file can make one."""
    path = ledger_path(root)
    last = json.loads(path.read_bytes().splitlines()[-1])
    fields = {**last, "seq": last["seq"] + 1, "prev": last["hash"], "type": type_, "payload": payload}
    fields["hash"] = ledger.record_hash(fields)
    with open(path, "ab") as fh:
        fh.write(ledger.canonical(fields) + b"\n")


def test_the_untouched_signed_run_verifies_in_every_mode(attacked: Path, tmp_path: Path, monkeypatch) -> None:
    assert verify().exit_code == 0
    assert verify("--require-signed").exit_code == 0
    monkeypatch.setenv("SIL_WITNESS", str(tmp_path / "witness"))
    result = verify()
    assert result.exit_code == 0 and "NO OUTSIDE WITNESS" not in result.output
    head = runner.invoke(app, ["ledger", "head", RUN], catch_exceptions=False)
    assert head.exit_code == 0
    assert verify("--expect-head", head.stdout.strip()).exit_code == 0


def test_a_signed_run_copied_with_its_checkpoints_into_another_project_does_not_verify(
    attacked: Path, tmp_path: Path, monkeypatch
) -> None:
    other = tmp_path / "other"
    assert cpmod.project_id(other) != cpmod.project_id(attacked)  # a project of its own
    ledger_path(other).parent.mkdir(parents=True)
    shutil.copyfile(ledger_path(attacked), ledger_path(other))
    ref = cpmod.checkpoint_ref(RUN)  # the signed checkpoints travel with it
    subprocess.run(["git", "-C", str(repo(other)), "fetch", "-q", str(repo(attacked)), f"{ref}:{ref}"], check=True)
    monkeypatch.chdir(other)
    result = verify("--require-signed")
    assert result.exit_code != 0 and "belongs to project" in result.output
    monkeypatch.chdir(attacked)
    git(attacked, "update-ref", "-d", cpmod.PROJECT_REF)  # and a project whose id was deleted
    result = verify()
    assert result.exit_code != 0 and "has no id" in result.output


def test_without_witness_verify_says_so_loudly(attacked: Path) -> None:
    result = verify()
    assert result.exit_code == 0 and "NO OUTSIDE WITNESS" in result.output


def test_deleted_refs_and_truncated_ledger(attacked: Path, outside) -> None:
    git(attacked, "update-ref", "-d", f"refs/sil/{RUN}/checkpoints")
    truncate_to(attacked, 5)
    result = verify("--allowed-signers", str(outside["allowed"]), "--require-signed")
    assert result.exit_code == 1 and "there are none" in result.output
    assert verify().exit_code == 1  # the run's first record declares it signed


def test_truncated_ledger_and_a_recomputed_unsigned_first_record_fail_when_signed_is_required(
    attacked: Path, outside
) -> None:
    git(attacked, "update-ref", "-d", f"refs/sil/{RUN}/checkpoints")
    truncate_to(attacked, 1)
    path = ledger_path(attacked)
    first = json.loads(path.read_bytes())
    first["payload"]["trust"] = Trust().model_dump()
    first["hash"] = ledger.record_hash(first)
    path.write_bytes(ledger.canonical(first) + b"\n")
    assert verify("--require-signed").exit_code == 1


def _older_checkpoint(root: Path) -> tuple[str, int]:
    commits = git(root, "rev-list", "--first-parent", f"refs/sil/{RUN}/checkpoints").split()
    older = commits[len(commits) // 2]
    note = git(root, "cat-file", "blob", f"{older}:checkpoint").splitlines()
    return older, int(note[1])


def test_rollback_to_an_older_signed_checkpoint(attacked: Path, tmp_path: Path, monkeypatch) -> None:
    pinned = runner.invoke(app, ["ledger", "head", RUN], catch_exceptions=False).stdout.strip()
    older, records = _older_checkpoint(attacked)
    git(attacked, "update-ref", f"refs/sil/{RUN}/checkpoints", older)
    truncate_to(attacked, records)
    alone = verify()
    assert alone.exit_code == 0 and "NO OUTSIDE WITNESS" in alone.output  # the documented bound
    pinned_check = verify("--expect-head", pinned)
    assert pinned_check.exit_code == 1 and "pinned head" in pinned_check.output
    monkeypatch.setenv("SIL_WITNESS", str(tmp_path / "witness"))
    witnessed = verify()
    assert witnessed.exit_code == 1 and "rolled back or deleted" in witnessed.output


def test_rollback_then_a_forged_stop(attacked: Path) -> None:
    older, records = _older_checkpoint(attacked)
    git(attacked, "update-ref", f"refs/sil/{RUN}/checkpoints", older)
    truncate_to(attacked, records)
    append_forged(attacked, "stop", {"reason": "completed", "audits": 1, "gaps": 0, "usd": 0.0, "elapsed_s": 1.0})
    result = verify()
    assert (
        result.exit_code == 1
        and "stop record" in result.output
        and "not covered by a signed checkpoint" in (result.output)
    )


@pytest.mark.parametrize("mode", [(), ("--require-signed",), ("--allowed-signers", "ALLOWED")])
def test_a_record_after_stop(attacked: Path, outside, mode) -> None:
    append_forged(attacked, "halt", {"reason": "late", "phase": None})
    args = [str(outside["allowed"]) if a == "ALLOWED" else a for a in mode]
    result = verify(*args)
    assert result.exit_code == 1 and "follows the run's stop" in result.output


def test_a_forged_segment_after_stop(attacked: Path) -> None:
    append_forged(attacked, "segment", {"reason": "replicate", "after_stop": "0" * 64, "trust": {}})
    result = verify()
    assert result.exit_code == 1 and "segment record" in result.output


def _replace_checkpoints(root: Path, signer: Signer | None) -> None:
    git(root, "update-ref", "-d", f"refs/sil/{RUN}/checkpoints")
    cpmod.write_checkpoint(ledger_path(root), repo(root), signer)


def test_signed_history_replaced_by_unsigned_checkpoints(attacked: Path, outside, monkeypatch) -> None:
    _replace_checkpoints(attacked, None)
    result = verify("--allowed-signers", str(outside["allowed"]))
    assert result.exit_code == 1 and "unsigned" in result.output
    monkeypatch.delenv("SIL_ALLOWED_SIGNERS")
    assert verify().exit_code == 1  # declared signed: an unsigned checkpoint is a downgrade


def test_attacker_key_in_the_repository_allowed_signers(attacked: Path, outside, monkeypatch) -> None:
    _replace_checkpoints(attacked, outside["mallory"])
    shutil.copy(outside["forged"], attacked / "state" / "allowed_signers")
    monkeypatch.delenv("SIL_ALLOWED_SIGNERS")
    plain = verify()
    assert plain.exit_code == 1 and "ignored state/allowed_signers" in plain.output
    monkeypatch.setenv("SIL_ALLOWED_SIGNERS", str(outside["allowed"]))
    assert verify().exit_code == 1  # the trusted anchor does not know mallory's key


def test_nothing_but_a_segment_may_follow_stop(tmp_path: Path, outside) -> None:
    path = tmp_path / "runs" / "r1" / "ledger.jsonl"
    book = RecordBook(Ledger(path, offline=True, simulated=True), "r1")
    stop = book.once(Keys.STOP, StopRecord(reason="completed", audits=0, gaps=0, usd=0.0, elapsed_s=0.0))
    with pytest.raises(LedgerError, match="no record may follow the run's stop"):
        book.once(Keys.halt(0), HaltRecord(reason="x"))
    segment = book.open_segment("replicate", Trust())
    assert segment is not None and segment.payload["after_stop"] == stop.hash
    assert book.open_segment("again", Trust()) is None  # only right after a stop
    assert ledger.verify_file(path).ok


def test_witness_inside_the_repository_is_refused(attacked: Path, monkeypatch) -> None:
    monkeypatch.setenv("SIL_WITNESS", str(attacked / "witness"))
    result = verify()
    assert result.exit_code == 2 and "inside the repository" in result.output


@pytest.mark.slow
def test_a_real_signed_run_declares_its_trust_and_is_witnessed(tmp_path: Path, outside, monkeypatch) -> None:
    (tmp_path / "ws").mkdir()
    root = make_workspace(tmp_path / "ws")
    witness = tmp_path / "run-witness"
    witness.mkdir()
    monkeypatch.chdir(root)
    monkeypatch.setenv("SIL_SIGNING_KEY", str(outside["alice"].key_path))
    monkeypatch.setenv("SIL_SIGNER", "alice@example.org")
    monkeypatch.setenv("SIL_WITNESS", str(witness))
    monkeypatch.setenv("SIL_ALLOWED_SIGNERS", str(outside["allowed"]))
    result = runner.invoke(app, ["run", "--run-id", RUN], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    first = json.loads(ledger_path(root).read_bytes().splitlines()[0])
    assert first["payload"]["trust"]["signed"] and first["payload"]["trust"]["signer"] == "alice@example.org"
    entries = (witness / f"{RUN}.jsonl").read_text().splitlines()
    assert len(entries) == len(git(root, "rev-list", f"refs/sil/{RUN}/checkpoints").split()) >= 2
    assert all(json.loads(e)["signature"] for e in entries)
    assert runner.invoke(app, ["ledger", "verify", RUN], catch_exceptions=False).exit_code == 0
    monkeypatch.delenv("SIL_SIGNING_KEY")
    monkeypatch.delenv("SIL_SIGNER")
    resumed = runner.invoke(app, ["run", "--run-id", RUN], catch_exceptions=False)
    assert resumed.exit_code == 2 and "declared checkpoints signed" in resumed.output


def test_a_downgrade_to_unsigned_fails_with_the_env_anchor_as_with_the_flag(
    attacked: Path, outside, monkeypatch
) -> None:
    """Issue 25.12: first record rewritten as unsigned plus a forged unsigned checkpoint."""
    git(attacked, "update-ref", "-d", f"refs/sil/{RUN}/checkpoints")
    truncate_to(attacked, 1)
    path = ledger_path(attacked)
    first = json.loads(path.read_bytes())
    first["payload"]["trust"] = Trust().model_dump()
    first["hash"] = ledger.record_hash(first)
    path.write_bytes(ledger.canonical(first) + b"\n")
    cpmod.write_checkpoint(path, repo(attacked), None)  # the forged unsigned checkpoint
    flag = verify("--allowed-signers", str(outside["allowed"]))
    env = verify()  # SIL_ALLOWED_SIGNERS is set by the fixture: the recommended setup
    assert flag.exit_code == 1 and env.exit_code == 1 and "unsigned" in env.output


def test_a_forged_segment_after_stop_on_an_unsigned_witnessed_run(tmp_path: Path) -> None:
    """Issue 25.13: the witness covers what follows its last entry, on unsigned runs too."""
    from sil.integrity.verify import verify_run_ledger

    root, witness_dir = tmp_path / "project", tmp_path / "witness"
    witness_dir.mkdir()
    path = root / "state" / "runs" / "u1" / "ledger.jsonl"
    book = RecordBook(Ledger(path, offline=True, simulated=True), "u1")
    witness, anchors = FileWitness(witness_dir), cpmod.anchor_repo(root)
    book.once(Keys.RUN, _run_record(Trust()))
    book.once(Keys.halt(0), HaltRecord(reason="step"))
    book.once(Keys.STOP, StopRecord(reason="completed", audits=0, gaps=0, usd=0.0, elapsed_s=0.0))
    cpmod.write_checkpoint(path, anchors, None, witness=witness)
    head = f"{book.records[-1].seq}:{book.records[-1].hash}"
    assert verify_run_ledger(path, root, witness=witness, expect_head=head).ok
    book.open_segment("forged", Trust())  # correctly chained, as anyone who can write the file can make it
    book.once(Keys.halt(1), HaltRecord(reason="a forged record after the segment"))
    report = verify_run_ledger(path, root, witness=witness, expect_head=head)
    assert not report.ok and any("follows the witness" in e and "segment" in e for e in report.errors)
