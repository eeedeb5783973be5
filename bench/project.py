"""A project, not a run: a simulated user who runs R times on one measurement, revising each time.

Each simulated project draws a mechanisms world (per-seed hidden mechanisms: a policy's effect
differs from seed to seed) and runs the product's own loop (`bench.looprun`, `sil run`'s phases
and certification, audits computed in-process) up to R times in one project folder, so every
certification is spent in the project's holdout ledger as `sil run`'s are. Run i starts from
the champion the last run delivered (the starting policy if none was), with a new candidate
stream (its run seed) and fresh audits of the same world (its own `sim.noise_seed`). With the project budget (`certification.project_alpha`), the user stops
when `sil check` would refuse the next run (`sil.exec.holdoutcheck.next_spend`). A run that
halts (the simulated runtime crashed in `stop.max_consecutive_gaps` audits in a row) delivers
nothing, as for a user, and the project goes on with the next run; the rows count such runs.

Per design (budget none | project, claim heldout | fresh) and per R = 1..--revisions:
P(some champion delivered by the first R runs is worse than its run's start on the target, or
beyond the harm tolerance on a critical dimension) on seeds the project never audited
(`p_any_worse_fresh_seeds`: the mean over --fresh-seeds new seeds of the world) and on the
held-out seeds themselves (`p_any_worse_heldout`), and the target change delivered after R runs
on fresh seeds (`final_target_fresh_seeds`, points, negative = better). Simulated figures.

    python -m bench.project --runs N --revisions R --out DIR [--jobs J]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench.looprun import POLICIES, SCRATCH, LoopRun
from bench.metrics import provenance
from bench.proposers import BenchWorld, origin_documents, revalidated, world_contract
from sil.base.fsutil import atomic_write_text
from sil.contract import prepare
from sil.contract.schema import LoadedContract, load_contract
from sil.contract.simparams import SimParams
from sil.exec.holdoutcheck import next_spend
from sil.exec.measure import MeasureContext
from sil.run.train import PHASES, run_phases

ROOT = Path(__file__).resolve().parents[1]
CONTRACT = ROOT / "examples" / "program-mutator-offline.md"
DESIGNS = (("none", "heldout"), ("none", "fresh"), ("project", "heldout"), ("project", "fresh"))
RUN_SEED_STEP = 7919  # run i of a project draws its candidates from seed + i * step
# Worlds: overrides of the contract's sim section and promotion rules. `stress` is the reuse
# problem's stress test: no mechanisms to find, every edit a small effect from the candidate mixture
# (bench.gates' "tiny effects" ranges, in the runtime's own landscape), strongly seed-specific, and a
# permissive search (no screen, a small design effect, alpha_search 0.45), so most runs hand the
# certification a champion whose true change is near zero either way: the certification alone
# decides, run after run, on the same held-out seeds.
WORLDS: dict[str, dict[str, dict[str, Any]]] = {
    "mechanisms": {"sim": {}, "promotion": {}},
    "stress": {
        "sim": {
            "landscape": "hashed",
            "hashed_scale": 1.0,
            "effect_heterogeneity": 1.0,
            "effect_mixture": {"help_target": (0.1, 0.5), "harm_target": (0.05, 0.5)},
        },
        "promotion": {"alpha_search": 0.45, "screen_sd": 0.0, "futility_effect": 0.3},
    },
}


@dataclass(frozen=True)
class Delivery:
    """One run of a project: whether it delivered a change, and how that change truly does."""

    delivered: bool
    refused: bool  # `sil check` would have refused the run: the held-out set's budget is spent
    worse_fresh: bool
    worse_heldout: bool
    target_fresh: float  # the project's delivered policy after this run minus the origin, fresh seeds
    certifying: bool = False  # the search handed the certification a champion (it ran rounds)
    halted: bool = False  # the run halted (e.g. consecutive audit gaps): it delivered nothing


class ProjectWorld(BenchWorld):
    """The world's truth on the search seeds, the held-out seeds and `n_fresh` seeds never audited."""

    def __init__(self, loaded: LoadedContract, n_fresh: int) -> None:
        c = loaded.contract
        root = ROOT / c.measurement.seed_library
        search = [s.id for s in prepare.load_seeds(root)]
        heldout = [s.id for s in prepare.load_heldout(root)]
        fresh = [f"fresh-{i:04d}" for i in range(n_fresh)]
        rubric = {d.name: d.tier for d in prepare.load_rubric(root)}
        super().__init__(loaded, search + heldout + fresh, rubric, n_search=len(search))
        self.promotion = c.promotion
        self.heldout_rows = slice(len(search), len(search) + len(heldout))
        self.fresh_rows = slice(len(search) + len(heldout), len(search) + len(heldout) + n_fresh)

    def truth_on(self, docs: dict[str, dict[str, Any]], rows: slice) -> np.ndarray:
        per_seed = self.world.expected_score_at(self.world._base + self.theta(docs))
        mean: np.ndarray = per_seed[rows].mean(axis=0)
        return mean

    def worse(self, docs: dict[str, dict[str, Any]], start: dict[str, dict[str, Any]], rows: slice) -> bool:
        """Worse than `start` on the target, or beyond a critical dimension's harm tolerance."""
        change = self.truth_on(docs, rows) - self.truth_on(start, rows)
        promo = self.promotion
        beyond = any(change[self.dims.index(c)] > promo.tolerance(c) for c in self.critical)
        return bool(change[self.dims.index(self.target)] > 0 or beyond)


