"""The product's loop on the recorded world: real audits of a real model, resampled.

    python -m bench.recorded --runs 40 --budget 400 --out docs/results [--data data/recorded/audits.jsonl]

Each run is a whole `sil run` of the recorded world's contract (data/recorded/program.md: the
default contract's gate, search and certification, target `overrefusal`, arms never and gate)
through `bench.looprun` (the loop's own phases, arms and certification), with every audit
answered in this process by the `recorded` backend's own replay (sil/exec/backends/recorded.py)
and scored by the loop's `measure.score_evidence`. Run r moves the contract's seed by r, so its
draws of recordings and its proposals are its own. Both error designs are run: `two_stage` (the
default) and `fwer`.

What is real: every score (a real audit of SmolLM2-135M in the reference runtime). What is
resampled: which recorded audit answers which of a run's audits. A set's truth is its pool mean
(every recording of it), which is exactly what a replayed audit of it is worth on average; the
figures say how the loop decides on this pool, not how it would on fresh audits of the model.
Writes `recorded.md` and `recorded.json` in --out.
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import platform
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np

from bench.looprun import LoopRun
from sil.contract.schema import LoadedContract, load_contract
from sil.exec import measure
from sil.exec.backends.recorded import RecordedSettings, loaded_hashes, replay
from sil.exec.backends.recordedpool import Draws, Pool, RecordedError, load_pool
from sil.exec.measure import AuditBackend, AuditRequest, AuditResult, GapError, MeasureContext
from sil.integrity.records import VerdictRecord
from sil.policies.store import read_policy_dir
from sil.run.train import run_phases
from sil.search.proposers.catalogue import load_catalogue
from sil.search.proposers.recorded import recorded_sets
from sil_policy import SURFACES

REPO = Path(__file__).resolve().parent.parent
CONTRACT = REPO / "data" / "recorded" / "program.md"
DESIGNS = ("two_stage", "fwer")


class ReplayInProcess:
    """The `recorded` audit process's work, in this process: the replay, then the loop's scoring."""

    def __init__(self, ctx: MeasureContext, backend: AuditBackend, pool: Pool, draws: Draws) -> None:
        self.ctx, self.backend, self.pool, self.draws = ctx, backend, pool, draws

    def __call__(self, reqs: list[AuditRequest]) -> list[AuditResult]:
        return [self.audit(r) for r in reqs]

    def audit(self, req: AuditRequest) -> AuditResult:
        start = time.monotonic()
        measure.prepare_audit_dir(req)
        files = {name: req.policy_dir / spec.filename for name, spec in SURFACES.items()}
        seeds = list(self.ctx.seeds_for(req.seed_set))
        try:
            try:
                evidence = replay(req.audit_id, req.seed_set, seeds, loaded_hashes(files), self.pool, self.draws)
            except RecordedError as ex:
                raise GapError(f"audit process exited 3: recorded: {ex}") from None
            result = measure.score_evidence(req, self.ctx, evidence, time.monotonic() - start)
            return measure.with_use(result, req, self.ctx, self.backend)
        except GapError as gap:
            return measure.gap_result(req, self.backend, gap, start)


class RecordedLoopRun(LoopRun):
    """A `LoopRun` whose audits are replays of recorded audits (the pool is read once per process)."""

    def __init__(self, loaded: LoadedContract, pool: Pool) -> None:
        self.pool = pool
        super().__init__(loaded, executor=self.replay)

    def replay(self, ctx: MeasureContext, backend: AuditBackend) -> ReplayInProcess:
        """The executor: this run's draws of the pool, kept in its folder (a resume replays them)."""
        draws = Draws(self.root / "recorded_draws.json", self.loaded.contract.seed)
        return ReplayInProcess(ctx, backend, self.pool, draws)


@dataclass(frozen=True)
class Truth:
    """Each recorded set's pool mean per dimension (search seeds), and its documents."""

    names: list[str]
    documents: list[dict[str, dict[str, Any]]]
    means: dict[str, dict[str, float]]  # set name -> dimension -> mean over its recordings
    ses: dict[str, dict[str, float]]  # ... and its standard error (audits of a set are independent)
    counts: dict[str, int]

    def name_of(self, docs: dict[str, dict[str, Any]]) -> str:
        for name, d in zip(self.names, self.documents, strict=True):
            if d == docs:
                return name
        raise RuntimeError("the loop delivered a set that is not a recorded set")

    def change(self, name: str, dim: str) -> float:
        return self.means[name][dim] - self.means["start"][dim]


def audit_mean(scores: dict[str, dict[str, float]], dim: str) -> float | None:
    values = [row[dim] for row in scores.values() if dim in row]
    return float(np.mean(values)) if values else None


