"""What the next run's certification would spend of its seed set's project budget: `sil check` shows it, a new run is refused when none is left.

spend = next_spend(contract, measure, root)
spend.describe()       # "held-out seed set 282cd6cd3b89 (6 seeds): 4 certification(s) served, ..."
spend.refused          # None, or why no certification may run on the set, with the fix
spend.uncounted        # runs that certified on the set without a record in the holdout ledger
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from sil.base.runpaths import LEDGER, run_dirs
from sil.contract import prepare
from sil.contract.prepare import SeedSet
from sil.contract.schema import Contract, LoadedContract
from sil.exec.checkitem import CheckItem
from sil.exec.measure import MeasureContext, MeasurementChanged
from sil.integrity.gitrefs import CheckpointError
from sil.integrity.holdout import DELIVERING_ARM, HoldoutUse, holdout_records, holdout_uses, set_hash
from sil.integrity.ledger import LedgerError, Record, read_records_of
from sil.stats.holdout import HoldoutSpent, SpendingRule, rule_for
from sil_policy.files import read_regular

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
    uncounted: tuple[str, ...] = ()  # runs whose delivering certification on the set the ledger lacks

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
    records = holdout_records(root)
    use = holdout_uses(records).get(digest)
    counted = {str(r.payload.get("run_id")) for r in records if r.type == "holdout_spend"}
    missing = tuple(uncounted_runs(root, contract, kind, counted))
    return NextSpend(kind, digest, seeds, use, rule_for(contract), contract.certification.claim, missing)


def uncounted_runs(root: Path, contract: Contract, kind: SeedSet, counted: set[str]) -> list[str]:
    """Runs of the project whose gate arm ran certification rounds on this measurement's `kind`
    seeds (same manifest) with no spend in the holdout ledger: run before the ledger existed, or
    the ledger lost their records. Their error is spent but the budget does not count it."""
    out = []
    for run_dir in run_dirs(root):
        if run_dir.name in counted:  # a run's folder is named by its run id
            continue
        try:
            data = read_regular(run_dir / LEDGER)
        except OSError:
            continue  # `sil runs` lists an unreadable run with its reason; here it spends nothing known
        if b'"type":"certify"' not in data:
            continue
        try:
            records = list(read_records_of(data))
        except LedgerError:
            continue
        if spent_on_set(records, contract.measurement.manifest_hash, kind) and records[0].run_id not in counted:
            out.append(records[0].run_id)
    return out


def spent_on_set(records: list[Record], manifest_hash: str, kind: SeedSet) -> bool:
    run = next((r.payload for r in records if r.type == "contract"), None)
    if run is None or run.get("manifest_hash") != manifest_hash:
        return False
    return any(
        r.type == "certify"
        and r.payload.get("arm") == DELIVERING_ARM
        and r.payload.get("rounds", 0) > 0
        and r.payload.get("seed_set", "search") == kind
        for r in records
    )


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
    if spend.uncounted:
        return CheckItem(
            name="holdout", status="warn", detail=f"{spend.describe()}; {claim}. {uncounted_warning(spend)}"
        )
    return CheckItem(name="holdout", status="ok", detail=f"{spend.describe()}; {claim}")


def uncounted_warning(spend: NextSpend) -> str:
    runs = ", ".join(spend.uncounted)
    return (
        f"{len(spend.uncounted)} earlier run(s) ({runs}) certified on this seed set without a record in the "
        "project holdout ledger (run before it existed, or its records were lost), so the error spent above "
        "understates what the set has served and the project guarantee does not cover them. "
        "Fix: certify on a fresh held-out set (new seeds, re-frozen, a new contract)"
    )