WORLD_NOTES = {
    "mechanisms": "",
    "stress": (
        "World: the stress test of reuse. The hashed landscape (no mechanisms), each edit's effect from the "
        "candidate mixture with small ranges (helps the target by a latent U(0.1, 0.5), harms it by U(0.05, 0.5), "
        "some harm a critical dimension), spread from seed to seed (`effect_heterogeneity` 1.0), and a permissive "
        "search (`screen_sd` 0, `futility_effect` 0.3, `alpha_search` 0.45): most runs hand the certification "
        "a champion whose true change is near zero either way, so the certification alone decides.\n\n"
    ),
}


def design_contract(loaded: LoadedContract, budget: str, claim: str, args: argparse.Namespace) -> LoadedContract:
    """The bench contract: the gate arm alone after the never arm, and the design's certification."""
    c = loaded.contract
    cert = {"claim": claim, "project_alpha": args.project_alpha if budget == "project" else None}
    cert["project_certifications"] = args.certifications
    fields = {**c.budget.model_dump(), "certify_random": False}
    base = c.settings(SimParams).model_dump()
    world = dict(WORLDS[args.world]["sim"])
    if "effect_mixture" in world:  # fields of the mixture, over the contract's
        world["effect_mixture"] = {**base["effect_mixture"], **world["effect_mixture"]}
    sim = SimParams.model_validate({**base, **world})
    promotion = {**c.promotion.model_dump(), **WORLDS[args.world]["promotion"]}
    if args.gate_audits is not None:
        fields["arm_audits"] = {**fields["arm_audits"], "gate": args.gate_audits}
    if args.certify_rounds is not None:
        fields["certify_rounds"] = args.certify_rounds
    changes = {"certification": cert, "budget": fields, "arms": ["never", "gate"], "promotion": promotion}
    return revalidated(loaded, {**changes, "backend_settings": sim.model_dump(mode="json")})


def one_project(task: tuple[str, str, int, int, dict[str, Any]]) -> list[dict[str, Any]]:
    """One simulated project of `revisions` runs: each run's delivery, scored on the truth."""
    budget, claim, project, revisions, opts = task
    args = argparse.Namespace(**opts)
    base = world_contract(design_contract(load_contract(CONTRACT), budget, claim, args), project)
    world = ProjectWorld(base, args.fresh_seeds)
    origin = start = origin_documents()
    folder = Path(tempfile.mkdtemp(prefix="sil-project-", dir=SCRATCH if SCRATCH.is_dir() else None))
    start_dir, out = POLICIES, []
    try:
        for i in range(revisions):
            loaded = revision(base, i)
            if refused(loaded, folder):
                out.append(asdict(Delivery(False, True, False, False, _target(world, start, origin))))
                continue
            with LoopRun(loaded, project=folder, run_id=f"r{i:02d}", policy_dir=start_dir) as lr:
                state = run_phases(lr.rc, PHASES)
                cert = lr.certification("gate")
                certifying = cert is not None and cert.rounds > 0
                if state.phase != "done":  # as for a user: the run delivers nothing, the next run goes on
                    halted = Delivery(False, False, False, False, _target(world, start, origin), certifying, True)
                    out.append(asdict(halted))
                    continue
                gate = state.arms["gate"]
                docs = lr.delivered("gate")
                changed = gate.champion.set_id != state.origin.set_id
                if changed:
                    start_dir = folder / f"start-{i:02d}"
                    shutil.copytree(lr.rc.store.set_dir(gate.champion), start_dir)
            worse_fresh = changed and world.worse(docs, start, world.fresh_rows)
            worse_heldout = changed and world.worse(docs, start, world.heldout_rows)
            start = docs if changed else start
            target = _target(world, start, origin)
            out.append(asdict(Delivery(changed, False, worse_fresh, worse_heldout, target, certifying)))
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    return out


