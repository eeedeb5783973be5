"""The fixed-budget loop (`sil run`): baseline, then the never, random and gate arms.

0. preflight: a sentinel audit proves every searched surface reaches the target;
1. baseline: K audits of the starting policy, recorded with provenance;
2. never: concurrent A/A pairs of the starting policy (noise floor and drift; never promotes);
3. random: one candidate at a time, one paired round, a seeded coin decides;
4. gate: one candidate at a time, a screen round, then sequential paired confirmation
   rounds (candidate and champion audited together on the same seeds) until the gate keeps
   or reverts, within the run's error budget;
5. final: the gate's champion is certified against the starting policy (or rolled back);
   the random arm's champion is re-measured, for the summary.

Every side effect is preceded by an intent record; state is saved atomically after every
step; re-running the same command resumes from the state, the ledger and the audit
directories without repeating a finished audit. How one round of audits is run and
recovered lives in loop/rounds.py.

    python train.py                      # same as `sil run` on program.md
"""

from __future__ import annotations

import hashlib
import re
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import fitness
import gate as gates
import measure
from ledger import Ledger
from loop.contract import LoadedContract
from loop.faults import crashpoint
from loop.mutation import Mutation, apply_mutation
from loop.backends import make_backend
from loop.errors import Halt
from loop.proposers import ProposalRequest, make_proposer
from loop.policyrefs import PolicyRefError, PolicyRefs
from loop.policystore import HandEditedPolicy, PolicyStore
from loop.records import (
    SIM_NOTE, BaselineRecord, IntentRecord, PolicyChangeRecord, RecordBook, RoundRecord, RunRecord,
    StopRecord, VerdictRecord,
)
from loop.rounds import RESULT_FILE, AuditRounds
from fitness import RoundStat
from loop.runstate import ArmState, Pending, RunState
from measure import MeasureContext

RANDOM_ACCEPT_P = 0.5
ARM_ORDER = ("never", "random", "gate")
STALE_TEMP = re.compile(r"^\..+\.[0-9a-f]{12}\.tmp$")  # loop.fsutil's atomic-write temp files


@dataclass(frozen=True)
class RunConfig:
    repo_root: Path
    run_dir: Path
    policy_dir: Path
    replicate_k: int | None = None
    approval_id: str = "not required (offline)"
    on_event: Callable[[str], None] = print
    before_audits: Callable[[], None] = lambda: None  # re-checks the approval; raises to stop
    anchor: Callable[[], None] = lambda: None  # signs and anchors the ledger head outside the file
    policy_repo: Path | None = None  # git repo for the candidates' refs (loop/policyrefs.py)


