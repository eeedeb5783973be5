"""What the next run's certification would spend of its seed set's project budget: `sil check` shows it, a new run is refused when none is left.

spend = next_spend(contract, measure, root)
spend.describe()       # "held-out seed set 282cd6cd3b89 (6 seeds): 4 certification(s) served, ..."
spend.refused          # None, or why no certification may run on the set, with the fix
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sil.contract import prepare
from sil.contract.prepare import SeedSet
from sil.contract.schema import Contract, LoadedContract
from sil.exec.checkitem import CheckItem
from sil.exec.measure import MeasureContext, MeasurementChanged
from sil.integrity.gitrefs import CheckpointError
from sil.integrity.holdout import HoldoutUse, holdout_records, holdout_uses, set_hash
from sil.stats.holdout import HoldoutSpent, SpendingRule, rule_for

CLAIMS = {
    "heldout": "on the held-out seeds themselves (fresh audits each certification)",
    "fresh": "on seeds the project never used (the held-out seeds read as a sample of seeds)",
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


def holdout_check(loaded: LoadedContract, root: Path) -> CheckItem:
    """The start-time check: what the next certification spends, failed when nothing is left."""
    c = loaded.contract
    if not c.certified_arms():
        return CheckItem(name="holdout", status="ok", detail="no certification: budget.certify_rounds is 0")
    try:
        spend = next_spend(c, MeasureContext.from_contract(c, root), root)
    except (prepare.MeasurementError, MeasurementChanged, CheckpointError, ValueError) as ex:
        return CheckItem(name="holdout", status="fail", detail=f"cannot read the project holdout ledger: {ex}")
    claim = f"claim: {CLAIMS[c.certification.claim]}"
    if spend.refused:
        return CheckItem(name="holdout", status="fail", detail=f"{spend.describe()}. {spend.refused}")
    return CheckItem(name="holdout", status="ok", detail=f"{spend.describe()}; {claim}")
