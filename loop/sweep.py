"""Sweeps: several contracts (or seeds of one) run as independent runs, with one combined status.

Each run of a sweep is its own `sil run` process: its own run directory, lock, ledger and
approval (a paid contract needs its own, as always), so a sweep adds no shared state and a
failed run stops only itself. With `executor: ray` the runs' audits share the cluster; each
run still bounds its own audits in flight. Seed variants of a contract are written beside it
as `<name>.seed-<k>.md` (the same contract with `seed: <seed + k>`), so each is a contract in
its own right, with its own hash and run id.

    runs = plan_sweep([Path("program.md")], seeds=3)
    outcomes = run_sweep(runs, root, parallel=3)
    console.print(sweep_table(outcomes, root))
"""

from __future__ import annotations

import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from loop.contract import ContractError, load_contract, split_front_matter
from loop.errors import Refused
from loop.runview import load_run
from loop.status import run_overview

SEED_LINE = re.compile(r"^seed:[ \t]*-?\d+[ \t]*(#.*)?$", re.MULTILINE)
MAX_RUNS = 64
TAIL_CHARS = 400
SIL_RUN = [sys.executable, "-c", "from loop.cli import app; app()", "run"]


@dataclass(frozen=True)
class SweepRun:
    """One run of a sweep: the contract file it runs and the run id `sil run` gives it."""

    contract: Path
    run_id: str


@dataclass(frozen=True)
class SweepOutcome:
    run: SweepRun
    exit_code: int
    tail: str  # the last lines `sil run` printed (its conclusion or why it stopped)


def seed_variant(path: Path, k: int) -> Path:
    """The contract at `path` with its seed moved by `k`, written beside it (k = 0: itself)."""
    if k == 0:
        return path
    text = path.read_text(encoding="utf-8")
    front, _ = split_front_matter(text)
    seed = load_contract(path).contract.seed + k
    if SEED_LINE.search(front):
        new_front = SEED_LINE.sub(f"seed: {seed}", front, count=1)
    else:
        new_front = front.rstrip("\n") + f"\nseed: {seed}\n"
    out = path.with_name(f"{path.stem}.seed-{k}{path.suffix}")
    out.write_text(text.replace(front, new_front, 1), encoding="utf-8")
    return out


def plan_sweep(contracts: list[Path], seeds: int = 1) -> list[SweepRun]:
    """The sweep's runs (Refused: a contract that does not load, a run twice, too many runs)."""
    if seeds < 1 or len(contracts) * seeds > MAX_RUNS:
        raise Refused(f"a sweep runs 1 to {MAX_RUNS} runs; {len(contracts)} contracts x {seeds} seeds asked")
    runs: list[SweepRun] = []
    for path in contracts:
        for k in range(seeds):
            try:
                variant = seed_variant(path, k)
                contract = load_contract(variant).contract
            except ContractError as ex:
                raise Refused(str(ex)) from None
            run = SweepRun(variant, f"{contract.contract_id}-{contract.contract_hash[:8]}")
            if any(r.run_id == run.run_id for r in runs):
                raise Refused(f"{variant} is the same contract as an earlier one of the sweep (run {run.run_id})")
            runs.append(run)
    return runs


def run_one(run: SweepRun, root: Path) -> SweepOutcome:
    """`sil run` of one contract, in its own process (its lock, ledger and approval)."""
    proc = subprocess.run(
        [*SIL_RUN, "--contract", str(run.contract), "--run-id", run.run_id],
        cwd=root,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
    )
    text = (proc.stdout + proc.stderr).strip()
    return SweepOutcome(run, proc.returncode, text[-TAIL_CHARS:])


def run_sweep(runs: list[SweepRun], root: Path, parallel: int) -> list[SweepOutcome]:
    """Run every run of the sweep, `parallel` at a time; outcomes in the sweep's order."""
    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(runs)))) as pool:
        return list(pool.map(lambda r: run_one(r, root), runs))


def sweep_table(outcomes: list[SweepOutcome], root: Path) -> Table:
    """The combined status: one row per run, from its own state and ledger."""
    table = Table(title="sweep")
    for col in ("run", "contract", "exit", "phase", "audits", "USD", "KEEP (arm)", "ledger"):
        table.add_column(col)
    for o in outcomes:
        run_dir = root / "state" / "runs" / o.run.run_id
        if not (run_dir / "ledger.jsonl").exists():
            table.add_row(escape(o.run.run_id), escape(str(o.run.contract)), str(o.exit_code), "not started")
            continue
        r = run_overview(load_run(run_dir))
        table.add_row(
            escape(o.run.run_id),
            escape(str(o.run.contract)),
            str(o.exit_code),
            r.phase,
            f"{r.audits}/{r.max_audits or '?'}",
            f"{r.usd:.2f}",
            ", ".join(f"{a} {n}" for a, n in r.keeps.items()),
            "ok" if r.verified else f"FAILS {escape(r.verify_note)}",
        )
    return table