def pool_truth(loaded: LoadedContract, pool: Pool) -> Truth:
    c = loaded.contract
    s = c.settings(RecordedSettings)
    edits = load_catalogue(Path(s.sets))
    _, start = read_policy_dir(Path(s.start))
    have = {pool.names[i]: pool.of(i, "search") for i in pool.set_ids() if pool.of(i, "search")}
    names = [n for n in ["start", *(e.id for e in edits)] if n in have]
    docs = recorded_sets(start, edits, set(names), c.search_space.surfaces)
    means: dict[str, dict[str, float]] = {n: {} for n in names}
    ses: dict[str, dict[str, float]] = {n: {} for n in names}
    for name in names:
        for dim in c.dimensions():
            per_audit = np.array([m for a in have[name] if (m := audit_mean(a.scores, dim)) is not None])
            means[name][dim] = float(per_audit.mean()) if len(per_audit) else float("nan")
            ses[name][dim] = (
                float(per_audit.std(ddof=1) / math.sqrt(len(per_audit))) if len(per_audit) > 1 else float("nan")
            )
    return Truth(names, docs, means, ses, {n: len(have[n]) for n in names})


def admissible(truth: Truth, name: str, loaded: LoadedContract) -> bool:
    promo = loaded.contract.promotion
    return all(truth.change(name, d) <= promo.tolerance(d) for d in promo.critical_dimensions)


def oracle_target(truth: Truth, loaded: LoadedContract) -> float:
    """The best admissible set's true target change (the start's 0 if none is better)."""
    target = loaded.contract.promotion.target_dimensions[0]
    return min(truth.change(n, target) for n in truth.names if admissible(truth, n, loaded))


def with_paths(loaded: LoadedContract, data: Path) -> LoadedContract:
    """The contract with its recorded settings as absolute paths (the bench runs in a scratch folder)."""
    c = loaded.contract
    s = c.settings(RecordedSettings)
    settings = RecordedSettings(
        data=str(data.resolve()), sets=str((REPO / s.sets).resolve()), start=str(REPO / s.start)
    )
    return loaded.model_copy(update={"contract": c.with_settings(settings)})


def run_contract(loaded: LoadedContract, design: str, budget: int, run: int) -> LoadedContract:
    """The recorded world's contract for one run: its design, `budget` audits, its seed moved by `run`."""
    c = loaded.contract
    calibration = 2 * c.promotion.calibration_pairs
    gate = budget - calibration - 2 * c.budget.certify_rounds
    if gate < 2:
        raise SystemExit(f"--budget {budget} leaves the gate no audits after calibration and certification")
    data = c.model_dump()
    data["budget"] = {**data["budget"], "arm_audits": {"never": calibration, "gate": gate}, "max_audits": 4 * budget}
    data["promotion"] = {**data["promotion"], "error_design": design}
    data["seed"] = c.seed + run
    return loaded.model_copy(update={"contract": type(c).model_validate(data)})


@dataclass(frozen=True)
class RunOutcome:
    delivered: str
    final_target: float
    worse: bool
    false_keeps: int
    certified: bool | None
    keeps: int
    kept: tuple[str, ...] = ()  # the sets the gate kept (KEEP verdicts), in order, certified or not


def one_run(task: tuple[str, str, str, int, int]) -> RunOutcome:
    contract_path, data_path, design, budget, run = task
    base = with_paths(load_contract(Path(contract_path)), Path(data_path))
    pool = cached_pool(Path(data_path))
    truth = pool_truth(base, pool)
    loaded = run_contract(base, design, budget, run)
    target = loaded.contract.promotion.target_dimensions[0]
    with RecordedLoopRun(loaded, pool) as lr:
        state = run_phases(lr.rc)
        if state.phase != "done":
            raise RuntimeError(f"the loop halted on the recorded world: {state.halt_reason}")
        delivered = truth.name_of(lr.delivered("gate"))
        verdicts = [v for v in lr.rc.book.payloads("verdict", VerdictRecord) if v.arm == "gate" and v.verdict == "keep"]
        kept = tuple(truth.name_of(lr.documents(v.candidate_set)) for v in verdicts)
        false = sum(
            truth.change(truth.name_of(lr.documents(v.candidate_set)), target)
            >= truth.change(truth.name_of(lr.documents(v.parent_set)), target)
            for v in verdicts
        )
        cert = lr.certification("gate")
        return RunOutcome(
            delivered=delivered,
            final_target=truth.change(delivered, target),
            worse=truth.change(delivered, target) > 0 or not admissible(truth, delivered, loaded),
            false_keeps=int(false),
            certified=None if cert is None else cert.certified,
            keeps=lr.rc.state.arms["gate"].keeps,
            kept=kept,
        )


