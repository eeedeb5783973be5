"""A run folder read for review, without locking or changing it (L3).

Every review command (`sil runs`, `sil status`, `sil report`, `sil compare`, `sil export`)
reads a run through `load_run`: its ledger records, verified as `sil ledger verify` verifies
them, and its state and the contract snapshot the run wrote when it started, each held to the
ledger (a snapshot that disagrees is one of the view's problems).

    view = load_run(Path("state/runs/sil-default-sim-0d3fff61"))
    view.payloads("verdict", VerdictRecord), view.contract, view.state.phase
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sil.base.errors import Halt
from sil.base.fsutil import atomic_write_bytes
from sil.base.runid import RunIdError, check_run_id
from sil.base.runpaths import CONTRACT_SNAPSHOT as CONTRACT_SNAPSHOT
from sil.base.runpaths import LEDGER as LEDGER
from sil.base.runpaths import RUNS as RUNS
from sil.base.runpaths import SWEEPS as SWEEPS
from sil.base.runpaths import resolve_run as resolve_run
from sil.base.runpaths import run_dirs as run_dirs
from sil.base.runpaths import sweep_run_dirs as sweep_run_dirs
from sil.contract.schema import Contract
from sil.integrity.ledger import (
    GENESIS,
    LedgerError,
    Record,
    VerifyReport,
    read_plain,
    read_records_of,
    read_snapshot,
)
from sil.integrity.records import Payload, parse_payload
from sil.integrity.verify import verify_run_ledger
from sil.integrity.witness import WitnessError, witness_from_env
from sil.store.binding import LedgerCounts, contract_is_the_ledgers, ledger_counts, snapshot_problems
from sil.store.runstate import RunState


@dataclass
class RunView:
    run_dir: Path
    state: RunState | None
    records: list[Record]
    contract: Contract | None
    problems: list[str] = field(default_factory=list)  # snapshots unreadable or not the ledger's
    counts: LedgerCounts | None = None  # what the ledger says the run did
    verification: VerifyReport | None = None  # None: not verified (load_run(verify=False))
    typed: dict[str, list[Payload]] = field(default_factory=dict)  # `payloads`, per record type

    @property
    def run_id(self) -> str:
        return self.run_dir.name

    def of_type(self, kind: str) -> list[dict[str, Any]]:
        return [r.payload for r in self.records if r.type == kind]

    def payloads[P: Payload](self, kind: str, model: type[P]) -> list[P]:
        """The typed payloads of every record of `kind`, in ledger order, read once. A record that
        does not hold its type's payload is left out and named among the view's problems."""
        if kind not in self.typed:
            self.typed[kind] = [p for r in self.records if r.type == kind if (p := self._parsed(r)) is not None]
        out = self.typed[kind]
        wrong = [type(p).__name__ for p in out if not isinstance(p, model)]
        if wrong:
            raise TypeError(f"a {kind} record holds a {wrong[0]}, not a {model.__name__}")
        return out  # type: ignore[return-value]  # each one checked to be a `model` above

    def _parsed(self, r: Record) -> Payload | None:
        try:
            return parse_payload(r.type, r.payload)
        except ValueError as ex:  # pydantic's ValidationError is one
            self.problems.append(f"ledger record {r.seq} ({r.type}) is malformed: {str(ex).splitlines()[0]}")
            return None

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


def load_run(run_dir: Path, *, verify: bool = True) -> RunView:
    """The run as its ledger vouches for it: verified in the caller's environment (as `sil ledger
    verify` would, unless `verify` is False), its snapshots held to it (sil/store/binding.py).
    Whatever cannot be read or does not agree is a problem of the view, never an exception."""
    problems: list[str] = []
    try:
        check_run_id(run_dir.name)
    except RunIdError as ex:
        return RunView(run_dir=run_dir, state=None, records=[], contract=None, problems=[str(ex)])
    state = _state(run_dir, problems)
    records, unread = _records(run_dir)
    contract = _contract(run_dir, problems)
    view = RunView(run_dir=run_dir, state=state, records=records, contract=contract, problems=problems)
    try:
        view.counts = ledger_counts(records)
        problems += snapshot_problems(state, contract, view.counts)
        if not contract_is_the_ledgers(contract, view.counts):
            view.contract = None  # its limits are not the run's: no view shows them
    except ValueError as ex:
        problems.append(str(ex))
    if unread is not None:  # what a verification would say first, and all it could say
        view.verification = VerifyReport(ok=False, records=0, head_hash=GENESIS, errors=[unread])
    elif verify:
        view.verification = verify_in_env(run_dir)
    return view


def verify_in_env(run_dir: Path) -> VerifyReport:
    """`sil ledger verify RUN` with the caller's environment (SIL_ALLOWED_SIGNERS, SIL_WITNESS)."""
    root = run_dir.parents[2]
    try:
        witness = witness_from_env(root)
    except WitnessError as ex:
        return VerifyReport(ok=False, records=0, head_hash=GENESIS, errors=[str(ex)])
    return verify_run_ledger(run_dir / LEDGER, root, witness=witness)


def _state(run_dir: Path, problems: list[str]) -> RunState | None:
    try:
        return RunState.load(run_dir)
    except Halt as ex:
        problems.append(str(ex))
    except (OSError, ValueError) as ex:
        problems.append(f"{run_dir / 'state.json'} cannot be read: {ex}")
    return None


def _records(run_dir: Path) -> tuple[list[Record], str | None]:
    """The ledger's records, or none and why it cannot be read."""
    try:
        return list(read_records_of(read_snapshot(run_dir / LEDGER))), None
    except (OSError, LedgerError) as ex:
        return [], f"the ledger cannot be read: {ex}"


def _contract(run_dir: Path, problems: list[str]) -> Contract | None:
    snap = run_dir / CONTRACT_SNAPSHOT
    if not snap.exists():
        problems.append(f"no contract snapshot {CONTRACT_SNAPSHOT} (run started by an older version)")
        return None
    try:
        return Contract.model_validate_json(read_plain(snap))
    except (OSError, ValueError) as ex:
        problems.append(f"{snap} unreadable: {ex.__class__.__name__}")
        return None


def write_contract_snapshot(run_dir: Path, contract: Contract) -> None:
    """Keep the run's contract next to its ledger (once) so review commands need no program.md."""
    path = run_dir / CONTRACT_SNAPSHOT
    if not path.exists():
        atomic_write_bytes(path, contract.model_dump_json(indent=1).encode())
