"""Proposer benchmark: does reading the evidence find better policies on the mechanisms world?

Each simulated run draws a world (seed difficulties, drift, hidden mechanisms per seed:
`world_seed` and `landscape_seed` vary with the run) and runs the product's loop on it
(`bench.looprun`: `sil run`'s own phases, arms and certification, in a temporary folder, the
audits computed in-process by the sim audit's own code), once per proposer and decision rule:
the proposer and the judge are handed to the loop's `CandidateArm` as `sil run` hands it its
own. The bench then scores what each run delivered against the simulated truth.

    python -m bench.proposers [--runs N] [--budget B] [--out DIR] [--jobs J]

Proposers: `catalogue` (offline/catalogue), `random_edit` (a random sentence on a random text
field), `mutator` (the LLM mutator with the offline `scripted/mutator` model, which reads the
highlights) and `oracle` (knows the true effect of every edit it can write: an upper bound).
Decision rules: `gate` (the loop's), `oracle_gate` (knows the truth, certifies nothing: the
ceiling) and `oracle_search` (knows the truth and keeps only improvements that harm no critical
dimension, then the loop's certification: what a perfect search delivers once certified).
Writes `proposers.json` and `proposers.md`. Simulated figures: they measure search
strategies on a simulated world, not any model.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import multiprocessing as mp
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import numpy as np

from bench.looprun import LoopRun, WorldTruth
from sil.contract import prepare
from sil.contract.schema import LoadedContract, Promotion, load_contract
from sil.contract.simparams import SimParams
from sil.integrity.records import MutatorCallRecord, ProposerGapRecord, VerdictRecord
from sil.policies.mutation import Mutation, MutationError, apply_mutation, mutation_id_for, parse_mutation, value_at
from sil.run.arms import CandidateArm
from sil.run.context import RunContext
from sil.run.train import PHASES, Phases, run_phases
from sil.search.proposers import Proposal, ProposalRequest, ProposerBase
from sil.search.proposers.catalogue import CatalogueProposer, default_catalogue
from sil.search.proposers.llm import LLMProposer
from sil.stats.fitness import RoundStat
from sil.stats.judges import ArmBudget, CandidateRoundKind, GateJudge, Judge, JudgeState, Outcome, Trial
from sil_policy import SURFACES, load_surface
from sil_runtime.sim.landscape import critical_dimensions, latent_field
from sil_runtime.sim.mechanisms import mechanism_field
from sil_runtime.sim.world import World

ROOT = Path(__file__).resolve().parents[1]
CONTRACT = ROOT / "examples" / "program-mutator-offline.md"
PROPOSER_NAMES = ("catalogue", "random_edit", "mutator", "oracle")
# the contract's gate judge; a gate that knows the truth (nothing certified: the ceiling); a search
# that knows the truth and keeps only harmless improvements, followed by the loop's certification
RULES = ("gate", "oracle_gate", "oracle_search")
RANDOM_WORDS = (
    "always never tool error result reply customer order check report say text call data "
    "instruction help routine refund account verify before after when if the a do not"
).split()


# ---------------------------------------------------------------- the world's truth


class BenchWorld:
    """One world's truth: the expected audit mean of a policy set on the search seeds, the held-out
    seeds or all of them. The loop's audits of the same world come from `bench.looprun`."""

    def __init__(self, loaded: LoadedContract, seed_ids: list[str], rubric: Mapping[str, str], n_search: int) -> None:
        c = loaded.contract
        self.n_search = n_search  # seeds [0, n_search) are the search seeds; the rest are held out
        self.params = c.settings(SimParams)  # the bench's worlds are simulated
        self.dims = list(rubric)
        self.target = self.params.landscape_target
        self.critical = critical_dimensions(rubric, self.target)
        self.seed_ids = seed_ids
        self.world = World(self.params, self.dims, len(seed_ids))
        self._theta: dict[str, np.ndarray] = {}

    def theta(self, docs: dict[str, dict[str, Any]]) -> np.ndarray:
        key = set_id(docs)
        if key not in self._theta:
            n = len(self.seed_ids)
            base = latent_field(docs, self.dims, self.target, self.critical, n, self.params)
            mech = mechanism_field(docs, self.dims, self.seed_ids, self.params)
            self._theta[key] = self.params.hashed_scale * base + mech
        return self._theta[key]

    def truth(self, docs: dict[str, dict[str, Any]], part: str = "search") -> np.ndarray:
        """True expected audit mean per dim over the search seeds, the held-out seeds, or all."""
        theta = self.theta(docs)
        if part == "all":
            return self.world.expected_scores(theta)
        per_seed = self.world.expected_score_at(self.world._base + theta)
        rows = slice(0, self.n_search) if part == "search" else slice(self.n_search, len(self.seed_ids))
        return per_seed[rows].mean(axis=0)

    @property
    def has_heldout(self) -> bool:
        return self.n_search < len(self.seed_ids)


