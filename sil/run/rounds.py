"""Rounds of audits: planned, budgeted, guarded, run, recovered after a crash, and recorded.

A round is a batch of audits that share one tick of the audit clock: a candidate/champion
pair, a candidate's single-audit screen (`promotion.screen_reference`: compared with the
champion's recent audits), an A/A pair of the never arm, a baseline batch or a replication pair. Every caller
(the arms, certification, `sil replicate`) runs audits only through `RoundRunner`, which
enforces for each batch: the audit, USD and wall-time budgets; the guard before audits
(the approval is re-checked); the audit ids, tick and seed set recorded before any audit starts; each
finished audit's result stored before it is recorded; and the plan kept in the run state
until the caller has saved the round's outcome, so a resumed run re-derives a round
instead of paying for a new one.

    rounds = RoundRunner(journal, measure_ctx, backend, store, Guards(before_audits=check_approval))
    rounds = RoundRunner(journal, measure_ctx, backend, store, guards, execute=in_process)  # the bench
    stat = rounds.run_pair("gate", label, "confirm", candidate, champion, mutation_id)
    stat = run_screen(rounds, "gate", label, candidate, champion, mutation_id)  # sil/run/screening.py
    stat = rounds.run_pair("final", label, "certify", champion, origin, seed_set="heldout")

Every audit runs on the search seeds unless its round asks for the held-out seeds; only the
final certification does (sil/run/certify.py), and the audit records say which set each ran.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from sil.base.diskspace import check_free_space
from sil.base.errors import Halt
from sil.base.faults import crashpoint
from sil.base.fsutil import atomic_write_bytes
from sil.contract.prepare import SeedSet
from sil.exec import attempts, measure
from sil.exec.attempts import AuditStateUnknown
from sil.exec.measure import AuditBackend, AuditRequest, AuditResult, MeasureContext
from sil.integrity.records import AuditRecord, IntentRecord, Keys, RecoveryRecord, RoundRecord
from sil.policies.store import PolicySet, PolicyStore
from sil.run.horizon import arm_limit, held_for_champion
from sil.stats import fitness
from sil.stats.fitness import RoundStat
from sil.store.events import AuditGap, Recovered
from sil.store.journal import RESULT_FILE, Journal
from sil.store.runstate import PlannedRound, RoundKind, RunState

# What an audit record copies from the audit's result.
AUDIT_RESULT_FIELDS = {
    "audit_id",
    "status",
    "gap_reason",
    "scores",
    "missing",
    "sample_counts",
    "loaded_policy_hashes",
    "usage",
    "wall_s",
    "backend",
    "simulated",
    "log_path",
    "diagnostics",
    "use",
}
RECOVERY_ACTIONS = {
    "finished": "score the evidence it left; not re-run",
    "timed_out": "record the timeout as a gap; not re-run",
    "died": "re-run it: it did not finish",
}


def _nothing() -> None:
    return None


# How a batch of audits is carried out: by default the backend's audit processes
# (`measure.run_audits`); the bench passes one that computes the same audits in its own process.
AuditExecutor = Callable[[list[AuditRequest]], list[AuditResult]]


@dataclass(frozen=True)
class Guards:
    """Checks around audits; each raises `Halt` to stop the run with its reason."""

    before_audits: Callable[[], None] = field(default=_nothing)  # e.g. the approval is still valid
    anchor: Callable[[], None] = field(default=_nothing)  # checkpoint the ledger head outside it


def usd_short(max_usd: float, spent: float, more: float, reserve_usd: float, what: str) -> str | None:
    """Why spending `more` USD (`what`: how it is counted) could exceed the budget, or None."""
    if spent + more + reserve_usd <= max_usd + 1e-12:
        return None
    held = f", ${reserve_usd:.2f} held back for the final canary" if reserve_usd else ""
    return f"USD budget (${max_usd:g}) could be exceeded: ${spent:.2f} spent, up to {what}{held}"


def audit_id(label: str, role: str) -> str:
    """The id of the audit `role` ("cand", "champ") of round `label`."""
    return f"{label}-{role}"


def audit_request(
    run_dir: Path,
    store: PolicyStore,
    label: str,
    what: tuple[str, PolicySet],
    when: tuple[int, SeedSet],
    contrast: PolicySet | None = None,
) -> AuditRequest:
    """The request for the audit of policy set `what` in role `what[0]` of round `label`; the
    target's inputs must show what sets it apart from `contrast` (the other arm of a pair)."""
    (role, ps), (tick, seed_set) = what, when
    aid = audit_id(label, role)
    return AuditRequest(
        audit_id=aid,
        audit_dir=run_dir / "audits" / aid,
        policy_dir=store.set_dir(ps),
        policy_hashes=ps.hashes,
        tick=tick,
        pair_key=label,
        seed_set=seed_set,
        contrast_dir=store.set_dir(contrast) if contrast is not None else None,
    )


