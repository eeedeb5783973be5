"""Proposer benchmark: does reading the evidence find better policies on the mechanisms world?

Layer L5. Each simulated run draws a world (seed difficulties, drift, hidden mechanisms per
seed: `world_seed` and `landscape_seed` vary with the run) and runs the gate arm's policy
with each proposer on it: the loop's own proposers (`sil/search/proposers`) asked with the loop's
own `ProposalRequest` and `MutatorContext` (`sil/search/evidence.py`), every candidate judged by the
loop's `GateJudge` and its final champion certified with `sil.stats.judges.certify`, exactly as
`sil/run/arms.py` and `sil/run/certify.py` call them. Only the audit is in-process: scores and
judge highlights come from the same world and mechanisms the sim audit subprocess uses.

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

from sil.contract import prepare
from sil.contract.schema import LoadedContract, Promotion, load_contract
from sil.contract.simparams import SimParams
from sil.policies.mutation import Mutation, MutationError, apply_mutation, mutation_id_for, parse_mutation
from sil.search.evidence import AuditEvidence, MutatorContext, SeedEvidence, TriedEdit, norm_hash, observed_effect
from sil.search.proposers import Proposal, ProposalRequest, ProposerBase
from sil.search.proposers.catalogue import CatalogueProposer, default_catalogue
from sil.search.proposers.llm import LLMProposer
from sil.stats.fitness import RoundStat, paired_round
from sil.stats.judges import ArmBudget, CoinJudge, GateJudge, Judge, JudgeState, Trial, certify, seed_count_scale
from sil_policy import SURFACES, load_surface
from sil_runtime.sim.landscape import critical_dimensions, latent_field
from sil_runtime.sim.mechanisms import highlights, mechanism_field
from sil_runtime.sim.world import World

ROOT = Path(__file__).resolve().parents[1]
CONTRACT = ROOT / "examples" / "program-mutator-offline.md"
PROPOSER_NAMES = ("catalogue", "random_edit", "mutator", "oracle")
# the contract's gate judge; a gate that knows the truth (nothing certified: the ceiling); a search
# that knows the truth and keeps only harmless improvements, followed by the loop's certification
RULES = ("gate", "oracle_gate", "oracle_search")
ORACLE_RULES = ("oracle_gate", "oracle_search")
CERTIFIED_RULES = ("gate", "oracle_search")
RANDOM_WORDS = (
    "always never tool error result reply customer order check report say text call data "
    "instruction help routine refund account verify before after when if the a do not"
).split()


# ---------------------------------------------------------------- the simulated audit


@dataclass
class Audit:
    audit_id: str
    set_id: str
    scores: np.ndarray  # [n_seeds, D], NaN = missing
    evidence: AuditEvidence


class BenchWorld:
    """One run's world: theta, truth and audits (scores + the judge's highlights) of a policy set."""

    def __init__(
        self,
        loaded: LoadedContract,
        run: int,
        seed_ids: list[str],
        rubric: Mapping[str, str],
        n_search: int | None = None,
    ) -> None:
        c = loaded.contract
        # seeds [0, n_search) are the search seeds; the rest are held out (certification only)
        self.n_search = len(seed_ids) if n_search is None else n_search
        sim = c.settings(SimParams)
        self.params = sim.model_copy(
            update={"world_seed": sim.world_seed + run, "landscape_seed": sim.landscape_seed + run}
        )
        self.dims = list(rubric)
        self.target = self.params.landscape_target
        self.critical = critical_dimensions(rubric, self.target)
        self.seed_ids = seed_ids
        self.world = World(self.params, self.dims, len(seed_ids))
        self._theta: dict[str, np.ndarray] = {}
        self.tick = 0

    def theta(self, docs: dict[str, dict[str, Any]], set_id: str) -> np.ndarray:
        if set_id not in self._theta:
            n = len(self.seed_ids)
            base = latent_field(docs, self.dims, self.target, self.critical, n, self.params)
            mech = mechanism_field(docs, self.dims, self.seed_ids, self.params)
            self._theta[set_id] = self.params.hashed_scale * base + mech
        return self._theta[set_id]

    def truth(self, docs: dict[str, dict[str, Any]], part: str = "search") -> np.ndarray:
        """True expected audit mean per dim over the search seeds, the held-out seeds, or all."""
        theta = self.theta(docs, set_id(docs))
        if part == "all":
            return self.world.expected_scores(theta)
        per_seed = self.world.expected_score_at(self.world._base + theta)
        rows = self.rows(part)
        return per_seed[rows].mean(axis=0)

    def rows(self, part: str) -> slice:
        return slice(0, self.n_search) if part == "search" else slice(self.n_search, len(self.seed_ids))

    @property
    def has_heldout(self) -> bool:
        return self.n_search < len(self.seed_ids)

    def pair(self, label: str, a: dict[str, dict[str, Any]], b: dict[str, dict[str, Any]]) -> tuple[Audit, Audit]:
        out = []
        for role, docs in (("candidate", a), ("champion", b)):
            sid = set_id(docs)
            audit_id = f"{label}-{role}"
            y = self.world.audit(self.theta(docs, sid), self.tick, label, audit_id)
            notes = highlights(docs, self.dims, self.seed_ids, self.params, audit_id)
            seeds = [
                SeedEvidence(
                    seed=seed,
                    scores={d: float(v) for d, v in zip(self.dims, row, strict=True) if math.isfinite(v)},
                    highlights=hl,
                )
                for seed, row, hl in list(zip(self.seed_ids, y, notes, strict=True))[: self.n_search]
            ]
            out.append(Audit(audit_id, sid, y, AuditEvidence(audit_id=audit_id, round=label, seeds=seeds)))
        self.tick += 1
        return out[0], out[1]


def set_id(docs: dict[str, dict[str, Any]]) -> str:
    return hashlib.sha256(json.dumps(docs, sort_keys=True).encode()).hexdigest()[:16]


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
            current = _value_at(request.champion[surface], path)
            value: Any = [*current, text] if isinstance(current, list) else text
            m = _mutation(surface, path, value, request, self.name, "random edit", {"broken_tool_use": 0.0})
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
            m = _mutation(surface, path, value, request, self.name, "oracle", {w.target: -0.5})
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


def _value_at(doc: Any, path: str) -> Any:
    for part in path.split("."):
        doc = doc.get(part) if isinstance(doc, dict) else None
    return doc


def _mutation(
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


# ---------------------------------------------------------------- one run of the arm


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


def tolerance(promotion: Promotion, dim: str) -> float:
    """A critical dimension's harm tolerance (the world may score more critical dims than the contract)."""
    tol = promotion.harm_tolerance
    return tol if isinstance(tol, float) else tol.get(dim, min(tol.values()))