def set_id(docs: dict[str, dict[str, Any]]) -> str:
    return hashlib.sha256(json.dumps(docs, sort_keys=True).encode()).hexdigest()[:16]


def bench_world(loaded: LoadedContract) -> BenchWorld:
    """The truth of the contract's world, over the seeds its audits use (held-out ones included)."""
    c = loaded.contract
    root = ROOT / c.measurement.seed_library
    search = [s.id for s in prepare.load_seeds(root)]
    heldout = [s.id for s in prepare.load_seeds(root, "heldout")] if c.measurement.certify_on != "search" else []
    rubric = {d.name: d.tier for d in prepare.load_rubric(root)}
    return BenchWorld(loaded, search + heldout, rubric, n_search=len(search))


def origin_documents() -> dict[str, dict[str, Any]]:
    return {n: load_surface(n, ROOT / "state" / "policies" / s.filename)[0] for n, s in SURFACES.items()}


# ---------------------------------------------------------------- bench-only proposers


class RandomEditProposer(ProposerBase):
    """A random sentence of plausible words on a random text field: search without reading."""

    name = "bench:random_edit"

    def __init__(self, surfaces: Sequence[str]) -> None:
        self.surfaces = list(surfaces)

    def propose(self, request: ProposalRequest) -> Proposal:
        rng = request.rng
        fields = [(s, p) for s in self.surfaces for p in _text_paths(request.champion[s])]
        for _ in range(20):
            surface, path = fields[int(rng.integers(len(fields)))]
            words = rng.choice(RANDOM_WORDS, size=int(rng.integers(6, 14)))
            text = " ".join(words).capitalize() + "."
            current = value_at(request.champion[surface], path)
            value: Any = [*current, text] if isinstance(current, list) else text
            m = edit_mutation(surface, path, value, request, self.name, "random edit", {"broken_tool_use": 0.0})
            if m is not None:
                return Proposal(mutation=m)
        return Proposal()


class OracleProposer(ProposerBase):
    """Knows the true effect of every edit in its pool (playbook-like fixes and the catalogue)."""

    name = "bench:oracle"

    def __init__(self, world: BenchWorld, surfaces: Sequence[str]) -> None:
        self.world, self.surfaces = world, list(surfaces)
        from sil_runtime.inspect_ext.offline.mutator import PLAYBOOK

        self.pool = [(p.surface, p.path, v) for p in PLAYBOOK for v in p.values]
        self.catalogue = CatalogueProposer(self.surfaces, [world.target], default_catalogue())

    def propose(self, request: ProposalRequest) -> Proposal:
        w, champ = self.world, request.champion
        base = w.truth(champ)
        t, crit = w.dims.index(w.target), [w.dims.index(c) for c in w.critical]
        best: tuple[float, Any] | None = None
        edits = [(s, p, v) for s, p, v in self.pool if s in self.surfaces]
        edits += [(e.surface, e.path, e.resolve(champ[e.surface])) for e in self.catalogue.open_edits(champ, set())]
        for surface, path, value in edits:
            m = edit_mutation(surface, path, value, request, self.name, "oracle", {w.target: -0.5})
            if m is None or m.edit_key in request.tried:
                continue
            docs = {**champ, surface: apply_mutation(m, champ, self.surfaces)}
            delta = w.truth(docs) - base
            if delta[t] < -0.05 and max(delta[crit], default=0.0) <= 0.1 and (best is None or delta[t] < best[0]):
                best = (float(delta[t]), m)
        return Proposal(mutation=best[1]) if best else Proposal()


def _text_paths(doc: dict[str, Any], prefix: str = "") -> list[str]:
    out = []
    for key, value in doc.items():
        path = f"{prefix}.{key}" if prefix else key
        if isinstance(value, dict):
            out += _text_paths(value, path)
        elif isinstance(value, str) or (isinstance(value, list) and all(isinstance(v, str) for v in value)):
            out.append(path)
    return [p for p in out if len(p.split(".")) <= 3]


def edit_mutation(
    surface: str, path: str, value: Any, request: ProposalRequest, name: str, why: str, effect: dict[str, float]
) -> Mutation | None:
    raw = {
        "mutation_id": mutation_id_for(request.run_seed, request.index, surface, path, value),
        "surface": surface,
        "path": path,
        "value": value,
        "hypothesis": why,
        "evidence": [why],
        "expected_effect": effect,
        "rollback_condition": "revert if the target does not improve",
        "proposer": name,
    }
    try:
        m = parse_mutation(raw, list(SURFACES))
        apply_mutation(m, request.champion, list(SURFACES))
    except MutationError:
        return None
    return m


# ---------------------------------------------------------------- the oracle rules, as judges


