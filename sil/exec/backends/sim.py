"""The `sim` backend: the embedded simulated runtime, auditor and judge (`python -m sil_runtime.sim`).

It makes no model call and costs nothing; every result it yields is marked simulated. See
`sil_runtime/sim/README.md` for the world it simulates.

    measure.run_audit(req, ctx, SimBackend())
"""

from __future__ import annotations

import sys

from sil.contract.schema import Contract
from sil.exec.measure import AuditRequest, MeasureContext, read_evidence_file
from sil_policy.evidence import EVIDENCE_FILE, Evidence

SIM_NOTE = "simulated audit: proves the loop's plumbing and statistics, not any model's quality"


class SimBackend:
    name = "sim"
    simulated = True
    note = SIM_NOTE
    # `python -m sil_runtime.sim` is forked from a warm worker that has imported it (sil/exec/zygote.py)
    warm_module = "sil_runtime.sim"

    def command(self, req: AuditRequest, ctx: MeasureContext) -> list[str]:
        params = req.audit_dir / "sim_params.json"
        params.write_text(ctx.contract.sim.model_dump_json() if ctx.contract.sim else "{}")
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

    def audit_cost_bound(self, contract: Contract, n_seeds: int) -> float:
        return 0.0
