"""The arms of a run: the never arm (noise floor), and candidate arms that differ only in their judge.

- `NeverArm`: concurrent A/A pairs of the unchanged starting policy; it measures the noise
  floor and the drift, and never mutates or promotes.
- `CandidateArm`: one candidate at a time, through the stages proposed -> applied (the
  working policy file holds it) -> decided -> settled (kept as champion, or its file
  restored). What the candidate's rounds mean is the judge's business (sil/stats/judges.py):
  a seeded coin for the random arm, the sequential gate for the gate arm.

Every side effect is preceded by an intent record and followed by a state save, so each
step is idempotent and a crash anywhere resumes where it stopped.

    never_phase(rc); candidate_phase(rc, "random"); candidate_phase(rc, "gate")
"""

from __future__ import annotations

from sil.base.errors import Halt
from sil.base.faults import crashpoint
from sil.integrity.records import (
    IntentRecord,
    Keys,
    MutationRecord,
    NoiseRecord,
    PolicyChangeRecord,
    RoundRecord,
    VerdictRecord,
)
from sil.policies.mutation import Mutation, MutationError, apply_mutation
from sil.policies.store import PolicySet
from sil.run.context import RunContext
from sil.run.horizon import certify_outlook, outlook_event
from sil.run.proposing import CandidateSource, record_effect
from sil.run.screening import note_paired, run_screen
from sil.search.proposers import Proposer, make_proposer
from sil.stats.gate import Ending, should_promote
from sil.stats.horizon import champion_effect, kept_on
from sil.stats.judges import ArmBudget, Judge, Outcome, judge_for
from sil.store.events import (
    ArmFinished,
    CandidateProposed,
    LookTaken,
    NoiseCalibrated,
    VerdictReached,
)
from sil.store.runstate import ArmState, Pending


def arm_state(rc: RunContext, name: str) -> ArmState:
    """The arm's state, created (champion = the starting policy) on first use."""
    state = rc.state
    if name not in state.arms:
        state.arms[name] = ArmState(arm=name, champion=state.origin)
        rc.save()
    return state.arms[name]


class NeverArm:
    """A/A pairs of the starting policy: the noise pool the gate's thresholds come from."""

    def __init__(self, rc: RunContext) -> None:
        self.rc = rc

    def run(self) -> None:
        rc, state = self.rc, self.rc.state
        arm = arm_state(rc, "never")
        while len(state.aa_rounds) < rc.promotion.calibration_pairs:
            label = rc.rounds.next_label(f"never-aa{len(state.aa_rounds):03d}")
            if not rc.rounds.resuming(label) and (why := rc.rounds.budget_left("never", 2)):
                arm.stop_reason = why
                break
            stat = rc.rounds.run_pair("never", label, "aa", state.origin, state.origin)
            rc.rounds.consumed()
            if stat is not None:
                state.shared.pool.add_aa(stat)
                state.aa_rounds.append(stat)
                note_paired(state, rc.promotion.screen_reference, label, state.origin, aa=True)
                rc.book.once(
                    Keys.round(label),
                    RoundRecord(
                        arm="never", round=label, kind="aa", mutation_id=None, diff=stat.diff, n_seeds=stat.n_seeds
                    ),
                )
            rc.save()
        est = state.shared.pool.estimate()
        arm.stop_reason = arm.stop_reason or f"{len(state.aa_rounds)} A/A pairs measured"
        rc.book.once(
            Keys.CALIBRATION, NoiseRecord(estimate=est, pairs=len(state.aa_rounds), source="never arm A/A pairs")
        )
        arm.done = True
        sigma = {d: est.sigma[d] for d in rc.promotion.target_dimensions if d in est.sigma}
        rc.emit(NoiseCalibrated(pairs=len(state.aa_rounds), sigma=sigma))
        if (seen := certify_outlook(rc.contract, state, rc.measure)) is not None:
            rc.emit(outlook_event(rc.contract, seen, rc.measure))


