"""Typed payloads of the ledger records the loop writes, and an index of what is recorded.

The index lets every step be idempotent: after a crash the loop rebuilds it from the ledger
and appends a record only if its key is not there yet.

    book = RecordBook(ledger, run_id)
    book.once("verdict", mutation_id, VerdictRecord(...))
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel

from ledger import Ledger, Record, read_records

SIM_NOTE = "simulated audit: proves the loop's plumbing and statistics, not any model's quality"


class RunRecord(BaseModel):
    contract_id: str
    contract_hash: str
    measurement_hash: str
    manifest_hash: str
    backend: str
    models: dict[str, str]
    arms: list[str]
    seed: int
    replicate_k: int
    approval: str
    note: str


class BaselineRecord(BaseModel):
    policy_set: str
    audit_ids: list[str]
    per_dimension_mean: dict[str, float | None]
    sample_counts: dict[str, int]
    contract_hash: str
    measurement_hash: str
    seeds_hash: str
    models: dict[str, str]


class IntentRecord(BaseModel):
    action: Literal["apply", "audit", "promote", "revert", "demote"]
    key: str
    detail: dict[str, Any] = {}


class AuditRecord(BaseModel):
    audit_id: str
    arm: str
    round: str
    role: str
    policy_set: str
    tick: int
    status: Literal["ok", "gap"]
    gap_reason: str | None
    scores: dict[str, dict[str, float]]
    missing: dict[str, list[str]]
    sample_counts: dict[str, int]
    loaded_policy_hashes: dict[str, str]
    usage: dict[str, Any]
    wall_s: float
    backend: str
    simulated: bool
    log_path: str | None
    diagnostics: list[str]


class RoundRecord(BaseModel):
    arm: str
    round: str
    kind: str
    mutation_id: str | None
    diff: dict[str, float | None]
    n_seeds: dict[str, int]
    decision: dict[str, Any] | None = None


class VerdictRecord(BaseModel):
    arm: str
    mutation_id: str
    verdict: Literal["keep", "revert"]
    reason: str
    candidate_set: str
    parent_set: str
    rounds: int
    alpha: float | None
    error_budget: dict[str, Any]
    decision: dict[str, Any] | None


class PolicyChangeRecord(BaseModel):
    arm: str
    mutation_id: str
    surface: str
    from_hash: str
    to_hash: str
    policy_set: str
    commit: str | None = None  # the candidate's git commit (loop/policyrefs.py), when recorded


class RecoveryRecord(BaseModel):
    """What a resumed run found of an audit a crash interrupted, and what it does about it."""

    audit_id: str
    attempt: int
    found: Literal["finished", "timed_out", "died"]
    detail: str
    action: str


class StopRecord(BaseModel):
    reason: str
    audits: int
    gaps: int
    usd: float
    elapsed_s: float


class RecordBook:
    """Ledger appends keyed by (type, key), each written at most once across resumes."""

    def __init__(self, ledger: Ledger, run_id: str) -> None:
        self.ledger = ledger
        self.run_id = run_id
        self.seen: set[tuple[str, str]] = set()
        self.records: list[Record] = []
        if ledger.path.exists():
            for rec in read_records(ledger.path):
                self._index(rec)

    def _index(self, rec: Record) -> None:
        self.records.append(rec)
        key = rec.payload.get("_key")
        if key is not None:
            self.seen.add((rec.type, key))

    def has(self, type_: str, key: str) -> bool:
        return (type_, key) in self.seen

    def once(self, type_: str, key: str, payload: BaseModel | dict[str, Any]) -> Record | None:
        if self.has(type_, key):
            return None
        body = payload.model_dump(mode="json") if isinstance(payload, BaseModel) else dict(payload)
        rec = self.ledger.append(type_, {**body, "_key": key}, run_id=self.run_id)
        self._index(rec)
        return rec

    def of_type(self, type_: str) -> list[Record]:
        return [r for r in self.records if r.type == type_]
