"""A run's side of the project holdout ledger: spend a certification's level before it runs, record what it concluded.

The level comes from the contract's spending rule (sil/stats/holdout.py) and what the seed set
has already spent (sil/integrity/holdout.py), so a run on a set whose project budget is used up
certifies nothing: its champion is rolled back, with the fix in the reason. `sil check` shows the
same figures before the run (sil/exec/holdoutcheck.py).

    level = reserve(rc, arm)          # a float, or the reason the certification may not run
    record_result(rc, arm, policy_set, certified, reason)
"""

from __future__ import annotations

from sil.exec.holdoutcheck import seed_set_of
from sil.integrity.holdout import DELIVERING_ARM, append_holdout, holdout_uses, spend_key
from sil.integrity.ledger import Record
from sil.integrity.records import HoldoutResultRecord, HoldoutSpendRecord
from sil.run.context import RunContext
from sil.stats.holdout import HoldoutSpent, rule_for
from sil.store.runstate import ArmState


def reserve(rc: RunContext, arm: ArmState) -> float | str:
    """The level of the arm's certification, spent in the project holdout ledger before its first
    round (a resumed run finds its spend there); or why it may not run (the set's budget is spent)."""
    c = rc.contract
    kind, digest, seeds = seed_set_of(c, rc.measure)
    rule = rule_for(c)
    delivers = arm.arm == DELIVERING_ARM

    def admit(records: list[Record]) -> None:
        use = holdout_uses(records).get(digest)
        if delivers:
            rule.level(use.spent if use else 0.0)

    spend = HoldoutSpendRecord(
        seed_set=kind,
        set_hash=digest,
        seeds=list(seeds),
        run_id=rc.state.run_id,
        contract_id=c.contract_id,
        contract_hash=c.contract_hash,
        arm=arm.arm,
        policy_set=arm.champion.set_id,
        against=rc.state.origin.set_id,
        level=rule.step,
        delivers=delivers,
        claim=c.certification.claim,
        project_alpha=c.certification.project_alpha,
    )
    key = spend_key(rc.state.run_id, arm.arm, arm.champion.set_id)
    try:
        rec = append_holdout(rc.root, spend, key=key, simulated=rc.backend.simulated, admit=admit)
    except HoldoutSpent as ex:
        return f"not certified: {ex}; certify on a fresh held-out set (a new measurement version and contract)"
    return float(rec.payload["level"])


def record_result(rc: RunContext, arm: str, policy_set: str, certified: bool, reason: str) -> None:
    """What the arm's certification concluded, in the project holdout ledger (once)."""
    result = HoldoutResultRecord(
        run_id=rc.state.run_id, arm=arm, policy_set=policy_set, certified=certified, reason=reason
    )
    key = spend_key(rc.state.run_id, arm, policy_set)
    append_holdout(rc.root, result, key=key, simulated=rc.backend.simulated)
