"""`sil replicate`: re-measure a past KEEP in K fresh paired rounds; demote it if it does not hold.

The kept policy set is audited against the policy it replaced, never reusing the audits that
led to the KEEP, through the run's own `RoundRunner`: the approval is re-checked before every
batch, the audit, USD and wall-time budgets apply, and the ledger head is anchored after the
result. The KEEP holds only if the 90% interval of the target's paired difference lies
wholly on the improving side of the superiority margin and no critical dimension is worse
than its margin on average; otherwise it is demoted (and if it is still its arm's champion,
the champion's file is restored to the parent).

    result = replicate(rc, mutation_id, arm="gate", k=8)
"""

from __future__ import annotations

import numpy as np

from sil.base.errors import Refused
from sil.integrity.records import DemoteRecord, IntentRecord, Keys, ReplicateRecord, Trust, VerdictRecord
from sil.run.context import RunContext
from sil.stats import fitness
from sil.stats.fitness import RoundStat
from sil.store.runstate import ArmState

LEVEL = 0.9


def find_keep(rc: RunContext, mutation_id: str, arm: str | None) -> VerdictRecord:
    """The KEEP verdict to replicate; `arm` is needed only when two arms kept the same edit."""
    verdicts = [
        v
        for v in rc.book.payloads("verdict", VerdictRecord)
        if v.mutation_id == mutation_id and (arm is None or v.arm == arm)
    ]
    if not verdicts:
        raise Refused(
            f"no verdict for mutation {mutation_id!r}{f' in the {arm} arm' if arm else ''} "
            "in this run (see `sil ledger show --type verdict`)"
        )
    keeps = [v for v in verdicts if v.verdict == "keep"]
    if not keeps:
        raise Refused(f"{mutation_id} was reverted, not kept: nothing to replicate")
    if len(keeps) > 1:
        raise Refused(f"{mutation_id} was kept in the arms {[v.arm for v in keeps]}; name one with --arm")
    return keeps[0]


def replicate(rc: RunContext, mutation_id: str, arm: str | None, k: int, trust: Trust | None = None) -> ReplicateRecord:
    keep = find_keep(rc, mutation_id, arm)
    cand, parent = rc.store.stored_set(keep.candidate_set), rc.store.stored_set(keep.parent_set)
    if why := rc.rounds.budget_left("replicate", 2 * k):
        raise Refused(f"{k} fresh rounds cannot start: {why}")
    if rc.book.open_segment(f"replicate {keep.arm} {mutation_id}", trust or Trust()):
        rc.rounds.anchor()  # the segment is checkpointed before anything is added to it
    done = len(rc.book.of_type("replicate"))
    rounds: list[RoundStat] = []
    for i in range(k):
        label = f"replicate{done:02d}-{keep.arm}-{mutation_id}-r{i:02d}"  # stable: a re-run reuses finished audits
        stat = rc.rounds.run_pair("replicate", label, "replicate", cand, parent, mutation_id)
        rc.rounds.consumed()
        rc.save()
        if stat is not None:
            rounds.append(stat)
    result = judge_replication(rc, keep, rounds)
    record_replication(rc, keep, result, done)
    rc.rounds.anchor()
    return result


def judge_replication(rc: RunContext, keep: VerdictRecord, rounds: list[RoundStat]) -> ReplicateRecord:
    p = rc.promotion
    target = p.target_dimensions[0]
    ti = fitness.interval(rounds, target, LEVEL) if rounds else None
    crit = {
        d: (float(np.mean(v)) if (v := [x for r in rounds if (x := r.diff.get(d)) is not None]) else None)
        for d in p.critical_dimensions
    }
    if ti is None:
        demoted, reason = True, "not enough usable fresh rounds for an interval: the KEEP is unconfirmed"
    elif ti[2] >= -p.superiority_margin:
        demoted, reason = (
            True,
            (
                f"fresh rounds do not show {target} improving: "
                f"{ti[0]:+.3f} [{ti[1]:+.3f}, {ti[2]:+.3f}] reaches {-p.superiority_margin:+.3f}"
            ),
        )
    elif bad := [d for d, m in crit.items() if m is not None and m > min(p.critical_margin, p.tolerance(d))]:
        demoted, reason = True, f"critical dimensions worse than their harm tolerance: {bad}"
    else:
        demoted, reason = False, f"the {LEVEL:.0%} interval of {target} excludes no improvement"
    return ReplicateRecord(
        mutation_id=keep.mutation_id,
        arm=keep.arm,
        rounds=len(rounds),
        target=target,
        target_interval=ti,
        critical_means=crit,
        demoted=demoted,
        reason=reason,
        champion_reverted=False,
    )


def record_replication(rc: RunContext, keep: VerdictRecord, result: ReplicateRecord, n: int) -> None:
    key = Keys.replication(keep.arm, keep.mutation_id, n)
    arm = rc.state.arms.get(keep.arm)
    if result.demoted and arm is not None and arm.champion.set_id == keep.candidate_set:
        restore_parent(rc, arm, keep, key)
        result = result.model_copy(update={"champion_reverted": True})
    rc.book.once(key, result)
    if result.demoted:
        rc.book.once(
            key,
            DemoteRecord(
                cause="replication",
                arm=keep.arm,
                policy_set=keep.candidate_set,
                restored_set=keep.parent_set if result.champion_reverted else None,
                mutation_id=keep.mutation_id,
                reason=result.reason,
            ),
        )
    rc.save()


def restore_parent(rc: RunContext, arm: ArmState, keep: VerdictRecord, key: str) -> None:
    """The demoted KEEP is still the arm's champion: put its parent's file back."""
    cand, parent = rc.store.stored_set(keep.candidate_set), rc.store.stored_set(keep.parent_set)
    rc.book.once(Keys.intent("demote", key), IntentRecord(action="demote", key=key, arm=keep.arm))
    for surface, digest in cand.hashes.items():
        if digest != parent.hashes[surface]:
            rc.store.write_surface(keep.arm, surface, parent, expect_current=digest)
    arm.champion = parent
