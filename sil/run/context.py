"""The frozen context every phase of a run receives: settings fixed at the start, and services.

Settings (contract, programme, effective promotion, measurement hash, approval) never change
during a run; the services (journal, rounds, policy store, refs, backend) carry the run's
state and side effects. train.py builds one per `sil run`; `sil replicate` builds one for
the run it re-measures, so it goes through the same budget and guards.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sil.contract.schema import Contract, LoadedContract, Promotion
from sil.exec.measure import AuditBackend, MeasureContext
from sil.integrity.ledger import RecordBook
from sil.policies.store import PolicyStore
from sil.run.rounds import RoundRunner
from sil.store.events import Event
from sil.store.journal import Journal
from sil.store.policyrefs import RunRefs
from sil.store.runstate import RunState


@dataclass(frozen=True)
class RunContext:
    loaded: LoadedContract
    promotion: Promotion  # the contract's, with the run's replicate_k
    measurement_hash: str
    approval_id: str
    policy_dir: Path  # the user's policy files: the run's starting point, never written by a run
    journal: Journal
    rounds: RoundRunner
    store: PolicyStore
    refs: RunRefs
    backend: AuditBackend
    measure: MeasureContext
    project_root: Path | None = None  # None: the folder that holds state/runs/<run>

    @property
    def root(self) -> Path:
        """The project's folder: where its refs (and its holdout ledger) live."""
        return self.project_root or self.run_dir.parents[2]

    @property
    def note(self) -> str:
        """What produces this run's scores, in one line (the backend's note for its contract)."""
        return self.backend.describe(self.contract).note

    @property
    def contract(self) -> Contract:
        return self.loaded.contract

    @property
    def state(self) -> RunState:
        return self.journal.state

    @property
    def book(self) -> RecordBook:
        return self.journal.book

    @property
    def run_dir(self) -> Path:
        return self.journal.run_dir

    def save(self) -> None:
        self.journal.save()

    def emit(self, event: Event) -> None:
        self.journal.emit(event)

    def record_time(self, type_: str, key: str) -> str:
        """When a record was written (fixed once written, so commits made from it are too)."""
        rec = self.book.seen[(type_, key)]
        return rec.ts