class Runner(AuditRounds):
    """Drives one run to completion (or to a recorded halt) from its persisted state."""

    def __init__(self, loaded: LoadedContract, cfg: RunConfig, measurement_hash: str) -> None:
        self.contract = loaded.contract
        self.programme = loaded.programme
        self.cfg = cfg
        self.ctx = MeasureContext.from_contract(self.contract, cfg.repo_root)
        self.store = PolicyStore(cfg.run_dir)
        self.book = RecordBook(
            Ledger(cfg.run_dir / "ledger.jsonl", offline=self.contract.offline,
                   simulated=self.contract.backend == "sim"),
            cfg.run_dir.name,
        )
        promotion = self.contract.promotion
        if cfg.replicate_k is not None:
            promotion = promotion.model_copy(update={"replicate_k": cfg.replicate_k})
        self.promotion = promotion
        self.proposer = make_proposer(loaded)
        self.measurement_hash = measurement_hash
        self.backend = make_backend(self.contract.backend)
        self.audit_cost_bound = self.backend.audit_cost_bound(self.contract, len(self.ctx.seed_ids))
        self.session_start = time.monotonic()
        self._refs: PolicyRefs | None = None
        stored = RunState.load(cfg.run_dir)
        self.state = stored or self._new_state()
        if stored is not None:
            self._recount()
            self._drop_stale_temps()

    # ---- state ---------------------------------------------------------------------------

    def _new_state(self) -> RunState:
        origin = self.store.snapshot_dir(self.cfg.policy_dir)
        state = RunState(
            run_id=self.cfg.run_dir.name, contract_hash=self.contract.contract_hash,
            measurement_hash=self.measurement_hash, origin=origin,
            error_budget=gates.ErrorBudget.from_promotion(self.promotion).model_dump(),
        )
        self.book.once("contract", "run", self._run_record())
        return state

    def _run_record(self) -> RunRecord:
        c = self.contract
        return RunRecord(
            contract_id=c.contract_id, contract_hash=c.contract_hash,
            measurement_hash=self.measurement_hash, manifest_hash=c.measurement.manifest_hash,
            backend=c.backend, models={r: getattr(c.models, r).model for r in ("auditor", "target", "judge", "mutator")},
            arms=list(c.arms), seed=c.seed, replicate_k=self.promotion.replicate_k,
            approval=self.cfg.approval_id,
            note=SIM_NOTE if c.backend == "sim" else "live audit: scores are a judge model's, with its noise",
        )

    def _recount(self) -> None:
        """Audit counters from the ledger, which is written before the state: an audit
        recorded just before a crash is counted exactly once after the resume."""
        s = self.state
        s.audits, s.usd, s.gaps = 0, 0.0, 0
        for arm in s.arms.values():
            arm.audits = 0
        for rec in self.book.records:
            if rec.type in ("audit", "probe"):
                s.audits += 1
                s.usd += rec.payload["usage"]["usd"]
            if rec.type == "audit":
                s.gaps += rec.payload["status"] == "gap"
                if rec.payload["arm"] in s.arms:
                    s.arms[rec.payload["arm"]].audits += 1

    def _drop_stale_temps(self) -> None:
        """Temp files of atomic writes a crash cut short (never an audit's own files)."""
        for path in self.cfg.run_dir.rglob(".*.tmp"):
            in_audit = path.relative_to(self.cfg.run_dir).parts[0] == "audits"
            if STALE_TEMP.match(path.name) and (not in_audit or path.name.startswith(f".{RESULT_FILE}.")):
                path.unlink(missing_ok=True)

    def save(self) -> None:
        now = time.monotonic()
        self.state.elapsed_s += now - self.session_start
        self.session_start = now
        crashpoint("state.before_save")
        self.state.save(self.cfg.run_dir)
        crashpoint("state.after_save")

    def emit(self, text: str) -> None:
        self.cfg.on_event(text)

    # ---- phases --------------------------------------------------------------------------

    def run(self) -> RunState:
        if self.state.phase == "halted" and self.state.resume_phase is None:
            return self.state
        try:
            self._resume_after_halt()
            self._check_same_run()
            for phase, step in (("preflight", self.preflight), ("baseline", self.baseline),
                                ("never", self.never_arm),
                                ("random", lambda: self.candidate_arm("random")),
                                ("gate", lambda: self.candidate_arm("gate")),
                                ("final", self.final_checks)):
                if self._phase_done(phase):
                    continue
                if phase in ("never", "random", "gate") and phase not in self.contract.arms:
                    continue
                self.state.phase = phase
                self.save()
                step()
            self.state.phase = "done"
            self._stop("completed")
        except (Halt, measure.MeasurementChanged, HandEditedPolicy) as ex:
            if self.state.phase != "halted":
                self.state.resume_phase = self.state.phase
            self.state.phase = "halted"
            self.state.halt_reason = str(ex)
            self.book.once("halt", f"halt:{len(self.book.of_type('halt'))}", {"reason": str(ex)})
            self.emit(f"HALT: {ex}")
            self.save()
            try:
                self.cfg.anchor()
            except Halt as anchor_failure:
                self.emit(f"also: {anchor_failure}")
        return self.state

    def _resume_after_halt(self) -> None:
        """Run again after a halt: back to the halted phase, where the cause is checked anew."""
        if self.state.phase == "halted":
            self.emit(f"resuming after a halt: {self.state.halt_reason}")
            self.state.phase, self.state.halt_reason = self.state.resume_phase, None

    def _phase_done(self, phase: str) -> bool:
        order = ("preflight", "baseline", "never", "random", "gate", "final", "done")
        if self.state.phase in ("done", "halted"):
            return True
        return order.index(phase) < order.index(self.state.phase)

    def _check_same_run(self) -> None:
        if self.state.contract_hash != self.contract.contract_hash:
            raise Halt("this run was started under another contract; start a new run (--new)")
        if self.state.measurement_hash != self.measurement_hash:
            raise Halt("the frozen measurement (seeds, rubric, code or pinned packages) changed "
                       "since this run started; start a new run under a new contract")

    def _stop(self, reason: str) -> None:
        self.save()
        self.book.once("stop", "stop", StopRecord(reason=reason, audits=self.state.audits,
                       gaps=self.state.gaps, usd=self.state.usd, elapsed_s=round(self.state.elapsed_s, 2)))
        self.cfg.anchor()

    def preflight(self) -> None:
        """Prove every surface in the search space reaches the target before spending budget.

        A gap (no usable evidence) is retried like any audit gap; a probe that saw the wrong
        policy halts at once.
        """
        from loop.preflight import run_preflight

        base = hashlib.sha256(self.state.run_id.encode()).hexdigest()[:10]
        for attempt in range(self.contract.stop.max_consecutive_gaps):
            key = f"preflight-{attempt}"
            if not self.book.has("probe", key):
                self._recover([(key, self.cfg.run_dir / key / "audit")])  # run_preflight's audit dir
                report = run_preflight(self.ctx, self.store.set_dir(self.state.origin),
                                       self.cfg.run_dir / key, self.backend, token=f"{base}{attempt:02d}")
                self.book.once("probe", key, report)
                self.state.audits += 1
                self.state.usd += report.usage.usd
                self.save()
            probe = next(r.payload for r in self.book.of_type("probe") if r.payload["_key"] == key)
            if probe["passed"]:
                self.emit(f"preflight: all {len(probe['probes'])} surfaces of the search space reach the target")
                return
            if probe["gap_reason"] is None:
                failed = [p["message"] for p in probe["probes"] if not p["passed"]]
                raise Halt("wiring preflight failed, refusing to spend budget: " + "; ".join(failed))
            self.emit(f"  preflight audit gap: {probe['gap_reason']}")
        raise Halt("wiring preflight could not run: every attempt was an audit gap")

    def baseline(self) -> None:
        k = self.promotion.baseline_k
        origin = self.state.origin
        if self.state.planned is None and (why := self.budget_left("baseline", k)):
            raise Halt(f"no budget for the baseline: {why}")
        self.emit(f"baseline: {k} audits of the starting policy {origin.set_id}")
        results = self.run_batch("baseline", "baseline", "baseline", [(f"k{i}", origin) for i in range(k)])
        self.state.baseline = [r.audit_id for r in results if r.ok]
        self.round_consumed()
        means, counts = {}, {}
        for dim in self.ctx.dimensions:
            vals = [v for r in results if r.ok for v in [r.scores.get(s, {}).get(dim) for s in self.ctx.seed_ids] if v is not None]
            means[dim] = round(float(np.mean(vals)), 4) if vals else None
            counts[dim] = len(vals)
        c = self.contract
        self.book.once("baseline", "baseline", BaselineRecord(
            policy_set=origin.set_id, audit_ids=self.state.baseline, per_dimension_mean=means,
            sample_counts=counts, contract_hash=c.contract_hash, measurement_hash=self.measurement_hash,
            seeds_hash=c.measurement.manifest_hash,
            models={r: getattr(c.models, r).model for r in ("auditor", "target", "judge")}))

    def never_arm(self) -> None:
        arm = self._arm("never")
        pairs = self.promotion.calibration_pairs
        pool = fitness.NoisePool.model_validate(self.state.noise_pool) if self.state.noise_pool else fitness.NoisePool()
        while len(self.state.aa_rounds) < pairs:
            label = self.next_label(f"never-aa{len(self.state.aa_rounds):03d}")
            if not self._resuming(label) and (why := self.budget_left("never", 2)):
                arm.stop_reason = why
                break
            stat = self.paired_round("never", label, "aa", self.state.origin, self.state.origin)
            self.round_consumed()
            if stat is None:
                self.save()
                continue
            pool.add_aa(stat)
            self.state.aa_rounds.append(stat)
            self.state.noise_pool = pool.model_dump(mode="json")
            self.book.once("round", label, RoundRecord(arm="never", round=label, kind="aa", mutation_id=None,
                           diff=stat.diff, n_seeds=stat.n_seeds))
            self.save()
        est = pool.estimate()
        arm.stop_reason = arm.stop_reason or f"{len(self.state.aa_rounds)} A/A pairs measured"
        self.book.once("noise", "calibration", {"estimate": est.model_dump(mode="json"),
                       "pairs": len(self.state.aa_rounds), "source": "never arm A/A pairs"})
        arm.done = True
        self.emit(f"never: {len(self.state.aa_rounds)} A/A pairs; noise sigma "
                  + ", ".join(f"{d}={est.sigma[d]:.2f}" for d in self.promotion.target_dimensions if d in est.sigma))

    def next_label(self, prefix: str) -> str:
        """The planned round's label when resuming it, else a fresh one stamped with the tick."""
        planned = self.state.planned
        if planned is not None and planned.label.startswith(prefix + "-t"):
            return planned.label
        return f"{prefix}-t{self.state.tick}"

    def _arm(self, name: str) -> ArmState:
        if name not in self.state.arms:
            self.state.arms[name] = ArmState(arm=name, champion=self.state.origin)
            self.save()
        return self.state.arms[name]

    # ---- candidates ----------------------------------------------------------------------

    def candidate_arm(self, name: str) -> None:
        arm = self._arm(name)
        self.store.init_working(name, arm.champion)
        while not arm.done:
            if arm.pending is None:
                if why := self.budget_left(name, 2) or self._alpha_exhausted(name):
                    arm.done, arm.stop_reason = True, why
                    break
                if arm.candidates >= self.contract.stop.max_candidates_per_arm:
                    arm.done, arm.stop_reason = True, "candidate limit reached"
                    break
                if not self.propose(arm):
                    arm.done, arm.stop_reason = True, "the proposer has nothing left to try"
                    break
            self.advance(arm)
            self.save()
        self.save()
        self.emit(f"{name}: {arm.candidates} candidates, {arm.keeps} kept, {arm.audits} audits"
                  f" ({arm.stop_reason})")

    def _alpha_exhausted(self, name: str) -> str | None:
        if name != "gate":
            return None
        budget = gates.ErrorBudget.model_validate(self.state.error_budget)
        return None if budget.next_alpha() is not None else "run error budget (alpha) fully spent"

    def propose(self, arm: ArmState) -> bool:
        champion_docs = self.store.documents(arm.champion)
        index = arm.candidates
        tried = {(r.payload["surface"], r.payload["path"], r.payload["value_hash"])
                 for r in self.book.of_type("mutation")
                 if r.payload.get("arm") == arm.arm and r.payload.get("index", -1) < index}
        rng = np.random.default_rng([self.contract.seed, ARM_ORDER.index(arm.arm), index])
        mutation = self.proposer.propose(ProposalRequest(champion_docs, tried, rng, index, self.contract.seed)).mutation
        if mutation is None:
            return False
        allowed = self.contract.search_space.surfaces
        new_doc = apply_mutation(mutation, champion_docs, allowed)
        candidate = self.store.store_documents({**champion_docs, mutation.surface: new_doc})
        arm.pending = Pending(index=index, mutation=mutation.model_dump(mode="json"),
                              parent=arm.champion, candidate=candidate)
        arm.candidates += 1
        crashpoint("propose.before_save")
        self.save()  # the mutation is recorded when applied: a proposal lost to a crash is redone
        crashpoint("propose.after_save")
        self.emit(f"{arm.arm}: candidate {index} {mutation.mutation_id} {mutation.surface}.{mutation.path}")
        return True

    def advance(self, arm: ArmState) -> None:
        p = arm.pending
        mutation = Mutation.model_validate(p.mutation)
        if p.stage == "proposed":
            self.apply(arm, mutation)
        elif p.stage in ("applied", "screen", "confirm"):
            self.measure_candidate(arm, mutation)
        elif p.stage == "decided":
            self.settle(arm, mutation)

    def apply(self, arm: ArmState, mutation: Mutation) -> None:
        p = arm.pending
        self.book.once("mutation", mutation.mutation_id, {
            **mutation.model_dump(mode="json"), "arm": arm.arm, "index": p.index,
            "candidate_set": p.candidate.set_id, "parent_set": p.parent.set_id,
            "value_hash": mutation.edit_key[2]})
        crashpoint("apply.before_intent")
        apply_mutation(mutation, self.store.documents(p.parent), self.contract.search_space.surfaces)
        s = mutation.surface
        self.book.once("intent", f"apply:{mutation.mutation_id}", IntentRecord(
            action="apply", key=mutation.mutation_id, detail={"arm": arm.arm, "surface": s}))
        crashpoint("apply.before_write")
        self.store.write_surface(arm.arm, s, p.candidate, expect_current=p.parent.hashes[s])
        crashpoint("apply.before_record")
        self.book.once("applied", mutation.mutation_id, PolicyChangeRecord(
            arm=arm.arm, mutation_id=mutation.mutation_id, surface=s, from_hash=p.parent.hashes[s],
            to_hash=p.candidate.hashes[s], policy_set=p.candidate.set_id))
        p.stage = "applied"
        crashpoint("apply.before_save")

    def measure_candidate(self, arm: ArmState, mutation: Mutation) -> None:
        p = arm.pending
        label = self.next_label(f"{arm.arm}-c{p.index:03d}-r{p.round_no:02d}")
        if not self._resuming(label) and (why := self.budget_left(arm.arm, 2)):
            self.decide(arm, "revert", f"stopped before a decision: {why}", None)
            return
        kind = "random" if arm.arm == "random" else ("screen" if p.stage == "applied" else "confirm")
        stat = self.paired_round(arm.arm, label, kind, p.candidate, p.parent, mutation.mutation_id)
        self.round_consumed()
        p.round_no += 1
        if stat is None:
            return
        if arm.arm == "random":
            self._random_verdict(arm, stat)
        elif p.stage == "applied":
            self._screen(arm, stat)
        else:
            self._confirm(arm, stat)

    def _random_verdict(self, arm: ArmState, stat: RoundStat) -> None:
        p = arm.pending
        coin = np.random.default_rng([self.contract.seed, 99, p.index]).random()
        keep = coin < RANDOM_ACCEPT_P
        self._record_round(arm, stat, "random", {"coin": round(float(coin), 4)})
        self.decide(arm, "keep" if keep else "revert", f"random arm coin flip ({coin:.3f})", None)

    def _gate(self, p: Pending) -> gates.Gate:
        noise = fitness.NoiseEstimate.model_validate(p.noise)
        return gates.make_gate(self.promotion, noise, p.alpha or 0.0)

    def _audits_left(self, arm: ArmState) -> int:
        b = self.contract.budget
        return min(b.arm_audits.get(arm.arm, b.max_audits) - arm.audits, b.max_audits - self.state.audits)

    def _screen(self, arm: ArmState, stat: RoundStat) -> None:
        p = arm.pending
        # Frozen here, before the confirmation: no candidate's own rounds set its threshold.
        p.noise = fitness.NoisePool.model_validate(self.state.noise_pool).estimate().model_dump(mode="json")
        budget = gates.ErrorBudget.model_validate(self.state.error_budget)
        forecast = gates.expected_confirmations(self._audits_left(arm), arm.audits, budget.confirmations)
        p.alpha = budget.next_alpha(forecast)
        decision = self._gate(p).screen(stat)
        p.screen = stat
        self._record_round(arm, stat, "screen", decision.model_dump(mode="json"))
        if decision.verdict == "revert":
            p.alpha = None  # a screened-out candidate spends no alpha
            self.decide(arm, "revert", f"screen: {decision.reason}", decision)
        else:
            p.stage = "confirm"

    def _confirm(self, arm: ArmState, stat: RoundStat) -> None:
        p = arm.pending
        p.confirm.append(stat)
        horizon = len(p.confirm) + self._audits_left(arm) // 2
        decision = self._gate(p).confirm(list(p.confirm), horizon=horizon)
        self._record_round(arm, stat, "confirm", decision.model_dump(mode="json"))
        self.emit(f"  {stat.label}: {decision.verdict} ({decision.reason})")
        if decision.verdict != "continue":
            self.decide(arm, decision.verdict, decision.reason, decision)

    def _record_round(self, arm: ArmState, stat: RoundStat, kind: str, decision: dict) -> None:
        self.book.once("round", stat.label, RoundRecord(
            arm=arm.arm, round=stat.label, kind=kind, mutation_id=arm.pending.mutation["mutation_id"],
            diff=stat.diff, n_seeds=stat.n_seeds, decision=decision))

    # ---- verdicts ------------------------------------------------------------------------

    def decide(self, arm: ArmState, verdict: str, reason: str, decision) -> None:
        p = arm.pending
        p.verdict, p.reason, p.stage = verdict, reason, "decided"
        p.decision = decision.model_dump(mode="json") if decision is not None else None
        budget = gates.ErrorBudget.model_validate(self.state.error_budget)
        if arm.arm == "gate" and p.alpha is not None:
            budget = budget.record(p.alpha, verdict == "keep")
            self.state.error_budget = budget.model_dump(mode="json")
        self.book.once("verdict", p.mutation["mutation_id"], VerdictRecord(
            arm=arm.arm, mutation_id=p.mutation["mutation_id"], verdict=verdict, reason=reason,
            candidate_set=p.candidate.set_id, parent_set=p.parent.set_id,
            rounds=len(p.confirm) + (1 if p.screen else 0), alpha=p.alpha,
            error_budget=self.state.error_budget,
            decision=decision.model_dump(mode="json") if decision is not None else None))
        crashpoint("verdict.before_save")
        self.save()
        crashpoint("verdict.before_anchor")
        self.cfg.anchor()
        self.emit(f"  {arm.arm} {p.mutation['mutation_id']}: {verdict.upper()} — {reason}")

    def settle(self, arm: ArmState, mutation: Mutation) -> None:
        """Carry out a recorded verdict: the candidate becomes champion, or its file is restored."""
        p = arm.pending
        s = mutation.surface
        mid = mutation.mutation_id
        crashpoint("settle.before_intent")
        if p.verdict == "keep" and arm.arm == "gate":
            decision = gates.GateDecision.model_validate(p.decision) if p.decision else None
            if decision is None or not gates.should_promote(decision):
                raise Halt(f"refusing to promote {mid}: its KEEP does not come from a confirmation in "
                           "which every leg crossed its boundary")
        if p.verdict == "keep":
            self.book.once("intent", f"promote:{mid}", IntentRecord(action="promote", key=mid, detail={"arm": arm.arm}))
            crashpoint("settle.before_write")  # the working file already holds the candidate
            crashpoint("settle.before_refs")
            commit = self._commit_candidate(arm, mutation)
            crashpoint("settle.before_record")
            arm.champion = p.candidate
            arm.keeps += 1
            self.book.once("promote", mid, PolicyChangeRecord(
                arm=arm.arm, mutation_id=mid, surface=s, from_hash=p.parent.hashes[s],
                to_hash=p.candidate.hashes[s], policy_set=p.candidate.set_id, commit=commit))
        else:
            self.book.once("intent", f"revert:{mid}", IntentRecord(action="revert", key=mid, detail={"arm": arm.arm}))
            crashpoint("settle.before_write")
            self.store.write_surface(arm.arm, s, p.parent, expect_current=p.candidate.hashes[s])
            crashpoint("settle.before_refs")
            commit = self._commit_candidate(arm, mutation)
            crashpoint("settle.before_record")
            arm.reverts += 1
            self.book.once("revert", mid, PolicyChangeRecord(
                arm=arm.arm, mutation_id=mid, surface=s, from_hash=p.candidate.hashes[s],
                to_hash=p.parent.hashes[s], policy_set=p.parent.set_id, commit=commit))
        if arm.arm == "gate" and p.alpha is not None:
            pool = fitness.NoisePool.model_validate(self.state.noise_pool)
            pool.add_candidate(list(p.confirm))
            self.state.noise_pool = pool.model_dump(mode="json")
        arm.pending = None
        crashpoint("settle.before_save")

    def _commit_candidate(self, arm: ArmState, mutation: Mutation) -> str | None:
        """Keep the candidate reachable in git refs whatever its verdict; a KEEP moves the
        arm's champion ref. Returns the candidate's commit (None without a policy repo)."""
        if self.cfg.policy_repo is None:
            return None
        p = arm.pending
        try:
            if self._refs is None:
                self._refs = PolicyRefs(self.cfg.policy_repo, self.state.run_id, self.store)
            parent = arm.champion_commit or self._refs.origin(self.state.origin, self._ts("contract", "run"))
            commit = self._refs.record_candidate(
                arm.arm, mutation.mutation_id, p.candidate, parent,
                f"candidate {p.index} {mutation.surface}.{mutation.path}: {p.verdict.upper()}",
                self._ts("verdict", mutation.mutation_id))
            champion = commit if p.verdict == "keep" else parent
            self._refs.set_champion(arm.arm, champion, previous=arm.champion_commit)
        except PolicyRefError as ex:
            raise Halt(f"cannot keep the candidate reachable in git: {ex}") from None
        arm.champion_commit = champion
        return commit

    def _ts(self, type_: str, key: str) -> str:
        """When a record was written (fixed once written, so commits made from it are too)."""
        return next(r.ts for r in self.book.of_type(type_) if r.payload.get("_key") == key)

    # ---- final checks --------------------------------------------------------------------

    def final_checks(self) -> None:
        """Re-measure each changed champion against the start; certify the gate's if asked."""
        for name in ("random", "gate"):
            arm = self.state.arms.get(name)
            if arm is None or arm.champion == self.state.origin:
                continue
            certify = name == "gate" and self.contract.budget.certify_rounds > 0
            rounds = self.contract.budget.certify_rounds if certify else self.contract.budget.final_check_rounds
            verdict = self._final_rounds(arm, rounds, certify)
            if certify and verdict != "continue":
                self._conclude_certification(arm, verdict)

    def _final_rounds(self, arm: ArmState, rounds: int, certify: bool) -> str:
        """Paired rounds champion vs origin; with `certify`, until the certification decides."""
        verdict = "continue"
        while len(arm.final_rounds) < rounds and verdict == "continue":
            label = self.next_label(f"final-{arm.arm}-{len(arm.final_rounds):02d}")
            if not self._resuming(label) and self.state.audits + 2 > self.contract.budget.max_audits:
                break
            stat = self.paired_round("final", label, "final", arm.champion, self.state.origin)
            decision = None
            if stat is not None:
                arm.final_rounds.append(stat)
                if certify:
                    decision = self._certify_gate(rounds).confirm(list(arm.final_rounds))
                    verdict = decision.verdict
                self.book.once("round", label, RoundRecord(
                    arm=arm.arm, round=label, kind="certify" if certify else "final", mutation_id=None,
                    diff=stat.diff, n_seeds=stat.n_seeds,
                    decision=decision.model_dump(mode="json") if decision else None))
            self.round_consumed()  # saved together with the round's outcome
            self.save()
        if certify and verdict == "continue":
            verdict = "revert"  # budget ran out before the certification could pass
        return verdict

    def _certify_gate(self, rounds: int) -> gates.Gate:
        noise = fitness.NoisePool.model_validate(self.state.noise_pool).estimate()
        return gates.make_certify_gate(self.promotion, noise, rounds)

    def _conclude_certification(self, arm: ArmState, verdict: str) -> None:
        """A champion that fails certification is rolled back to the starting policy."""
        champion = arm.champion
        key = f"certify:{champion.set_id}"
        self.book.once("certify", key, {"arm": arm.arm, "policy_set": champion.set_id,
                                        "certified": verdict == "keep", "rounds": len(arm.final_rounds)})
        if verdict == "keep":
            arm.stop_reason = f"{arm.stop_reason}; champion certified"
            self.save()
            return
        self.book.once("intent", key, IntentRecord(action="demote", key=key, detail={"arm": arm.arm}))
        for surface in champion.hashes:
            if champion.hashes[surface] != self.state.origin.hashes[surface]:
                self.store.write_surface(arm.arm, surface, self.state.origin, expect_current=champion.hashes[surface])
        arm.champion = self.state.origin
        arm.stop_reason = f"{arm.stop_reason}; champion failed certification, rolled back"
        self.book.once("demote", key, {"arm": arm.arm, "policy_set": champion.set_id,
                                       "restored": self.state.origin.set_id,
                                       "reason": "champion not certified against the starting policy: rolled back"})
        self.save()
        self.emit(f"gate: champion {champion.set_id} failed certification; rolled back to the starting policy")


def main() -> None:
    from loop.cli import app

    app(["run"])


if __name__ == "__main__":
    main()