class GateRun:
    """The gate arm of the loop on one bench world: calibrate, propose, judge, certify."""

    def __init__(
        self,
        loaded: LoadedContract,
        world: BenchWorld,
        origin: dict[str, dict[str, Any]],
        budget: int,
        rule: str = "gate",
        certify_coin: bool = False,
    ) -> None:
        self.loaded, self.world, self.origin, self.budget, self.rule = loaded, world, origin, budget, rule
        self.promo = loaded.contract.promotion
        # the oracle gate needs no certification: it knows the delivered champion's truth. The
        # coin's champion is certified only for the bench's counterfactual (`certify_coin`).
        certifies = rule in CERTIFIED_RULES or (rule == "coin" and certify_coin)
        self.reserve = 2 * loaded.contract.budget.certify_rounds if certifies else 0
        self.uncertified: RunResult | None = None  # the search's champion as if delivered uncertified
        self.used = 0
        self.ran_dry = False  # the proposer had nothing left: its unspent audits go to the certification
        self.audits: list[Audit] = []

    def round(
        self, label: str, cand: dict[str, dict[str, Any]], champ: dict[str, dict[str, Any]], part: str = "search"
    ) -> RoundStat:
        a, b = self.world.pair(label, cand, champ)
        if part == "search":
            self.audits += [a, b]  # held-out audits are never shown to the proposer
        self.used += 2
        rows = self.world.rows(part)
        return paired_round(a.scores[rows], b.scores[rows], self.world.dims, self.promo.min_seed_coverage)

    def context(self, champion: dict[str, dict[str, Any]], history: list[TriedEdit]) -> MutatorContext:
        sid = set_id(champion)
        mine = [a.evidence for a in self.audits if a.set_id == sid]
        k = self.loaded.contract.mutator.recent_audits
        index = {a.audit_id: {s.seed: sorted(s.scores) for s in a.evidence.seeds} for a in self.audits}
        # what a quoted score must match, as the loop's build_context gives it
        scores = {a.audit_id: {s.seed: dict(s.scores) for s in a.evidence.seeds} for a in self.audits}
        shown = list(reversed(mine[-k:]))
        messages = {
            a.audit_id: {s.seed: [h.message for h in s.highlights if h.message is not None] for s in a.seeds}
            for a in shown
        }
        p = self.promo
        return MutatorContext(
            arm="gate",
            champion_set=sid,
            target_dimensions=list(p.target_dimensions),
            critical_dimensions=list(p.critical_dimensions),
            auxiliary_dimensions=list(p.auxiliary_dimensions),
            audits=shown,
            history=history[-30:],
            index=index,
            messages=messages,
            scores=scores,
        )

    def run(self, proposer: Any, seed: int) -> RunResult:
        coin = self.rule == "coin"  # the random arm: one round, then the loop's seeded coin
        judge: Judge = CoinJudge(seed) if coin else GateJudge(self.promo)
        shared = self.calibrate(coin)
        calibration = self.used
        history: list[TriedEdit]
        tried: set[tuple[str, str, str]]
        champion, history, tried = self.origin, [], set()
        keeps = decisions = gaps = streak = calls = false_keeps = 0
        usd = 0.0
        index = 0
        while self.budget - self.reserve - self.used >= 2 and judge.stop_reason(shared) is None:
            rng = np.random.default_rng([seed, 2, index])
            ctx = self.context(champion, history) if getattr(proposer, "reads_evidence", False) else None
            proposal = proposer.propose(ProposalRequest(champion, tried, rng, index, seed, arm="gate", context=ctx))
            calls += len(proposal.calls)
            usd += sum(c.usd for c in proposal.calls)
            if proposal.gap is not None:
                gaps, streak = gaps + 1, streak + 1
                if streak >= self.loaded.contract.stop.max_consecutive_gaps:
                    break
                continue
            if proposal.mutation is None:
                self.ran_dry = True
                break
            streak, m = 0, proposal.mutation
            cand = {**champion, m.surface: apply_mutation(m, champion, list(SURFACES))}
            diffs, verdict, shared = self.decide(judge, shared, cand, champion, index, calibration)
            decisions += 1
            tried.add(m.edit_key)
            history.append(self.tried_edit(index, m, verdict, diffs, shared))
            if verdict == "keep":
                t = self.world.dims.index(self.world.target)
                false_keeps += int(self.world.truth(cand)[t] >= self.world.truth(champion)[t])
                champion, keeps = cand, keeps + 1
            index += 1
        counts = RunCounts(keeps, decisions, self.used, gaps, calls, usd)
        self.uncertified = self.result(champion, counts, None, false_keeps)
        certified = self.certify(champion, shared) if keeps and self.reserve else None
        counts = replace(counts, audits=self.used)
        return self.result(self.origin if certified is False else champion, counts, certified, false_keeps)

    def result(
        self, champion: dict[str, dict[str, Any]], counts: RunCounts, certified: bool | None, false_keeps: int
    ) -> RunResult:
        """A run's outcome with `champion` as what it delivers, scored against the simulated truth."""
        final = self.world.truth(champion) - self.world.truth(self.origin)
        crit = [self.world.dims.index(c) for c in self.world.critical]
        t = self.world.dims.index(self.world.target)
        beyond = any(final[self.world.dims.index(c)] > tolerance(self.promo, c) for c in self.world.critical)
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
            false_keeps=false_keeps,
            **self.other_parts(champion, t),
        )

    def calibrate(self, coin: bool) -> JudgeState:
        """The noise floor from A/A pairs, as the never arm measures it."""
        shared = JudgeState.start(self.promo)
        for i in range(self.promo.calibration_pairs):
            shared.pool.add_aa(self.round(f"aa{i:03d}", self.origin, self.origin))
        if coin:  # the never arm paid for these; the random arm's proposer reads them as evidence
            self.used = 0
        return shared

    def decide(
        self,
        judge: Judge,
        shared: JudgeState,
        cand: dict[str, dict[str, Any]],
        champion: dict[str, dict[str, Any]],
        index: int,
        calibration: int,
    ) -> tuple[list[dict[str, float | None]], str, JudgeState]:
        """One candidate's paired rounds until the rule decides: its differences, verdict, new state."""
        coin = self.rule == "coin"
        diffs: list[dict[str, float | None]] = []
        trial, verdict = Trial(), "continue"
        if self.rule in ORACLE_RULES:
            diffs.append(self.round(f"c{index:03d}-r00", cand, champion).diff)
            verdict = "keep" if self.oracle_keeps(cand, champion, harmless=self.rule == "oracle_search") else "revert"
        while verdict == "continue":
            if self.budget - self.reserve - self.used < 2:
                verdict = "revert"
                break
            stat = self.round(f"{'coin-' if coin else ''}c{index:03d}-r{len(diffs):02d}", cand, champion)
            diffs.append(stat.diff)
            left = self.budget - self.reserve - self.used
            budget = ArmBudget(audits_left=left, audits_spent=self.used - calibration)
            trial, outcome = judge.judge(trial, stat, shared, budget, index)
            verdict = outcome.verdict
        if self.rule not in ORACLE_RULES:
            shared = judge.close(trial, verdict, shared)
        return diffs, verdict, shared

    def other_parts(self, champion: dict[str, dict[str, Any]], t: int) -> dict[str, float]:
        if not self.world.has_heldout:
            return {}
        w, o = self.world, self.origin
        return {
            "target_heldout": float(w.truth(champion, "heldout")[t] - w.truth(o, "heldout")[t]),
            "target_all": float(w.truth(champion, "all")[t] - w.truth(o, "all")[t]),
        }

    def oracle_keeps(
        self, cand: dict[str, dict[str, Any]], champion: dict[str, dict[str, Any]], harmless: bool = False
    ) -> bool:
        """KEEP iff the candidate truly lowers the target and leaves every critical dimension
        within its tolerance of the start (`harmless`: no worse than the start at all, which a
        certification can pass): the decision a gate with no noise would make."""
        w, p = self.world, self.promo
        origin, before, after = w.truth(self.origin), w.truth(champion), w.truth(cand)
        t = w.dims.index(w.target)
        room = {c: 1e-9 if harmless else tolerance(p, c) for c in w.critical}
        within = all(after[w.dims.index(c)] - origin[w.dims.index(c)] <= room[c] for c in w.critical)
        return bool(after[t] < before[t] and within)

    def tried_edit(
        self, index: int, m: Any, verdict: str, diffs: list[dict[str, float | None]], shared: JudgeState
    ) -> TriedEdit:
        return TriedEdit(
            index=index,
            mutation_id=m.mutation_id,
            surface=m.surface,
            path=m.path,
            value=json.dumps(m.value)[:300],
            norm_hash=norm_hash(m.value),
            hypothesis=m.hypothesis[:300],
            expected=dict(m.expected_effect),
            verdict=verdict,
            observed=observed_effect(diffs, shared.pool.estimate().sigma),
        )

    def certify(self, champion: dict[str, dict[str, Any]], shared: JudgeState) -> bool:
        # as sil/run/certify.certify_looks: a dry proposer's unspent audits lengthen the horizon
        unspent = max(0, self.budget - self.reserve - self.used) if self.ran_dry else 0
        looks = self.loaded.contract.budget.certify_rounds + unspent // 2
        part = "heldout" if self.world.has_heldout else "search"  # as measurement.certify_on auto
        n_cert = len(self.world.seed_ids) - self.world.n_search if part == "heldout" else self.world.n_search
        scale = seed_count_scale(self.world.n_search, n_cert)
        rounds = []
        for i in range(looks):
            rounds.append(self.round(f"cert{i:02d}", champion, self.origin, part))
            decision = certify(self.promo, shared.pool, rounds, looks, scale)
            if decision.verdict != "continue":
                return decision.verdict == "keep"
        return False


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


