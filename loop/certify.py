"""The final phase: re-measure each changed champion against the starting policy.

The gate arm's champion is certified with a sequential test (`certify_rounds` rounds at
`alpha_certify`, loop/judges.certify); if it is not certified it is rolled back to the
starting policy (working files and champion ref). The random arm's champion is only
re-measured (`final_check_rounds`), for the summary.

    final_phase(rc)
"""

from __future__ import annotations

import fitness
from gate import GateDecision
from loop.context import RunContext
from loop.judges import certify
from loop.records import CertifyLeg, CertifyRecord, DemoteRecord, IntentRecord, Keys, RoundRecord
from loop.runstate import ArmState, RoundKind

INTERVAL_LEVEL = 0.9


def final_phase(rc: RunContext) -> None:
    """Re-measure each changed champion against the start; certify the gate's if asked."""
    budget = rc.contract.budget
    for name in ("random", "gate"):
        arm = rc.state.arms.get(name)
        if arm is None or arm.champion == rc.state.origin:
            continue
        certifying = name == "gate" and budget.certify_rounds > 0
        looks = budget.certify_rounds if certifying else budget.final_check_rounds
        decision = final_rounds(rc, arm, looks, certifying)
        if certifying:
            conclude(rc, arm, decision)


def final_rounds(rc: RunContext, arm: ArmState, looks: int, certifying: bool) -> GateDecision | None:
    """Paired rounds champion vs origin; when certifying, until the certification decides."""
    decision: GateDecision | None = None
    while len(arm.final_rounds) < looks and (decision is None or decision.verdict == "continue"):
        label = rc.rounds.next_label(f"final-{arm.arm}-{len(arm.final_rounds):02d}")
        if not rc.rounds.resuming(label) and (why := rc.rounds.budget_left(None, 2)):
            rc.emit(f"final check of {arm.arm} stopped: {why}")
            break
        kind: RoundKind = "certify" if certifying else "final"
        stat = rc.rounds.run_pair("final", label, kind, arm.champion, rc.state.origin)
        if stat is not None:
            arm.final_rounds.append(stat)
            if certifying:
                decision = certify(rc.promotion, rc.state.shared.pool, arm.final_rounds, looks)
            rc.book.once(
                Keys.round(label),
                RoundRecord(
                    arm=arm.arm,
                    round=label,
                    kind=kind,
                    mutation_id=None,
                    diff=stat.diff,
                    n_seeds=stat.n_seeds,
                    decision=decision,
                ),
            )
        rc.rounds.consumed()  # saved together with the round's outcome
        rc.save()
    return decision


def certify_legs(arm: ArmState, decision: GateDecision | None) -> list[CertifyLeg]:
    """Each leg's estimate, 90% interval over the certification rounds, statistic and boundary."""
    legs = []
    for leg in decision.legs if decision is not None else []:
        ci = (
            fitness.interval(arm.final_rounds, leg.dim, INTERVAL_LEVEL)
            if arm.final_rounds and leg.dim in arm.final_rounds[0].diff
            else None
        )
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


def conclude(rc: RunContext, arm: ArmState, decision: GateDecision | None) -> None:
    """A champion that is not certified is rolled back to the starting policy."""
    champion, origin = arm.champion, rc.state.origin
    key = Keys.certify(arm.arm, champion.set_id)
    certified = decision is not None and decision.verdict == "keep"
    rc.book.once(
        key,
        CertifyRecord(
            arm=arm.arm,
            policy_set=champion.set_id,
            against=origin.set_id,
            certified=certified,
            rounds=len(arm.final_rounds),
            decision=decision,
            reason=decision.reason if decision is not None else "the budget ran out before the certification decided",
            legs=certify_legs(arm, decision),
        ),
    )
    if certified:
        arm.stop_reason = f"{arm.stop_reason}; champion certified"
        rc.save()
        return
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
    why = "not certified" if decision is not None else "the budget ran out before the certification decided"
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
    rc.emit(f"gate: champion {champion.set_id} failed certification; rolled back to the starting policy")