def batch_requests(
    run_dir: Path,
    store: PolicyStore,
    label: str,
    sets: list[tuple[str, PolicySet]],
    when: tuple[int, SeedSet],
    compared_with: PolicySet | None = None,
) -> list[AuditRequest]:
    """The requests of one batch. In a pair of two different sets each audit is told apart from
    the other (per-audit proof of use), and a screen's lone audit from the champion it is compared
    with (`compared_with`); a batch of one set (baseline, A/A) has nothing to tell apart."""
    distinct = {ps.set_id: ps for _, ps in sets}
    reqs = []
    for role, ps in sets:
        others = [p for set_id, p in distinct.items() if set_id != ps.set_id]
        if compared_with is not None and compared_with.set_id != ps.set_id:
            others = [*others, compared_with]
        contrast = others[0] if len(others) == 1 else None
        reqs.append(audit_request(run_dir, store, label, (role, ps), when, contrast))
    return reqs


class RoundRunner:
    """The only way the loop spends audits."""

    def __init__(
        self,
        journal: Journal,
        ctx: MeasureContext,
        backend: AuditBackend,
        store: PolicyStore,
        guards: Guards,
        execute: AuditExecutor | None = None,
    ) -> None:
        self.journal = journal
        self.ctx = ctx
        self.backend = backend
        self.store = store
        self.guards = guards
        self.execute = execute or functools.partial(measure.run_audits, ctx=ctx, backend=backend)
        # the dearer of a search and a held-out audit: every budget check uses this bound
        self.cost_bound = backend.audit_cost_bound(ctx.contract, max(len(ctx.seed_ids), len(ctx.heldout_ids)))
        self.reserve_usd = 0.0  # held back from audits and mutator calls (e.g. the final canary)

    # ---- budget --------------------------------------------------------------------------

    def budget_left(self, arm: str | None, n: int) -> str | None:
        """Why `n` more audits may not start, or None if they may."""
        b, s = self.ctx.contract.budget, self.journal.state
        if s.audits + n > b.max_audits:
            return f"run budget ({b.max_audits} audits) spent"
        spent_by_arm = s.arms[arm].audits if arm in s.arms else 0
        limit = arm_limit(self.ctx.contract, s, self.ctx, arm)
        if limit is not None and spent_by_arm + n > limit:
            return f"arm budget ({limit} audits{held_for_champion(self.ctx.contract, arm)}) spent"
        if self.journal.elapsed() > b.max_wall_s:
            return f"wall-time budget ({b.max_wall_s:g}s) reached"
        return usd_short(b.max_usd, s.usd, n * self.cost_bound, self.reserve_usd, f"${self.cost_bound:.2f} per audit")

    def wall_left(self) -> float:
        """Seconds of the run's wall-time budget left (a model call may take no longer)."""
        return self.ctx.contract.budget.max_wall_s - self.journal.elapsed()

    def usd_left(self, usd: float) -> str | None:
        """Why spending up to `usd` more (e.g. a mutator call) may not start, or None."""
        b, s = self.ctx.contract.budget, self.journal.state
        return usd_short(b.max_usd, s.usd, usd, self.reserve_usd, f"${usd:.2f} more")

    def audits_left(self, arm: str) -> int:
        """Audits the arm may still spend under its own and the run's audit budgets."""
        b, s = self.ctx.contract.budget, self.journal.state
        spent = s.arms[arm].audits if arm in s.arms else 0
        limit = arm_limit(self.ctx.contract, s, self.ctx, arm)
        return min((b.max_audits if limit is None else limit) - spent, b.max_audits - s.audits)

    def next_label(self, prefix: str) -> str:
        """The planned round's label when resuming it, else a fresh one stamped with the tick."""
        planned = self.journal.state.planned
        if planned is not None and planned.label.startswith(prefix + "-t"):
            return planned.label
        return f"{prefix}-t{self.journal.state.tick}"

    def resuming(self, label: str) -> bool:
        """Whether `label` is the planned round: its audits were budgeted when it was planned."""
        planned = self.journal.state.planned
        return planned is not None and planned.label == label

    def consumed(self) -> None:
        """Forget the planned round once its outcome is in the state (saved by the caller)."""
        self.journal.state.planned = None

    # ---- running -------------------------------------------------------------------------

    def run_batch(
        self,
        arm: str,
        label: str,
        kind: RoundKind,
        sets: list[tuple[str, PolicySet]],
        seed_set: SeedSet = "search",
        reference: list[str] | None = None,
        compared_with: PolicySet | None = None,
    ) -> list[AuditResult]:
        """Run audits that share a clock tick on one seed set (a screen's `reference` and `compared_with`)."""
        state = self.journal.state
        planned = state.planned
        if planned is None or planned.label != label:
            planned = PlannedRound(
                label=label, tick=state.tick, kind=kind, seed_set=seed_set, reference=reference or []
            )
            ids = [audit_id(label, role) for role, _ in sets]
            self.journal.book.once(
                Keys.intent("audit", label),
                IntentRecord(action="audit", key=label, arm=arm, audit_ids=ids, tick=planned.tick, seed_set=seed_set),
            )
            state.tick += len(sets)
            state.planned = planned
            self.journal.save()
        if planned.seed_set != seed_set:
            raise Halt(
                f"round {label} was planned on the {planned.seed_set} seeds but is resumed on the {seed_set} "
                "seeds; the run state and the code disagree: start a new run with --new"
            )
        reqs = batch_requests(self.journal.run_dir, self.store, label, sets, (planned.tick, seed_set), compared_with)
        todo = [r for r in reqs if not (r.audit_dir / RESULT_FILE).exists()]
        crashpoint("audit.before_launch")
        if todo:
            self._launch(todo)
        crashpoint("audit.before_record")
        results = [AuditResult.model_validate_json((r.audit_dir / RESULT_FILE).read_bytes()) for r in reqs]
        for (role, ps), res in zip(sets, results, strict=True):
            self._record_audit(arm, label, role, ps, (planned.tick, seed_set), res)
            crashpoint("audit.between_records")
        self.journal.save()
        return results

    def _launch(self, todo: list[AuditRequest]) -> None:
        lost = self._run_and_store(todo)
        if not lost:
            return
        # a worker died mid-audit: recover its audits as after a crash, then run them once more
        self.journal.emit(Recovered(f"worker lost mid-audit: {', '.join(r.audit_id for r in lost)}; recovering"))
        again = self._run_and_store(lost)
        if again:
            raise Halt(
                f"the workers of audits {[r.audit_id for r in again]} died twice in a row; "
                "check the cluster's nodes, then resume (the attempts logs say what each audit did)"
            )

    def _run_and_store(self, reqs: list[AuditRequest]) -> list[AuditRequest]:
        """Recover, guard, run the audits and store each finished result; the requests whose worker was lost."""
        self.recover([(r.audit_id, r.audit_dir) for r in reqs])
        self.guards.before_audits()
        check_free_space(self.journal.run_dir, self.ctx.contract.budget.min_free_mb)  # DiskFull: halt
        lost: list[str] = []
        try:
            fresh = self.execute(reqs)
        except AuditStateUnknown as ex:
            raise Halt(f"unknown: {ex}; inspect the audit directory, then resume") from None
        except measure.BatchInterrupted as ex:
            fresh, lost = ex.finished, ex.lost
        for res in fresh:
            crashpoint("audit.before_result")
            atomic_write_bytes(
                self.journal.run_dir / "audits" / res.audit_id / RESULT_FILE, res.model_dump_json().encode()
            )
        return [r for r in reqs if r.audit_id in lost]

    def run_pair(
        self,
        arm: str,
        label: str,
        kind: RoundKind,
        cand: PolicySet,
        champ: PolicySet,
        mutation_id: str | None = None,
        seed_set: SeedSet = "search",
    ) -> RoundStat | None:
        """One concurrent candidate/champion round on one seed set; None when either audit is a gap."""
        a, b = self.run_batch(arm, label, kind, [("cand", cand), ("champ", champ)], seed_set)
        crashpoint("round.before_record")
        if not (a.ok and b.ok):
            self.record_gap(arm, label, kind, mutation_id, a.gap_reason or b.gap_reason)
            return None
        cand_scores, champ_scores = self.ctx.matrix(a.scores, seed_set), self.ctx.matrix(b.scores, seed_set)
        stat = fitness.paired_round_for(cand_scores, champ_scores, self.ctx.dimensions, self.ctx.contract.promotion)
        if kind == "certify":  # a claim about seeds never used reads the effect's spread between seeds
            seeds = fitness.seed_differences(cand_scores, champ_scores, self.ctx.dimensions)
            stat = stat.model_copy(update={"seed_diff": seeds})
        self.scored(arm)
        return stat.labelled(label)

    def scored(self, arm: str) -> None:
        """A round of `arm` was scored: its run of consecutive gaps is over."""
        state = self.journal.state
        state.consecutive_gaps = {**state.consecutive_gaps, arm: 0}

    def record_gap(self, arm: str, label: str, kind: RoundKind, mutation_id: str | None, reason: str | None) -> None:
        """Record a round that had a gap and count it toward the arm's consecutive-gap halt."""
        self.journal.book.once(
            Keys.round(label),
            RoundRecord(
                arm=arm, round=label, kind=kind, mutation_id=mutation_id, diff={}, n_seeds={}, gap_reason=reason
            ),
        )
        note_gap(self.journal.state, arm, self.ctx.contract.stop.max_consecutive_gaps, reason)

    def recover(self, audits: list[tuple[str, Path]]) -> None:
        """Before touching audits a crash interrupted, find out what they did and record it.

        A still-running audit is awaited (up to its timeout); one that cannot be established
        halts the run with an explicit "unknown" instead of a guess.
        """
        timeout = self.ctx.contract.measurement.audit_timeout_s
        try:
            awaited = measure.settle(self.ctx, audits)  # Ray slots a crashed driver left: await what they run
        except AuditStateUnknown as ex:
            raise Halt(f"unknown: {ex}; inspect the cluster and the audit directory, then resume") from None
        if awaited:
            self.journal.emit(Recovered(f"{', '.join(awaited)} still held by Ray slots; awaited them"))
        for audit_id, audit_dir in audits:
            try:
                status = attempts.await_attempt(audit_dir, timeout)
            except AuditStateUnknown as ex:
                raise Halt(f"unknown: {ex}; inspect {audit_dir}, then resume") from None
            if status.state == "unknown":
                raise Halt(
                    f"unknown: cannot establish what audit {audit_id} did ({status.detail}); "
                    f"inspect {audit_dir}, then resume"
                )
            if status.state == "new":
                continue
            if status.state == "running":  # still running after its whole timeout: cannot be established
                raise Halt(f"unknown: audit {audit_id} is still running past its timeout; inspect {audit_dir}")
            action = RECOVERY_ACTIONS[status.state]
            charge = self.cost_bound if started_and_died(status) else 0.0
            record = RecoveryRecord(
                audit_id=audit_id, attempt=status.attempt, found=status.state, detail=status.detail, action=action
            ).model_copy(update={"charged_usd": charge})
            if self.journal.book.once(Keys.recovery(audit_id, status.attempt), record) is not None:
                self.journal.state.usd += charge  # once: a second resume finds the record and charges nothing
            paid = f"; charged ${charge:.4f}, the bound of one audit" if charge else ""
            self.journal.emit(Recovered(f"{audit_id}: {status.detail}; {action}{paid}"))

    def anchor(self) -> None:
        self.guards.anchor()

    # ---- recording -----------------------------------------------------------------------

    def _record_audit(
        self, arm: str, label: str, role: str, ps: PolicySet, when: tuple[int, SeedSet], res: AuditResult
    ) -> None:
        rec = audit_record(arm, label, role, ps, when, res)
        if self.journal.book.once(Keys.audit(res.audit_id), rec) is None:
            return
        state = self.journal.state
        state.audits += 1
        state.usd += res.usage.usd
        if arm in state.arms:
            state.arms[arm].audits += 1
        if not res.ok:
            state.gaps += 1
            self.journal.emit(AuditGap(audit_id=res.audit_id, reason=res.gap_reason or ""))


def audit_record(
    arm: str, label: str, role: str, ps: PolicySet, when: tuple[int, SeedSet], res: AuditResult
) -> AuditRecord:
    tick, seed_set = when
    return AuditRecord(
        arm=arm,
        round=label,
        role=role,
        policy_set=ps.set_id,
        tick=tick,
        seed_set=seed_set,
        **res.model_dump(include=AUDIT_RESULT_FIELDS),
    )


def started_and_died(status: attempts.AttemptStatus) -> bool:
    """A died attempt whose process had started: it may have paid for calls no log reported."""
    return status.state == "died" and status.pid is not None


def note_gap(state: RunState, arm: str, max_gaps: int, reason: str | None = None) -> None:
    """Count a gapped round of `arm`; a run of `max_gaps` of them halts the run, saying the last reason."""
    gaps = state.consecutive_gaps.get(arm, 0) + 1
    state.consecutive_gaps = {**state.consecutive_gaps, arm: gaps}
    if gaps >= max_gaps:
        last = f"; the last: {reason}" if reason else "; see the gap reasons in the ledger"
        raise Halt(f"{gaps} consecutive audit gaps in the {arm} rounds{last}")
