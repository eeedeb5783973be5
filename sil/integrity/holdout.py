"""The project's holdout ledger: every certification on a seed set, by every run, at refs/sil/_holdout.

A held-out set serves every run on one measurement, so what it has served is the project's, not
a run's: which runs certified which champions on it, at which level, concluding what. The ledger
is a run ledger's format (hash-chained canonical records, `ledger.verify_bytes`), kept as the one
file of a chain of commits at refs/sil/_holdout, so it travels with refs/sil/* (the run ledgers'
checkpoints and the project id do too) and each append is one commit whose parent holds the
ledger before it: `verify_holdout` checks the chain of records and that every commit only added
a record to its parent's. ('_' cannot start a run id, so no run's refs/sil/<run>/ collides.)

A certification is written twice: `holdout_spend` before its first round (the level is spent
whether or not it finishes) and `holdout_result` when it concludes. The spend is admitted under
a lock and by compare-and-swap of the ref, so concurrent runs cannot both take the last slot.

    rec = append_holdout(root, spend, key=..., admit=check)   # HoldoutSpent from `admit`: nothing written
    uses = holdout_uses(root)                                 # per set: certifications, error spent
    report = verify_holdout(root)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from filelock import FileLock

from sil.contract.prepare import SEED_FOLDERS, SeedSet
from sil.integrity.gitrefs import REF_PREFIX, CheckpointError, Git, anchor_repo
from sil.integrity.ledger import GENESIS, Record, VerifyReport, canonical, next_record, read_records_of, verify_bytes
from sil.integrity.records import HoldoutResultRecord, HoldoutSpendRecord, Payload, record_type

HOLDOUT_REF = f"{REF_PREFIX}/_holdout"
HOLDOUT_FILE = "holdout.jsonl"
LOCK_NAME = "sil-holdout.lock"
CAS_TRIES = 5
HOLDOUT_RUN_ID = "project"  # the ledger's records are the project's; each payload names its run
DELIVERING_ARM = "gate"  # the only arm whose champion a user is handed (`sil promote` refuses the random arm)


def set_hash(manifest_files: dict[str, str], seed_set: SeedSet) -> str:
    """The identity of a seed set: sha256 over its files' manifest entries (names and hashes)."""
    prefix = SEED_FOLDERS[seed_set] + "/"
    entries = {p: h for p, h in manifest_files.items() if p.startswith(prefix)}
    return hashlib.sha256(json.dumps(entries, sort_keys=True).encode()).hexdigest()


def read_holdout(root: Path) -> bytes:
    """The project holdout ledger's bytes (empty when the project has none)."""
    repo = anchor_repo(Path(root), create=False)
    if repo is None:
        return b""
    git = Git(repo)
    tip = git.resolve(HOLDOUT_REF)
    return b"" if tip is None else _ledger_at(git, tip)


def _ledger_at(git: Git, commit: str) -> bytes:
    data = git.cat_batch([f"{commit}:{HOLDOUT_FILE}"])[0]
    if data is None:
        raise CheckpointError(f"{HOLDOUT_REF} commit {commit[:12]} has no {HOLDOUT_FILE}")
    return data


def holdout_records(root: Path) -> list[Record]:
    return list(read_records_of(read_holdout(root)))


def _lock(git: Git) -> FileLock:
    common = Path(git.out("rev-parse", "--git-common-dir"))
    return FileLock(str((common if common.is_absolute() else git.repo / common) / LOCK_NAME))


def append_holdout(
    root: Path,
    payload: Payload,
    *,
    key: str,
    simulated: bool,
    admit: Callable[[list[Record]], None] | None = None,
) -> Record:
    """Append `payload` under `key` (a record of its type with that key already there is returned
    instead: a resumed run writes nothing twice). `admit` sees the records before the append and
    may refuse it by raising; the whole step holds the project's lock."""
    git = Git(anchor_repo(Path(root)) or Path(root))  # created on first use
    type_ = record_type(payload)
    with _lock(git):
        for _ in range(CAS_TRIES):
            tip = git.resolve(HOLDOUT_REF)
            data = b"" if tip is None else _ledger_at(git, tip)
            report = verify_bytes(data)
            if not report.ok:
                raise CheckpointError(f"the project holdout ledger does not verify: {'; '.join(report.errors)}")
            records = list(read_records_of(data))
            if done := next((r for r in records if r.type == type_ and r.payload.get("_key") == key), None):
                return done
            if admit is not None:
                admit(records)
            record = _make(
                records[-1] if records else None, type_, {**payload.model_dump(mode="json"), "_key": key}, simulated
            )
            line = canonical(record.model_dump(mode="json")) + b"\n"
            made = git.commit(git.tree({HOLDOUT_FILE: data + line}), f"sil holdout {type_} {key}", [tip] if tip else [])
            if git.run("update-ref", HOLDOUT_REF, made, tip or "").returncode == 0:
                return record
    raise CheckpointError(f"could not append to {HOLDOUT_REF}: it kept moving under the lock")