class OracleJudge:
    """An oracle decision rule as the gate arm's judge in the loop's own `CandidateArm`: the
    candidate's one paired round is charged, then the truth decides. KEEP iff the candidate truly
    lowers the target and leaves every critical dimension within its tolerance of the start
    (`harmless`: no worse than the start at all, which a certification can pass)."""

    keeps_by_test = False

    def __init__(self, run: LoopRun, world: WorldTruth, harmless: bool) -> None:
        self.run, self.world, self.harmless = run, world, harmless
        self.name = "oracle_search" if harmless else "oracle_gate"
        self.origin = self.world.truth(run.rc.store.documents(run.rc.state.origin))

    def stop_reason(self, shared: JudgeState) -> str | None:
        return None

    def next_kind(self, trial: Trial) -> CandidateRoundKind:
        return "screen"

    def judge(
        self, trial: Trial, stat: RoundStat, shared: JudgeState, budget: ArmBudget, index: int
    ) -> tuple[Trial, Outcome]:
        pending = self.run.rc.state.arms["gate"].pending
        assert pending is not None
        w, promo = self.world, self.run.rc.promotion
        before = w.truth(self.run.rc.store.documents(pending.parent))
        after = w.truth(self.run.rc.store.documents(pending.candidate))
        t = w.dims.index(w.target)
        room = {c: 1e-9 if self.harmless else promo.tolerance(c) for c in w.critical}
        within = all(after[w.dims.index(c)] - self.origin[w.dims.index(c)] <= room[c] for c in w.critical)
        keep = bool(after[t] < before[t] and within)
        outcome = Outcome(verdict="keep" if keep else "revert", reason=f"{self.name}: the truth", kind="screen")
        return trial.model_copy(update={"screen": stat}), outcome

    def close(self, trial: Trial, verdict: str, shared: JudgeState) -> JudgeState:
        return shared


# ---------------------------------------------------------------- what a run delivered


@dataclass(frozen=True)
class RunCounts:
    keeps: int
    decisions: int
    audits: int
    gaps: int
    mutator_calls: int
    mutator_usd: float


@dataclass(frozen=True)
class RunResult:
    final_target: float
    final_critical: float
    keeps: int
    decisions: int
    audits: int
    gaps: int
    mutator_calls: int
    mutator_usd: float
    certified: bool | None
    worse: bool = False  # final target change > 0, or a critical dimension beyond its tolerance
    false_keeps: int = 0  # KEEPs whose true target change against the champion was >= 0
    target_heldout: float | None = None  # the final true target change on the held-out seeds
    target_all: float | None = None  # ... and on all seeds (search and held-out)
    clean_power: float | None = None  # the certification's planned power for a clean champion (its outlook)


def arm_counts(run: LoopRun, arm: str) -> RunCounts:
    """The arm's KEEPs, decisions, audits, proposer gaps and mutator calls, as its run recorded them."""
    book, state = run.rc.book, run.rc.state.arms[arm]
    calls = [c for c in book.payloads("mutator_call", MutatorCallRecord) if c.arm == arm]
    gaps = [g for g in book.payloads("proposer_gap", ProposerGapRecord) if g.arm == arm]
    usd = round(sum(c.usd for c in calls), 6)
    return RunCounts(state.keeps, state.keeps + state.reverts, state.audits, len(gaps), len(calls), usd)


def false_keeps(run: LoopRun, world: BenchWorld, arm: str) -> int:
    """The arm's KEEPs whose true target change against the champion they replaced was >= 0."""
    t = world.dims.index(world.target)
    verdicts = [v for v in run.rc.book.payloads("verdict", VerdictRecord) if v.arm == arm and v.verdict == "keep"]
    truth = world.truth
    return sum(
        bool(truth(run.documents(v.candidate_set))[t] >= truth(run.documents(v.parent_set))[t]) for v in verdicts
    )


def scored(
    world: BenchWorld, promo: Promotion, champion: dict[str, dict[str, Any]], counts: RunCounts, certified: bool | None
) -> RunResult:
    """A run's outcome with `champion` as what it delivers, scored against the simulated truth."""
    origin = origin_documents()
    final = world.truth(champion) - world.truth(origin)
    crit = [world.dims.index(c) for c in world.critical]
    t = world.dims.index(world.target)
    beyond = any(final[world.dims.index(c)] > promo.tolerance(c) for c in world.critical)
    heldout = all_seeds = None
    if world.has_heldout:
        heldout = float(world.truth(champion, "heldout")[t] - world.truth(origin, "heldout")[t])
        all_seeds = float(world.truth(champion, "all")[t] - world.truth(origin, "all")[t])
    return RunResult(
        float(final[t]),
        float(max(final[crit])),
        counts.keeps,
        counts.decisions,
        counts.audits,
        counts.gaps,
        counts.mutator_calls,
        counts.mutator_usd,
        certified,
        worse=bool(final[t] > 0 or beyond),
        target_heldout=heldout,
        target_all=all_seeds,
    )