class CandidateArm:
    """One candidate at a time: propose, apply, measure until the judge decides, settle."""

    def __init__(self, rc: RunContext, name: str, judge: Judge, proposer: Proposer) -> None:
        self.rc = rc
        self.name = name
        self.judge = judge
        self.proposer = proposer
        self.source = CandidateSource(rc, name, proposer)

    def run(self) -> None:
        rc = self.rc
        arm = arm_state(rc, self.name)
        rc.store.init_working(self.name, arm.champion)
        while not arm.done:
            if arm.pending is None:
                if why := self.stop_reason(arm):
                    arm.done, arm.stop_reason = True, why
                else:
                    self.propose(arm)
            else:
                self.advance(arm)
            rc.save()
        rc.emit(ArmFinished(self.name, arm.candidates, arm.keeps, arm.audits, arm.stop_reason))

    def stop_reason(self, arm: ArmState) -> str | None:
        """Why no new candidate may start: budget, error budget or the candidate limit."""
        if arm.candidates >= self.rc.contract.stop.max_candidates_per_arm:
            return "candidate limit reached"
        return self.rc.rounds.budget_left(self.name, 2) or self.judge.stop_reason(self.rc.state.shared)

    def advance(self, arm: ArmState) -> None:
        assert arm.pending is not None
        stage = arm.pending.stage
        if stage == "proposed":
            self.apply(arm)
        elif stage == "applied":
            self.measure(arm)
        else:
            self.settle(arm)

    # ---- propose and apply ---------------------------------------------------------------

    def propose(self, arm: ArmState) -> None:
        """Ask the proposer for one candidate and store it as a policy set (no file written yet)."""
        rc = self.rc
        champion = rc.store.documents(arm.champion)
        index = arm.candidates
        mutation = self.source.ask(arm, champion)
        if mutation is None:
            return
        try:
            new_doc = apply_mutation(mutation, champion, rc.contract.search_space.surfaces)
        except MutationError as ex:
            raise Halt(f"the proposer's mutation {mutation.mutation_id} does not apply: {ex}") from None
        candidate = rc.store.store_documents({**champion, mutation.surface: new_doc}, base=arm.champion)
        arm.pending = Pending(index=index, mutation=mutation, parent=arm.champion, candidate=candidate)
        arm.candidates += 1
        crashpoint("propose.before_save")
        rc.save()  # the mutation is recorded when applied: a proposal lost to a crash is redone
        crashpoint("propose.after_save")
        rc.emit(CandidateProposed(self.name, index, mutation.mutation_id, f"{mutation.surface}.{mutation.path}"))

    def apply(self, arm: ArmState) -> None:
        """Write the candidate's surface into the arm's working policy files."""
        rc, p = self.rc, arm.pending
        assert p is not None
        m = p.mutation
        key = Keys.candidate(self.name, m.mutation_id)
        rc.book.once(
            key,
            MutationRecord(
                arm=self.name,
                index=p.index,
                mutation=m,
                candidate_set=p.candidate.set_id,
                parent_set=p.parent.set_id,
                value_hash=m.edit_key[2],
            ),
        )
        crashpoint("apply.before_intent")
        rc.book.once(Keys.intent("apply", key), IntentRecord(action="apply", key=key, arm=self.name, surface=m.surface))
        crashpoint("apply.before_write")
        rc.store.write_surface(self.name, m.surface, p.candidate, expect_current=p.parent.hashes[m.surface])
        crashpoint("apply.before_record")
        self.record_change(key, m, p.parent, p.candidate, "applied")
        p.stage = "applied"
        crashpoint("apply.before_save")

    def record_change(
        self, key: str, m: Mutation, old: PolicySet, new: PolicySet, event: str, commit: str | None = None
    ) -> None:
        """The arm's working policy changed from `old` to `new` (applied, promoted or reverted)."""
        self.rc.book.once(
            key,
            PolicyChangeRecord(
                arm=self.name,
                mutation_id=m.mutation_id,
                surface=m.surface,
                from_hash=old.hashes[m.surface],
                to_hash=new.hashes[m.surface],
                policy_set=new.set_id,
                commit=commit,
            ),
            event,
        )

    # ---- measure and decide --------------------------------------------------------------

    def measure(self, arm: ArmState) -> None:
        """One paired round of candidate vs champion, judged."""
        rc, p = self.rc, arm.pending
        assert p is not None
        label = rc.rounds.next_label(f"{self.name}-c{p.index:03d}-r{p.round_no:02d}")
        if not rc.rounds.resuming(label) and (why := rc.rounds.budget_left(self.name, 2)):
            kind = self.judge.next_kind(p.trial)
            why = f"stopped before a decision: {why}"
            self.decide(arm, Outcome(verdict="revert", reason=why, kind=kind, ending=Ending.BUDGET))
            return
        kind = self.judge.next_kind(p.trial)
        if kind == "screen":
            stat = run_screen(rc.rounds, self.name, label, p.candidate, p.parent, p.mutation.mutation_id)
        else:
            stat = rc.rounds.run_pair(self.name, label, kind, p.candidate, p.parent, p.mutation.mutation_id)
        rc.rounds.consumed()
        p.round_no += 1
        if stat is None:
            return
        if not stat.reference:  # a paired round: its champion side is an unselected audit of the champion
            note_paired(rc.state, rc.promotion.screen_reference, label, p.parent)
        budget = ArmBudget(audits_left=rc.rounds.audits_left(self.name), audits_spent=arm.audits)
        p.trial, outcome = self.judge.judge(p.trial, stat, rc.state.shared, budget, p.index)
        rc.book.once(
            Keys.round(label),
            RoundRecord(
                arm=self.name,
                round=label,
                kind=outcome.kind,
                mutation_id=p.mutation.mutation_id,
                diff=stat.diff,
                n_seeds=stat.n_seeds,
                decision=outcome.decision,
                coin=outcome.coin,
                reference=stat.reference,
            ),
        )
        if outcome.kind == "confirm":
            rc.emit(LookTaken(label=label, verdict=outcome.verdict, reason=outcome.reason))
        if outcome.verdict != "continue":
            self.decide(arm, outcome)

    def decide(self, arm: ArmState, outcome: Outcome) -> None:
        """Record the verdict and account it in the run's error budget and noise pool."""
        rc, p = self.rc, arm.pending
        assert p is not None and outcome.verdict in ("keep", "revert")
        p.verdict = "keep" if outcome.verdict == "keep" else "revert"
        p.reason, p.decision, p.stage = outcome.reason, outcome.decision, "decided"
        rc.state.shared = self.judge.close(p.trial, p.verdict, rc.state.shared)
        spends = p.trial.alpha is not None
        rc.book.once(
            Keys.candidate(self.name, p.mutation.mutation_id),
            VerdictRecord(
                arm=self.name,
                mutation_id=p.mutation.mutation_id,
                verdict=p.verdict,
                reason=outcome.reason,
                candidate_set=p.candidate.set_id,
                parent_set=p.parent.set_id,
                rounds=p.trial.rounds,
                alpha=p.trial.alpha,
                error_budget=rc.state.shared.budget if spends else None,
                decision=outcome.decision,
            ),
        )
        record_effect(rc, self.name, p)
        crashpoint("verdict.before_save")
        rc.save()
        crashpoint("verdict.before_anchor")
        rc.rounds.anchor()
        rc.emit(
            VerdictReached(arm=self.name, mutation_id=p.mutation.mutation_id, verdict=p.verdict, reason=outcome.reason)
        )

    # ---- settle --------------------------------------------------------------------------

    def settle(self, arm: ArmState) -> None:
        """Carry out a recorded verdict: the candidate becomes champion, or its file is restored."""
        rc, p = self.rc, arm.pending
        assert p is not None and p.verdict is not None
        m = p.mutation
        key = Keys.candidate(self.name, m.mutation_id)
        keep = p.verdict == "keep"
        crashpoint("settle.before_intent")
        if keep and self.judge.keeps_by_test and (p.decision is None or not should_promote(p.decision)):
            raise Halt(
                f"refusing to promote {m.mutation_id}: its KEEP does not come from a confirmation "
                "in which every leg crossed its boundary"
            )
        rc.book.once(
            Keys.intent("promote" if keep else "revert", key),
            IntentRecord(action="promote" if keep else "revert", key=key, arm=self.name),
        )
        crashpoint("settle.before_write")
        if not keep:  # a KEEP's working file already holds the candidate
            rc.store.write_surface(self.name, m.surface, p.parent, expect_current=p.candidate.hashes[m.surface])
        crashpoint("settle.before_refs")
        commit, arm.champion_commit = rc.refs.record_verdict(
            self.name,
            m.mutation_id,
            p.candidate,
            rc.state.origin,
            arm.champion_commit,
            keep,
            f"candidate {p.index} {m.surface}.{m.path}: {p.verdict.upper()}",
            (rc.record_time("contract", Keys.RUN), rc.record_time("verdict", key)),
        )
        crashpoint("settle.before_record")
        new, old = (p.candidate, p.parent) if keep else (p.parent, p.candidate)
        self.record_change(key, m, old, new, "promote" if keep else "revert", commit)
        if keep:
            arm.champion, arm.keeps = p.candidate, arm.keeps + 1
            arm.champion_effect = champion_effect(arm.champion_effect, kept_on(p.trial))
        else:
            arm.reverts += 1
        arm.pending = None
        crashpoint("settle.before_save")


def never_phase(rc: RunContext) -> None:
    NeverArm(rc).run()


def candidate_phase(rc: RunContext, name: str) -> None:
    judge = judge_for(name, rc.promotion, rc.contract.seed)
    CandidateArm(rc, name, judge, make_proposer(rc.loaded)).run()
