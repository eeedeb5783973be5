"""`sil replicate`: re-measure a past KEEP in K fresh paired rounds; demote it if it does not hold.

The kept policy set is audited against the policy it replaced, never reusing the audits that
led to the KEEP, through the run's own `RoundRunner`: the approval is re-checked before every
batch, the audit, USD and wall-time budgets apply, and the ledger head is anchored after the
result. A replication decides only when its test concludes: the KEEP holds if the 90%
interval of the target's paired difference lies wholly on the improving side of the
superiority margin, and it is demoted only if that interval lies wholly on the other side
(or a critical dimension's interval lies wholly beyond its tolerance); if it is still its
arm's champion, the champion's file is restored to the parent. Otherwise the replication is
inconclusive, changes nothing, and says about how many rounds would decide.

    result = replicate(rc, mutation_id, arm="gate", k=8)
"""

from __future__ import annotations

import math

import numpy as np

from sil.base.errors import Refused
from sil.integrity.records import DemoteRecord, IntentRecord, Keys, ReplicateRecord, RoundRecord, Trust, VerdictRecord
from sil.run.context import RunContext
from sil.stats import fitness
from sil.stats.fitness import RoundStat
from sil.store.runstate import ArmState

LEVEL = 0.9
MIN_ROUNDS = 2  # a t-interval from the rounds' own spread needs two
MAX_NEEDED = 10_000  # beyond this the effect is indistinguishable from the margin


def _t(k: int) -> float:
    from scipy import stats  # only a replication needs it

    return float(stats.t.ppf(0.5 + LEVEL / 2, k - 1))


def rounds_needed(ti: tuple[float, float, float], n: int, margin: float) -> int | None:
    """About how many rounds an effect and spread like `ti`'s (over n rounds) need for the 90%
    interval to clear -margin, with the t quantile of each size; None: more than MAX_NEEDED."""
    mean, lo, hi = ti
    return rounds_for(mean, (hi - lo) / 2 * math.sqrt(n) / _t(n), margin)


def rounds_for(mean: float, sd: float, margin: float) -> int | None:
    """Rounds for a 90% t interval around `mean` with per-round spread `sd` to clear -margin."""
    gap = abs(mean + margin)
    if gap == 0:
        return None
    k = MIN_ROUNDS
    while _t(k) * sd / math.sqrt(k) >= gap:
        k = k + 1 if k < 100 else int(k * 1.1)
        if k > MAX_NEEDED:
            return None
    return k


def pooled_needed(keep: list[RoundStat], fresh: list[RoundStat], target: str, margin: float) -> int:
    """Rounds in all for the fresh rounds' effect, with the spread pooled over the KEEP's rounds and these."""
    fresh_x = [x for r in fresh if (x := r.diff.get(target)) is not None]
    keep_x = [x for r in keep if (x := r.diff.get(target)) is not None]
    ss = sum(float(np.var(v, ddof=1)) * (len(v) - 1) for v in (fresh_x, keep_x) if len(v) >= MIN_ROUNDS)
    df = sum(len(v) - 1 for v in (fresh_x, keep_x) if len(v) >= MIN_ROUNDS)
    sd = math.sqrt(ss / df) if df else 0.0
    return rounds_for(float(np.mean(fresh_x)), sd, margin) or MAX_NEEDED


def margin_words(margin: float) -> str:
    return "0 (no change)" if margin == 0 else f"the margin {-margin:+.2f}"


def keep_rounds(rc: RunContext, keep: VerdictRecord) -> list[RoundStat]:
    """The rounds that led to the KEEP (its own arm's, not another arm's candidate of the same edit)."""
    return [
        RoundStat(diff=r.diff, n_seeds=r.n_seeds, se={})
        for r in rc.book.payloads("round", RoundRecord)
        if r.arm == keep.arm and r.mutation_id == keep.mutation_id and r.gap_reason is None
    ]


