"""`sil ledger verify`: a run's ledger held to the trust it declared, its checkpoints and its witness (L2).

Checks, in order: the hash chain (`ledger.verify_bytes`, which also refuses any record after
a `stop` that does not open a segment); every checkpoint in git is still a prefix of the
ledger; the trust the run declared in its first record (sil/integrity/records.Trust). A signed run, or
any verify with `--require-signed` or an explicit `--allowed-signers`, needs signed checkpoints
only, by the declared signer, checked against an allowed_signers file from outside the
repository, and its `stop` and every `segment` record covered by one of them. With an outside
witness (`SIL_WITNESS`, sil/integrity/witness.py) each witnessed head must still be a prefix of the
ledger and no newer than the git ref (else the ref was rolled back or deleted); with
`expect_head` (`sil ledger head` pinned elsewhere) that record must be in the ledger and
covered by the checkpoints.

What it cannot see without a witness or a pinned head: the refs pointed back at an older
genuinely signed checkpoint with the ledger cut to match, which looks like a run in progress.

    report = verify_run_ledger(run_dir / "ledger.jsonl", root, witness=witness_from_env(root))
"""

from __future__ import annotations

import os
from pathlib import Path

from sil.base.sshsig import ALLOWED_SIGNERS_ENV
from sil.integrity.checkpoint import (
    ALLOWED_SIGNERS_DEFAULT,
    PROJECT_REF,
    Checkpoint,
    CheckpointError,
    anchor_repo,
    compare_checkpoints,
    project_id,
    read_checkpoints,
    run_id_of,
    signature_errors,
)
from sil.integrity.ledger import GENESIS, LedgerError, Record, VerifyReport, parsed_lines, read_snapshot, verify_bytes
from sil.integrity.records import RunRecord, Trust
from sil.integrity.witness import Witness, WitnessEntry, WitnessError

NO_WITNESS_NOTE = (
    "NO OUTSIDE WITNESS (SIL_WITNESS is unset): deleting the checkpoint refs, or pointing them back at an "
    "older checkpoint and cutting the ledger to match, cannot be detected from the repository alone; set "
    "SIL_WITNESS, or pin `sil ledger head` elsewhere and pass it as --expect-head"
)
UNSIGNED_NOTE = (
    "checkpoints are unsigned: they anchor the ledger in git, but anyone able to rewrite git refs could "
    "replace them; set SIL_SIGNING_KEY and SIL_SIGNER to sign"
)


class HeadError(ValueError):
    """An --expect-head value that is not `<seq>:<sha256 hex>`."""


def parse_head(text: str) -> tuple[int, str]:
    seq, _, digest = text.partition(":")
    if not seq.isdigit() or len(digest) != 64 or any(c not in "0123456789abcdef" for c in digest):
        raise HeadError(f"--expect-head {text!r} must be <seq>:<64 hex digits>, as `sil ledger head` prints it")
    return int(seq), digest


def format_head(cp: Checkpoint) -> str:
    return f"{cp.seq}:{cp.head_hash}"


def trust_anchor(explicit: Path | None, root: Path) -> tuple[Path | None, list[str]]:
    """The allowed_signers to trust and warnings: from outside the repository unless named explicitly."""
    root = Path(root).resolve()
    chosen = Path(explicit) if explicit is not None else None
    if chosen is None and os.environ.get(ALLOWED_SIGNERS_ENV):
        chosen = Path(os.environ[ALLOWED_SIGNERS_ENV]).expanduser()
    if chosen is not None:
        inside = chosen.resolve().is_relative_to(root)
        return chosen, [
            f"warning: the trust anchor {chosen} is inside the repository; anyone who can write the "
            "repository can add a key to it"
        ] if inside else []
    default = root / ALLOWED_SIGNERS_DEFAULT
    if default.is_file():
        return None, [
            f"ignored {ALLOWED_SIGNERS_DEFAULT}: it is inside the repository, so it cannot vouch for the ledger; "
            "name it with --allowed-signers to use it anyway, or set SIL_ALLOWED_SIGNERS to a file outside"
        ]
    return None, []


def declared_run(data: bytes) -> RunRecord | None:
    """The run record the ledger starts with, if it starts with one."""
    first = data.split(b"\n", 1)[0]
    try:
        rec = Record.model_validate_json(first)
        if rec.type == "contract":
            return RunRecord.model_validate({k: v for k, v in rec.payload.items() if k != "_key"})
    except ValueError:
        pass
    return None