def revision(base: LoadedContract, i: int) -> LoadedContract:
    """Run i of a project: a new candidate stream (its run seed) and, as a real re-run would, fresh
    audits of the same world (its own `sim.noise_seed`; run 0 keeps the world's own stream).
    Without this a simulated re-run would replay its predecessor's audits exactly."""
    c = base.contract
    fields: dict[str, Any] = {"seed": c.seed + i * RUN_SEED_STEP}
    if i:
        sim = c.settings(SimParams)
        fresh = sim.model_copy(update={"noise_seed": sim.world_seed + i * RUN_SEED_STEP})
        fields["backend_settings"] = fresh.model_dump(mode="json")
    return revalidated(base, fields)


def _target(world: ProjectWorld, docs: dict[str, dict[str, Any]], origin: dict[str, dict[str, Any]]) -> float:
    t = world.dims.index(world.target)
    return float(world.truth_on(docs, world.fresh_rows)[t] - world.truth_on(origin, world.fresh_rows)[t])


def refused(loaded: LoadedContract, folder: Path) -> bool:
    """Whether `sil check` would refuse the next run: its held-out set's project budget is spent."""
    if not (folder / loaded.contract.measurement.seed_library).exists():
        return False
    measure = MeasureContext.from_contract(loaded.contract, folder)
    return next_spend(loaded.contract, measure, folder).refused is not None


def rows_of(budget: str, claim: str, projects: list[list[dict[str, Any]]], revisions: int) -> list[dict[str, Any]]:
    """Per R, the share of projects with some worse delivery in their first R runs, and the gain."""
    rows = []
    for r in range(1, revisions + 1):
        first = [p[:r] for p in projects]
        rows.append(
            {
                "budget": budget,
                "claim": claim,
                "revisions": r,
                "p_any_worse_fresh_seeds": float(np.mean([any(d["worse_fresh"] for d in p) for p in first])),
                "p_any_worse_heldout": float(np.mean([any(d["worse_heldout"] for d in p) for p in first])),
                "final_target_fresh_seeds": float(np.mean([p[-1]["target_fresh"] for p in first])),
                "deliveries_per_project": float(np.mean([sum(d["delivered"] for d in p) for p in first])),
                "refused_per_project": float(np.mean([sum(d["refused"] for d in p) for p in first])),
                "certifying_per_project": _certifying(first),
                "halted_per_project": float(np.mean([sum(d.get("halted", False) for d in p) for p in first])),
                "worse_fresh_projects": int(sum(any(d["worse_fresh"] for d in p) for p in first)),
                "worse_heldout_projects": int(sum(any(d["worse_heldout"] for d in p) for p in first)),
                "runs": len(projects),
            }
        )
    return rows


def _certifying(projects: list[list[dict[str, Any]]]) -> float | None:
    """Certifications that ran rounds per project (None: measured before the bench counted them)."""
    if any("certifying" not in d for p in projects for d in p):
        return None
    return float(np.mean([sum(d["certifying"] for d in p) for p in projects]))


def upper_95(k: int, n: int) -> float:
    """The one-sided 95% Clopper-Pearson upper bound of a rate seen k times in n."""
    from scipy.stats import beta

    return 1.0 if k >= n else float(beta.ppf(0.95, k + 1, n - k))


def bounds_md(rows: list[dict[str, Any]], alpha: float) -> str:
    """At the largest R, each design's worse projects with the 95% upper bound of their rate."""
    last = max(r["revisions"] for r in rows)
    lines = [
        f"| {r['budget']} | {r['claim']} | {r['worse_fresh_projects']} of {r['runs']} "
        f"| {upper_95(r['worse_fresh_projects'], r['runs']):.3f} | {r['worse_heldout_projects']} of {r['runs']} "
        f"| {upper_95(r['worse_heldout_projects'], r['runs']):.3f} |"
        for r in rows
        if r["revisions"] == last
    ]
    return (
        f"\n## At R = {last}: how far the rates can be from what was seen\n\nOne-sided 95% Clopper-Pearson "
        f"upper bounds of P(any worse); the project's α is {alpha}.\n\n"
        "| budget | claim | worse on fresh seeds | upper 95% | worse on held-out seeds | upper 95% |\n"
        "|---|---|---|---|---|---|\n" + "\n".join(lines) + "\n"
    )