def with_overrides(loaded: LoadedContract, overrides: dict[str, object]) -> LoadedContract:
    """The contract with promotion fields replaced (validated, as the contract would be);
    `certify_rounds` is the budget's field of that name."""
    if not overrides:
        return loaded
    c, over = loaded.contract, dict(overrides)
    budget = c.budget.model_dump()
    if "certify_rounds" in over:
        budget["certify_rounds"] = over.pop("certify_rounds")
    promo = Promotion.model_validate({**c.promotion.model_dump(), **over})
    contract = type(c).model_validate({**c.model_dump(), "promotion": promo.model_dump(), "budget": budget})
    return loaded.model_copy(update={"contract": contract})


def entry_name(proposer: str, rule: str) -> str:
    return proposer if rule == "gate" else f"{proposer}+{rule}"


def one_run(task: tuple[str, int, int, tuple[tuple[str, str], ...], dict[str, object]]) -> dict[str, RunResult]:
    contract_path, run, budget, entries, overrides = task
    loaded = with_overrides(load_contract(Path(contract_path)), overrides)
    root = ROOT / loaded.contract.measurement.seed_library
    seeds = [s.id for s in prepare.load_seeds(root)]
    rubric = {d.name: d.tier for d in prepare.load_rubric(root)}
    origin = {n: load_surface(n, ROOT / "state" / "policies" / s.filename)[0] for n, s in SURFACES.items()}
    out = {}
    for name, rule in entries:
        world = BenchWorld(loaded, run, seeds, rubric)
        gate_run = GateRun(loaded, world, origin, budget, rule)
        out[entry_name(name, rule)] = gate_run.run(make_proposer(name, loaded, world), 1000 + run)
    return out


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
    """The contract's three arms on one world, with its own arm budgets (the default `make run`):
    the never arm's A/A pairs, the random arm's coin over its audits (and the gate's certification,
    as the loop does with `budget.certify_random`; the other way is the counterfactual row), the
    gate arm's gate and certification. Each arm's champion is scored against the simulated truth."""
    contract_path, run, overrides = task
    loaded = with_overrides(load_contract(Path(contract_path)), overrides)
    c = loaded.contract
    root = ROOT / c.measurement.seed_library
    search = [s.id for s in prepare.load_seeds(root)]
    heldout = [s.id for s in prepare.load_seeds(root, "heldout")] if c.measurement.certify_on != "search" else []
    rubric = {d.name: d.tier for d in prepare.load_rubric(root)}
    origin = {n: load_surface(n, ROOT / "state" / "policies" / s.filename)[0] for n, s in SURFACES.items()}
    arm = c.budget.arm_audits
    gate_budget = 2 * c.promotion.calibration_pairs + arm["gate"] + 2 * c.budget.certify_rounds
    out = {"never": RunResult(0.0, 0.0, 0, 0, arm.get("never", 0), 0, 0, 0.0, None, target_heldout=0.0, target_all=0.0)}
    for name, rule, budget in (("random", "coin", arm["random"]), ("gate", "gate", gate_budget)):
        world = BenchWorld(loaded, run, search + heldout, rubric, n_search=len(search))
        proposer = LLMProposer(loaded)
        if rule == "coin":  # its search as the loop runs it, then the gate's certification
            coin = GateRun(loaded, world, origin, budget + 2 * c.budget.certify_rounds, rule, certify_coin=True)
            certified = coin.run(proposer, c.seed + run)
            assert coin.uncertified is not None
            if c.budget.certify_random and c.budget.certify_rounds:
                out[name], out[RANDOM_UNCERTIFIED] = certified, coin.uncertified
            else:
                out[name], out[RANDOM_CERTIFIED] = coin.uncertified, certified
        else:
            out[name] = GateRun(loaded, world, origin, budget, rule).run(proposer, c.seed + run)
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
    )
    args.out.mkdir(parents=True, exist_ok=True)
    data = {"runs": args.runs, "rows": rows, "per_run": [{a: asdict(r[a]) for a in names} for r in per_run]}
    (args.out / f"{args.name}.json").write_text(json.dumps(data, indent=1))
    (args.out / f"{args.name}.md").write_text(text)
    print(text)
    return rows