def arm_result(run: LoopRun, world: BenchWorld, arm: str, search_champion: bool = False) -> RunResult:
    """What the arm delivered, its certification's audits counted (or, `search_champion`, what its
    search left before any certification)."""
    counts, cert = arm_counts(run, arm), run.certification(arm)
    if search_champion or cert is None:
        docs, certified = (run.search_champion(arm) if search_champion else run.delivered(arm)), None
    else:
        docs, certified = run.delivered(arm), cert.certified
        counts = replace(counts, audits=counts.audits + 2 * cert.rounds)
    result = scored(world, run.rc.promotion, docs, counts, certified)
    clean = cert.outlook.power if cert is not None and cert.outlook is not None else None
    return replace(result, false_keeps=false_keeps(run, world, arm), clean_power=clean)


def finished(run: LoopRun, phases: Phases = PHASES) -> LoopRun:
    """The run driven to its end by the loop's phases; a halt is the bench's error, never a figure."""
    state = run_phases(run.rc, phases)
    if state.phase != "done":
        raise RuntimeError(f"the loop halted on a bench world: {state.halt_reason}")
    return run


# ---------------------------------------------------------------- the grid


def make_proposer(name: str, loaded: LoadedContract, world: BenchWorld) -> Any:
    surfaces = loaded.contract.search_space.surfaces
    if name == "catalogue":
        return CatalogueProposer(surfaces, loaded.contract.promotion.target_dimensions)
    if name == "random_edit":
        return RandomEditProposer(surfaces)
    if name == "mutator":
        return LLMProposer(loaded)
    if name == "oracle":
        return OracleProposer(world, surfaces)
    raise ValueError(f"unknown proposer {name!r}; choose from {', '.join(PROPOSER_NAMES)}")


def revalidated(loaded: LoadedContract, fields: dict[str, Any]) -> LoadedContract:
    """The contract with top-level fields replaced, validated as a contract would be."""
    c = loaded.contract
    return loaded.model_copy(update={"contract": type(c).model_validate({**c.model_dump(), **fields})})


BUDGET_OVERRIDES = ("certify_rounds", "certify_horizon", "certify_power")  # --set fields of the budget


def promotion_overrides(pairs: Sequence[str]) -> dict[str, object]:
    """`--set FIELD=VALUE ...` as promotion overrides (a value is JSON, or a bare string such as elond)."""
    out: dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or key not in Promotion.model_fields:
            raise SystemExit(f"--set expects FIELD=VALUE with a promotion field, got {pair!r}")
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = value  # a bare string such as elond
    return out


def with_overrides(loaded: LoadedContract, overrides: dict[str, object], regrid: bool = False) -> LoadedContract:
    """The contract with promotion fields replaced (validated, as the contract would be);
    `certify_rounds`, `certify_horizon` and `certify_power` are the budget's fields of those names.
    `regrid`: the grid re-budgets the run afterwards (`grid_contract`), so a `certify_rounds` the
    contract's own `max_audits` could not pay for is no error here."""
    if not overrides:
        return loaded
    c, over = loaded.contract, dict(overrides)
    budget = c.budget.model_dump()
    for key in BUDGET_OVERRIDES:
        if key in over:
            budget[key] = over.pop(key)
    if regrid:
        budget["max_audits"] = 100_000  # the schema's largest: grid_contract then sets the grid's own
    promo = Promotion.model_validate({**c.promotion.model_dump(), **over})
    return revalidated(loaded, {"promotion": promo.model_dump(), "budget": budget})


# World 0's seeds (world_seed, landscape_seed, the run's seed). The bench numbers its worlds from
# this fixed world, not from the contract's seeds, so a contract may simulate any one of them
# (program.md: world 2) without moving a figure measured on the others.
WORLD0 = (20261129, 7, 20261129)


def world_contract(loaded: LoadedContract, run: int) -> LoadedContract:
    """World `run`: the contract's sim world with `world_seed`, `landscape_seed` and its run seed
    set to world 0's moved by `run` (the coins and proposals of one world are not another's)."""
    world_seed, landscape_seed, seed = (s + run for s in WORLD0)
    sim = loaded.contract.settings(SimParams)
    moved = sim.model_copy(update={"world_seed": world_seed, "landscape_seed": landscape_seed})
    return revalidated(loaded, {"backend_settings": moved.model_dump(mode="json"), "seed": seed})


def own_world(loaded: LoadedContract) -> int | None:
    """Which of the bench's worlds the contract itself simulates (what `sil run` on it audits), or
    None when its seeds are not one of them."""
    sim, c = loaded.contract.settings(SimParams), loaded.contract
    moves = {sim.world_seed - WORLD0[0], sim.landscape_seed - WORLD0[1], c.seed - WORLD0[2]}
    return moves.pop() if len(moves) == 1 and min(moves) >= 0 else None


