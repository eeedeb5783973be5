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
Writes `proposers.json` and `proposers.md`. Simulated figures: they measure search
strategies on a simulated world, not any model.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import multiprocessing as mp
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sil.contract import prepare
from sil.contract.schema import LoadedContract, load_contract
from sil.policies.mutation import Mutation, MutationError, apply_mutation, mutation_id_for, parse_mutation
from sil.search.evidence import AuditEvidence, MutatorContext, SeedEvidence, TriedEdit, norm_hash, observed_effect
from sil.search.proposers import Proposal, ProposalRequest
from sil.search.proposers.catalogue import CatalogueProposer, default_catalogue
from sil.search.proposers.llm import LLMProposer
from sil.stats.fitness import RoundStat, paired_round
from sil.stats.judges import ArmBudget, GateJudge, JudgeState, Trial, certify
from sil_policy import SURFACES, load_surface
from sil_runtime.sim.landscape import critical_dimensions, latent_field
from sil_runtime.sim.mechanisms import highlights, mechanism_field
from sil_runtime.sim.world import World

ROOT = Path(__file__).resolve().parents[1]
CONTRACT = ROOT / "examples" / "program-mutator-offline.md"
PROPOSER_NAMES = ("catalogue", "random_edit", "mutator", "oracle")
HARM_TOLERANCE = 0.3  # as bench/simrun.py: a final critical change above this is "worse"
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

    def __init__(self, loaded: LoadedContract, run: int, seed_ids: list[str], rubric: Mapping[str, str]) -> None:
        c = loaded.contract
        assert c.sim is not None
        self.params = c.sim.model_copy(
            update={"world_seed": c.sim.world_seed + run, "landscape_seed": c.sim.landscape_seed + run}
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

    def truth(self, docs: dict[str, dict[str, Any]]) -> np.ndarray:
        return self.world.expected_scores(self.theta(docs, set_id(docs)))

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
                for seed, row, hl in zip(self.seed_ids, y, notes, strict=True)
            ]
            out.append(Audit(audit_id, sid, y, AuditEvidence(audit_id=audit_id, round=label, seeds=seeds)))
        self.tick += 1
        return out[0], out[1]


def set_id(docs: dict[str, dict[str, Any]]) -> str:
    return hashlib.sha256(json.dumps(docs, sort_keys=True).encode()).hexdigest()[:16]


# ---------------------------------------------------------------- bench-only proposers


class RandomEditProposer:
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


class OracleProposer:
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


class GateRun:
    """The gate arm of the loop on one bench world: calibrate, propose, judge, certify."""

    def __init__(
        self, loaded: LoadedContract, world: BenchWorld, origin: dict[str, dict[str, Any]], budget: int
    ) -> None:
        self.loaded, self.world, self.origin, self.budget = loaded, world, origin, budget
        self.promo = loaded.contract.promotion
        self.reserve = 2 * loaded.contract.budget.certify_rounds
        self.used = 0
        self.audits: list[Audit] = []

    def round(self, label: str, cand: dict[str, dict[str, Any]], champ: dict[str, dict[str, Any]]) -> RoundStat:
        a, b = self.world.pair(label, cand, champ)
        self.audits += [a, b]
        self.used += 2
        return paired_round(a.scores, b.scores, self.world.dims, self.promo.min_seed_coverage)

    def context(self, champion: dict[str, dict[str, Any]], history: list[TriedEdit]) -> MutatorContext:
        sid = set_id(champion)
        mine = [a.evidence for a in self.audits if a.set_id == sid]
        k = self.loaded.contract.mutator.recent_audits
        index = {a.audit_id: {s.seed: sorted(s.scores) for s in a.evidence.seeds} for a in self.audits}
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
        )

    def run(self, proposer: Any, seed: int) -> RunResult:
        judge, shared = GateJudge(self.promo), JudgeState.start(self.promo)
        for i in range(self.promo.calibration_pairs):
            shared.pool.add_aa(self.round(f"aa{i:03d}", self.origin, self.origin))
        calibration = self.used
        history: list[TriedEdit]
        tried: set[tuple[str, str, str]]
        champion, history, tried = self.origin, [], set()
        keeps = decisions = gaps = streak = calls = 0
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
                break
            streak, m = 0, proposal.mutation
            cand = {**champion, m.surface: apply_mutation(m, champion, list(SURFACES))}
            diffs: list[dict[str, float | None]]
            trial, diffs, verdict = Trial(), [], "continue"
            while verdict == "continue":
                if self.budget - self.reserve - self.used < 2:
                    verdict = "revert"
                    break
                stat = self.round(f"c{index:03d}-r{len(diffs):02d}", cand, champion)
                diffs.append(stat.diff)
                left = self.budget - self.reserve - self.used
                budget = ArmBudget(audits_left=left, audits_spent=self.used - calibration)
                trial, outcome = judge.judge(trial, stat, shared, budget, index)
                verdict = outcome.verdict
            shared = judge.close(trial, verdict, shared)
            decisions += 1
            tried.add(m.edit_key)
            history.append(self.tried_edit(index, m, verdict, diffs, shared))
            if verdict == "keep":
                champion, keeps = cand, keeps + 1
            index += 1
        certified = self.certify(champion, shared) if keeps and self.reserve else None
        if certified is False:
            champion = self.origin
        final = self.world.truth(champion) - self.world.truth(self.origin)
        crit = [self.world.dims.index(c) for c in self.world.critical]
        t = self.world.dims.index(self.world.target)
        return RunResult(
            float(final[t]), float(max(final[crit])), keeps, decisions, self.used, gaps, calls, usd, certified
        )

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
        looks = self.loaded.contract.budget.certify_rounds
        rounds = []
        for i in range(looks):
            rounds.append(self.round(f"cert{i:02d}", champion, self.origin))
            decision = certify(self.promo, shared.pool, rounds, looks)
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


