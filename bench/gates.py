"""Benchmark of KEEP/REVERT gates on the simulated audit world (docs/statistics.md §4).

Runs the single-audit margin gate, a GEODE-style gate, a fixed-K replicate gate, the loop's
own gate (gate.py, as the loop calls it), a random arm and an oracle side by side on the same
worlds and candidate sequences, for each drift scenario, noise correlation and budget; then
the type-I validity table of the confirmation test and an acceptance check. All figures are
SIMULATED: they score the statistics on a calibrated model, not any real model or policy.

    python -m bench.gates                 # default: 60 runs per cell, a few minutes on 2 cores
    python -m bench.gates --full          # 1000 runs per cell and 2000 validity replicates
    python -m bench.gates --runs 20 --budgets 300 --variants   # quick look, extra SPG variants
"""

from __future__ import annotations

import argparse
import json
import math
import multiprocessing as mp
import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import ValidationError

from bench.looprun import LoopRun
from bench.manytoone import ManyToOneSettings, run_many_to_one, slots_of
from bench.metrics import (
    KindRow,
    Row,
    WaldPoint,
    against_section,
    aggregate,
    by_kind,
    format_by_kind,
    format_table,
    provenance,
)
from bench.posterior import PosteriorJudge, PosteriorSettings, Prior, PriorView
from bench.procedures import PROCEDURES, Procedure, audit_mean
from bench.proposers import OracleJudge, grid_contract, promotion_overrides, revalidated
from bench.simrun import RunSummary, SimRun, candidate_stream, summarize
from bench.validity import ValidityRow, format_validity, validity_table
from bench.vectorloop import VectorWorld, loop_summary
from sil.contract import prepare
from sil.contract.schema import LoadedContract, Promotion, load_contract
from sil.contract.simparams import SimParams
from sil.stats.judges import GateJudge, Judge
from sil_runtime.sim.world import World

REPO = Path(__file__).resolve().parents[1]
SEED = 20250601
# Worlds: overrides of the contract's sim section (SimParams fields; effect_mixture fields
# under "effect_mixture"). The first four are the drift scenarios; the rest the robustness grid.
WORLDS: dict[str, dict[str, Any]] = {
    "none": {"drift_sd": 0.0},
    "calibrated": {},
    "up trend": {"drift_trend": 0.005},
    "down trend": {"drift_trend": -0.005},
    "heavy tails": {"noise_df": 2.2, "noise_scale": 1.8},
    "heavy missing": {"p_missing_cell": 0.15, "p_missing_dimension": 0.08},
    "mnar": {"missing_mode": "mnar", "mnar_slope": 0.15},
    "trade-offs": {
        "effect_mixture": {
            "null": 0.38,
            "harms_target": 0.2,
            "helps_target": 0.1,
            "helps_target_harms_critical": 0.25,
            "harms_critical_only": 0.07,
            "tradeoff_harm": (0.3, 0.8),
        }
    },
    "tiny effects": {"effect_mixture": {"help_target": (0.1, 0.5), "harm_target": (0.05, 0.5)}},
    "heterogeneous": {"effect_heterogeneity": 1.5, "seed_difficulty_sd": 2.5},
}
DRIFT_WORLDS = ("none", "calibrated", "up trend", "down trend")
GRID_WORLDS = (
    "calibrated",
    "heavy tails",
    "heavy missing",
    "mnar",
    "up trend",
    "down trend",
    "trade-offs",
    "tiny effects",
    "heterogeneous",
)
CORRELATIONS = (0.0, 0.5)
BUDGETS = (300, 600)  # the loop's calibration and 70-round certification alone take 164 audits
DEFAULT_RUNS, FULL_RUNS = 60, 1000
DEFAULT_VALIDITY, FULL_VALIDITY = 500, 2000
CONFIRMATIONS_PER_300 = 24  # J_max scales with the budget (12, 24, 48)
CERTIFY_AUDITS = 40
METHODS = ("single_audit", "geode", "fixed_k", "loop_gate", "random", "oracle")
VARIANTS = ("loop_gate_elond", "loop_gate_certified", "oracle_certified")
# Posterior search references (bench/posterior.py): the world's own prior, or one learned from the run
POSTERIORS: dict[str, Prior] = {"posterior_true": "true", "posterior_learned": "learned"}
# keep_p, drop_p, max_rounds, harm_slack per reference, each tuned on worlds 100-139 (--first-run 100)
POSTERIOR_RULES = {"posterior_true": (0.7, 0.1, 24, 0.3), "posterior_learned": (0.5, 0.1, 8, 0.3)}
# Gate variants as promotion overrides. "before" is the gate as it was before the harm
# tolerance drove the margin (NI margin 0.5) and before the default changes; the bench still
# scores harm with the contract's tolerance.
OVERRIDES: dict[str, dict[str, object]] = {
    "loop_gate_before": {"harm_tolerance": 0.5, "futility_effect": 0.5, "min_seed_coverage": 0.7},
    "loop_gate_trim": {"target_trim": 0.2},
    "loop_gate_bound": {"missing_policy": "bound"},
    # the default before issue 10 part 4: K = 16 confirmation rounds, no alpha recycling
    "loop_gate_k16": {"replicate_k": 16, "alpha_recycle": False},
    # today's run-level FWER design with the final certification, and the two-stage design
    "loop_gate_fwer": {"error_design": "fwer", "alpha_noninferiority": 0.2},  # program.md before issue 23
    "loop_gate_two_stage": {"error_design": "two_stage"},
}
LEVERS = ("loop_gate_m2o1", "loop_gate_m2o2", "loop_gate_m2o3", "loop_gate_m2o4")  # many-to-one, 1-4 slots
# Acceptance (issue 10): final true target change of the loop's gate at budget 300.
TARGET_GAIN = {0.0: -0.8, 0.5: -1.0}
SD_WORLDS, SD_PAIRS = 40, 50
WALD_EFFECTS = (0.3, 0.5, 0.8)


