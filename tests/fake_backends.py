"""Offline audit backends for tests: a subprocess that writes the evidence file a runtime would.

class Liar(EvidenceFileBackend):
    name = "liar"
    def command(self, req, ctx):
        return evidence_command(self.name, reporting_samples(ctx, req.policy_hashes))
"""

from __future__ import annotations

import json
import sys
from typing import Any

from sil.exec import measure


def reporting_samples(ctx: Any, hashes: dict[str, str], score: float = 2.0) -> list[dict[str, Any]]:
    """One sample per frozen seed, every dimension at `score`, reporting `hashes` as loaded."""
    return [
        {"seed_id": s, "scores": {d: score for d in ctx.dimensions}, "policy_hashes": dict(hashes)}
        for s in ctx.seed_ids
    ]


def evidence_command(
    name: str, samples: list[dict[str, Any]], simulated: bool = True, runtime: str = "fake"
) -> list[str]:
    """The audit process: write `samples` as evidence.json in the audit folder, nothing else."""
    evidence = {"backend": name, "simulated": simulated, "runtime": runtime, "samples": samples}
    return [sys.executable, "-c", f"open('evidence.json', 'w').write({json.dumps(evidence)!r})"]


class EvidenceFileBackend(measure.BackendBase):
    """Reads the evidence file the command wrote; costs nothing."""

    name = "fake"
    simulated = True

    def read_evidence(self, req: Any, ctx: Any) -> Any:
        return measure.read_evidence_file(req.audit_dir / "evidence.json")

    def audit_cost_bound(self, contract: Any, n_seeds: int) -> float:
        return 0.0