def grid_contract(loaded: LoadedContract, budget: int, rule: str) -> LoadedContract:
    """The gate arm alone after the never arm's calibration, `budget` audits for both and the
    certification (none for the oracle gate, which knows what it delivers)."""
    c = loaded.contract
    certify_rounds = 0 if rule == "oracle_gate" else c.budget.certify_rounds
    calibration = 2 * c.promotion.calibration_pairs
    arm_audits = {"never": calibration, "gate": budget - calibration - 2 * certify_rounds}
    if arm_audits["gate"] < 2:
        raise SystemExit(
            f"--budget {budget} leaves the gate arm no audits after the calibration ({calibration}) and the "
            f"certification ({2 * certify_rounds}): raise --budget, or lower the certification with "
            "--set certify_rounds=N"
        )
    fields = {"arm_audits": arm_audits, "certify_rounds": certify_rounds, "certify_random": False}
    budget_fields = {**c.budget.model_dump(), **fields, "max_audits": 4 * budget}
    # a contract without a certification must not claim the two-stage design's guarantee; the
    # oracle gate, which knows the truth, never asks the design anything
    design = c.promotion.error_design if certify_rounds else "fwer"
    promotion = {**c.promotion.model_dump(), "error_design": design}
    return revalidated(loaded, {"arms": ["never", "gate"], "budget": budget_fields, "promotion": promotion})


def entry_name(proposer: str, rule: str) -> str:
    return proposer if rule == "gate" else f"{proposer}+{rule}"


def grid_entry(loaded: LoadedContract, name: str, rule: str) -> RunResult:
    """One proposer with one decision rule: the loop's phases, its gate arm holding both."""
    world = bench_world(loaded)
    with LoopRun(loaded) as run:
        proposer = make_proposer(name, loaded, world)
        judge: Judge = (
            GateJudge(run.rc.promotion) if rule == "gate" else OracleJudge(run, world, rule == "oracle_search")
        )

        def gate_arm(rc: RunContext) -> None:
            CandidateArm(rc, "gate", judge, proposer).run()

        finished(run, tuple((p, gate_arm if p == "gate" else step) for p, step in PHASES))
        return arm_result(run, world, "gate")


def one_run(task: tuple[str, int, int, tuple[tuple[str, str], ...], dict[str, object]]) -> dict[str, RunResult]:
    contract_path, run, budget, entries, overrides = task
    loaded = world_contract(with_overrides(load_contract(Path(contract_path)), overrides, regrid=True), run)
    return {entry_name(n, r): grid_entry(grid_contract(loaded, budget, r), n, r) for n, r in entries}


# the random arm as the loop does not deliver it: certified when the contract leaves it
# uncertified, and its uncertified search champion when the contract certifies it
RANDOM_CERTIFIED = "random, certified as the gate's"
RANDOM_UNCERTIFIED = "random, its search champion uncertified"
ARMS = ("never", "random", RANDOM_CERTIFIED, "gate")
CERTIFIED_ARMS = ("never", "random", RANDOM_UNCERTIFIED, "gate")


def arm_rows(contract_path: Path, overrides: dict[str, object]) -> tuple[str, ...]:
    """The rows of `--arms`: the loop's three arms and the random arm's other delivery."""
    budget = with_overrides(load_contract(contract_path), overrides).contract.budget
    return CERTIFIED_ARMS if budget.certify_random and budget.certify_rounds else ARMS


PARTS = ("target_heldout", "target_all")


def arms_run(task: tuple[str, int, dict[str, object]]) -> dict[str, RunResult]:
    """The contract's whole run (`sil run`'s phases and arms) on one world; each arm's delivered
    champion scored against the simulated truth. The random arm's other delivery: its search
    champion before the certification, or (a contract with `certify_random: false`) the same
    run with the random arm certified as the gate's."""
    contract_path, run, overrides = task
    loaded = world_contract(with_overrides(load_contract(Path(contract_path)), overrides), run)
    world = bench_world(loaded)
    with LoopRun(loaded) as lr:
        finished(lr)
        never = lr.rc.state.arms["never"].audits if "never" in lr.rc.state.arms else 0
        out = {
            "never": RunResult(0.0, 0.0, 0, 0, never, 0, 0, 0.0, None, target_heldout=0.0, target_all=0.0),
            "random": arm_result(lr, world, "random"),
            "gate": arm_result(lr, world, "gate"),
        }
        if loaded.contract.budget.certify_random and loaded.contract.budget.certify_rounds:
            out[RANDOM_UNCERTIFIED] = arm_result(lr, world, "random", search_champion=True)
            return out
    budget = {**loaded.contract.budget.model_dump(), "certify_random": True}
    with LoopRun(revalidated(loaded, {"budget": budget})) as other:
        out[RANDOM_CERTIFIED] = arm_result(finished(other), world, "random")
    return out


