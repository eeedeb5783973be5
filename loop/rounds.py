"""How a round of audits is planned, run, recovered after a crash, and recorded.

A round is a batch of audits that share one tick of the audit clock: a candidate/champion
pair, an A/A pair of the never arm, or the baseline batch. Its audit ids and tick are fixed
and recorded (intent) before any audit starts; each finished audit's result is stored
before it is recorded in the ledger; and the plan stays in the run state until the caller
has saved the round's outcome, so a resumed run re-derives a round instead of paying for a
new one. `Runner` in train.py mixes this in; it provides `state`, `book`, `ctx`, `store`,
`cfg`, `contract`, `promotion`, `audit_cost_bound`, `session_start`, `save()` and `emit()`.
"""

from __future__ import annotations

import time
from pathlib import Path

import fitness
from fitness import RoundStat
import measure
from loop import attempts
from loop.attempts import AuditStateUnknown
from loop.errors import Halt
from loop.faults import crashpoint
from loop.fsutil import atomic_write_bytes
from loop.policystore import PolicySet
from loop.records import AuditRecord, IntentRecord, RecoveryRecord, RoundRecord
from loop.runstate import PlannedRound
from measure import AuditRequest, AuditResult

RESULT_FILE = "result.json"
RECOVERY_ACTIONS = {"finished": "score the evidence it left; not re-run",
                    "timed_out": "record the timeout as a gap; not re-run",
                    "died": "re-run it: it did not finish"}