def power_note(rc: RunContext, mutation_id: str, arm: str | None, k: int) -> str | None:
    """Why K fresh rounds are likely too few to decide (Refused below MIN_ROUNDS); None if they may do."""
    keep = find_keep(rc, mutation_id, arm)
    if k < MIN_ROUNDS:
        raise Refused(f"--k {k}: a replication needs at least {MIN_ROUNDS} fresh rounds for an interval")
    rounds = keep_rounds(rc, keep)
    target = rc.promotion.target_dimensions[0]
    ti = fitness.interval(rounds, target, LEVEL) if len(rounds) >= MIN_ROUNDS else None
    if ti is None:
        return None
    need = rounds_needed(ti, len(rounds), rc.promotion.superiority_margin)
    if need is not None and k >= need:
        return None
    about = f"about {need}" if need else f"more than {MAX_NEEDED}"
    return (
        f"--k {k} is likely too few: at the KEEP's own effect and spread ({ti[0]:+.2f} over {len(rounds)} "
        f"rounds, which chose it, so optimistic) a replication needs {about} rounds to conclude; "
        "an inconclusive one changes nothing"
    )


MIN_PREFIX = 4


def find_keep(rc: RunContext, mutation_id: str, arm: str | None) -> VerdictRecord:
    """The KEEP verdict to replicate, by its id or a unique prefix of it (as `git` takes commits);
    `arm` is needed only when two arms kept the same edit."""
    every = rc.book.payloads("verdict", VerdictRecord)
    ids = {v.mutation_id for v in every}
    if mutation_id not in ids and len(mutation_id) >= MIN_PREFIX:
        matches = sorted(i for i in ids if i.startswith(mutation_id))
        if len(matches) > 1:
            raise Refused(f"{mutation_id!r} names several mutations ({', '.join(matches)}): give more of the id")
        mutation_id = matches[0] if matches else mutation_id
    verdicts = [v for v in every if v.mutation_id == mutation_id and (arm is None or v.arm == arm)]
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
    result = judge_replication(rc, keep, rounds, keep_rounds(rc, keep))
    record_replication(rc, keep, result, done)
    rc.rounds.anchor()
    return result


def judge_replication(
    rc: RunContext, keep: VerdictRecord, rounds: list[RoundStat], earlier: list[RoundStat] | None = None
) -> ReplicateRecord:
    p = rc.promotion
    target = p.target_dimensions[0]
    ti = fitness.interval(rounds, target, LEVEL) if rounds else None
    crit = {
        d: (float(np.mean(v)) if (v := [x for r in rounds if (x := r.diff.get(d)) is not None]) else None)
        for d in p.critical_dimensions
    }
    harmed = [
        d
        for d in p.critical_dimensions
        if (ci := fitness.interval(rounds, d, LEVEL)) is not None and ci[1] > min(p.critical_margin, p.tolerance(d))
    ]
    needed: int | None = None
    if harmed:
        demoted, reason = True, f"critical dimensions worse than their harm tolerance (whole interval): {harmed}"
    elif ti is None:
        demoted, reason = False, "not enough usable fresh rounds for an interval; nothing changed"
    elif ti[1] >= -p.superiority_margin:
        demoted, reason = (
            True,
            f"fresh rounds show no {target} improvement: {_ci(ti)} lies wholly at or above "
            f"{margin_words(p.superiority_margin)}",
        )
    elif ti[2] < -p.superiority_margin:
        demoted, reason = False, f"the {LEVEL:.0%} interval of {target} {_ci(ti)} excludes no improvement"
    else:
        needed = pooled_needed(earlier or [], rounds, target, p.superiority_margin)
        demoted, reason = (
            False,
            f"{target} {_ci(ti)} spans {margin_words(p.superiority_margin)}; about {needed} rounds in all would "
            f"decide (at these {len(rounds)} rounds' effect, the spread pooled with the KEEP's own rounds); "
            "the KEEP stands unconfirmed, nothing changed",
        )
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
        conclusive=demoted or (ti is not None and ti[2] < -p.superiority_margin),
        rounds_needed=needed,
    )


def _ci(ti: tuple[float, float, float]) -> str:
    return f"{ti[0]:+.2f} [{ti[1]:+.2f}, {ti[2]:+.2f}]"


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