def format_md(rows: list[dict[str, Any]], args: argparse.Namespace, prov: str, n: int, segments: list[str]) -> str:
    head = (
        "| budget | claim | R | P(any worse, fresh seeds) | P(any worse, held-out seeds) "
        "| final target, fresh seeds | deliveries | certifications run | refused runs | halted runs | projects |\n"
        "|---|---|---|---|---|---|---|---|---|---|---|\n"
    )
    body = "".join(
        f"| {r['budget']} | {r['claim']} | {r['revisions']} | {r['p_any_worse_fresh_seeds']:.3f} "
        f"| {r['p_any_worse_heldout']:.3f} | {r['final_target_fresh_seeds']:+.3f} | {r['deliveries_per_project']:.2f} "
        f"| {_or_dash(r['certifying_per_project'])} | {r['refused_per_project']:.2f} "
        f"| {r['halted_per_project']:.2f} | {r['runs']} |\n"
        for r in rows
    )
    return (
        f"# A project, not a run (simulated {args.world} world, `{CONTRACT.name}`)\n\n{prov}\n\n{WORLD_NOTES[args.world]}"
        f"{n} simulated projects per design, each up to {args.revisions} runs on one measurement, "
        f"every run starting from the last delivered champion with a new candidate stream. Project budget: "
        f"`project_alpha` {args.project_alpha} over {args.certifications} delivering certifications "
        f"({args.project_alpha / args.certifications:g} each); without it every run certifies at "
        f"`alpha_certify`. Per run: the gate arm's audits {args.gate_audits or 'as the contract'}, certification "
        f"rounds {args.certify_rounds or 'as the contract'}. Fresh seeds: {args.fresh_seeds} seeds of the world no run audited. Worse: the "
        "delivered champion is worse than its run's start on the target, or beyond the harm tolerance on a "
        "critical dimension. These are figures about the simulated world, not about any model.\n\n"
        + head
        + body
        + bounds_md(rows, args.project_alpha)
        + (_segments_md(segments) if len(segments) > 1 else "")
    )


def _or_dash(value: float | None) -> str:
    return "—" if value is None else f"{value:.2f}"


def _segments_md(segments: list[str]) -> str:
    """The measurement's segments (one per `--resume`), each with its own command, date and commit."""
    return "\n## Segments\n\nThe projects were measured in parts, each resuming the last:\n\n" + "\n".join(segments)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.project", description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=300, help="simulated projects per design")
    ap.add_argument("--revisions", type=int, default=20, help="runs per project (R = 1..this)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "results")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--project-alpha", type=float, default=0.05)
    ap.add_argument("--certifications", type=int, default=10, help="delivering certifications per held-out set")
    ap.add_argument("--fresh-seeds", type=int, default=200, help="seeds never audited, for the fresh-seed truth")
    ap.add_argument(
        "--gate-audits", type=int, default=None, help="the gate arm's audits per run (default: the contract's)"
    )
    ap.add_argument("--certify-rounds", type=int, default=None, help="certification rounds (default: the contract's)")
    ap.add_argument("--designs", default=",".join(f"{b}:{c}" for b, c in DESIGNS))
    ap.add_argument("--world", choices=list(WORLDS), default="mechanisms", help="the simulated world (see WORLDS)")
    ap.add_argument("--name", default="project", help="write NAME.md and NAME.json (default project)")
    ap.add_argument(
        "--resume",
        action="store_true",
        help="keep the projects already in --out/NAME.json and measure on from there",
    )
    args = ap.parse_args(argv)
    if min(args.runs, args.revisions, args.jobs, args.certifications, args.fresh_seeds) < 1:
        ap.error("--runs, --revisions, --jobs, --certifications and --fresh-seeds must each be at least 1")
    if not 0 < args.project_alpha < 1:
        ap.error(f"--project-alpha must be between 0 and 1, got {args.project_alpha}")
    unknown = [d for d in args.designs.split(",") if tuple(d.split(":")) not in DESIGNS]
    if unknown:
        ap.error(f"unknown design(s) {', '.join(unknown)}; choose from {', '.join(f'{b}:{c}' for b, c in DESIGNS)}")
    return args