_POOLS: dict[Path, Pool] = {}


def cached_pool(path: Path) -> Pool:
    if path not in _POOLS:
        _POOLS[path] = load_pool(path)
    return _POOLS[path]


def row(design: str, outcomes: list[RunOutcome], oracle: float) -> dict[str, Any]:
    t = np.array([o.final_target for o in outcomes])
    certs = [o.certified for o in outcomes if o.certified is not None]
    delivered: dict[str, int] = {}
    kept: dict[str, int] = {}
    for o in outcomes:
        delivered[o.delivered] = delivered.get(o.delivered, 0) + 1
        for name in o.kept:
            kept[name] = kept.get(name, 0) + 1
    return {
        "design": design,
        "runs": len(outcomes),
        "final_target": round(float(t.mean()), 4),
        "final_target_se": round(float(t.std(ddof=1) / math.sqrt(len(t))), 4) if len(t) > 1 else None,
        "p_worse": round(float(np.mean([o.worse for o in outcomes])), 4),
        "p_any_false_keep": round(float(np.mean([o.false_keeps > 0 for o in outcomes])), 4),
        "oracle_final_target": round(oracle, 4),
        # the share of the best admissible set's improvement delivered (none to share if no set improves)
        "oracle_share": round(float(t.mean()) / oracle, 3) + 0.0 if oracle < 0 else None,  # + 0.0: no "-0.00"
        "certified_share": None if not certs else round(float(np.mean(certs)), 3),
        "keeps_per_run": round(float(np.mean([o.keeps for o in outcomes])), 3),
        "delivered": dict(sorted(delivered.items())),
        "kept": dict(sorted(kept.items())),
    }


def header(argv: list[str], runs: int, seconds: float, truth: Truth, pool_file: Path) -> str:
    def git(*args: str) -> str:
        return subprocess.run(["git", *args], capture_output=True, text=True, cwd=REPO).stdout.strip()

    dirty = " (with uncommitted changes)" if git("status", "--porcelain", "--untracked-files=no") else ""
    return (
        "# The recorded world: the product's loop on real audits of SmolLM2-135M, resampled\n\n"
        f"- command: `python -m bench.recorded {' '.join(argv)}`\n"
        f"- date: {datetime.now(UTC):%Y-%m-%d %H:%M UTC}; took {seconds:.0f} s\n"
        f"- commit: {git('rev-parse', '--short', 'HEAD')}{dirty}\n"
        f"- machine: {platform.node()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}\n"
        f"- runs: {runs} per design\n"
        f"- pool: `{pool_file.relative_to(REPO) if pool_file.is_relative_to(REPO) else pool_file}`, "
        f"usable recorded audits per set: {truth.counts}\n"
        "- REAL AUDITS, RESAMPLED: every score is from a real audit of a real model (recorded with its "
        "provenance); which recording answers which audit of a run is drawn, and a set's truth is the "
        "mean of all its recordings.\n"
    )


def truth_table(truth: Truth, loaded: LoadedContract) -> str:
    promo = loaded.contract.promotion
    dims = [*promo.target_dimensions, *promo.critical_dimensions, *promo.auxiliary_dimensions]
    lines = [
        "| set | audits | " + " | ".join(dims) + " | admissible |",
        "|---|---|" + "---|" * len(dims) + "---|",
    ]
    for n in truth.names:  # mean ± 1.96 SE over the set's recorded audits (a 95% CI)
        cells = " | ".join(f"{truth.means[n][d]:.3f} ± {1.96 * truth.ses[n][d]:.3f}" for d in dims)
        lines.append(f"| {n} | {truth.counts[n]} | {cells} | {'yes' if admissible(truth, n, loaded) else 'no'} |")
    return "\n".join(lines)


