"""Recorded audits: one line per real audit in a JSON-lines data file, read back as a pool per set.

`python -m bench.record_audits` appends one `RecordedAudit` per finished audit of a real model
(scores per seed and dimension, or the gap's reason) with its provenance: the model file's hash,
the library versions, the contract and measurement hashes, the commit and the date. The
`recorded` backend (sil/exec/backends/recorded.py) replays them: `load_pool` groups the usable
audits by policy set and seed set, and `Draws` hands a run each set's recordings without
replacement, in an order fixed by the run's seed, until every one was drawn.

    pool = load_pool(Path("data/recorded/audits.jsonl"))
    audit = Draws(run_dir / "recorded_draws.json", seed=7).draw(pool, audit_id, set_id, "search")
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
from filelock import FileLock
from pydantic import BaseModel, ConfigDict, ValidationError

SeedSetName = Literal["search", "heldout"]


class RecordedError(ValueError):
    """A data file of recorded audits that cannot be read, or a set it does not hold."""


class Provenance(BaseModel):
    """Where a recorded audit's scores came from: what ran, which versions, when, at which commit."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    model: str  # the target role's model name
    model_file: str  # the weights' file name
    model_sha256: str
    server: str  # e.g. llama-cpp-python 0.3.36 (portable build)
    inspect_ai: str
    inspect_petri: str
    contract_id: str
    contract_hash: str
    manifest_hash: str
    commit: str
    recorder: str  # the command that recorded it


class RecordedAudit(BaseModel):
    """One real audit of one policy set: its per-seed scores, or the reason it yielded none."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    set: str  # the set's name in the sets file ("start" for the start)
    set_id: str  # sil.policies.setid.set_id_of(policy_hashes)
    policy_hashes: dict[str, str]
    audit_id: str
    seed_set: SeedSetName = "search"
    status: Literal["ok", "gap"]
    gap_reason: str | None = None
    scores: dict[str, dict[str, float]] = {}  # seed -> dimension -> score (1-10)
    missing: dict[str, list[str]] = {}  # dimension -> seeds without a usable score
    evidence_sha256: str | None = None  # of the audit's evidence file (petri: its inspect .eval log)
    input_tokens: int = 0
    output_tokens: int = 0
    wall_s: float = 0.0
    recorded_at: str  # ISO 8601, UTC
    provenance: Provenance


@dataclass(frozen=True)
class Pool:
    """The usable recorded audits, per (set id, seed set), in file order."""

    audits: Mapping[tuple[str, str], tuple[RecordedAudit, ...]]
    names: Mapping[str, str]  # set id -> set name

    def of(self, set_id: str, seed_set: str) -> tuple[RecordedAudit, ...]:
        return self.audits.get((set_id, seed_set), ())

    def set_ids(self) -> list[str]:
        return sorted(self.names, key=lambda s: self.names[s])

    def counts(self, seed_set: str = "search") -> dict[str, int]:
        """Usable recordings per set name."""
        return {self.names[s]: len(self.of(s, seed_set)) for s in self.set_ids()}


def read_records(path: Path) -> list[RecordedAudit]:
    """Every record of the data file; a malformed line is an error naming it (a torn last line,
    left by a recorder killed mid-write, is skipped: it was never a whole record)."""
    try:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
    except OSError as ex:
        raise RecordedError(
            f"cannot read recorded audits {path}: {ex.strerror}; record some with `python -m bench.record_audits`"
        ) from None
    records = []
    for n, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(RecordedAudit.model_validate_json(line))
        except ValidationError as ex:
            if n == len(lines) and not line.endswith("}"):
                break
            raise RecordedError(f"{path}:{n} is not a recorded audit: {ex.errors()[0]['msg']}") from None
    return records


def load_pool(path: Path) -> Pool:
    """The data file's usable audits (status ok) grouped per set and seed set."""
    audits: dict[tuple[str, str], list[RecordedAudit]] = {}
    names: dict[str, str] = {}
    for rec in read_records(path):
        names.setdefault(rec.set_id, rec.set)
        if rec.status == "ok":
            audits.setdefault((rec.set_id, rec.seed_set), []).append(rec)
    return Pool({k: tuple(v) for k, v in audits.items()}, names)


def append_record(path: Path, record: RecordedAudit) -> None:
    """Append one record as a whole line, flushed to disk before returning (a kill loses no other)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    line = record.model_dump_json() + "\n"
    with FileLock(str(path) + ".lock"), open(path, "a", encoding="utf-8") as out:
        out.write(line)
        out.flush()
        os.fsync(out.fileno())


class Draws:
    """Which recording each audit of a run replays: per set, a seeded permutation of its
    recordings, taken in order (without replacement) and begun again once all were drawn.

    The choices are kept in a JSON file beside the run's audits, so an audit asked again (a
    resumed run) replays the same recording, and separate audit processes share one order."""

    def __init__(self, path: Path, seed: int) -> None:
        self.path, self.seed = Path(path), seed

    def draw(self, pool: Pool, audit_id: str, set_id: str, seed_set: str) -> RecordedAudit:
        recordings = pool.of(set_id, seed_set)
        if not recordings:
            raise RecordedError(f"no recorded {seed_set} audit of policy set {set_id}")
        with FileLock(str(self.path) + ".lock"):
            state = self._read()
            key = f"{set_id}/{seed_set}"
            if audit_id not in state["chosen"]:
                taken = state["taken"].get(key, 0)
                order = permutation(self.seed, key, len(recordings))
                state["chosen"][audit_id] = order[taken % len(recordings)]
                state["taken"][key] = taken + 1
                self._write(state)
            index = state["chosen"][audit_id]
        if index >= len(recordings):
            raise RecordedError(f"audit {audit_id} drew recording {index} of {set_id}, which the data file lost")
        return recordings[index]

    def _read(self) -> dict[str, dict[str, int]]:
        try:
            data: dict[str, dict[str, int]] = json.loads(self.path.read_text())
            return data
        except FileNotFoundError:
            return {"chosen": {}, "taken": {}}

    def _write(self, state: dict[str, dict[str, int]]) -> None:
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(state))
        os.replace(tmp, self.path)


def permutation(seed: int, key: str, n: int) -> list[int]:
    """A permutation of range(n) fixed by the run's seed and the set (the same in every process)."""
    digest = hashlib.sha256(f"{seed}/{key}".encode()).digest()
    rng = np.random.default_rng(int.from_bytes(digest[:8], "big"))
    return [int(i) for i in rng.permutation(n)]


def file_sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()