def main(argv: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """Every design's projects, interleaved so that all designs have the same count at any time;
    the results files are rewritten after each round of projects (a stopped measurement keeps its
    last complete round, and says its count). With --resume, the projects already in
    `--out`/NAME.json are kept and the measurement goes on from the next project."""
    argv = list(argv) if argv is not None else sys.argv[1:]
    args = parse_args(argv)
    started = time.monotonic()
    opts = {k: v for k, v in vars(args).items() if k not in ("out", "resume")}
    designs = [tuple(d.split(":")) for d in args.designs.split(",")]
    earlier = resumed(args) if args.resume else Earlier()
    done: dict[tuple[str, ...], list[list[dict[str, Any]]]] = {d: list(earlier.projects.get(d, [])) for d in designs}
    first = len(done[designs[0]])
    tasks = [(b, c, p, args.revisions, opts) for p in range(first, args.runs) for b, c in designs]
    rows: list[dict[str, Any]] = []
    with mp.get_context("spawn").Pool(args.jobs) if args.jobs > 1 else _Serial() as pool:
        for task, project in zip(tasks, pool.imap(one_project, tasks), strict=True):
            done[(task[0], task[1])].append(project)
            if all(len(p) == len(done[designs[0]]) for p in done.values()):
                rows = [row for (b, c), ps in done.items() for row in rows_of(b, c, ps, args.revisions)]
                n = len(done[designs[0]])
                write(args, argv, rows, done, earlier, n, time.monotonic() - started)
    return rows


SETTINGS = (
    "world",
    "revisions",
    "project_alpha",
    "certifications",
    "fresh_seeds",
    "gate_audits",
    "certify_rounds",
    "designs",
)


def contract_hash() -> str:
    """The hash of the contract every project runs (its world's overrides are the settings)."""
    return load_contract(CONTRACT).contract.contract_hash


@dataclass
class Earlier:
    """What earlier segments of a resumed measurement left: their projects and their headers."""

    projects: dict[tuple[str, ...], list[list[dict[str, Any]]]] = field(default_factory=dict)
    segments: list[str] = field(default_factory=list)


def resumed(args: argparse.Namespace) -> Earlier:
    """The projects an earlier measurement with the same settings wrote to `--out`, or exit 2 with why."""
    path = args.out / f"{args.name}.json"
    try:
        old = json.loads(path.read_text())
        settings, projects, segments = old["settings"], old["projects"], old["segments"]
    except FileNotFoundError:
        raise SystemExit(f"--resume: nothing to resume, {path} does not exist; run without --resume first") from None
    except (OSError, ValueError, KeyError, TypeError) as ex:
        raise SystemExit(f"--resume: {path} is not a project measurement this bench wrote ({ex!r})") from None
    differ = [k for k in SETTINGS if settings.get(k) != getattr(args, k)]
    if differ:
        said = ", ".join(f"--{k.replace('_', '-')} {settings.get(k)} (now {getattr(args, k)})" for k in differ)
        raise SystemExit(f"--resume: {path} was measured with {said}; resume with the same settings or write elsewhere")
    was, now = settings.get("contract_hash"), contract_hash()
    if was != now:
        said = "records no contract hash" if was is None else f"was measured with contract {str(was)[:12]}"
        raise SystemExit(
            f"--resume: {path} {said}, and {CONTRACT.name} is now {now[:12]}: resuming would put two designs in "
            "one row; resume at the commit its segments name (e.g. in a `git worktree`) or write elsewhere"
        )
    return Earlier({tuple(k.split(":")): v for k, v in projects.items()}, list(segments))


def write(
    args: argparse.Namespace,
    argv: list[str],
    rows: list[dict[str, Any]],
    done: dict[tuple[str, ...], list[list[dict[str, Any]]]],
    earlier: Earlier,
    n: int,
    seconds: float,
) -> None:
    first = len(next(iter(earlier.projects.values()), []))
    prov = provenance(["bench.project", *argv], f"{n} projects per design (of --runs {args.runs})", seconds)
    segment = provenance(["bench.project", *argv], f"projects {first + 1} to {n}", seconds)
    segments = [*earlier.segments, segment]
    settings = {**{k: getattr(args, k) for k in SETTINGS}, "contract_hash": contract_hash()}
    data = {
        "provenance": prov,
        "segments": segments,
        "settings": settings,
        "rows": rows,
        "projects": {":".join(d): ps for d, ps in done.items()},
    }
    args.out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(args.out / f"{args.name}.json", json.dumps(data, indent=1) + "\n")
    atomic_write_text(args.out / f"{args.name}.md", format_md(rows, args, prov, n, segments))
    print(f"{n} projects per design written after {seconds:.0f} s", flush=True)


class _Serial:
    """A pool of one: the tasks in this process (what --jobs 1 means)."""

    def imap(self, fn: Any, tasks: Sequence[Any]) -> Any:
        return map(fn, tasks)

    def __enter__(self) -> _Serial:
        return self

    def __exit__(self, *exc: object) -> None:
        return None


if __name__ == "__main__":
    main()
