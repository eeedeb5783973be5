"""Shared set-up for the Petri tests: a workspace, the offline contract, policy variants, a verdict."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sil.contract.schema import Contract, load_contract
from sil.exec.measure import AuditRequest, AuditResult, MeasureContext
from sil.stats import fitness, gate
from sil_policy import SURFACES, canonical_bytes, content_hash

REPO = Path(__file__).resolve().parent.parent
OFFLINE_CONTRACT = REPO / "examples" / "program-petri-offline.md"


def make_workspace(root: Path) -> Path:
    shutil.copytree(REPO / "measurement", root / "measurement")
    shutil.copytree(REPO / "state" / "policies", root / "policies" / "baseline")
    return root


def context(root: Path, **updates: Any) -> MeasureContext:
    contract = load_contract(OFFLINE_CONTRACT).contract
    if updates:
        contract = Contract.model_validate({**contract.model_dump(), **updates})
    return MeasureContext.from_contract(contract, root)


def variant(root: Path, name: str, surface: str, change: Callable[[dict], None]) -> Path:
    """A copy of the baseline policies with one surface's document changed."""
    dest = root / "policies" / name
    shutil.copytree(root / "policies" / "baseline", dest)
    path = dest / SURFACES[surface].filename
    doc = json.loads(path.read_text())
    change(doc)
    path.write_bytes(canonical_bytes(doc))
    return dest


def request(root: Path, audit_id: str, policy_dir: Path) -> AuditRequest:
    hashes = {n: content_hash((policy_dir / s.filename).read_bytes()) for n, s in SURFACES.items()}
    return AuditRequest(
        audit_id=audit_id, audit_dir=root / "audits" / audit_id, policy_dir=policy_dir, policy_hashes=hashes, tick=0
    )


def verdict(ctx: MeasureContext, champion: AuditResult, candidate: AuditResult) -> str:
    """The contract's gate on one paired round, read from the two audits' parsed scores.

    The offline models are deterministic, so an A/A pair of the champion is exactly zero
    (noise at the gate's floor) and a fresh confirmation round repeats the screen round.
    """
    promotion = ctx.contract.promotion
    dims = ctx.dimensions
    champ = ctx.matrix(champion.scores)
    cand = ctx.matrix(candidate.scores)
    pool = fitness.NoisePool()
    for _ in range(promotion.calibration_pairs):
        pool.add_aa(fitness.paired_round(champ, champ, dims, promotion.min_seed_coverage))
    alpha = gate.ErrorBudget.from_promotion(promotion).next_alpha()
    g = gate.make_gate(promotion, pool.estimate(), alpha)
    paired = fitness.paired_round(cand, champ, dims, promotion.min_seed_coverage)
    decision = g.screen(paired)
    if decision.verdict == "continue":
        decision = g.confirm([paired])
    return decision.verdict
