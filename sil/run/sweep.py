"""Sweeps: several contracts (or seeds of one) run as independent runs, with one combined status.

Each run of a sweep is its own `sil run` process in its own workspace,
`state/sweeps/<run id>/`: the contract (a seed variant is the same contract with
`seed: <seed + k>`, and on a backend whose audit noise is a setting, such as sim's
`noise_seed`, that setting moved too, so its audits are fresh as a real re-run's are: a contract
of its own, with its own hash and run id), a copy of its
frozen measurement and of the project's runtime policies, and the project's approval for it
and `allowed_signers` if there are any (signed files, verified as always). So every run has
its own run directory, lock, policy lock, ledger and approval, no run waits for another's
locks, and a failed run stops only itself. With `executor: ray` the runs' audits share the
cluster; each run still bounds its own audits in flight. Running the same sweep again resumes
each run. `sil status` inside a run's workspace shows that run.

    runs = plan_sweep([Path("program.md")], root, seeds=3)
    outcomes = run_sweep(runs, parallel=3)
    console.print(sweep_table(outcomes))
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from pydantic import BaseModel
from rich.markup import escape
from rich.table import Table

from sil.base.errors import Refused
from sil.contract.approval import ALLOWED_SIGNERS_DEFAULT, approval_path
from sil.contract.backendsettings import V1_SECTIONS, settings_model
from sil.contract.schema import (
    Contract,
    ContractError,
    catalogue_path,
    load_contract,
    parse_contract,
    split_front_matter,
)
from sil.review.runview import load_run
from sil.review.status import run_overview

SEED_LINE = re.compile(r"^seed:[ \t]*-?\d+[ \t]*(#.*)?$", re.MULTILINE)
MAX_RUNS = 64
TAIL_CHARS = 400
SWEEPS = Path("state") / "sweeps"
POLICIES = Path("state") / "policies"
CONTRACT_NAME = "program.md"
SIL_RUN = [sys.executable, "-c", "from sil.cli.app import app; app()", "run"]


@dataclass(frozen=True)
class SweepRun:
    """One run of a sweep: its workspace (holding its contract) and the run id `sil run` gives it."""

    workspace: Path
    run_id: str
    source: Path  # the contract file it came from

    @property
    def run_dir(self) -> Path:
        return self.workspace / "state" / "runs" / self.run_id


@dataclass(frozen=True)
class SweepOutcome:
    run: SweepRun
    exit_code: int
    tail: str  # the last lines `sil run` printed (its conclusion or why it stopped)


def seed_text(path: Path, k: int) -> str:
    """The contract text at `path` with its seed moved by `k` (k = 0: unchanged), and the backend
    settings its audits draw their noise from moved too (`BackendSettings.replicate`)."""
    text = path.read_text(encoding="utf-8")
    if k == 0:
        return text
    front, _ = split_front_matter(text, str(path))
    contract = load_contract(path).contract
    seed = contract.seed + k
    if SEED_LINE.search(front):
        new_front = SEED_LINE.sub(f"seed: {seed}", front, count=1)
    else:
        new_front = front.rstrip("\n") + f"\nseed: {seed}\n"
    if moved := replicated_settings(contract, k):
        new_front = with_backend_settings(new_front, contract.backend, moved)
    return text.replace(front, new_front, 1)


def replicated_settings(contract: Contract, k: int) -> dict[str, Any]:
    """The backend settings the k-th seed variant changes (empty: its audits are fresh anyway)."""
    model = settings_model(contract.backend)
    if model is None:
        return {}
    settings = contract.settings(model)
    before, after = settings.model_dump(mode="json"), settings.replicate(k).model_dump(mode="json")
    return {name: value for name, value in after.items() if before.get(name) != value}


def with_backend_settings(front: str, backend: str, changes: dict[str, Any]) -> str:
    """The front matter with `changes` in its backend's settings, wherever the contract keeps them
    (`backend: {kind, settings}` or a v1 contract's section). Written anew: its comments are lost,
    so it says where it came from."""
    data = yaml.safe_load(front)
    spec = data.get("backend")
    if isinstance(spec, dict):
        spec["settings"] = {**(spec.get("settings") or {}), **changes}
    elif backend in V1_SECTIONS and isinstance(data.get(backend), dict):
        data[backend] = {**data[backend], **changes}
    else:
        data["backend"] = {"kind": backend, "settings": changes}
    note = f"# a seed variant written by `sil sweep --seeds`: its seed and {', '.join(changes)} moved\n"
    return note + yaml.safe_dump(data, sort_keys=False, allow_unicode=True)


def plan_sweep(contracts: list[Path], root: Path, seeds: int = 1) -> list[SweepRun]:
    """The sweep's runs, their workspaces made (Refused: a bad contract, a run twice, too many)."""
    if seeds < 1 or len(contracts) * seeds > MAX_RUNS:
        raise Refused(f"a sweep runs 1 to {MAX_RUNS} runs; {len(contracts)} contracts x {seeds} seeds asked")
    runs: list[SweepRun] = []
    for path in contracts:
        for k in range(seeds):
            try:
                text = seed_text(path, k)
                contract = parse_contract(text, str(path)).contract
            except ContractError as ex:
                raise Refused(str(ex)) from None
            # not the id a plain `sil run` of that contract takes: the two share the project's checkpoint refs
            run_id = f"sweep-{contract.contract_id}-{contract.contract_hash[:8]}"
            if any(r.run_id == run_id for r in runs):
                raise Refused(f"{path} (seed +{k}) is the same contract as an earlier one of the sweep (run {run_id})")
            runs.append(SweepRun(make_workspace(root, path, text, contract, run_id), run_id, path))
    return runs


def make_workspace(root: Path, source: Path, text: str, contract: Contract, run_id: str) -> Path:
    """`state/sweeps/<run id>/` with the contract, its measurement, policies and approval (kept if made)."""
    ws = root / SWEEPS / run_id
    target = ws / CONTRACT_NAME
    if target.exists():
        if target.read_text(encoding="utf-8") != text:
            raise Refused(f"{target} exists with another contract; remove {ws} to start that run afresh")
        return ws
    _copy_tree(root / contract.measurement.seed_library, ws / contract.measurement.seed_library)
    _copy_tree(root / POLICIES, ws / POLICIES)
    catalogue = catalogue_path(contract, source)
    if catalogue is not None:
        rel = Path(contract.mutator.catalogue or "")
        if rel.is_absolute() or ".." in rel.parts:
            raise Refused(
                f"{source}: a sweep copies mutator.catalogue into the run's workspace; give it inside the project"
            )
        _copy_file(catalogue, ws / rel)
    for extra in (approval_path(contract.contract_hash, root), root / ALLOWED_SIGNERS_DEFAULT):
        if extra.is_file():
            _copy_file(extra, ws / extra.relative_to(root))
    target.write_text(text, encoding="utf-8")  # last: a workspace with its contract is complete
    return ws


def _copy_tree(src: Path, dest: Path) -> None:
    if not src.is_dir():
        raise Refused(f"{src} does not exist: run the sweep from the project root")
    shutil.copytree(src, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns(".sil-policy.lock*"))


def _copy_file(src: Path, dest: Path) -> None:
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copy2(src, dest)


def run_one(run: SweepRun) -> SweepOutcome:
    """`sil run` of one contract in its workspace, in its own process (its locks, ledger, approval)."""
    proc = subprocess.run(
        [*SIL_RUN, "--contract", CONTRACT_NAME, "--run-id", run.run_id],
        cwd=run.workspace,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
    )
    text = (proc.stdout + proc.stderr).strip()
    return SweepOutcome(run, proc.returncode, text[-TAIL_CHARS:])


def run_sweep(runs: list[SweepRun], parallel: int) -> list[SweepOutcome]:
    """Run every run of the sweep, `parallel` at a time; outcomes in the sweep's order."""
    with ThreadPoolExecutor(max_workers=max(1, min(parallel, len(runs)))) as pool:
        return list(pool.map(run_one, runs))


def sweep_table(outcomes: list[SweepOutcome]) -> Table:
    """The combined status: one row per run, from its own state and ledger."""
    table = Table(title="sweep")
    for col in ("run", "contract", "exit", "phase", "audits", "USD", "KEEP (arm)", "ledger"):
        table.add_column(col)
    for o in outcomes:
        if not (o.run.run_dir / "ledger.jsonl").exists():
            table.add_row(escape(o.run.run_id), escape(str(o.run.source)), str(o.exit_code), "not started")
            continue
        r = run_overview(load_run(o.run.run_dir))
        table.add_row(
            escape(o.run.run_id),
            escape(str(o.run.source)),
            str(o.exit_code),
            r.phase,
            f"{r.audits}/{r.max_audits or '?'}",
            f"{r.usd:.2f}",
            ", ".join(f"{a} {n}" for a, n in r.keeps.items()),
            "ok" if r.verified else f"FAILS {escape(r.verify_note)}",
        )
    return table


class SweepAggregate(BaseModel):
    """The gate arm across a sweep's finished runs: effect on the target, KEEP rate, cost."""

    runs: list[str]
    finished: int
    target: str | None
    effects: list[float]  # per run: the gate champion's Δ target vs start (0 when unchanged or rolled back)
    effect_mean: float | None
    effect_lo: float | None  # 90% t-interval across runs (needs two)
    effect_hi: float | None
    keeps: int
    candidates: int
    certified_runs: int
    audits: int
    gaps: int
    usd: float
    wall_s: float


def sweep_aggregate(run_dirs: list[Path]) -> SweepAggregate:
    """Aggregate the runs' own summaries; a run without state or contract counts only as listed."""
    from sil.review.summary import build_summary
    from sil.store.champion import champion_status

    effects, keeps, cands, certified, audits, gaps, usd, wall, target = [], 0, 0, 0, 0, 0, 0.0, 0.0, None
    for d in run_dirs:
        view = load_run(d)
        if view.state is None or view.contract is None or view.state.phase != "done":
            continue
        s = build_summary(view.state, view.records, view.contract, "")
        target = s.target
        gate = next((a for a in s.arms if a.arm == "gate"), None)
        if gate is not None:
            effects.append(gate.target_change[0] if gate.changed and gate.target_change else 0.0)
            keeps, cands = keeps + gate.keeps, cands + gate.candidates
            certified += champion_status(view.state, view.records, "gate").standing == "certified"
        audits, gaps, usd, wall = audits + s.audits, gaps + s.gaps, usd + s.usd, wall + s.elapsed_s
    lo = hi = None
    if len(effects) >= 2:
        from scipy import stats

        arr = np.asarray(effects)
        half = float(stats.t.ppf(0.95, arr.size - 1) * arr.std(ddof=1) / np.sqrt(arr.size))
        lo, hi = float(arr.mean()) - half, float(arr.mean()) + half
    return SweepAggregate(
        runs=[d.name for d in run_dirs],
        finished=len(effects),
        target=target,
        effects=effects,
        effect_mean=float(np.mean(effects)) if effects else None,
        effect_lo=lo,
        effect_hi=hi,
        keeps=keeps,
        candidates=cands,
        certified_runs=certified,
        audits=audits,
        gaps=gaps,
        usd=round(usd, 6),
        wall_s=round(wall, 1),
    )


def aggregate_lines(a: SweepAggregate) -> list[str]:
    """The aggregate in words: effect mean and interval, KEEP rate, certified runs, cost."""
    if not a.finished:
        return [f"sweep of {len(a.runs)} runs: none finished yet"]
    eff = "—" if a.effect_mean is None else f"{a.effect_mean:+.2f}"
    if a.effect_lo is not None and a.effect_hi is not None:
        eff += f" [{a.effect_lo:+.2f}, {a.effect_hi:+.2f}] (90% CI across runs)"
    rate = f"{a.keeps}/{a.candidates} ({a.keeps / a.candidates:.0%})" if a.candidates else "0/0"
    return [
        f"sweep of {len(a.runs)} runs, {a.finished} finished: gate champion Δ {a.target} vs start {eff}",
        f"gate KEEP rate {rate}; certified champion in {a.certified_runs} of {a.finished} runs",
        f"cost: {a.audits} audits ({a.gaps} gaps), USD {a.usd:.2f}, wall {a.wall_s:.0f}s summed over runs",
    ]
