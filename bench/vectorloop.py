"""The gate benchmark's vector world, run through the product's loop.

The gate benchmark (bench/gates.py) draws each run's candidates as latent effect fields
(`bench.simrun.candidate_stream`, the world's `sim.effect_mixture`). Here they enter `sil run`'s
own phases, arms and certification (bench/looprun.py) as policy edits: candidate i is the edit
that adds the marker `bench_candidate_<i>` to `tool_policy.forbidden_tools` (`MarkerProposer`),
and the in-process executor (`VectorInProcess`) audits a policy set at the sum of the fields its
markers name, with the very `World` the truth is read from. So the loop's `CandidateArm`, with
the contract's gate judge (or a judge that knows the truth, or a posterior reference), decides
every candidate, and the loop's final phase certifies the champion.

    world = VectorWorld(World(params, dims, n_seeds), candidates, critical_idx)
    summary = loop_summary(loaded, world, judge_of)     # RunSummary, as bench.metrics reads it
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from bench.looprun import LoopRun, policy_env
from bench.proposers import edit_mutation, finished
from bench.simrun import Candidate, RunSummary, SimRun, summarize
from sil.contract import prepare
from sil.contract.schema import LoadedContract
from sil.exec import measure
from sil.exec.measure import AuditBackend, AuditRequest, AuditResult, GapError, MeasureContext
from sil.integrity.records import CertifyRecord, MutationRecord, RoundRecord, VerdictRecord
from sil.run.arms import CandidateArm
from sil.run.context import RunContext
from sil.run.train import PHASES
from sil.search.proposers import Proposal, ProposalRequest, ProposerBase
from sil.stats.judges import Judge, Outcome
from sil_runtime.policy_loader import LoadedPolicies, load_policies
from sil_runtime.sim.__main__ import SIMULATED_NOTE, JudgedScores, evidence_of, write_evidence
from sil_runtime.sim.world import World

MARKER = "bench_candidate_"
SURFACE, PATH = "tool_policy", "forbidden_tools"  # a list of names: each candidate adds its own


@dataclass
class VectorWorld:
    """One run's world and candidate stream; a policy set's latent field is the sum of the
    fields its markers name (the starting policy has none: field zero)."""

    world: World
    candidates: list[Candidate]
    critical_idx: list[int]
    _expected: dict[tuple[int, ...], np.ndarray] = field(default_factory=dict)

    @property
    def dims(self) -> list[str]:
        return list(self.world.dims)

    @property
    def target(self) -> str:
        return self.world.dims[0]

    @property
    def critical(self) -> list[str]:
        return [self.world.dims[i] for i in self.critical_idx]

    def markers(self, docs: dict[str, dict[str, Any]]) -> tuple[int, ...]:
        names = docs[SURFACE].get(PATH, [])
        return tuple(sorted(int(n[len(MARKER) :]) for n in names if n.startswith(MARKER)))

    def theta(self, docs: dict[str, dict[str, Any]]) -> np.ndarray:
        theta = np.zeros(self.world.shape)
        for i in self.markers(docs):
            theta = theta + self.candidates[i].field
        return theta

    def truth(self, docs: dict[str, dict[str, Any]]) -> np.ndarray:
        """Expected audit mean per dimension at drift 0 (`World.expected_scores`)."""
        key = self.markers(docs)
        if key not in self._expected:
            self._expected[key] = self.world.expected_scores(self.theta(docs))
        return self._expected[key]


class MarkerProposer(ProposerBase):
    """Proposes the stream's candidates in order: candidate i adds the marker of field i."""

    name = "bench:vector"

    def __init__(self, count: int, target: str) -> None:
        self.count, self.target = count, target

    def propose(self, request: ProposalRequest) -> Proposal:
        if request.index >= self.count:
            return Proposal(stop="the candidate stream is spent")
        names = list(request.champion[SURFACE].get(PATH, []))
        value = [*names, f"{MARKER}{request.index:04d}"]
        expected = {self.target: 0.0}  # the marker claims nothing: its field is the world's secret
        m = edit_mutation(SURFACE, PATH, value, request, self.name, "vector candidate", expected)
        if m is None:
            raise ValueError(f"the marker edit of candidate {request.index} is not a valid mutation")
        return Proposal(mutation=m)