class AuditRounds:
    """Budget checks and round execution for the loop (a mixin of train.Runner)."""

    def budget_left(self, arm: str | None, n: int) -> str | None:
        """Why `n` more audits may not start, or None if they may."""
        b = self.contract.budget
        if self.state.audits + n > b.max_audits:
            return f"run budget ({b.max_audits} audits) spent"
        spent_by_arm = self.state.arms[arm].audits if arm in self.state.arms else 0
        if arm in b.arm_audits and spent_by_arm + n > b.arm_audits[arm]:
            return f"arm budget ({b.arm_audits[arm]} audits) spent"
        if self.state.elapsed_s + (time.monotonic() - self.session_start) > b.max_wall_s:
            return f"wall-time budget ({b.max_wall_s:g}s) reached"
        if self.state.usd + n * self.audit_cost_bound > b.max_usd + 1e-12:
            return (f"USD budget (${b.max_usd:g}) could be exceeded: ${self.state.usd:.2f} spent, "
                    f"up to ${self.audit_cost_bound:.2f} per audit")
        return None

    def run_batch(self, arm: str, label: str, kind: str, sets: list[tuple[str, PolicySet]],
                  mutation_id: str | None = None) -> list[AuditResult]:
        """Run audits that share a clock tick (a paired round or a baseline batch)."""
        planned = self.state.planned
        if planned is None or planned.label != label:
            planned = PlannedRound(label=label, tick=self.state.tick, kind=kind)
            ids = [f"{label}-{role}" for role, _ in sets]
            self.book.once("intent", f"audit:{label}", IntentRecord(action="audit", key=label,
                           detail={"audit_ids": ids, "tick": planned.tick, "arm": arm}))
            self.state.tick += len(sets)
            self.state.planned = planned
            self.save()
        reqs = [self._request(label, role, ps, planned.tick) for role, ps in sets]
        todo = [r for r in reqs if not (r.audit_dir / RESULT_FILE).exists()]
        crashpoint("audit.before_launch")
        if todo:
            self._recover([(r.audit_id, r.audit_dir) for r in todo])
            self.cfg.before_audits()
            try:
                fresh = measure.run_audits(todo, self.ctx, self.backend)
            except AuditStateUnknown as ex:
                raise Halt(f"unknown: {ex}; inspect the audit directory, then resume") from None
            for res in fresh:
                crashpoint("audit.before_result")
                atomic_write_bytes(self.cfg.run_dir / "audits" / res.audit_id / RESULT_FILE,
                                   res.model_dump_json().encode())
        crashpoint("audit.before_record")
        results = [AuditResult.model_validate_json((r.audit_dir / RESULT_FILE).read_bytes()) for r in reqs]
        for (role, ps), res in zip(sets, results, strict=True):
            self._record_audit(arm, label, role, ps, planned.tick, res)
            crashpoint("audit.between_records")
        self.save()
        return results

    def _recover(self, audits: list[tuple[str, Path]]) -> None:
        """Before touching audits a crash interrupted, find out what they did and record it.

        A still-running audit is awaited (up to its timeout); one that cannot be established
        halts the run with an explicit "unknown" instead of a guess.
        """
        timeout = self.contract.measurement.audit_timeout_s
        for audit_id, audit_dir in audits:
            try:
                status = attempts.await_attempt(audit_dir, timeout)
            except AuditStateUnknown as ex:
                raise Halt(f"unknown: {ex}; inspect {audit_dir}, then resume") from None
            if status.state == "unknown":
                raise Halt(f"unknown: cannot establish what audit {audit_id} did ({status.detail}); "
                           f"inspect {audit_dir}, then resume")
            if status.state == "new":
                continue
            action = RECOVERY_ACTIONS[status.state]
            self.book.once("recovery", f"audit:{audit_id}:{status.attempt}", RecoveryRecord(
                audit_id=audit_id, attempt=status.attempt, found=status.state, detail=status.detail,
                action=action))
            self.emit(f"  recovery: {audit_id}: {status.detail}; {action}")

    def _resuming(self, label: str) -> bool:
        """Whether `label` is the planned round: its audits were budgeted when it was planned."""
        return self.state.planned is not None and self.state.planned.label == label

    def round_consumed(self) -> None:
        """Forget the planned round once its outcome is in the state (saved by the caller).

        Until then a resumed run re-derives the same round from its stored audit results
        instead of planning (and paying for) a new one.
        """
        self.state.planned = None

    def _request(self, label: str, role: str, ps: PolicySet, tick: int) -> AuditRequest:
        audit_id = f"{label}-{role}"
        return AuditRequest(audit_id=audit_id, audit_dir=self.cfg.run_dir / "audits" / audit_id,
                            policy_dir=self.store.set_dir(ps), policy_hashes=ps.hashes,
                            tick=tick, pair_key=label)

    def _record_audit(self, arm, label, role, ps, tick, res: AuditResult) -> None:
        rec = AuditRecord(
            audit_id=res.audit_id, arm=arm, round=label, role=role, policy_set=ps.set_id, tick=tick,
            status=res.status, gap_reason=res.gap_reason, scores=res.scores, missing=res.missing,
            sample_counts=res.sample_counts, loaded_policy_hashes=res.loaded_policy_hashes,
            usage=res.usage.model_dump(), wall_s=res.wall_s, backend=res.backend,
            simulated=res.simulated, log_path=res.log_path, diagnostics=res.diagnostics,
        )
        if self.book.once("audit", res.audit_id, rec) is not None:
            self.state.audits += 1
            self.state.usd += res.usage.usd
            if arm in self.state.arms:
                self.state.arms[arm].audits += 1
            if not res.ok:
                self.state.gaps += 1
                self.emit(f"  gap in {res.audit_id}: {res.gap_reason}")

    def paired_round(self, arm: str, label: str, kind: str, cand: PolicySet, champ: PolicySet,
                     mutation_id: str | None = None) -> RoundStat | None:
        """One concurrent candidate/champion round; None when either audit is a gap."""
        a, b = self.run_batch(arm, label, kind, [("cand", cand), ("champ", champ)], mutation_id)
        crashpoint("round.before_record")
        if not (a.ok and b.ok):
            self._note_gap(arm)
            self.book.once("round", label, RoundRecord(arm=arm, round=label, kind=kind,
                           mutation_id=mutation_id, diff={}, n_seeds={},
                           decision={"verdict": "gap", "reason": a.gap_reason or b.gap_reason}))
            return None
        stat = fitness.paired_round(
            fitness.score_matrix(a.scores, self.ctx.seed_ids, self.ctx.dimensions),
            fitness.score_matrix(b.scores, self.ctx.seed_ids, self.ctx.dimensions),
            self.ctx.dimensions, self.promotion.min_seed_coverage,
        )
        self.state.consecutive_gaps = {**self.state.consecutive_gaps, arm: 0}
        return stat.labelled(label)

    def _note_gap(self, arm: str) -> None:
        gaps = self.state.consecutive_gaps.get(arm, 0) + 1
        self.state.consecutive_gaps = {**self.state.consecutive_gaps, arm: gaps}
        if gaps >= self.contract.stop.max_consecutive_gaps:
            raise Halt(f"{gaps} consecutive audit gaps in the {arm} rounds; "
                       "see the gap reasons in the ledger")
