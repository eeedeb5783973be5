"""What each seed set has served the project, in lines for `sil runs` and `sil status`.

for line in holdout_lines(root): print(line)
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Any

from sil.contract.prepare import SEED_SET_NAMES
from sil.integrity.gitrefs import CheckpointError
from sil.integrity.holdout import HoldoutUse, holdout_records, holdout_uses, verify_holdout
from sil.integrity.ledger import LedgerError, VerifyReport

UNREADABLE = (CheckpointError, LedgerError, ValueError)


def read_holdout(root: Path) -> tuple[VerifyReport, dict[str, HoldoutUse]]:
    """The ledger's verification, and what each seed set served (read only from a ledger that
    verifies); raises one of UNREADABLE when the ledger cannot be read at all."""
    report = verify_holdout(root)
    return report, holdout_uses(holdout_records(root)) if report.ok else {}


def holdout_lines(root: Path) -> list[str]:
    """One line per seed set certifications ran on, and one if the ledger does not verify."""
    try:
        report, uses = read_holdout(root)
    except UNREADABLE as ex:
        return [f"project holdout ledger cannot be read: {ex}"]
    lines = [describe_use(use) for use in uses.values()]
    if not report.ok:
        lines.append(f"project holdout ledger FAILS verification: {'; '.join(report.errors[:3])}")
    return lines


def describe_use(use: HoldoutUse) -> str:
    """E.g. "held-out set 282cd6cd3b89 (6 seeds): 4 certifications (2 delivering, 0 certified) by 2 runs;
    error spent 0.0333 of project alpha 0.05"."""
    budget = f"of project alpha {use.budget:g}" if use.budget is not None else "(no project budget: per-run guarantees)"
    return (
        f"{SEED_SET_NAMES.get(use.seed_set, use.seed_set)} set {use.set_hash[:12]} ({len(use.seeds)} seeds): "
        f"{use.certifications} certification(s) ({use.delivering} delivering, {use.certified} certified) "
        f"by {len(use.runs)} run(s); error spent {use.spent:.4g} {budget}"
    )


def holdout_json(root: Path) -> dict[str, Any]:
    """`sil project holdout --json`: whether the ledger verifies (`ok`, its `errors`, or why it
    cannot be read), and per seed set what it served."""
    try:
        report, uses = read_holdout(root)
    except UNREADABLE as ex:
        return {"ok": False, "records": 0, "errors": [f"project holdout ledger cannot be read: {ex}"], "sets": []}
    return {
        "ok": report.ok,
        "records": report.records,
        "errors": report.errors,
        "sets": [asdict(use) | {"name": SEED_SET_NAMES.get(use.seed_set, use.seed_set)} for use in uses.values()],
    }