def aggregate(name: str, results: list[RunResult]) -> dict[str, Any]:
    t = np.array([r.final_target for r in results])
    c = np.array([r.final_critical for r in results])
    decisions = sum(r.decisions for r in results)
    certs = [r.certified for r in results if r.certified is not None]
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
    }


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
        "| P(any false KEEP) | KEEPs/run | certified | audits/decision | decisions/run | gaps | mutator calls/run |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for tol, rows in tables.items():
        for r in rows:
            share = share_of(rows, CEILING, r["final_target"])
            share += f" | {share_of(rows, CERTIFIED_CEILING, r['final_target'])}"
            cert = "—" if r["certified_share"] is None else f"{r['certified_share']:.2f}"
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
    ap.add_argument(
        "--entries", help="proposer:rule pairs, e.g. mutator:gate,oracle:oracle_gate (instead of proposers x rules)"
    )
    args = ap.parse_args(argv)
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
    return args


def main(argv: Sequence[str] | None = None, progress: Callable[[str], None] = print) -> list[dict[str, Any]]:
    from bench.gates import _overrides

    args = parse_args(argv)
    cert = [x for x in args.set if x.startswith("certify_rounds=")]
    overrides = _overrides([x for x in args.set if x not in cert])
    if cert:
        overrides["certify_rounds"] = int(cert[-1].split("=", 1)[1])
    try:
        base = with_overrides(load_contract(args.contract), overrides)
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
    text = head + format_md(tables, args) + "\n" + "\n".join(diffs) + "\n"
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.name}.json").write_text(json.dumps(data, indent=1))
    (args.out / f"{args.name}.md").write_text(text)
    progress(text)
    return [row for rows in tables.values() for row in rows]


if __name__ == "__main__":
    main()