@dataclass(frozen=True)
class Cell:
    world: str
    rho: float
    budget: int

    @property
    def label(self) -> str:
        return f"world={self.world}, rho={self.rho}, budget={self.budget}"


def world_params(base: SimParams, world: str, update: dict[str, object]) -> SimParams:
    """The contract's sim section with one named world's overrides (validated)."""
    if world not in WORLDS:
        raise SystemExit(f"unknown world {world!r}; choose from {', '.join(WORLDS)}")
    knobs = dict(WORLDS[world])
    mixture = knobs.pop("effect_mixture", None)
    data = {**base.model_dump(), **knobs, **update}
    if mixture is not None:
        data["effect_mixture"] = {**base.effect_mixture.model_dump(), **mixture}
    return SimParams.model_validate(data)


@dataclass(frozen=True)
class GridResult:
    """Per cell: the method rows, the A/A paired-round SD, and where each method's audits went."""

    tables: dict[Cell, list[Row]]
    sds: dict[Cell, float]
    kinds: dict[Cell, list[KindRow]]


@dataclass(frozen=True)
class Setup:
    """Everything a worker needs: base world parameters, dimensions and the loop's promotion."""

    params: SimParams
    dims: tuple[str, ...]
    n_seeds: int
    promotion: Promotion
    methods: tuple[str, ...]
    certify_audits: int = CERTIFY_AUDITS  # reserved for the final certification (2 per round)
    certify_horizon: str = "fixed"  # the contract's budget.certify_horizon: fixed, or sized by the search
    certify_power: float = 0.8
    posterior_rule: tuple[float, float, int, float] | None = None  # None: POSTERIOR_RULES
    loaded: LoadedContract | None = None  # the contract the loop's runs start from

    def cell_params(self, cell: Cell, run: int) -> SimParams:
        return world_params(self.params, cell.world, {"pair_correlation": cell.rho, "world_seed": SEED + run})

    def cell_promotion(self, cell: Cell, mode: str | None = None) -> Promotion:
        j_max = max(6, round(CONFIRMATIONS_PER_300 * cell.budget / 300))
        update: dict[str, object] = {"max_confirmations": j_max}
        if mode:  # e-LOND is a run-level control of the FWER design's confirmations
            update["error_control"] = mode
            update["error_design"] = "fwer"
        return self.promotion.model_copy(update=update)