class VectorInProcess:
    """Audits a policy set in the vector world: the runtime loads the set as in any audit, the
    world scores the field its markers name, and the loop scores the evidence."""

    def __init__(self, ctx: MeasureContext, backend: AuditBackend, world: VectorWorld, judge_resamples: int) -> None:
        self.ctx, self.backend, self.world, self.k = ctx, backend, world, judge_resamples
        self.seeds = prepare.load_seeds(ctx.measurement_root)
        rubric = prepare.load_rubric(ctx.measurement_root)
        self.higher = {d.name for d in rubric if d.direction == "higher_is_better"}
        self.policies: dict[Path, LoadedPolicies] = {}

    def __call__(self, reqs: list[AuditRequest]) -> list[AuditResult]:
        return [self.audit(r) for r in reqs]

    def audit(self, req: AuditRequest) -> AuditResult:
        start = time.monotonic()
        measure.prepare_audit_dir(req)
        try:
            if req.seed_set != "search":
                raise GapError("the vector world has no held-out seeds: certify on the search seeds")
            policies = self.loaded(req)
            theta = self.world.theta(policies.documents)
            rows = self.world.world.audit(theta, req.tick, req.pair_key or req.audit_id, req.audit_id, self.k)
            judged = JudgedScores(self.world.dims, self.higher, rows, [[] for _ in self.seeds])
            evidence = evidence_of(self.seeds, judged, policies, [SIMULATED_NOTE, "bench vector world"], self.k)
            write_evidence(evidence, req.audit_dir)
            # no proof of use: a marker is a tool name, which no audit shows (sil/exec/useproof.py)
            return measure.score_evidence(req, self.ctx, evidence, time.monotonic() - start)
        except GapError as gap:
            return measure.gap_result(req, self.backend, gap, start)

    def loaded(self, req: AuditRequest) -> LoadedPolicies:
        """The runtime's loading of the audited set, once per set: a set's folder never changes."""
        if req.policy_dir not in self.policies:
            self.policies[req.policy_dir] = load_policies(policy_env(req))
        return self.policies[req.policy_dir]


class ObservedArm(CandidateArm):
    """The loop's candidate arm, noting how each decision ended (the judge's `Ending`)."""

    def __init__(self, rc: RunContext, judge: Judge, proposer: MarkerProposer) -> None:
        super().__init__(rc, "gate", judge, proposer)
        self.endings: list[str] = []

    def decide(self, arm: Any, outcome: Outcome) -> None:
        self.endings.append(outcome.ending.value)
        super().decide(arm, outcome)


JudgeOf = Callable[[LoopRun], Judge]  # the gate arm's judge, made once the run is open


def loop_summary(loaded: LoadedContract, world: VectorWorld, judge_of: JudgeOf, name: str) -> RunSummary:
    """The contract's run (its never arm's calibration, the gate arm holding `judge_of`'s judge
    over the world's candidates, its certification) in the product's loop, scored against the truth."""
    k = loaded.contract.measurement.judge_resamples

    def executor(ctx: MeasureContext, backend: AuditBackend) -> VectorInProcess:
        return VectorInProcess(ctx, backend, world, k)

    with LoopRun(loaded, executor=executor) as lr:
        arm = ObservedArm(lr.rc, judge_of(lr), MarkerProposer(len(world.candidates), world.target))
        finished(lr, tuple((p, (lambda _rc: arm.run()) if p == "gate" else step) for p, step in PHASES))
        return summarize(replayed(lr, world, arm.endings, name))


def replayed(lr: LoopRun, world: VectorWorld, endings: list[str], name: str) -> SimRun:
    """The run's decisions, in the ledger's order, replayed on a `SimRun` of the same world: each
    decided candidate with its true effect, its audits and its ending; the delivered champion."""
    book, state = lr.rc.book, lr.rc.state
    index = {m.mutation.mutation_id: m.index for m in book.payloads("mutation", MutationRecord) if m.arm == "gate"}
    audits: dict[str | None, int] = {}  # a screen against the champion's audits is one audit, a pair two
    for r in book.payloads("round", RoundRecord):
        if r.arm == "gate":
            audits[r.mutation_id] = audits.get(r.mutation_id, 0) + (1 if r.reference else 2)
    verdicts = [v for v in book.payloads("verdict", VerdictRecord) if v.arm == "gate"]
    run = SimRun(world.world, world.candidates, 0, name, world.critical_idx, tolerance_of(lr, world))
    for v, ending in zip(verdicts, endings, strict=True):
        cand = world.candidates[index[v.mutation_id]]
        run.decide(cand, v.verdict == "keep", audits.get(v.mutation_id, 0), ending)
    run.set_champion(world.theta(lr.delivered("gate")))
    certs = [c for c in book.payloads("certify", CertifyRecord) if c.arm == "gate"]
    gate = state.arms.get("gate")
    final_rounds = len(gate.final_rounds) if gate else 0
    run.used = sum(a.audits for a in state.arms.values()) + 2 * final_rounds
    run.notes["alpha_spent"] = state.shared.budget.spent
    if certs:
        run.notes["certified"] = float(certs[-1].certified)
    return run


def tolerance_of(lr: LoopRun, world: VectorWorld) -> np.ndarray:
    return np.array([lr.rc.promotion.tolerance(d) for d in world.critical])
