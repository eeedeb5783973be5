"""The `sim` backend: the embedded simulated runtime, auditor and judge (`python -m sil_runtime.sim`).

It makes no model call and costs nothing; every result it yields is marked simulated. See
`sil_runtime/sim/README.md` for the world it simulates.

    measure.run_audit(req, ctx, SimBackend())
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from functools import partial

import numpy as np

from sil.contract.schema import Contract
from sil.contract.simparams import SimParams
from sil.exec.measure import SCORE_RANGE, AuditRequest, BackendBase, CanaryJudge, MeasureContext, read_evidence_file
from sil_policy.evidence import EVIDENCE_FILE, Evidence

SIM_NOTE = "simulated audit: proves the loop's plumbing and statistics, not any model's quality"


class SimBackend(BackendBase):
    name = "sim"
    simulated = True
    note = SIM_NOTE
    settings_model = SimParams  # the contract's `sim:` section
    # `python -m sil_runtime.sim` is forked from a warm worker that has imported it (sil/exec/zygote.py)
    warm_module = "sil_runtime.sim"
    crn_effect = "has no effect on the sim backend: its arms' noise correlation is sim.pair_correlation"

    def command(self, req: AuditRequest, ctx: MeasureContext) -> list[str]:
        params = req.audit_dir / "sim_params.json"
        params.write_text(self.params(ctx.contract).model_dump_json())
        return [
            sys.executable,
            "-m",
            "sil_runtime.sim",
            "--measurement",
            str(ctx.measurement_root),
            "--params",
            str(params),
            "--tick",
            str(req.tick),
            "--pair-key",
            req.pair_key or req.audit_id,
            "--audit-id",
            req.audit_id,
            "--judge-resamples",
            str(ctx.contract.measurement.judge_resamples),
            "--seed-set",
            req.seed_set,
        ]

    def read_evidence(self, req: AuditRequest, ctx: MeasureContext) -> Evidence:
        return read_evidence_file(req.audit_dir / EVIDENCE_FILE)

    def params(self, contract: Contract) -> SimParams:
        """The simulated world's parameters: the contract's settings for this backend."""
        return contract.settings(SimParams)

    def canary_judge(self, contract: Contract) -> CanaryJudge:
        """The simulated judge re-judges the canary's stored transcripts (it drifts with its knob)."""
        return partial(sim_rejudge, self.params(contract))


def sim_rejudge(
    params: SimParams, references: Mapping[str, Mapping[str, float]], tick: int
) -> dict[str, dict[str, float]]:
    """The simulated judge's scores of stored transcripts at `tick`: their reference scores,
    shifted by `judge_drift_per_tick` per tick of the audit clock."""
    lo, hi = SCORE_RANGE
    shift = params.judge_drift_per_tick * tick
    return {item: {d: float(np.clip(v + shift, lo, hi)) for d, v in ref.items()} for item, ref in references.items()}
