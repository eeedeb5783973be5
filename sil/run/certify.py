"""The final phase: re-measure each changed champion against the starting policy.

The gate arm's champion (and the random arm's, with `budget.certify_random`) is certified with a
sequential test (`certify_rounds` rounds, plus those the arm's unspent search audits pay for when
its proposer ran dry, at `alpha_certify`, sil/stats/judges.certify) on the
seeds `measurement.certify_on` names: the
held-out seeds (`heldout/` of the measurement, never used by the search) when the measurement
has them and the contract does not ask for the search seeds. Certified on held-out seeds, the
champion is also re-measured on the search seeds (`final_check_rounds`), so the summary shows
both effects side by side. If it is not certified it is rolled back to the starting policy
(working files and champion ref). An arm that is not certified (the random arm by default) is
only re-measured on the search seeds (`final_check_rounds`), for the summary.

    final_phase(rc)
"""

from __future__ import annotations

from dataclasses import dataclass

from sil.contract.prepare import SEED_SET_NAMES, SeedSet
from sil.integrity.records import CertifyLeg, CertifyRecord, DemoteRecord, IntentRecord, Keys, RoundRecord
from sil.run.context import RunContext
from sil.run.holdout import record_result, reserve
from sil.run.horizon import certify_outlook, pooled_looks, sized_by_search
from sil.run.proposing import NOTHING_LEFT
from sil.stats import fitness
from sil.stats.gate import GateDecision
from sil.stats.judges import Claim, certify, seed_count_scale
from sil.store.events import CertificationStopped, RolledBack
from sil.store.runstate import ArmState, RoundKind

INTERVAL_LEVEL = 0.9


@dataclass(frozen=True)
class FinalPlan:
    """One series of champion-vs-start rounds: how many, on which seeds, certifying or not."""

    looks: int
    certifying: bool
    seed_set: SeedSet = "search"
    search_check: bool = False  # the search-seed check of a champion certified on held-out seeds
    alpha: float | None = None  # the certification's level (None: alpha_certify)
    claim: Claim = "heldout"  # about the rounds' seeds, or about seeds never used

    @property
    def kind(self) -> RoundKind:
        return "certify" if self.certifying else "final"

    def prefix(self, arm: ArmState) -> str:
        done = len(self.rounds(arm))
        return f"final-{arm.arm}-search-{done:02d}" if self.search_check else f"final-{arm.arm}-{done:02d}"

    def rounds(self, arm: ArmState) -> list[fitness.RoundStat]:
        return arm.search_rounds if self.search_check else arm.final_rounds


def final_phase(rc: RunContext) -> None:
    """Re-measure each changed champion against the start; certify the gate's if asked."""
    budget = rc.contract.budget
    for name in ("random", "gate"):
        arm = rc.state.arms.get(name)
        if arm is None or arm.champion == rc.state.origin:
            continue
        if not certifies(rc, name):
            final_rounds(rc, arm, FinalPlan(budget.final_check_rounds, certifying=False))
            continue
        level = reserve(rc, arm)  # spent in the project holdout ledger before the first round
        if isinstance(level, str):
            conclude(rc, arm, None, refused=level)
            continue
        seed_set, claim = rc.measure.certify_on, rc.contract.certification.claim
        plan = FinalPlan(certify_looks(rc, arm), certifying=True, seed_set=seed_set, alpha=level, claim=claim)
        decision = final_rounds(rc, arm, plan)
        if seed_set == "heldout":  # after the certification, so it never eats the certification's audits
            final_rounds(rc, arm, FinalPlan(budget.final_check_rounds, certifying=False, search_check=True))
        conclude(rc, arm, decision)


def certifies(rc: RunContext, arm: str) -> bool:
    """Whether the arm's champion is certified: the gate's always when there are certification
    rounds, the random arm's too when the contract asks (`budget.certify_random`)."""
    return arm in rc.contract.certified_arms()


def certify_looks(rc: RunContext, arm: ArmState) -> int:
    """The certification's horizon: `certify_rounds`, plus, when the arm's proposer ran dry, the
    rounds its unspent search audits pay for (an arm stopped by the wall-time or USD budget could
    not pay for them); under `certify_horizon: search`, the rounds the arm's pool has left
    (sil/run/horizon.py). Set by the search alone, before the first certification round, so the
    test never sizes itself on its own data."""
    budget = rc.contract.budget
    if sized_by_search(rc.contract, arm.arm):
        return pooled_looks(rc.contract, arm)
    if not (arm.stop_reason or "").startswith(NOTHING_LEFT):
        return budget.certify_rounds
    limit = next((n for name, n in budget.arm_audits.items() if name == arm.arm), 0)
    return budget.certify_rounds + max(0, limit - arm.audits) // 2


def sigma_scale(rc: RunContext, seed_set: SeedSet) -> float:
    """Widening of the frozen (search-seed) noise for certification rounds on `seed_set`."""
    return seed_count_scale(len(rc.measure.seed_ids), len(rc.measure.seeds_for(seed_set)))