def one_run(task: tuple[str, int, int, tuple[str, ...]]) -> dict[str, RunResult]:
    contract_path, run, budget, names = task
    loaded = load_contract(Path(contract_path))
    root = ROOT / loaded.contract.measurement.seed_library
    seeds = [s.id for s in prepare.load_seeds(root)]
    rubric = {d.name: d.tier for d in prepare.load_rubric(root)}
    origin = {n: load_surface(n, ROOT / "state" / "policies" / s.filename)[0] for n, s in SURFACES.items()}
    out = {}
    for name in names:
        world = BenchWorld(loaded, run, seeds, rubric)
        out[name] = GateRun(loaded, world, origin, budget).run(make_proposer(name, loaded, world), 1000 + run)
    return out


def aggregate(name: str, results: list[RunResult]) -> dict[str, Any]:
    t = np.array([r.final_target for r in results])
    c = np.array([r.final_critical for r in results])
    decisions = sum(r.decisions for r in results)
    return {
        "proposer": name,
        "runs": len(results),
        "final_target": round(float(t.mean()), 4),
        "final_target_se": round(float(t.std(ddof=1) / math.sqrt(len(t))) if len(t) > 1 else float("nan"), 4),
        "p_final_worse": round(float(np.mean((t > 0) | (c > HARM_TOLERANCE))), 4),
        "keeps_per_run": round(float(np.mean([r.keeps for r in results])), 3),
        "audits_per_decision": round(sum(r.audits for r in results) / max(1, decisions), 2),
        "decisions_per_run": round(decisions / len(results), 2),
        "proposer_gaps": int(sum(r.gaps for r in results)),
        "mutator_calls_per_run": round(float(np.mean([r.mutator_calls for r in results])), 2),
        "mutator_usd": round(float(sum(r.mutator_usd for r in results)), 4),
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


def format_md(rows: list[dict[str, Any]], args: argparse.Namespace, seconds: float) -> str:
    head = (
        f"# Proposer benchmark (simulated mechanisms world)\n\n"
        f"`python -m bench.proposers --runs {args.runs} --budget {args.budget}`: {args.runs} runs per "
        f"proposer, audit budget {args.budget} per run (calibration and certification included), "
        f"{seconds:.0f}s. Simulated figures about search strategies, not about any model.\n\n"
        "| proposer | final true target change (± SE) | P(final worse) | KEEPs/run | audits/decision "
        "| decisions/run | proposer gaps | mutator calls/run | mutator USD |\n|---|---|---|---|---|---|---|---|---|\n"
    )
    lines = [
        f"| {r['proposer']} | {r['final_target']:+.3f} ± {r['final_target_se']:.3f} | {r['p_final_worse']:.3f} "
        f"| {r['keeps_per_run']:.2f} | {r['audits_per_decision']:.1f} | {r['decisions_per_run']:.1f} "
        f"| {r['proposer_gaps']} | {r['mutator_calls_per_run']:.1f} | {r['mutator_usd']:.2f} |"
        for r in rows
    ]
    return head + "\n".join(lines) + "\n"


def main(argv: Sequence[str] | None = None, progress: Callable[[str], None] = print) -> list[dict[str, Any]]:
    ap = argparse.ArgumentParser(prog="python -m bench.proposers", description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=40)
    ap.add_argument("--budget", type=int, default=300)
    ap.add_argument("--out", type=Path, default=Path("bench/out"))
    ap.add_argument("--jobs", type=int, default=2)
    ap.add_argument("--contract", type=Path, default=CONTRACT)
    ap.add_argument("--proposers", default=",".join(PROPOSER_NAMES))
    args = ap.parse_args(argv)
    names = tuple(n for n in args.proposers.split(",") if n)
    bad = [n for n in names if n not in PROPOSER_NAMES]
    if bad or args.runs < 1 or args.budget < 60:
        ap.error(f"--proposers from {', '.join(PROPOSER_NAMES)}; --runs >= 1; --budget >= 60 (got {bad or ''})")
    started = time.monotonic()
    tasks = [(str(args.contract), r, args.budget, names) for r in range(args.runs)]
    if args.jobs > 1:
        with mp.get_context("spawn").Pool(args.jobs) as pool:
            per_run = pool.map(one_run, tasks)
    else:
        per_run = [one_run(t) for t in tasks]
    rows = [aggregate(n, [r[n] for r in per_run]) for n in names]
    seconds = time.monotonic() - started
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "proposers.json").write_text(
        json.dumps(
            {
                "runs": args.runs,
                "budget": args.budget,
                "rows": rows,
                "per_run": [{n: asdict(r[n]) for n in names} for r in per_run],
            },
            indent=1,
        )
    )
    text = format_md(rows, args, seconds) + "\n" + "\n".join(differences(per_run, names)) + "\n"
    (args.out / "proposers.md").write_text(text)
    progress(text)
    return rows


if __name__ == "__main__":
    main()