def declared_trust(data: bytes) -> Trust:
    """The trust the run declared in its first record (unsigned when it declares none)."""
    run = declared_run(data)
    return run.trust if run is not None else Trust()


def verify_run_ledger(
    ledger_path: Path,
    root: Path,
    allowed_signers: Path | None = None,
    *,
    require_signed: bool = False,
    witness: Witness | None = None,
    expect_head: str | None = None,
) -> VerifyReport:
    """Every check of the module docstring; the report's errors say what failed, notes what is
    unchecked, `checked` what was. A ledger, checkpoint or project ref that cannot be read is an
    error of the report, never an exception."""
    try:
        data = read_snapshot(ledger_path)
    except OSError as ex:
        return VerifyReport(ok=False, records=0, head_hash=GENESIS, errors=[f"the ledger cannot be read: {ex}"])
    base = verify_bytes(data)
    run_id = run_id_of(ledger_path, data)
    repo = anchor_repo(root, create=False)
    checkpoints, errors = _checkpoints(repo, run_id)
    errors = [*base.errors, *binding_errors(ledger_path, data), *project_errors(data, root), *errors]
    errors += compare_checkpoints(data, checkpoints)
    anchor, notes = trust_anchor(allowed_signers, root)
    trust = declared_trust(data)
    checked = ["hash chain", f"{len(checkpoints)} checkpoints"]
    # A trust anchor from SIL_ALLOWED_SIGNERS means what --allowed-signers means: signatures are
    # expected, so a run rewritten as unsigned is a downgrade, not an unsigned run.
    if trust.signed or require_signed or anchor is not None:
        errors += _signed_errors(data, checkpoints, trust, anchor, require_signed)
        checked.append(f"signed by {trust.signer or 'an allowed signer'}")
    else:
        notes += _unsigned_notes(checkpoints, anchor, errors, repo is None)
        checked.append("unsigned")
    if witness is None:
        notes.append(NO_WITNESS_NOTE)
    else:
        errors += _witness_errors(data, checkpoints, witness, run_id)
        checked.append("witnessed")
    if expect_head is not None:
        errors += _head_errors(data, checkpoints, expect_head)
    return base.model_copy(
        update={
            "ok": not errors,
            "errors": errors,
            "checkpoints": len(checkpoints),
            "notes": notes,
            "checked": checked,
        }
    )


def _checkpoints(repo: Path | None, run_id: str) -> tuple[list[Checkpoint], list[str]]:
    """The run's checkpoints, or none and why they cannot be read (a malformed commit, a bad id)."""
    if repo is None:
        return [], []
    try:
        return read_checkpoints(repo, run_id), []
    except (CheckpointError, LedgerError) as ex:
        return [], [f"the checkpoints of run {run_id!r} cannot be read: {ex}"]


def binding_errors(ledger_path: Path, data: bytes) -> list[str]:
    """A run's ledger lives in the folder named by its run id: every record must name that run.
    A genuine ledger of another run copied into this folder verifies on its own, so the folder
    it sits in is part of what is verified."""
    folder = Path(ledger_path).parent.name
    ids = {r.run_id for r in _records(data)}
    if not ids or ids == {folder}:
        return []
    return [
        f"the ledger's records belong to run {', '.join(sorted(ids))}, not to {folder}: "
        "a ledger copied from another run (or a mixed one) is not this run's"
    ]


def project_errors(data: bytes, root: Path) -> list[str]:
    """A run's first record names its project: a genuine ledger of another project (same run id,
    even with that project's signed checkpoints beside it) is not this project's."""
    run = declared_run(data)
    if run is None or not run.project:  # no run record, or written before runs named their project
        return []
    try:
        here = project_id(root, create=False)
    except CheckpointError as ex:
        return [f"the project id ({PROJECT_REF}) cannot be read: {ex}"]
    if run.project == here:
        return []
    where = f"this project is {here}" if here else f"this project has no id ({PROJECT_REF} is missing)"
    return [
        f"the ledger belongs to project {run.project}, but {where}: a ledger copied from another project is not this one's"
    ]