def _make(last: Record | None, type_: str, body: dict[str, Any], simulated: bool) -> Record:
    return next_record(last, type_, body, HOLDOUT_RUN_ID, offline=simulated, simulated=simulated)


def verify_holdout(root: Path) -> VerifyReport:
    """The ledger's chain of records, and its history: every commit adds one record to its parent's."""
    repo = anchor_repo(Path(root), create=False)
    git = Git(repo) if repo is not None else None
    tip = git.resolve(HOLDOUT_REF) if git is not None else None
    if git is None or tip is None:
        return VerifyReport(ok=True, records=0, head_hash=GENESIS, errors=[], notes=["no project holdout ledger yet"])
    data = _ledger_at(git, tip)
    report = verify_bytes(data)
    errors = list(report.errors) + _history_errors(git, tip)
    for n, rec in enumerate(read_records_of(data) if report.ok else []):
        if rec.type not in ("holdout_spend", "holdout_result"):
            errors.append(f"line {n + 1}: a {rec.type!r} record is not a holdout record")
    checked = ["hash chain", f"{report.records} commits, each adding one record"]
    return report.model_copy(update={"ok": not errors, "errors": errors, "checked": checked})


def _history_errors(git: Git, tip: str) -> list[str]:
    """Each commit of the ref holds its parent's ledger plus one line; the first holds one line."""
    commits = git.out("rev-list", "--parents", tip).splitlines()
    errors = []
    for line in commits:
        commit, *parents = line.split()
        data = _ledger_at(git, commit)
        before = _ledger_at(git, parents[0]) if parents else b""
        added = data[len(before) :]
        if len(parents) > 1 or not data.startswith(before) or added.count(b"\n") != 1 or not added.endswith(b"\n"):
            errors.append(f"commit {commit[:12]} of {HOLDOUT_REF} does not append exactly one record to its parent's")
    return errors


@dataclass
class HoldoutUse:
    """What one seed set has served, read from the project holdout ledger."""

    set_hash: str
    seed_set: str
    seeds: list[str]
    certifications: int = 0  # every arm's
    delivering: int = 0  # the gate arm's: the ones that spend the project's error
    spent: float = 0.0  # the sum of the delivering certifications' levels
    certified: int = 0
    runs: list[str] = field(default_factory=list)
    budget: float | None = None  # the project alpha the latest spend named (None: per-run guarantee)


def holdout_uses(records: list[Record]) -> dict[str, HoldoutUse]:
    """Per seed set (by its hash), what it served, in ledger order."""
    uses: dict[str, HoldoutUse] = {}
    where: dict[str, str] = {}
    for rec in records:
        key = str(rec.payload.get("_key"))
        if rec.type == "holdout_spend":
            spend = HoldoutSpendRecord.model_validate({k: v for k, v in rec.payload.items() if k != "_key"})
            use = uses.setdefault(spend.set_hash, HoldoutUse(spend.set_hash, spend.seed_set, spend.seeds))
            use.certifications += 1
            use.delivering += spend.delivers
            use.spent += spend.level if spend.delivers else 0.0
            use.budget = spend.project_alpha
            if spend.run_id not in use.runs:
                use.runs.append(spend.run_id)
            where[key] = spend.set_hash
        elif rec.type == "holdout_result" and key in where:
            result = HoldoutResultRecord.model_validate({k: v for k, v in rec.payload.items() if k != "_key"})
            uses[where[key]].certified += result.certified
    return uses


def spend_key(run_id: str, arm: str, policy_set: str) -> str:
    return f"{run_id}:{arm}:{policy_set}"
