"""Ledger checkpoints: the chain head, signed and anchored in a git ref outside the ledger.

A hash chain on its own cannot show that its tail was cut or that the whole chain was
recomputed. After every verdict the loop writes a checkpoint, a short note modelled on
C2SP tlog-checkpoint (`sil-ledger/<run_id>`, record count, byte size, head hash), signs it
with `ssh-keygen -Y sign -n sil-ledger` when a key is configured, and commits it to
`refs/sil/<run_id>/checkpoints` with git plumbing only (hash-object, mktree, commit-tree,
update-ref). The user's branch, HEAD, index and work tree are never touched. Verification
checks the ledger against every checkpoint: a record covered by one cannot be removed or
rewritten without the mismatch showing. Unsigned checkpoints are still anchored, and the
report says that anyone able to rewrite git refs could replace them.

    repo = anchor_repo(root)     # the project's git repo, else state/anchors.git
    cp = write_checkpoint(run_dir / "ledger.jsonl", repo, Signer.from_env())
    report = verify_against_checkpoints(run_dir / "ledger.jsonl", repo, allowed_signers)
    # `sil ledger verify` (trust, witness, pinned head) is sil/integrity/verify.py
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from sil.base.sshsig import SignatureError, Signer, sign, verify
from sil.integrity.gitrefs import BARE_REPO as BARE_REPO
from sil.integrity.gitrefs import META_FILE, NAMESPACE, NOTE_FILE, SIG_FILE, Git, checkpoint_ref_of
from sil.integrity.gitrefs import PROJECT_REF as PROJECT_REF
from sil.integrity.gitrefs import REF_PREFIX as REF_PREFIX
from sil.integrity.gitrefs import CheckpointError as CheckpointError
from sil.integrity.gitrefs import anchor_repo as anchor_repo
from sil.integrity.ledger import (
    GENESIS,
    Record,
    VerifyReport,
    check_run_id,
    parsed_lines,
    read_snapshot,
    verify_bytes,
)
from sil.integrity.projectid import project_id as project_id
from sil.integrity.witness import Witness, WitnessEntry, WitnessError

ALLOWED_SIGNERS_DEFAULT = Path("state") / "allowed_signers"
UNSIGNED_NOTE = (
    "checkpoints are unsigned: they anchor the ledger in git, but anyone able to "
    "rewrite git refs could replace them; set SIL_SIGNING_KEY and SIL_SIGNER to sign"
)


class Checkpoint(BaseModel):
    """One anchored chain head. `note()` is the exact text that is signed."""

    model_config = ConfigDict(frozen=True)
    run_id: str
    records: int
    size: int
    head_hash: str
    created_at: str
    signer: str | None = None
    signature: str | None = None
    commit: str | None = None

    @property
    def seq(self) -> int:
        return self.records - 1

    def note(self) -> bytes:
        return f"{NAMESPACE}/{self.run_id}\n{self.records}\n{self.size}\n{self.head_hash}\n".encode()


def checkpoint_ref(run_id: str) -> str:
    return checkpoint_ref_of(check_run_id(run_id))


def write_checkpoint(
    ledger_path: Path,
    repo_dir: Path,
    signer: Signer | None,
    *,
    run_id: str | None = None,
    witness: Witness | None = None,
) -> Checkpoint:
    """Anchor the ledger's current head (and append it to `witness`); refuses a ledger that does
    not verify or extend the last checkpoint."""
    data = read_snapshot(ledger_path)
    report = verify_bytes(data)
    if not report.ok or report.records == 0:
        reason = "; ".join(report.errors[:3]) or "it is empty"
        raise CheckpointError(f"refusing to anchor {ledger_path}: {reason}")
    run_id = run_id or _first_run_id(data)
    git = GitPlumbing(repo_dir)
    ref = checkpoint_ref(run_id)
    old = git.resolve(ref)
    # Each checkpoint was checked against the one before, so the latest one suffices here.
    mismatch = compare_checkpoints(data, git.read_checkpoints([old]) if old else [])
    if mismatch:
        raise CheckpointError(
            f"refusing to anchor {ledger_path}: it does not extend the last checkpoint ({mismatch[0]})"
        )
    cp = Checkpoint(
        run_id=run_id,
        records=report.records,
        size=report.size,
        head_hash=report.head_hash,
        created_at=datetime.now(UTC).isoformat(timespec="seconds"),
        signer=signer.identity if signer else None,
    )
    if signer is not None:
        try:
            cp = cp.model_copy(update={"signature": sign(cp.note(), signer, NAMESPACE)})
        except SignatureError as ex:
            raise CheckpointError(f"cannot sign the checkpoint: {ex}") from None
    commit = git.commit_checkpoint(cp, parent=old)
    git.update_ref(ref, commit, old)
    if witness is not None:
        try:
            witness.append(WitnessEntry(**cp.model_dump(exclude={"commit"})))
        except WitnessError as ex:
            raise CheckpointError(f"checkpoint written to git but not witnessed: {ex}") from None
    return cp.model_copy(update={"commit": commit})


def read_checkpoints(repo_dir: Path, run_id: str) -> list[Checkpoint]:
    """All checkpoints of a run, oldest first (empty when none were written)."""
    git = GitPlumbing(repo_dir)
    ref = checkpoint_ref(run_id)
    if git.resolve(ref) is None:
        return []
    return git.read_checkpoints(git.out("rev-list", "--first-parent", "--reverse", ref, "--").split())


def start_conflict(ledger_path: Path, repo_dir: Path | None, run_id: str) -> str | None:
    """Why run `run_id` may not start or resume on this ledger (None if it may): the run was
    anchored before, and the ledger no longer extends its last checkpoint.

    Checked before any audit, so a deleted or truncated run directory costs nothing. The ref is
    read before the ledger: an append-only ledger can only have grown since its checkpoint.
    """
    if repo_dir is None:
        return None
    git = GitPlumbing(repo_dir)
    last = git.resolve(checkpoint_ref(run_id))
    if last is None:
        return None
    cp = git.read_checkpoints([last])[0]
    data = read_snapshot(ledger_path)
    if not data:
        return (
            f"run {run_id} was checkpointed before (its last checkpoint, {cp.created_at}, covers "
            f"{cp.records} ledger records) but {ledger_path} is missing or empty: its run folder was "
            f"deleted or moved. Restore the folder to resume that run, or start a fresh run under a "
            f"new id with `sil run --new` (or --run-id NAME). The old run's checkpoints stay in "
            f"{checkpoint_ref(run_id)}; deleting them would discard its tamper evidence"
        )
    mismatch = compare_checkpoints(data, [cp])
    if not mismatch:
        return None
    return (
        f"the ledger of run {run_id} does not extend its last checkpoint ({mismatch[0]}): it was "
        f"truncated or rewritten after it was anchored, so it cannot be resumed. `sil ledger verify "
        f"{run_id}` shows the details; start a fresh run with `sil run --new`"
    )


def verify_against_checkpoints(
    ledger_path: Path, repo_dir: Path, allowed_signers: Path | None, *, run_id: str | None = None
) -> VerifyReport:
    """`verify_file` plus every checkpoint: truncation, rewrites, and signatures if given."""
    data = read_snapshot(ledger_path)
    base = verify_bytes(data)
    run_id = run_id or run_id_of(ledger_path, data)
    checkpoints = read_checkpoints(repo_dir, run_id)
    errors = list(base.errors) + compare_checkpoints(data, checkpoints)
    notes: list[str] = []
    if not checkpoints:
        notes.append("no checkpoint: truncation and a recomputed chain cannot be detected")
    elif allowed_signers is not None:
        errors += signature_errors(checkpoints, Path(allowed_signers))
    elif any(cp.signature for cp in checkpoints):
        notes.append("signatures present but not checked: pass an allowed_signers file")
    if any(cp.signature is None for cp in checkpoints) and allowed_signers is None:
        notes.append(UNSIGNED_NOTE)
    return base.model_copy(update={"ok": not errors, "errors": errors, "checkpoints": len(checkpoints), "notes": notes})


def run_id_of(ledger_path: Path, data: bytes | None = None) -> str:
    """The run id in the ledger's first record, else the run directory's name."""
    if data is None:
        data = read_snapshot(ledger_path)
    return _first_run_id(data, fallback=Path(ledger_path).parent.name)


def _first_run_id(data: bytes, fallback: str | None = None) -> str:
    first = data.split(b"\n", 1)[0]
    try:
        return Record.model_validate_json(first).run_id
    except ValueError:
        if fallback is None:
            raise CheckpointError("cannot read the run id from the ledger's first record") from None
        return fallback


def _line_heads(data: bytes) -> list[tuple[int, str | None]]:
    """(byte offset after the line, its record hash or None) for every complete line."""
    heads: list[tuple[int, str | None]] = []
    offset = 0
    for line, rec in zip(data.split(b"\n")[:-1], parsed_lines(data), strict=True):
        offset += len(line) + 1
        heads.append((offset, rec.hash if rec is not None else None))
    return heads


def compare_checkpoints(data: bytes, checkpoints: list[Checkpoint]) -> list[str]:
    """Each checkpoint must still be a prefix of the ledger: same count, size and head."""
    errors: list[str] = []
    heads = _line_heads(data)
    last_records = 0
    for n, cp in enumerate(checkpoints, start=1):
        where = f"checkpoint {n} (seq {cp.seq})"
        if cp.records < last_records:
            errors.append(f"{where}: covers fewer records than the checkpoint before it")
        last_records = cp.records
        if cp.records > len(heads):
            errors.append(
                f"{where}: ledger has {len(heads)} records, checkpoint covered "
                f"{cp.records} (truncated or records deleted)"
            )
            continue
        offset, head = heads[cp.records - 1] if cp.records else (0, GENESIS)
        if head != cp.head_hash:
            errors.append(f"{where}: record {cp.seq} is not the one anchored (rewritten chain)")
        elif offset != cp.size:
            errors.append(f"{where}: anchored {cp.size} bytes, ledger has {offset} up to seq {cp.seq}")
    return errors


def signature_errors(checkpoints: list[Checkpoint], allowed: Path) -> list[str]:
    errors = []
    for n, cp in enumerate(checkpoints, start=1):
        if cp.signature is None or cp.signer is None:
            errors.append(f"checkpoint {n} (seq {cp.seq}) is unsigned but signatures are required")
            continue
        try:
            verify(cp.note(), cp.signature, allowed, cp.signer, NAMESPACE)
        except SignatureError as ex:
            errors.append(f"checkpoint {n} (seq {cp.seq}): {ex}")
    return errors


class GitPlumbing(Git):
    """`Git` with the checkpoints' own objects: one commit per checkpoint under refs/sil/<run>/checkpoints.

    Used for checkpoints here and for the policy history in `sil/store/policyrefs.py`.
    """

    def commit_checkpoint(self, cp: Checkpoint, parent: str | None) -> str:
        meta = cp.model_dump(mode="json", exclude={"signature", "commit"})
        files = {NOTE_FILE: cp.note(), META_FILE: (json.dumps(meta, sort_keys=True, indent=1) + "\n").encode()}
        if cp.signature:
            files[SIG_FILE] = cp.signature.encode()
        message = f"sil checkpoint {cp.run_id} seq {cp.seq}\n\nLedger-Head: {cp.seq}:{cp.head_hash}\n"
        return self.commit(self.tree(files), message, [parent] if parent else [])

    def update_ref(self, ref: str, new: str, old: str | None) -> None:
        """Compare-and-swap: fails if another writer moved the ref since we read it."""
        self.out("update-ref", "-m", "sil checkpoint", ref, new, old or "")

    def read_checkpoints(self, commits: list[str]) -> list[Checkpoint]:
        names = [f"{c}:{name}" for c in commits for name in (NOTE_FILE, META_FILE, SIG_FILE)]
        blobs = self.cat_batch(names)
        return [self._parse(c, *blobs[3 * i : 3 * i + 3]) for i, c in enumerate(commits)]

    @staticmethod
    def _parse(commit: str, note: bytes | None, meta: bytes | None, sig: bytes | None) -> Checkpoint:
        try:
            origin, records, size, head = (note or b"").decode().splitlines()
            fields = json.loads(meta or b"{}")
            cp = Checkpoint(
                **{
                    **fields,
                    "records": int(records),
                    "size": int(size),
                    "head_hash": head,
                    "commit": commit,
                    "signature": sig.decode() if sig is not None else None,
                }
            )
        except (ValueError, TypeError) as ex:
            raise CheckpointError(f"checkpoint commit {commit[:12]} is malformed: {ex}") from None
        if origin != f"{NAMESPACE}/{cp.run_id}":
            raise CheckpointError(f"checkpoint commit {commit[:12]} belongs to {origin!r}")
        return cp
