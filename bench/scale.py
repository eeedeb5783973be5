"""Executor scale benchmark: audits/hour and the loop's overhead per audit, local vs Ray.

Every audit is a fixed-duration stand-in (`FixedBackend`: the audit process sleeps `--audit-s`
seconds, then publishes evidence the backend prepared), so the figures measure the loop, not a
model. Each cell runs one batch of `--audits` audits through the product's own path,
`RoundRunner.run_batch` (intent record, recovery check, `measure.run_audits` with the contract's
executor, `result.json` stored atomically, one ledger record per audit), at 1, 2, 4 and 8 audits
in flight. Overhead per audit = (wall - ideal) / audits, where ideal = ceil(audits / in_flight)
x audit_s; it is the loop's whole cost (driver bookkeeping, process start, Ray scheduling),
amortized over the audits. "wave +s" is the same excess per wave of `in_flight` audits: how
much later than `audit_s` an audit's result arrives. A Ray cell first runs one warm-up wave
that connects to the cluster and starts the slots; "start-up s" is that cost (paid once per
run and per in-flight slot, not per audit) and is not in the other columns.

    python -m bench.scale                          # local and Ray (a local Ray cluster is started)
    python -m bench.scale --executors local --audits 16 --audit-s 1
    RAY_ADDRESS=127.0.0.1:6379 python -m bench.scale   # against a running cluster

The Ray column needs `pip install -e '.[ray]'`; it is skipped with a note if ray is missing.
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import shutil
import statistics
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.table import Table

from sil.contract.schema import Contract, load_contract
from sil.exec.measure import AuditRequest, BackendBase, MeasureContext, read_evidence_file
from sil.integrity.ledger import Ledger
from sil.policies.store import PolicyStore
from sil.run.rounds import Guards, RoundRunner
from sil.stats.judges import JudgeState
from sil.store.journal import Journal
from sil.store.runstate import RunState
from sil_policy.evidence import EVIDENCE_FILE, Evidence, SampleEvidence

REPO = Path(__file__).resolve().parent.parent
IN_FLIGHT = (1, 2, 4, 8)
DEFAULT_AUDITS = 32
DEFAULT_AUDIT_S = 2.0
OVERHEAD_GOAL = 0.05  # of one audit's duration, at 8 in flight (the acceptance bar)
PENDING = "evidence.pending.json"
LEDGER_SAMPLES = 200


class FixedBackend(BackendBase):
    """A stand-in audit of fixed duration: `sleep`, then the evidence the backend prepared appears."""

    name = "fixed"
    simulated = True
    note = "fixed-duration stand-in audit for the executor benchmark; measures the loop, not a model"

    def __init__(self, audit_s: float) -> None:
        self.audit_s = audit_s

    def command(self, req: AuditRequest, ctx: MeasureContext) -> list[str]:
        samples = [
            SampleEvidence(seed_id=s, scores={d: 3.0 for d in ctx.dimensions}, policy_hashes=dict(req.policy_hashes))
            for s in ctx.seed_ids
        ]
        ev = Evidence(backend=self.name, simulated=True, runtime="bench-fixed", samples=samples)
        (req.audit_dir / PENDING).write_text(ev.model_dump_json())
        return ["/bin/sh", "-c", f"sleep {self.audit_s:g} && mv {PENDING} {EVIDENCE_FILE}"]

    def read_evidence(self, req: AuditRequest, ctx: MeasureContext) -> Evidence:
        return read_evidence_file(req.audit_dir / EVIDENCE_FILE)

    def audit_cost_bound(self, contract: Contract, n_seeds: int) -> float:
        return 0.0


@dataclass(frozen=True)
class Cell:
    executor: str
    in_flight: int
    audits: int
    audit_s: float
    wall_s: float
    startup_s: float = 0.0  # Ray: connect and start the slots (a warm-up batch), once per run

    @property
    def ideal_s(self) -> float:
        return math.ceil(self.audits / self.in_flight) * self.audit_s

    @property
    def overhead_s(self) -> float:
        """The loop's cost per audit, over what the audits themselves took."""
        return max(self.wall_s - self.ideal_s, 0.0) / self.audits

    @property
    def wave_excess_s(self) -> float:
        """How much longer than one audit each wave of `in_flight` audits took (the latency cost)."""
        return max(self.wall_s - self.ideal_s, 0.0) / math.ceil(self.audits / self.in_flight)

    @property
    def per_hour(self) -> float:
        return self.audits / self.wall_s * 3600


def bench_contract(executor: str, in_flight: int) -> Contract:
    """The default contract, with the executor and its in-flight bound set for one cell."""
    data = load_contract(REPO / "program.md").contract.model_dump(mode="json")
    data["bound"] = {}
    data["measurement"]["concurrency"] = in_flight
    data["measurement"]["audit_timeout_s"] = 600
    if executor == "ray":
        address = "RAY_ADDRESS" if os.environ.get("RAY_ADDRESS") else None
        data["executor"] = {"kind": "ray", "address_env": address, "num_cpus": 0, "max_in_flight": in_flight}
    return Contract.model_validate(data)