def load_setup(
    contract: Path, methods: Sequence[str], with_aux: bool, overrides: dict[str, object] | None = None
) -> Setup:
    """World parameters and gate settings from the contract; dims = target + critical (+aux)."""
    c = load_contract(contract).contract
    try:
        sim = c.settings(SimParams)
    except ValidationError:
        raise SystemExit(f"{contract} has no sim section: the benchmark needs the sim parameters") from None
    p = c.promotion
    aux = p.auxiliary_dimensions if with_aux else []
    dims = (p.target_dimensions[0], *p.critical_dimensions, *aux)
    update = {**(overrides or {}), "target_dimensions": [dims[0]], "auxiliary_dimensions": aux}
    try:
        promo = Promotion.model_validate({**p.model_dump(), **update})
    except ValidationError as ex:
        raise SystemExit(f"invalid promotion override: {ex}") from None
    certify = 2 * c.budget.certify_rounds or CERTIFY_AUDITS
    b = c.budget
    return Setup(
        sim,
        dims,
        len(prepare.load_seeds()),
        promo,
        tuple(methods),
        certify,
        b.certify_horizon,
        b.certify_power,
        loaded=load_contract(contract),
    )


def simulate_run(setup: Setup, cell: Cell, run: int) -> dict[str, RunSummary]:
    """All procedures on one world and one candidate sequence: the loop's in the product's loop
    (bench/vectorloop.py), the others on a `SimRun`."""
    world = World(setup.cell_params(cell, run), setup.dims, setup.n_seeds)
    promo = setup.promotion
    cand_rng = np.random.default_rng(np.random.SeedSequence([SEED, run, 1]))
    count = max(400, cell.budget + 100)
    candidates = candidate_stream(world, cand_rng, count, setup.dims[0], promo.critical_dimensions)
    critical_idx = [setup.dims.index(d) for d in promo.critical_dimensions]
    tolerance = np.array([promo.tolerance(d) for d in promo.critical_dimensions])
    out = {}
    for method in setup.methods:
        plan = loop_plan(setup, cell, method)
        if plan is not None:
            out[method] = in_loop(setup, cell, run, plan, VectorWorld(world, candidates, critical_idx))
            continue
        run_state = SimRun(world, candidates, cell.budget, method, critical_idx, tolerance)
        procedure, settings = _procedure(setup, cell, method, run)
        procedure(run_state, settings)
        out[method] = summarize(run_state)
    return out


@dataclass(frozen=True)
class LoopPlan:
    """A method the product's loop runs: the gate arm's promotion and judge, its certification."""

    method: str
    promotion: Promotion
    certify_rounds: int
    posterior: PosteriorSettings | None = None


def loop_plan(setup: Setup, cell: Cell, method: str) -> LoopPlan | None:
    """The loop's run of `method`, or None for a procedure that is not the loop's."""
    promo = setup.cell_promotion(cell)
    rounds = setup.certify_audits // 2
    if method in ("loop_gate", "loop_gate_certified", "oracle_certified") or method in OVERRIDES:
        promo = Promotion.model_validate({**promo.model_dump(), **OVERRIDES.get(method, {})})
        # the two-stage design's guarantee is its certification: the loop always runs it
        certify = method != "loop_gate" and method not in OVERRIDES or promo.error_design == "two_stage"
        return LoopPlan(method, promo, rounds if certify else 0)
    if method == "loop_gate_elond":
        return LoopPlan(method, setup.cell_promotion(cell, "elond"), 0)
    if method in POSTERIORS:
        keep_p, drop_p, max_rounds, slack = setup.posterior_rule or POSTERIOR_RULES[method]
        rule = PosteriorSettings(
            promo, setup.certify_audits, POSTERIORS[method], keep_p, drop_p, int(max_rounds), slack
        )
        return LoopPlan(method, promo, rounds, rule)
    return None


def in_loop(setup: Setup, cell: Cell, run: int, plan: LoopPlan, world: VectorWorld) -> RunSummary:
    """One run of the product's loop on this world: the contract with the cell's world, the
    plan's promotion and certification, the gate arm alone after the never arm's calibration."""
    assert setup.loaded is not None, "Setup.loaded: the loop's runs need the contract"
    c = setup.loaded.contract
    params = setup.cell_params(cell, run).model_copy(update={"p_crash": 0.0})  # the copy's world had no crashes
    loaded = revalidated(
        setup.loaded,
        {
            "promotion": plan.promotion.model_dump(),
            "budget": {
                **c.budget.model_dump(),
                "certify_rounds": plan.certify_rounds,
                "certify_horizon": setup.certify_horizon,
                "certify_power": setup.certify_power,
            },
            "measurement": {**c.measurement.model_dump(), "certify_on": "search"},
            "backend_settings": params.model_dump(mode="json"),
            "seed": c.seed + run,
        },
    )
    return loop_summary(grid_contract(loaded, cell.budget, "gate"), world, judge_maker(plan, world), plan.method)