def main_arms(args: argparse.Namespace, overrides: dict[str, object], argv: Sequence[str]) -> list[dict[str, Any]]:
    """`--arms`: the default run's three arms over --runs worlds, with their true delivered change."""
    from bench.metrics import provenance

    started = time.monotonic()
    tasks = [(str(args.contract), r, overrides) for r in range(args.first_world, args.first_world + args.runs)]
    if args.jobs > 1:
        with mp.get_context("spawn").Pool(args.jobs) as pool:
            per_run = pool.map(arms_run, tasks)
    else:
        per_run = [arms_run(t) for t in tasks]
    names = arm_rows(args.contract, overrides)
    rows = [aggregate(a, [r[a] for r in per_run]) for a in names]
    gate_minus_random = paired_difference(per_run, "gate", "random")
    gate_minus_other = paired_difference(per_run, "gate", names[2])
    head = (
        f"# The default run's three arms (simulated, `{args.contract.name}`)\n\n"
        + provenance(["bench.proposers", *argv], f"{args.runs} worlds{world_range(args)}", time.monotonic() - started)
        + f"- promotion overrides: {overrides or 'none'}; arm budgets and certification as the contract\n\n"
        "| arm | true delivered target change, search seeds (± SE) | on held-out seeds | on all seeds "
        "| P(delivered worse) | P(any false KEEP) | KEEPs/run | certified | decisions/run |\n"
        "|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = []
    for r in rows:
        cert = "—" if r["certified_share"] is None else f"{r['certified_share']:.2f}"
        parts = [[x for x in (getattr(p[r["proposer"]], f) for p in per_run) if x is not None] for f in PARTS]
        extra = " | ".join(
            f"{np.mean(x):+.3f} ± {np.std(x, ddof=1) / math.sqrt(len(x)):.3f}" if len(x) > 1 else "—" for x in parts
        )
        lines.append(
            f"| {r['proposer']} | {r['final_target']:+.3f} ± {r['final_target_se']:.3f} | {extra} | {r['p_final_worse']:.3f} "
            f"| {r['p_any_false_keep']:.3f} | {r['keeps_per_run']:.2f} | {cert} | {r['decisions_per_run']:.1f} |"
        )
    text = (
        head
        + "\n".join(lines)
        + (f"\n\ngate - random (paired by world): {gate_minus_random[0]:+.3f} ± {gate_minus_random[1]:.3f} (SE)\n")
        + (f"gate - {names[2]} (paired by world): {gate_minus_other[0]:+.3f} ± {gate_minus_other[1]:.3f} (SE)\n")
        + own_world_line(args, per_run)
        + moved_section(args, {("", r["proposer"]): r for r in rows})
    )
    args.out.mkdir(parents=True, exist_ok=True)
    data = {"runs": args.runs, "rows": rows, "per_run": [{a: asdict(r[a]) for a in names} for r in per_run]}
    (args.out / f"{args.name}.json").write_text(json.dumps(data, indent=1))
    (args.out / f"{args.name}.md").write_text(text)
    print(text)
    return rows


def moved_section(args: argparse.Namespace, now: dict[tuple[str, str], dict[str, Any]]) -> str:
    """With `--previous`: how far each row moved from the earlier results file, and why."""
    from bench.metrics import against_section

    if args.before is None:
        return ""
    return "\n" + against_section(args.previous, args.why, args.before, now)


def aggregate(name: str, results: list[RunResult]) -> dict[str, Any]:
    t = np.array([r.final_target for r in results])
    c = np.array([r.final_critical for r in results])
    decisions = sum(r.decisions for r in results)
    certs = [r.certified for r in results if r.certified is not None]
    clean = [r.clean_power for r in results if r.clean_power is not None]
    return {
        "proposer": name,
        "runs": len(results),
        "final_target": round(float(t.mean()), 4),
        "final_target_se": round(float(t.std(ddof=1) / math.sqrt(len(t))) if len(t) > 1 else float("nan"), 4),
        "p_final_worse": round(float(np.mean([r.worse for r in results])), 4),
        "p_any_false_keep": round(float(np.mean([r.false_keeps > 0 for r in results])), 4),
        "worst_critical": round(float(c.mean()), 4),
        "keeps_per_run": round(float(np.mean([r.keeps for r in results])), 3),
        "audits_per_decision": round(sum(r.audits for r in results) / max(1, decisions), 2),
        "decisions_per_run": round(decisions / len(results), 2),
        "proposer_gaps": int(sum(r.gaps for r in results)),
        "mutator_calls_per_run": round(float(np.mean([r.mutator_calls for r in results])), 2),
        "mutator_usd": round(float(sum(r.mutator_usd for r in results)), 4),
        "certified_share": None if not certs else round(float(np.mean(certs)), 3),
        "clean_power": None if not clean else round(float(np.mean(clean)), 3),
    }


def own_world_line(args: argparse.Namespace, per_run: list[dict[str, RunResult]]) -> str:
    """Where the contract's own world (what `sil run` on it simulates) sits among the worlds run:
    gate - random on the held-out seeds, what a run's conclusion line compares."""
    first, own = args.first_world, own_world(load_contract(args.contract))
    if own is None or not first <= own < first + len(per_run):
        return ""
    pairs = [(r["gate"].target_heldout, r["random"].target_heldout) for r in per_run]
    held = [g - c for g, c in pairs if g is not None and c is not None]
    if len(held) < len(pairs):
        return ""
    return (
        f"{args.contract.name}'s own world (what `sil run` on it simulates): world {own}, gate - random on the "
        f"held-out seeds {held[own - first]:+.3f} (the {len(held)} worlds' mean {np.mean(held):+.3f})\n"
    )


def paired_difference(per_run: list[dict[str, RunResult]], a: str, b: str) -> tuple[float, float]:
    """Mean and SE of a's final true target change minus b's, paired by world (same run)."""
    d = np.array([r[a].final_target - r[b].final_target for r in per_run])
    return float(d.mean()), float(d.std(ddof=1) / math.sqrt(len(d))) if len(d) > 1 else float("nan")


def differences(per_run: list[dict[str, RunResult]], names: Sequence[str]) -> list[str]:
    if "catalogue" not in names:
        return []
    out = []
    for name in names:
        if name != "catalogue":
            mean, se = paired_difference(per_run, name, "catalogue")
            out.append(f"- {name} - catalogue (paired by world): {mean:+.3f} ± {se:.3f} (SE)")
    return out


CEILING = entry_name("oracle", "oracle_gate")
CERTIFIED_CEILING = entry_name("oracle", "oracle_search")


def share_of(rows: list[dict[str, Any]], ceiling: str, value: float) -> str:
    top = next((r["final_target"] for r in rows if r["proposer"] == ceiling), None)
    return f"{value / top:.0%}" if top else "—"


def format_md(tables: dict[float, list[dict[str, Any]]], args: argparse.Namespace) -> str:
    """One table per tolerance, and each proposer x rule as a share of the ceiling (uncertified,
    as the issue defines it) and of the certified reference (oracle search, then certified)."""
    out = [
        "| tolerance | proposer + rule | final true target change (± SE) | share of ceiling "
        "| share of certified oracle | P(final worse) "
        "| P(any false KEEP) | KEEPs/run | certified | clean-champion power | audits/decision | decisions/run "
        "| gaps | mutator calls/run |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for tol, rows in tables.items():
        for r in rows:
            share = share_of(rows, CEILING, r["final_target"])
            share += f" | {share_of(rows, CERTIFIED_CEILING, r['final_target'])}"
            cert = "—" if r["certified_share"] is None else f"{r['certified_share']:.2f}"
            cert += " | —" if r.get("clean_power") is None else f" | {r['clean_power']:.2f}"
            out.append(
                f"| {tol:g} | {r['proposer']} | {r['final_target']:+.3f} ± {r['final_target_se']:.3f} | {share} "
                f"| {r['p_final_worse']:.3f} | {r['p_any_false_keep']:.3f} | {r['keeps_per_run']:.2f} | {cert} "
                f"| {r['audits_per_decision']:.1f} | {r['decisions_per_run']:.1f} | {r['proposer_gaps']} "
                f"| {r['mutator_calls_per_run']:.1f} |"
            )
    return "\n".join(out) + "\n"


def run_tolerance(
    args: argparse.Namespace, entries: tuple[Any, ...], overrides: dict[str, object]
) -> list[dict[str, RunResult]]:
    tasks = [
        (str(args.contract), r, args.budget, entries, overrides)
        for r in range(args.first_world, args.first_world + args.runs)
    ]
    if args.jobs > 1:
        with mp.get_context("spawn").Pool(args.jobs) as pool:
            return pool.map(one_run, tasks)
    return [one_run(t) for t in tasks]


def world_range(args: argparse.Namespace) -> str:
    return f" (worlds {args.first_world}-{args.first_world + args.runs - 1})" if args.first_world else ""


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m bench.proposers", description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument(
        "--first-world", type=int, default=0, help="worlds first..first+runs-1 (tune on some, report on others)"
    )
    ap.add_argument("--budget", type=int, default=300)
    ap.add_argument("--out", type=Path, default=Path("bench/out"))
    ap.add_argument("--name", default="proposers", help="file stem: writes <out>/<name>.md and .json")
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--contract", type=Path, default=CONTRACT)
    ap.add_argument("--proposers", default=",".join(PROPOSER_NAMES))
    ap.add_argument("--rules", default="gate", help=f"decision rules, from {', '.join(RULES)}")
    ap.add_argument("--tolerances", type=float, nargs="+", help="harm tolerances (default: the contract's)")
    ap.add_argument("--set", nargs="+", default=[], metavar="FIELD=VALUE", help="promotion overrides")
    ap.add_argument("--arms", action="store_true", help="the contract's three arms with its arm budgets")
    ap.add_argument("--previous", type=Path, help="an earlier results .json: say how far each row moved from it")
    ap.add_argument("--why", help="with --previous: what changed since the earlier file, said beside the moves")
    ap.add_argument(
        "--entries", help="proposer:rule pairs, e.g. mutator:gate,oracle:oracle_gate (instead of proposers x rules)"
    )
    args = ap.parse_args(argv)
    if args.why and not args.previous:
        ap.error("--why says why figures moved from an earlier file: give that file with --previous")
    names = tuple(n for n in args.proposers.split(",") if n)
    rules = tuple(n for n in args.rules.split(",") if n)
    pairs = [tuple(e.split(":", 1)) for e in (args.entries or "").split(",") if e]
    if args.entries:
        names = tuple(dict.fromkeys(p[0] for p in pairs))
        rules = tuple(dict.fromkeys(p[-1] for p in pairs))
    bad = [n for n in names if n not in PROPOSER_NAMES] + [r for r in rules if r not in RULES]
    if bad or args.runs < 1 or args.budget < 60:
        ap.error(
            f"--proposers from {', '.join(PROPOSER_NAMES)}; --rules from {', '.join(RULES)}; --runs >= 1; "
            f"--budget >= 60 (got {bad or ''})"
        )
    if any(len(p) != 2 for p in pairs):
        ap.error(f"--entries takes proposer:rule pairs, got {args.entries!r}")
    args.entries = tuple(pairs) if pairs else tuple((n, r) for r in rules for n in names)
    from bench.metrics import previous_rows

    args.before = previous_rows(args.previous) if args.previous else None  # read before the output overwrites it
    return args


def main(argv: Sequence[str] | None = None, progress: Callable[[str], None] = print) -> list[dict[str, Any]]:
    args = parse_args(argv)
    cert = [x for x in args.set if x.partition("=")[0] in BUDGET_OVERRIDES]
    overrides = promotion_overrides([x for x in args.set if x not in cert])
    for pair in cert:
        key, _, value = pair.partition("=")
        overrides[key] = value if key == "certify_horizon" else float(value) if key == "certify_power" else int(value)
    try:
        base = with_overrides(load_contract(args.contract), overrides, regrid=not args.arms)
    except Exception as ex:  # a bad override or contract: one line, exit 2
        raise SystemExit(f"invalid contract or --set override: {ex}") from None
    if args.arms:
        return main_arms(args, overrides, list(argv if argv is not None else sys.argv[1:]))
    tolerances = args.tolerances or [base.contract.promotion.harm_tolerance]
    names = [entry_name(n, r) for n, r in args.entries]
    started = time.monotonic()
    tables: dict[float, list[dict[str, Any]]] = {}
    data: dict[str, Any] = {"runs": args.runs, "budget": args.budget, "overrides": overrides, "tolerances": {}}
    diffs = []
    for tol in tolerances:
        per_run = run_tolerance(args, args.entries, {**overrides, "harm_tolerance": tol})
        tables[tol] = [aggregate(n, [r[n] for r in per_run]) for n in names]
        data["tolerances"][str(tol)] = {
            "rows": tables[tol],
            "per_run": [{n: asdict(r[n]) for n in names} for r in per_run],
        }
        diffs += [f"- tolerance {tol:g}: {line[2:]}" for line in differences(per_run, names)]
    seconds = time.monotonic() - started
    from bench.metrics import provenance

    head = (
        f"# Proposer benchmark (simulated mechanisms world, `{args.contract.name}`)\n\n"
        + provenance(
            ["bench.proposers", *(argv if argv is not None else sys.argv[1:])],
            f"{args.runs} per cell{world_range(args)}",
            seconds,
        )
        + f"- audit budget per run: {args.budget} (calibration and certification included); "
        f"promotion overrides: {overrides or 'none'}\n\n"
    )
    now = {(str(tol), r["proposer"]): r for tol, rows in tables.items() for r in rows}
    text = head + format_md(tables, args) + "\n" + "\n".join(diffs) + "\n" + moved_section(args, now)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(data, indent=1))
    (args.out / f"{args.name}.md").write_text(text)
    progress(text)
    return [row for rows in tables.values() for row in rows]


if __name__ == "__main__":
    main()
