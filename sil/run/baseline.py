"""The baseline phase: K audits of the starting policy, recorded with their provenance.

The baseline is what the summary's drift and levels are read against; the gate itself
compares paired rounds, never against this stored mean. A baseline without one usable
audit halts the run: nothing measured is not a level.

    baseline_phase(rc)
"""

from __future__ import annotations

import numpy as np

from sil.base.errors import Halt
from sil.exec.measure import AuditResult
from sil.integrity.records import BaselineRecord, Keys
from sil.run.context import RunContext
from sil.store.events import BaselineStarted

MODEL_ROLES = ("auditor", "target", "judge")


def baseline_means(
    results: list[AuditResult], seeds: tuple[str, ...], dims: tuple[str, ...]
) -> tuple[dict[str, float | None], dict[str, int]]:
    """Per-dimension mean over every scored cell of the usable audits, and the cell counts."""
    means: dict[str, float | None] = {}
    counts: dict[str, int] = {}
    for dim in dims:
        vals = [v for r in results if r.ok for s in seeds if (v := r.scores.get(s, {}).get(dim)) is not None]
        means[dim] = round(float(np.mean(vals)), 4) if vals else None
        counts[dim] = len(vals)
    return means, counts


def baseline_phase(rc: RunContext) -> None:
    state, c = rc.state, rc.contract
    k = rc.promotion.baseline_k
    origin = state.origin
    if state.planned is None and (why := rc.rounds.budget_left("baseline", k)):
        raise Halt(f"no budget for the baseline: {why}")
    rc.emit(BaselineStarted(audits=k, set_id=origin.set_id))
    results = rc.rounds.run_batch("baseline", "baseline", "baseline", [(f"k{i}", origin) for i in range(k)])
    state.baseline = [r.audit_id for r in results if r.ok]
    rc.rounds.consumed()
    if not state.baseline:
        reasons = "; ".join(sorted({r.gap_reason or "" for r in results}))
        raise Halt(f"the baseline has no usable audit ({k} gaps: {reasons}); fix the cause and resume")
    means, counts = baseline_means(results, rc.measure.seed_ids, rc.measure.dimensions)
    rc.book.once(
        Keys.BASELINE,
        BaselineRecord(
            policy_set=origin.set_id,
            audit_ids=state.baseline,
            per_dimension_mean=means,
            sample_counts=counts,
            contract_hash=c.contract_hash,
            measurement_hash=rc.measurement_hash,
            seeds_hash=c.measurement.manifest_hash,
            models={r: getattr(c.models, r).model for r in MODEL_ROLES},
        ),
    )