def judge_maker(plan: LoopPlan, world: VectorWorld) -> Callable[[LoopRun], Judge]:
    """The gate arm's judge for the plan: the contract's gate, the oracle search, or a posterior."""

    def make(lr: LoopRun) -> Judge:
        if plan.method == "oracle_certified":
            return OracleJudge(lr, world, harmless=True)
        if plan.posterior is not None:

            def theta() -> np.ndarray:
                return world.theta(lr.rc.store.documents(lr.rc.state.arms["gate"].champion))

            return PosteriorJudge(PriorView(world, theta), plan.posterior)
        return GateJudge(lr.rc.promotion)

    return make


def delivered_alpha(setup: Setup, cell: Cell, method: str) -> float | None:
    """alpha_certify for a method that runs the two-stage design with its certification (its
    guarantee is on the delivered champion), else None (held to the FWER criterion)."""
    plan = loop_plan(setup, cell, method)
    if plan is not None and plan.certify_rounds:
        return plan.promotion.alpha_certify if plan.promotion.error_design == "two_stage" else None
    return None


def _procedure(setup: Setup, cell: Cell, method: str, run: int) -> tuple[Procedure, object]:
    if method in LEVERS:
        return run_many_to_one, ManyToOneSettings(setup.cell_promotion(cell), slots_of(method))
    if method == "random":
        return PROCEDURES["random"], np.random.default_rng(np.random.SeedSequence([SEED, run, 2]))
    return PROCEDURES[method], None


def paired_sd(setup: Setup, cell: Cell) -> float:
    """SD of one A/A paired round's target statistic in this cell (for the Wald bound)."""
    diffs = []
    for w in range(SD_WORLDS):
        world = World(setup.cell_params(cell, 10_000 + w), setup.dims, setup.n_seeds)
        run = SimRun(world, [], 10**6, "sd", [])
        for _ in range(SD_PAIRS):
            a, b = run.audit_pair(run.theta, run.theta)
            diffs.append(audit_mean(a - b)[0])
            run.used = (run.used + 7) % cell.budget  # spread ticks over the run
    return float(np.nanstd(diffs, ddof=1))


def _work(task: tuple[Setup, Cell, list[int]]) -> tuple[Cell, list[dict[str, RunSummary]]]:
    setup, cell, runs = task
    return cell, [simulate_run(setup, cell, r) for r in runs]


def _tasks(setup: Setup, cells: Sequence[Cell], runs: range, chunk: int) -> Iterator[tuple[Setup, Cell, list[int]]]:
    for cell in sorted(cells, key=lambda c: -c.budget):  # longest first balances the workers
        for start in range(runs.start, runs.stop, chunk):
            yield setup, cell, list(range(start, min(runs.stop, start + chunk)))


def refuse_unpayable(setup: Setup, cells: Sequence[Cell]) -> None:
    """SystemExit before any run when a cell's budget cannot pay a loop method's calibration and
    certification and leave its gate arm a paired round."""
    calibration = 2 * setup.promotion.calibration_pairs
    for cell in cells:
        for method in setup.methods:
            plan = loop_plan(setup, cell, method)
            if plan is not None and cell.budget - calibration - 2 * plan.certify_rounds < 2:
                raise SystemExit(
                    f"--budgets {cell.budget} cannot pay {method}'s calibration ({calibration} audits) and "
                    f"certification ({2 * plan.certify_rounds}) with a round left: raise the budget, or lower "
                    "the certification with --certify-rounds N"
                )


