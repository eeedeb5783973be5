"""A run folder read for review, without locking or changing it (L3).

The review commands (`sil runs`, `sil status`, `sil report`, `sil compare`, `sil export`)
read a run only through `load_run`: its state, its ledger records (typed by record type),
and the contract snapshot the run wrote when it started.

    view = load_run(Path("state/runs/sil-default-sim-0d3fff61"))
    view.of_type("verdict"), view.contract, view.state.phase
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sil.base.errors import Halt, Refused
from sil.base.fsutil import atomic_write_bytes
from sil.base.runid import RunIdError, run_dir_under
from sil.contract.schema import Contract
from sil.integrity.ledger import LedgerError, Record, read_records
from sil.store.runstate import RunState

RUNS = Path("state/runs")
SWEEPS = Path("state/sweeps")  # each sweep run is a project of its own: state/sweeps/<id>/state/runs/<id>
CONTRACT_SNAPSHOT = "contract.json"
LEDGER = "ledger.jsonl"


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


def run_dirs(root: Path, sweeps: bool = True) -> list[Path]:
    """Every run folder under state/runs (and of every sweep), oldest first; one without a ledger is skipped."""
    found = list((root / RUNS).glob(f"*/{LEDGER}"))
    if sweeps:
        found += (root / SWEEPS).glob(f"*/{RUNS}/*/{LEDGER}")
    return sorted((p.parent for p in found), key=lambda p: (p / LEDGER).stat().st_mtime)


def sweep_run_dirs(root: Path) -> list[Path]:
    """The run folders of every sweep under state/sweeps, in name order."""
    return sorted(p.parent for p in (root / SWEEPS).glob(f"*/{RUNS}/*/{LEDGER}"))


def resolve_run(root: Path, run: str | None) -> Path:
    """The folder of run `run` (default: the most recently written); Refused with how to fix it."""
    base = root / RUNS
    if run is None:
        found = run_dirs(root)
        if not found:
            raise Refused(f"no runs under {base}; start one with `sil run`")
        return found[-1]
    try:
        path = run_dir_under(base, run)
        swept = run_dir_under(root / SWEEPS, run) / RUNS / run
    except RunIdError as ex:
        raise Refused(f"{ex} (list them with `sil runs`)") from None
    for candidate in (path, swept):
        if (candidate / LEDGER).is_file():
            return candidate
    raise Refused(f"no run {run!r} with a ledger under {base} or {root / SWEEPS} (list them with `sil runs`)")


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