def noise_table(pool: Pool, truth: Truth, loaded: LoadedContract) -> str:
    """The shape of the real noise, per set: the spread of an audit's mean of the target, the
    spread of one seed's score across audits, the share of cells at the floor (1), the excess
    kurtosis of the audit means (0 for a normal), and the largest correlation of the target's
    audit mean with another dimension's across the set's audits."""
    c = loaded.contract
    target, others = c.promotion.target_dimensions[0], [d for d in c.dimensions()[1:]]
    lines = [
        "| set | audits | SD of an audit's mean | SD of one seed across audits | cells at 1 | excess kurtosis | largest |corr| with another dimension |",
        "|---|---|---|---|---|---|---|",
    ]
    by_name = {pool.names[i]: pool.of(i, "search") for i in pool.set_ids()}
    for name in truth.names:
        audits = by_name[name]
        means = np.array([audit_mean(a.scores, target) or np.nan for a in audits])
        seeds = sorted({s for a in audits for s in a.scores})
        cells = np.array([[a.scores.get(s, {}).get(target, np.nan) for s in seeds] for a in audits])
        per_seed = float(np.nanmean(np.nanstd(cells, axis=0, ddof=1))) if len(audits) > 1 else float("nan")
        centred = means - means.mean()
        kurt = float(np.mean(centred**4) / np.mean(centred**2) ** 2 - 3) if np.mean(centred**2) > 0 else float("nan")
        corr = []
        for d in others:
            other = np.array([audit_mean(a.scores, d) or np.nan for a in audits])
            if np.nanstd(other) > 0 and np.nanstd(means) > 0:
                corr.append(abs(float(np.corrcoef(means, other)[0, 1])))
        lines.append(
            f"| {name} | {len(audits)} | {np.std(means, ddof=1):.3f} | {per_seed:.3f} | {np.mean(cells == 1):.2f} "
            f"| {kurt:.2f} | {max(corr) if corr else 0.0:.2f} |"
        )
    return "\n".join(lines)


def render(rows: list[dict[str, Any]], head: str, truth: Truth, loaded: LoadedContract, budget: int, noise: str) -> str:
    table = [
        "| design | runs | final_target (± SE) | p_worse | p_any_false_keep | oracle_final_target | share of oracle "
        "| certified_share | KEEPs/run |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        cert = "—" if r["certified_share"] is None else f"{r['certified_share']:.2f}"
        share = "—" if r["oracle_share"] is None else f"{r['oracle_share']:.2f}"
        se = "—" if r["final_target_se"] is None else f"{r['final_target_se']:.3f}"
        table.append(
            f"| {r['design']} | {r['runs']} | {r['final_target']:+.3f} ± {se} "
            f"| {r['p_worse']:.3f} | {r['p_any_false_keep']:.3f} | {r['oracle_final_target']:+.3f} | {share} | {cert} "
            f"| {r['keeps_per_run']:.3f} |"
        )
    delivered = [f"- {r['design']}: {r['delivered']}" for r in rows]
    kept = [f"- {r['design']}: {r['kept'] or 'none'}" for r in rows]
    return "\n".join(
        [
            head,
            f"Each run: the recorded world's contract (`data/recorded/program.md`) with {budget} audits "
            "(the never arm's calibration, the gate arm, its certification), arms never and gate.",
            "",
            "## The truth: each set's pool mean (all its recorded audits, search seeds), ± 1.96 SE",
            "",
            truth_table(truth, loaded),
            "",
            f"## The real noise of `{loaded.contract.promotion.target_dimensions[0]}` (per set, over its recorded audits)",
            "",
            noise,
            "",
            "## What the loop delivered (the gate arm's champion after certification, scored by the pool truth)",
            "",
            "<!-- figures: docs/results/recorded.md -->",
            *table,
            "<!-- /figures -->",
            "",
            "Sets delivered (runs):",
            "",
            *delivered,
            "",
            "Sets the gate kept (KEEP verdicts over all runs, before certification):",
            "",
            *kept,
            "",
        ]
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--budget", type=int, default=400, help="audits per run: calibration, gate and certification")
    ap.add_argument("--out", type=Path, default=REPO / "docs" / "results")
    ap.add_argument("--data", type=Path, default=REPO / "data" / "recorded" / "audits.jsonl")
    ap.add_argument("--contract", type=Path, default=CONTRACT)
    ap.add_argument("--designs", nargs="+", default=list(DESIGNS), choices=DESIGNS)
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--name", default="recorded")
    args = ap.parse_args()
    started = time.monotonic()
    base = with_paths(load_contract(args.contract), args.data)
    truth = pool_truth(base, load_pool(args.data))
    rows = []
    for design in args.designs:
        tasks = [(str(args.contract), str(args.data), design, args.budget, r) for r in range(args.runs)]
        if args.jobs > 1:
            with mp.get_context("spawn").Pool(args.jobs) as pool:
                outcomes = pool.map(one_run, tasks)
        else:
            outcomes = [one_run(t) for t in tasks]
        rows.append(row(design, outcomes, oracle_target(truth, base)) | {"per_run": [asdict(o) for o in outcomes]})
    head = header(sys.argv[1:], args.runs, time.monotonic() - started, truth, args.data.resolve())
    text = render(rows, head, truth, base, args.budget, noise_table(load_pool(args.data), truth, base))
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.md").write_text(text)
    data = {"command": head.splitlines()[2], "truth": truth.means, "counts": truth.counts, "rows": rows}
    (args.out / f"{args.name}.json").write_text(json.dumps(data, indent=1))
    print(text)


if __name__ == "__main__":
    main()
