"""Whether a run's snapshots (state.json, contract.json) are the ones its ledger records (L3).

The ledger is the run's verified account; state.json and contract.json are conveniences beside
it that anyone can edit. Every view and `sil run` hold them to the ledger: the contract snapshot
must hash to the contract the run record names, the state must name that contract and
measurement, and its counters (audits, gaps, each arm's KEEPs, and the spend the `stop` record
states) must be the ledger's once the run finished; before, they may lag the ledger (a crash
between a record and the state's save; the loop recounts on resume) but never exceed it. A snapshot that disagrees is reported, never shown as the run's.

    problems = snapshot_problems(state, contract, records)   # [] when they agree
    counts = ledger_counts(records)                          # audits, gaps, KEEPs per arm
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from sil.base.errors import Halt
from sil.contract.schema import Contract
from sil.integrity.ledger import LedgerError, Record, read_plain, read_records_of, read_snapshot
from sil.integrity.records import AuditRecord, PreflightReport, RunRecord, StopRecord, VerdictRecord
from sil.store.champion import typed
from sil.store.runstate import RunState

USD_TOLERANCE = 1e-6  # sums of the same floats in another order


@dataclass(frozen=True)
class LedgerCounts:
    """What the ledger itself says a run did."""

    run: RunRecord | None
    audits: int = 0
    gaps: int = 0
    keeps: dict[str, int] = field(default_factory=dict)
    stopped_usd: float | None = None  # the spend the last `stop` states, unless a segment followed it


def ledger_counts(records: list[Record]) -> LedgerCounts:
    """Audits and gaps as `Journal.recount` derives them, KEEPs per arm; ValueError on a malformed record."""
    runs = typed(records[:1], "contract", RunRecord)
    probes = typed(records, "probe", PreflightReport)
    audits = typed(records, "audit", AuditRecord)
    keeps: dict[str, int] = {}
    for v in typed(records, "verdict", VerdictRecord):
        keeps[v.arm] = keeps.get(v.arm, 0) + (v.verdict == "keep")
    stops = typed(records, "stop", StopRecord)
    last_stop = max((r.seq for r in records if r.type == "stop"), default=None)
    resumed = last_stop is not None and any(r.type == "segment" and r.seq > last_stop for r in records)
    return LedgerCounts(
        run=runs[0] if runs else None,
        audits=len(probes) + len(audits),
        gaps=sum(p.audit_gap_reason is not None for p in probes) + sum(a.status == "gap" for a in audits),
        keeps=keeps,
        stopped_usd=stops[-1].usd if stops and not resumed else None,
    )


def contract_is_the_ledgers(contract: Contract | None, counts: LedgerCounts) -> bool:
    """The contract snapshot is the one the run record names (or the ledger names none)."""
    return contract is None or counts.run is None or contract.contract_hash == counts.run.contract_hash


def snapshot_problems(state: RunState | None, contract: Contract | None, counts: LedgerCounts) -> list[str]:
    """How state.json and contract.json disagree with the ledger ([] when they agree)."""
    run = counts.run
    if run is None:
        return []  # a ledger without its run record says nothing to hold them to
    problems = []
    if contract is not None and not contract_is_the_ledgers(contract, counts):
        problems.append(
            f"contract.json is not the contract the ledger records (it hashes to {contract.contract_hash[:12]}, "
            f"the run record names {run.contract_hash[:12]}): edited after the run started"
        )
    if state is not None:
        problems += _state_problems(state, run, counts)
    return problems


def _off(stated: int, recorded: int, finished: bool) -> bool:
    """The ledger is written before the state: an interrupted run's state may lag it (the loop
    recounts on resume), but never run ahead of it, and a finished run's must equal it."""
    return stated != recorded if finished else stated > recorded


def _state_problems(state: RunState, run: RunRecord, counts: LedgerCounts) -> list[str]:
    differ = []
    finished = counts.stopped_usd is not None
    if state.contract_hash != run.contract_hash:
        differ.append(f"contract {state.contract_hash[:12]} (ledger {run.contract_hash[:12]})")
    if state.measurement_hash != run.measurement_hash:
        differ.append(f"measurement {state.measurement_hash[:12]} (ledger {run.measurement_hash[:12]})")
    if _off(state.audits, counts.audits, finished):
        differ.append(f"audits {state.audits} (ledger {counts.audits})")
    if _off(state.gaps, counts.gaps, finished):
        differ.append(f"gaps {state.gaps} (ledger {counts.gaps})")
    for arm in sorted({*state.arms, *counts.keeps}):
        kept = state.arms[arm].keeps if arm in state.arms else 0
        if _off(kept, counts.keeps.get(arm, 0), finished):
            differ.append(f"{arm} KEEPs {kept} (ledger {counts.keeps.get(arm, 0)})")
    if counts.stopped_usd is not None and abs(state.usd - counts.stopped_usd) > USD_TOLERANCE * max(1.0, state.usd):
        differ.append(f"USD {state.usd:.4f} (ledger's stop record {counts.stopped_usd:.4f})")
    if not differ:
        return []
    return [f"state.json disagrees with the ledger: {', '.join(differ)}"]


def stored_run_problems(run_dir: Path) -> list[str]:
    """Why the stored run in `run_dir` cannot be resumed as it stands: its state or contract
    snapshot cannot be read or is not what its ledger records ([] for a new or sound run)."""
    ledger = run_dir / "ledger.jsonl"
    if not os.path.lexists(ledger):
        return []
    try:
        state = RunState.load(run_dir)
        snap = run_dir / "contract.json"
        contract = Contract.model_validate_json(read_plain(snap)) if snap.exists() else None
        counts = ledger_counts(list(read_records_of(read_snapshot(ledger))))
    except (Halt, OSError, ValueError, LedgerError) as ex:
        return [str(ex)]
    return snapshot_problems(state, contract, counts)