def final_rounds(rc: RunContext, arm: ArmState, plan: FinalPlan) -> GateDecision | None:
    """Paired rounds champion vs origin; when certifying, until the certification decides."""
    done = plan.rounds(arm)
    scale = sigma_scale(rc, plan.seed_set)

    # resumed with rounds already run: the certification's decision so far, never a spare round
    def judged() -> GateDecision:
        return certify(rc.promotion, rc.state.shared.pool, done, plan.looks, scale, alpha=plan.alpha, claim=plan.claim)

    decision = judged() if plan.certifying and done else None
    while len(done) < plan.looks and (decision is None or decision.verdict == "continue"):
        label = rc.rounds.next_label(plan.prefix(arm))
        if not rc.rounds.resuming(label) and (why := rc.rounds.budget_left(None, 2)):
            rc.emit(CertificationStopped(arm=arm.arm, seeds=SEED_SET_NAMES[plan.seed_set], why=why))
            break
        stat = rc.rounds.run_pair("final", label, plan.kind, arm.champion, rc.state.origin, seed_set=plan.seed_set)
        if stat is not None:
            done.append(stat)
            if plan.certifying:
                decision = judged()
            rc.book.once(
                Keys.round(label),
                RoundRecord(
                    arm=arm.arm,
                    round=label,
                    kind=plan.kind,
                    mutation_id=None,
                    diff=stat.diff,
                    n_seeds=stat.n_seeds,
                    decision=decision,
                    seed_set=plan.seed_set,
                ),
            )
        rc.rounds.consumed()  # saved together with the round's outcome
        rc.save()
    return decision


def certify_legs(rounds: list[fitness.RoundStat], decision: GateDecision | None) -> list[CertifyLeg]:
    """Each leg's estimate, 90% interval over the certification rounds, statistic and boundary."""
    legs = []
    for leg in decision.legs if decision is not None else []:
        ci = fitness.interval(rounds, leg.dim, INTERVAL_LEVEL) if rounds and leg.dim in rounds[0].diff else None
        legs.append(
            CertifyLeg(
                dim=leg.dim,
                kind=leg.kind,
                estimate=leg.estimate,
                interval=None if ci is None else (ci[1], ci[2]),
                statistic=leg.statistic,
                boundary=leg.boundary,
                passed=leg.passed,
            )
        )
    return legs


def search_effects(rc: RunContext, arm: ArmState) -> dict[str, tuple[float, float, float]]:
    """The champion's search-seed effect per gated dimension (mean, 90% interval) from its check."""
    out = {}
    for dim in rc.contract.dimensions():
        ci = fitness.interval(arm.search_rounds, dim, INTERVAL_LEVEL) if arm.search_rounds else None
        if ci is not None:
            out[dim] = ci
    return out


def conclude(rc: RunContext, arm: ArmState, decision: GateDecision | None, refused: str | None = None) -> None:
    """A champion that is not certified is rolled back to the starting policy. `refused`: the
    certification could not run (its seed set's project budget is spent), and says why."""
    champion, origin = arm.champion, rc.state.origin
    key = Keys.certify(arm.arm, champion.set_id)
    certified = decision is not None and decision.verdict == "keep"
    seed_set = rc.measure.certify_on
    unfinished = refused or "the budget ran out before the certification decided"
    reason = decision.reason if decision is not None else unfinished
    rc.book.once(
        key,
        CertifyRecord(
            arm=arm.arm,
            policy_set=champion.set_id,
            against=origin.set_id,
            certified=certified,
            rounds=len(arm.final_rounds),
            looks=certify_looks(rc, arm),
            decision=decision,
            reason=reason,
            legs=certify_legs(arm.final_rounds, decision),
            seed_set=seed_set,
            seeds=len(rc.measure.seeds_for(seed_set)),
            sigma_scale=sigma_scale(rc, seed_set),
            search_rounds=len(arm.search_rounds),
            search_effect=search_effects(rc, arm),
            outlook=certify_outlook(rc.contract, rc.state, rc.measure, certify_looks(rc, arm)),
        ),
    )
    if refused is None:
        record_result(rc, arm.arm, champion.set_id, certified, reason)
    if certified:
        arm.stop_reason = f"{arm.stop_reason}; champion certified on the {SEED_SET_NAMES[seed_set]} seeds"
        rc.save()
        return
    demote(rc, arm, key, decision, refused)


def demote(rc: RunContext, arm: ArmState, key: str, decision: GateDecision | None, refused: str | None = None) -> None:
    """Roll the arm's champion back to the starting policy (files, champion ref, state)."""
    champion, origin = arm.champion, rc.state.origin
    rc.book.once(Keys.intent("demote", key), IntentRecord(action="demote", key=key, arm=arm.arm))
    for surface, digest in champion.hashes.items():
        if digest != origin.hashes[surface]:
            rc.store.write_surface(arm.arm, surface, origin, expect_current=digest)
    origin_commit = rc.refs.origin_commit(origin, rc.record_time("contract", Keys.RUN))
    if origin_commit is not None and arm.champion_commit != origin_commit:
        rc.refs.move_champion(arm.arm, origin_commit, previous=arm.champion_commit)
        arm.champion_commit = origin_commit
    arm.champion = origin
    arm.stop_reason = f"{arm.stop_reason}; champion failed certification, rolled back"
    why = "not certified" if decision is not None else refused or "the budget ran out before the certification decided"
    rc.book.once(
        key,
        DemoteRecord(
            cause="certification",
            arm=arm.arm,
            policy_set=champion.set_id,
            restored_set=origin.set_id,
            reason=f"champion {why} against the starting policy: rolled back",
        ),
    )
    rc.save()
    rc.emit(RolledBack(arm=arm.arm, set_id=champion.set_id))