def run_grid(setup: Setup, cells: Sequence[Cell], runs: int, jobs: int, first_run: int = 0) -> GridResult:
    """`runs` runs per cell, worlds first_run .. first_run + runs - 1."""
    refuse_unpayable(setup, cells)
    results: dict[Cell, list[dict[str, RunSummary]]] = {c: [] for c in cells}
    span = range(first_run, first_run + runs)
    tasks = list(_tasks(setup, cells, span, chunk=max(1, min(25, runs // 4 or 1))))
    if jobs > 1:
        with mp.get_context("fork").Pool(jobs) as pool:
            for cell, out in pool.imap_unordered(_work, tasks):
                results[cell].extend(out)
    else:
        for task in tasks:
            cell, out = _work(task)
            results[cell].extend(out)
    grid = GridResult({}, {}, {})
    for cell in cells:
        sd = paired_sd(setup, cell)
        promo = setup.cell_promotion(cell)
        design = (promo.futility_effect, promo.replicate_k)
        grid.tables[cell] = [
            aggregate(m, [r[m] for r in results[cell]], sd, design, delivered_alpha(setup, cell, m))
            for m in setup.methods
        ]
        grid.kinds[cell] = [k for m in setup.methods for k in by_kind(m, [r[m] for r in results[cell]])]
        grid.sds[cell] = sd
    return grid


def wald_reference(setup: Setup, cell: Cell, sd: float) -> str:
    """Wald's bound at the useful operating point: alpha per test = alpha_run / J_max, beta 0.2."""
    promo = setup.cell_promotion(cell)
    alpha = promo.alpha_run / promo.max_confirmations
    point = WaldPoint(alpha, 0.2, promo.futility_effect, 10**6)  # uncapped: the ideal test
    cells = ", ".join(f"{e} -> {point.audits(-e, True, sd):.0f}" for e in WALD_EFFECTS)
    null = point.audits(0.0, False, sd)
    return (
        f"Wald bound (alpha per test {alpha:.4f}, beta 0.2, paired-round SD {sd:.2f}): audits to KEEP "
        f"an improvement of {cells}; to REVERT a null vs d = {promo.futility_effect}: {null:.0f}"
    )


def acceptance(tables: dict[Cell, list[Row]], validity: Sequence[ValidityRow], alpha_run: float) -> list[str]:
    """The issue's acceptance checks, evaluated on this run's figures."""
    lines = []
    for cell, rows in tables.items():
        by = {r.method: r for r in rows}
        if "loop_gate" not in by:
            continue
        ok = by["loop_gate"].admissible(alpha_run)
        others = [m for m in ("single_audit", "geode") if m in by]
        refuted = all(not by[m].admissible(alpha_run) for m in others)
        line = (
            f"{cell.label}: loop gate admissible={'yes' if ok else 'NO'}"
            f" ({by['loop_gate'].criterion(alpha_run)});"
            f" single-audit/GEODE inadmissible={'yes' if refuted else 'NO'}"
        )
        if cell.budget == 300 and cell.world == "calibrated":
            goal = TARGET_GAIN[cell.rho]
            gain = by["loop_gate"].final_target
            line += f"; final dT {gain:+.3f} <= {goal} {'yes' if gain <= goal else 'NO'}"
        lines.append(line)
    bad = [f"{r.scenario} a={r.alpha}" for r in validity if not r.within_mc_error]
    lines.append("type-I within MC error of nominal: " + ("yes" if not bad else "NO: " + ", ".join(bad)))
    return lines


def design_line(promo: Promotion, certify_audits: int, horizon: str = "fixed", power: float = 0.8) -> str:
    """The loop gate's error design in one phrase."""
    if promo.error_design == "two_stage":
        held = (
            f"up to {certify_audits} audits held back, sized by the search for power {power}"
            if horizon == "search"
            else f"{certify_audits} audits reserved"
        )
        return (
            f"two-stage design (search: each confirmation at alpha_search {promo.alpha_search}; "
            f"certification of the delivered champion at alpha_certify {promo.alpha_certify}, {held})"
        )
    return f"alpha_run {promo.alpha_run} ({promo.error_control})"


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--full", action="store_true", help=f"{FULL_RUNS} runs per cell")
    ap.add_argument("--runs", type=int, help=f"runs per cell (default {DEFAULT_RUNS})")
    ap.add_argument(
        "--first-run", type=int, default=0, help="world of the first run (tune on worlds apart from the reported 0..)"
    )
    ap.add_argument("--validity-reps", type=int, help="null replicates for the type-I table")
    ap.add_argument("--budgets", type=int, nargs="+", default=list(BUDGETS))
    ap.add_argument(
        "--worlds",
        nargs="+",
        default=list(DRIFT_WORLDS),
        help=f"worlds to run ({', '.join(WORLDS)}), or 'grid' for the robustness grid",
    )
    ap.add_argument("--rhos", type=float, nargs="+", default=list(CORRELATIONS))
    ap.add_argument("--variants", action="store_true", help="add e-LOND and certified loop gates")
    ap.add_argument(
        "--methods",
        nargs="+",
        choices=METHODS + VARIANTS + tuple(POSTERIORS) + LEVERS + tuple(OVERRIDES),
        help="run only these",
    )
    ap.add_argument(
        "--posterior-rule",
        type=float,
        nargs=4,
        metavar=("KEEP_P", "DROP_P", "MAX_ROUNDS", "HARM_SLACK"),
        help=f"the posterior references' decision rule (default, per reference: {POSTERIOR_RULES})",
    )
    ap.add_argument("--certify-rounds", type=int, help="certification rounds (default: the contract's, or 20)")
    ap.add_argument(
        "--certify-horizon",
        choices=("fixed", "search"),
        help="budget.certify_horizon: the whole reserve, or sized by the search (default: the contract's)",
    )
    ap.add_argument("--certify-power", type=float, help="budget.certify_power (default: the contract's)")
    ap.add_argument("--aux", action="store_true", help="add the contract's auxiliary dimensions")
    ap.add_argument("--jobs", type=int, default=min(2, os.cpu_count() or 1))
    ap.add_argument("--contract", type=Path, default=REPO / "program.md")
    ap.add_argument(
        "--set",
        nargs="+",
        default=[],
        metavar="FIELD=VALUE",
        help="override promotion settings of the loop's gate, e.g. critical_margin=0.4",
    )
    ap.add_argument(
        "--by-kind", action="store_true", help="also show where each method's audits went, per candidate type"
    )
    ap.add_argument("--out", type=Path, help="also write <out>/<name>.md and <name>.json")
    ap.add_argument("--previous", type=Path, help="an earlier results .json: say how far each row moved from it")
    ap.add_argument("--why", help="with --previous: what changed since the earlier file, said beside the moves")
    ap.add_argument("--name", default="gates", help="file stem of the --out files (default gates)")
    return ap


def setup_from_args(args: argparse.Namespace) -> Setup:
    """The contract's setup with the command line's methods, overrides and certification settings."""
    methods = tuple(args.methods or METHODS + (VARIANTS if args.variants else ()))
    setup = load_setup(args.contract, methods, args.aux, promotion_overrides(args.set))
    if args.certify_rounds is not None:
        setup = replace(setup, certify_audits=2 * args.certify_rounds)
    if args.certify_horizon is not None:
        setup = replace(setup, certify_horizon=args.certify_horizon)
    if args.certify_power is not None:
        setup = replace(setup, certify_power=args.certify_power)
    if args.posterior_rule is not None:
        keep_p, drop_p, rounds, slack = args.posterior_rule
        if not (0 <= drop_p < keep_p <= 1 and rounds >= 1 and rounds == int(rounds) and slack >= 0):
            raise SystemExit(
                "--posterior-rule needs 0 <= DROP_P < KEEP_P <= 1, a whole MAX_ROUNDS >= 1 and HARM_SLACK >= 0"
            )
        setup = replace(setup, posterior_rule=(keep_p, drop_p, int(rounds), slack))
    return setup


def main(argv: Sequence[str] | None = None) -> None:
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.why and not args.previous:
        parser.error("--why says why figures moved from an earlier file: give that file with --previous")
    before = previous_cells(args.previous) if args.previous else None  # read before the output overwrites it
    runs = args.runs or (FULL_RUNS if args.full else DEFAULT_RUNS)
    reps = args.validity_reps or (FULL_VALIDITY if args.full else DEFAULT_VALIDITY)
    if runs < 2 or reps < 1 or args.first_run < 0:
        raise SystemExit("--runs must be >= 2, --validity-reps >= 1 and --first-run >= 0")
    setup = setup_from_args(args)
    alpha_run = setup.promotion.alpha_run
    worlds = [w for name in args.worlds for w in (GRID_WORLDS if name == "grid" else (name,))]
    for name in worlds:
        world_params(setup.params, name, {})  # an unknown world or bad knob fails before any run
    cells = [Cell(w, r, b) for w in worlds for r in args.rhos for b in args.budgets]
    start = time.monotonic()
    out = [
        f"# Gate benchmark (SIMULATED world; {runs} runs per cell{_from(args.first_run)}, seed {SEED})",
        f"dims: {', '.join(setup.dims)}; seeds per audit: {setup.n_seeds}; "
        f"loop gate: {setup.promotion.gate}, {design_line(setup.promotion, setup.certify_audits, setup.certify_horizon, setup.certify_power)}, "
        f"K = {setup.promotion.replicate_k}, J_max = 24 * budget / 300",
        "",
    ]
    print("\n".join(out), flush=True)
    grid = run_grid(setup, cells, runs, args.jobs, args.first_run)
    tables = grid.tables
    for cell in cells:
        block = f"## {cell.label}\n\n{format_table(tables[cell], alpha_run)}\n\n{wald_reference(setup, cell, grid.sds[cell])}\n"
        if args.by_kind:
            block += f"\nWhere the candidate audits went:\n\n{format_by_kind(grid.kinds[cell])}\n"
        print(block, flush=True)
        out.append(block)
    validity = validity_table(setup.params, setup.dims, setup.n_seeds, setup.promotion, reps, SEED)
    block = (
        f"## Type-I of the confirmation test (pure null, target leg only, "
        f"{setup.promotion.calibration_pairs} A/A pairs, K = 12, {reps} replicates)\n\n"
        f"{format_validity(validity)}\n"
    )
    print(block)
    out.append(block)
    if before is not None:
        out.append(against_section(args.previous, args.why, before, moved_rows(tables)))
        print(out[-1])
    checks = acceptance(tables, validity, alpha_run)
    block = "## Acceptance checks\n\n" + "\n".join(f"- {line}" for line in checks)
    block += f"\n\n(elapsed {time.monotonic() - start:.0f} s, {args.jobs} worker(s))"
    print(block)
    out.append(block)
    if args.out:
        argv_used = list(argv) if argv is not None else sys.argv[1:]
        head = provenance(["bench.gates", *argv_used], f"{runs} per cell", time.monotonic() - start)
        _write(args.out, "\n".join([out[0], "", head, *out[1:]]), grid, validity, args.name)


def cell_key(world: str, rho: float, budget: int) -> str:
    return f"{world}, rho {float(rho):g}, budget {budget}"


def previous_cells(path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """The rows of an earlier `bench.gates` results file (.json), by (cell, method), in the
    terms `bench.metrics.moved_table` compares."""
    try:
        cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    except (OSError, ValueError, KeyError) as ex:
        raise SystemExit(f"--previous {path}: not a bench.gates results file ({ex})") from None
    return {
        (cell_key(c["world"], c["rho"], c["budget"]), r["method"]): moved_terms(r) for c in cells for r in c["rows"]
    }


def moved_terms(row: dict[str, Any]) -> dict[str, Any]:
    keys = {"final_target": "final_target", "final_target_se": "final_target_se", "p_final_worse": "p_worse"}
    return {**{k: row[v] for k, v in keys.items()}, "keeps_per_run": row["keeps"]}


def moved_rows(tables: dict[Cell, list[Row]]) -> dict[tuple[str, str], dict[str, Any]]:
    return {
        (cell_key(c.world, c.rho, c.budget), r.method): moved_terms(asdict(r))
        for c, rows in tables.items()
        for r in rows
    }


def _from(first_run: int) -> str:
    return f" from world {first_run}" if first_run else ""


def _write(folder: Path, text: str, grid: GridResult, validity: Sequence[ValidityRow], name: str = "gates") -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / f"{name}.md").write_text(text + "\n", encoding="utf-8")
    data = {
        "cells": [
            {**asdict(c), "rows": [asdict(r) for r in rows], "by_kind": [asdict(k) for k in grid.kinds[c]]}
            for c, rows in grid.tables.items()
        ],
        "validity": [asdict(v) for v in validity],
    }
    (folder / f"{name}.json").write_text(
        json.dumps(data, indent=1, default=lambda x: None if isinstance(x, float) and math.isnan(x) else x),
        encoding="utf-8",
    )


if __name__ == "__main__":
    main()