def _signed_errors(
    data: bytes, checkpoints: list[Checkpoint], trust: Trust, anchor: Path | None, required: bool
) -> list[str]:
    errors: list[str] = []
    if not trust.signed:
        errors.append("the run declares unsigned checkpoints, but signed ones are required")
    if anchor is None:
        errors.append(
            "signed checkpoints required but no allowed_signers file outside the repository: pass "
            "--allowed-signers FILE or set SIL_ALLOWED_SIGNERS"
        )
    if not checkpoints:
        errors.append("signed checkpoints required but there are none (refs deleted?)")
        return errors
    if anchor is not None:
        errors += signature_errors(checkpoints, anchor)
    else:
        errors += [
            f"checkpoint {n} (seq {cp.seq}) is unsigned" for n, cp in enumerate(checkpoints, 1) if not cp.signature
        ]
    if trust.signed:
        errors += [
            f"checkpoint {n} (seq {cp.seq}) is signed as {cp.signer!r}, the run declared {trust.signer!r}"
            for n, cp in enumerate(checkpoints, 1)
            if cp.signature and cp.signer != trust.signer
        ]
    covered = max(cp.records for cp in checkpoints)
    for rec in _records(data):
        if rec.type in ("stop", "segment") and rec.seq >= covered:
            errors.append(
                f"the {rec.type} record (seq {rec.seq}) is not covered by a signed checkpoint "
                "(forged, or appended after the last signed head)"
            )
    return errors


def _unsigned_notes(checkpoints: list[Checkpoint], anchor: Path | None, errors: list[str], no_repo: bool) -> list[str]:
    if no_repo:
        return ["no checkpoint repository: truncation and a recomputed chain cannot be detected"]
    if not checkpoints:
        return ["no checkpoint: truncation and a recomputed chain cannot be detected"]
    notes = []
    if any(cp.signature for cp in checkpoints):
        if anchor is not None:
            errors += signature_errors([cp for cp in checkpoints if cp.signature], anchor)
        else:
            notes.append("signatures present but not checked: pass an allowed_signers file")
    if any(cp.signature is None for cp in checkpoints):
        notes.append(UNSIGNED_NOTE)
    return notes


def _witness_errors(data: bytes, checkpoints: list[Checkpoint], witness: Witness, run_id: str) -> list[str]:
    try:
        entries = witness.entries(run_id)
    except WitnessError as ex:
        return [str(ex)]
    if not entries:
        return [f"the witness {witness.name} has no checkpoint of run {run_id} (never witnessed, or the wrong witness)"]
    witnessed = [_as_checkpoint(e) for e in entries]
    errors = [f"witness: {e}" for e in compare_checkpoints(data, witnessed)]
    latest = checkpoints[-1].records if checkpoints else 0
    if witnessed[-1].records > latest:
        errors.append(
            f"the witness holds a checkpoint at seq {witnessed[-1].seq} but the git ref only reaches "
            f"{latest - 1 if latest else 'nothing'}: the checkpoint ref was rolled back or deleted"
        )
    return errors + _unwitnessed_errors(data, witnessed[-1].records, witness.name)


def _unwitnessed_errors(data: bytes, covered: int, name: str) -> list[str]:
    """What follows the witness's last entry is not vouched for: a run's end (`stop`), a later
    `segment` and anything after a stop are written with a checkpoint the witness records, so
    one of them beyond its last entry was appended (forged) after the witness last saw the run."""
    errors, stopped = [], False
    for rec in _records(data):
        if rec.seq >= covered and (stopped or rec.type in ("stop", "segment")):
            errors.append(
                f"the {rec.type} record (seq {rec.seq}) follows the witness {name}'s last entry "
                f"(seq {covered - 1}): forged, or appended after the witness last saw the run"
            )
        stopped = stopped or rec.type == "stop"
    return errors


def _head_errors(data: bytes, checkpoints: list[Checkpoint], expect_head: str) -> list[str]:
    seq, digest = parse_head(expect_head)
    records = {rec.seq: rec.hash for rec in _records(data)}
    if records.get(seq, GENESIS) != digest:
        return [f"the pinned head {seq}:{digest[:16]} is not in the ledger (truncated or rewritten)"]
    if not checkpoints or checkpoints[-1].records <= seq:
        return [f"the checkpoints no longer reach the pinned head seq {seq} (ref rolled back)"]
    return []


def _records(data: bytes) -> list[Record]:
    return [r for r in parsed_lines(data) if r is not None]


def _as_checkpoint(entry: WitnessEntry) -> Checkpoint:
    return Checkpoint(**entry.model_dump(exclude={"created_at"}), created_at=entry.created_at or "")
