"""A run's side of the project holdout ledger: spend a certification's level before it runs, record what it concluded.

The level comes from the contract's spending rule (sil/stats/holdout.py) and what the seed set
has already spent (sil/integrity/holdout.py), so a run on a set whose project budget is used up
certifies nothing: its champion is rolled back, with the fix in the reason. `sil check` shows the
same figures before the run (`next_spend`).

    level = reserve(rc, arm)          # a float, or the reason the certification may not run
    record_result(rc, arm, policy_set, certified, reason)
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sil.contract import prepare
from sil.contract.prepare import SeedSet
from sil.contract.schema import Contract
from sil.exec.measure import MeasureContext
from sil.integrity.holdout import (
    HoldoutUse,
    append_holdout,
    holdout_records,
    holdout_uses,
    set_hash,
    spend_key,
)
from sil.integrity.ledger import Record
from sil.integrity.records import HoldoutResultRecord, HoldoutSpendRecord
from sil.run.context import RunContext
from sil.stats.holdout import HoldoutSpent, SpendingRule, rule_for
from sil.store.runstate import ArmState

DELIVERING_ARM = "gate"  # the only arm whose champion a user is handed (`sil promote` refuses the random arm)
CLAIMS = {
    "heldout": "on the held-out seeds themselves (fresh audits)",
    "fresh": "on seeds the project never used (held-out seeds as a sample)",
}


@dataclass(frozen=True)
class NextSpend:
    """What the next run's delivering certification would spend on its seed set."""

    seed_set: SeedSet
    set_hash: str
    seeds: tuple[str, ...]
    use: HoldoutUse | None  # what the set served so far (None: nothing)
    rule: SpendingRule
    claim: str

    @property
    def spent(self) -> float:
        return self.use.spent if self.use else 0.0

    @property
    def refused(self) -> str | None:
        """Why no further delivering certification may run on the set (None: it may)."""
        try:
            self.rule.level(self.spent)
        except HoldoutSpent as ex:
            return (
                f"{ex}. Fix: certify on a fresh held-out set: add new seeds under the measurement's "
                f"{prepare.SEED_FOLDERS['heldout']}/ (or replace them), re-freeze it (`python prepare.py --write`) "
                "and revise the contract to the new measurement (a new contract), or raise "
                "certification.project_certifications only if the project alpha allows it"
            )
        return None

    def describe(self) -> str:
        served = self.use.certifications if self.use else 0
        head = (
            f"{self.seed_set} seed set {self.set_hash[:12]} ({len(self.seeds)} seeds): {served} certification(s) served"
        )
        if not self.rule.bounded:
            return (
                f"{head}, {self.spent:.4g} error spent; no project budget: the next certifies at "
                f"alpha_certify {self.rule.step:g}, a guarantee per run"
            )
        remaining = self.rule.remaining(self.spent)
        spent = f"{head}, {self.spent:.4g} of project alpha {self.rule.project_alpha:g} spent"
        if self.refused:
            return f"{spent}; no certification remains"
        return f"{spent}; the next spends {self.rule.step:.4g}, {remaining} certification(s) remain including it"


def seed_set_of(contract: Contract, measure: MeasureContext) -> tuple[SeedSet, str, tuple[str, ...]]:
    """The seed set a run's certification uses: its kind, its identity and its seed ids."""
    kind = measure.certify_on
    files = prepare.read_manifest(measure.measurement_root).files
    return kind, set_hash(files, kind), measure.seeds_for(kind)


def next_spend(contract: Contract, measure: MeasureContext, root: Path) -> NextSpend:
    kind, digest, seeds = seed_set_of(contract, measure)
    use = holdout_uses(holdout_records(root)).get(digest)
    return NextSpend(kind, digest, seeds, use, rule_for(contract), contract.certification.claim)


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