def run_cell(executor: str, in_flight: int, audits: int, audit_s: float, scratch: Path) -> Cell:
    """One batch of `audits` fixed-duration audits through `RoundRunner.run_batch`."""
    contract = bench_contract(executor, in_flight)
    run_dir = scratch / f"{executor}-{in_flight}"
    run_dir.mkdir(parents=True)
    ctx = MeasureContext.from_contract(contract, REPO)
    backend = FixedBackend(audit_s)
    store = PolicyStore(run_dir)
    origin = store.snapshot_dir(REPO / "state" / "policies")
    ledger = Ledger(run_dir / "ledger.jsonl", offline=True, simulated=True)

    def new_state() -> RunState:
        return RunState(
            run_id=run_dir.name,
            contract_hash=contract.contract_hash,
            measurement_hash="0" * 64,
            origin=origin,
            replicate_k=1,
            shared=JudgeState.start(contract.promotion),
        )

    journal = Journal.open(run_dir, ledger, new_state, lambda _text: None)
    rounds = RoundRunner(journal, ctx, backend, store, Guards())
    start = time.monotonic()
    if executor == "ray":  # connect and start the slots first: a run pays that once, not per audit
        rounds.run_batch("never", "warmup", "baseline", [(f"w{i}", origin) for i in range(in_flight)])
    startup = max(time.monotonic() - start - audit_s, 0.0)
    start = time.monotonic()
    results = rounds.run_batch("never", "bench", "baseline", [(f"a{i:03d}", origin) for i in range(audits)])
    wall = time.monotonic() - start
    gaps = [r.gap_reason for r in results if not r.ok]
    if gaps:
        raise SystemExit(f"{executor} x{in_flight}: {len(gaps)} gaps, first: {gaps[0]}")
    return Cell(executor, in_flight, audits, audit_s, wall, startup)


def ledger_append_ms(scratch: Path, n: int = LEDGER_SAMPLES) -> float:
    """Median ms of one fsynced ledger append of an audit-sized record (the driver's serial write)."""
    ledger = Ledger(scratch / "append-bench.jsonl", offline=True, simulated=True)
    payload = {"audit_id": "x", "scores": {f"seed{i}": {f"dim{j}": 3.0 for j in range(10)} for i in range(10)}}
    times = []
    for i in range(n):
        start = time.perf_counter()
        ledger.append("audit", {**payload, "i": i}, run_id="bench")
        times.append(time.perf_counter() - start)
    return statistics.median(times) * 1000


def render(cells: list[Cell], console: Console) -> None:
    table = Table(title=f"{cells[0].audits} audits of {cells[0].audit_s:g} s each, one batch per cell")
    cols: tuple[str, ...]  # grows below: the start-up column is appended
    cols = ("executor", "in flight", "wall s", "ideal s", "audits/hour", "overhead/audit s", "% of audit", "wave +s")
    cols += ("start-up s",)
    for col in cols:
        table.add_column(col, justify="right")
    for c in cells:
        share = c.overhead_s / c.audit_s
        table.add_row(
            c.executor,
            str(c.in_flight),
            f"{c.wall_s:.2f}",
            f"{c.ideal_s:.1f}",
            f"{c.per_hour:,.0f}",
            f"{c.overhead_s:.3f}",
            f"{share:.1%}",
            f"{c.wave_excess_s:.3f}",
            f"{c.startup_s:.2f}" if c.executor == "ray" else "-",
        )
    console.print(table)
    for c in cells:
        if c.in_flight == max(IN_FLIGHT):
            verdict = "meets" if c.overhead_s / c.audit_s < OVERHEAD_GOAL else "MISSES"
            console.print(
                f"{c.executor} at {c.in_flight} in flight: overhead {c.overhead_s / c.audit_s:.1%} of an audit "
                f"({verdict} the {OVERHEAD_GOAL:.0%} goal)"
            )


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--executors", default="local,ray", help="comma-separated: local, ray")
    parser.add_argument("--audits", type=int, default=DEFAULT_AUDITS, help="audits per cell")
    parser.add_argument("--audit-s", type=float, default=DEFAULT_AUDIT_S, help="seconds per audit")
    parser.add_argument("--in-flight", default=",".join(map(str, IN_FLIGHT)), help="comma-separated")
    args = parser.parse_args(argv)
    console = Console(width=140)
    cells = []
    scratch = Path(tempfile.mkdtemp(prefix="sil-scale-"))
    try:
        for executor in args.executors.split(","):
            if executor == "ray" and not _ray_available(console):
                continue
            for k in (int(x) for x in args.in_flight.split(",")):
                cells.append(run_cell(executor, k, args.audits, args.audit_s, scratch))
        append_ms = ledger_append_ms(scratch)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    render(cells, console)
    console.print(f"driver: one fsynced ledger append (audit-sized record) takes {append_ms:.2f} ms (median)")


def _ray_available(console: Console) -> bool:
    if importlib.util.find_spec("ray") is None:
        console.print("ray is not installed (pip install -e '.[ray]'): the Ray rows are skipped")
        return False
    return True


if __name__ == "__main__":
    main()
