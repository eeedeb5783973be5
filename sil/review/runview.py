"""A run folder read for review, without locking or changing it (L3).

The review commands (`sil report`, `sil compare`, `sil export`, and `sil runs`/`sil status`
whenever their quick reading in glance.py is unsure) read a run through `load_run`: its
state, its ledger records (typed by record type), and the contract snapshot the run wrote
when it started.

    view = load_run(Path("state/runs/sil-default-sim-0d3fff61"))
    view.of_type("verdict"), view.contract, view.state.phase
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sil.base.errors import Halt
from sil.base.fsutil import atomic_write_bytes
from sil.contract.schema import Contract
from sil.integrity.ledger import LedgerError, Record, read_records
from sil.review.runpaths import CONTRACT_SNAPSHOT as CONTRACT_SNAPSHOT
from sil.review.runpaths import LEDGER as LEDGER
from sil.review.runpaths import RUNS as RUNS
from sil.review.runpaths import SWEEPS as SWEEPS
from sil.review.runpaths import resolve_run as resolve_run
from sil.review.runpaths import run_dirs as run_dirs
from sil.review.runpaths import sweep_run_dirs as sweep_run_dirs
from sil.store.runstate import RunState


@dataclass
class RunView:
    run_dir: Path
    state: RunState | None
    records: list[Record]
    contract: Contract | None
    problems: list[str] = field(default_factory=list)

    @property
    def run_id(self) -> str:
        return self.run_dir.name

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [r.payload for r in self.records if r.type == kind]

    def first(self, kind: str) -> dict[str, Any] | None:
        found = self.of_type(kind)
        return found[0] if found else None

    @property
    def project(self) -> Path:
        """The project folder the run belongs to (a sweep run's is its own workspace)."""
        return self.run_dir.parents[2]

    @property
    def simulated(self) -> bool:
        return any(r.simulated for r in self.records)

    @property
    def target(self) -> str | None:
        return self.contract.promotion.target_dimensions[0] if self.contract else None

    @property
    def critical(self) -> list[str]:
        return list(self.contract.promotion.critical_dimensions) if self.contract else []


def load_run(run_dir: Path) -> RunView:
    problems = []
    try:
        state = RunState.load(run_dir)
    except Halt as ex:
        state, problems = None, [str(ex)]
    try:
        records = list(read_records(run_dir / LEDGER))
    except (OSError, LedgerError) as ex:
        records = []
        problems.append(f"ledger unreadable: {ex}; run `sil ledger verify {run_dir.name}`")
    contract = None
    snap = run_dir / CONTRACT_SNAPSHOT
    if snap.is_file():
        try:
            contract = Contract.model_validate_json(snap.read_bytes())
        except ValueError as ex:
            problems.append(f"{snap} unreadable: {ex.__class__.__name__}")
    else:
        problems.append(f"no contract snapshot {CONTRACT_SNAPSHOT} (run started by an older version)")
    return RunView(run_dir=run_dir, state=state, records=records, contract=contract, problems=problems)


def write_contract_snapshot(run_dir: Path, contract: Contract) -> None:
    """Keep the run's contract next to its ledger (once) so review commands need no program.md."""
    path = run_dir / CONTRACT_SNAPSHOT
    if not path.exists():
        atomic_write_bytes(path, contract.model_dump_json(indent=1).encode())
