"""The product's loop on a bench world: `sil run`'s own phases and arms, audits computed in-process.

The bench does not drive a copy of the loop. It opens a real run (sil/run/train.open_run) in a
temporary folder, with its ledger, state and policy store there as in any run, and hands the
`RoundRunner` an executor (`SimInProcess`) that computes each audit in this process with the
very code the `sim` backend's audit process runs (`sil_runtime.sim.__main__.simulate`), then
scores it with the loop's own `measure.score_evidence`. So a bench run and a `sil run` of the
same contract and world record the same decisions (tests/bench/test_bench_equivalence.py); the
bench only saves the process start of each audit, and reads the delivered champions back.

    with LoopRun(loaded, world=3) as lr:
        run_phases(lr.rc)                     # the whole `sil run`
        docs = lr.delivered("gate")
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any, Protocol

import numpy as np

from sil.contract.schema import LoadedContract
from sil.contract.simparams import SimParams
from sil.exec import measure
from sil.exec.measure import AuditBackend, AuditRequest, AuditResult, GapError, MeasureContext
from sil.integrity.records import CertifyRecord
from sil.run.context import RunContext
from sil.run.rounds import AuditExecutor
from sil.run.train import RunConfig, open_run
from sil.store.events import Update
from sil_policy import SURFACES
from sil_policy.evidence import Evidence
from sil_runtime.policy_loader import load_policies
from sil_runtime.sim.__main__ import Frozen, crashes, load_frozen, read_params, simulate, write_evidence

ROOT = Path(__file__).resolve().parents[1]
POLICIES = ROOT / "state" / "policies"
SCRATCH = Path("/dev/shm")  # in memory where the system has it: a run's many fsyncs cost nothing there
MEASUREMENT_HASH = "bench-" + "0" * 58  # the bench verifies no frozen measurement: it runs in-process


def policy_env(req: AuditRequest) -> dict[str, str]:
    """The environment a runtime reads the audited policy set from (OVERRIDE + STRICT per surface)."""
    env = {}
    for spec in SURFACES.values():
        env[spec.override_env] = str(req.policy_dir / spec.filename)
        env[spec.strict_env] = "1"
    return env


def scored(
    req: AuditRequest, ctx: MeasureContext, backend: AuditBackend, evidence: Evidence, start: float
) -> AuditResult:
    """The audit's evidence, written where the mutator's evidence reader finds it, scored by the loop."""
    write_evidence(evidence, req.audit_dir)
    result = measure.score_evidence(req, ctx, evidence, time.monotonic() - start)
    return measure.with_use(result, req, ctx, backend)


class SimInProcess:
    """The `sim` audit process's work, done in this process: evidence, then the loop's scoring."""

    def __init__(self, ctx: MeasureContext, backend: AuditBackend) -> None:
        self.ctx, self.backend = ctx, backend
        self.frozen: dict[str, Frozen] = {}  # read once per seed set, not once per audit

    def __call__(self, reqs: list[AuditRequest]) -> list[AuditResult]:
        return [self.audit(r) for r in reqs]

    def audit(self, req: AuditRequest) -> AuditResult:
        start = time.monotonic()
        measure.prepare_audit_dir(req)
        params = req.audit_dir / "sim_params.json"
        c = self.ctx.contract
        params.write_text(c.settings(SimParams).model_dump_json())
        args = argparse.Namespace(
            measurement=self.ctx.measurement_root,
            tick=req.tick,
            pair_key=req.pair_key or req.audit_id,
            audit_id=req.audit_id,
            judge_resamples=c.measurement.judge_resamples,
            seed_set=req.seed_set,
        )
        try:
            sim = read_params(params)
            if crashes(sim, req.audit_id):
                raise GapError(f"audit process exited 3: simulated runtime crash in audit {req.audit_id}")
            if req.seed_set not in self.frozen:
                self.frozen[req.seed_set] = load_frozen(self.ctx.measurement_root, req.seed_set)
            evidence = simulate(args, sim, load_policies(policy_env(req)), self.frozen[req.seed_set])
            return scored(req, self.ctx, self.backend, evidence, start)
        except GapError as gap:
            return measure.gap_result(req, self.backend, gap, start)


class WorldTruth(Protocol):
    """A bench world's truth, as a judge that knows it reads it: the expected audit mean per
    dimension (`dims` order) of a policy set, lower is better."""

    @property
    def dims(self) -> list[str]: ...
    @property
    def target(self) -> str: ...
    @property
    def critical(self) -> list[str]: ...

    def truth(self, docs: dict[str, dict[str, Any]]) -> np.ndarray: ...


# What computes a run's audits in this process, made once its measurement context exists: the sim
# audit's own code by default; the gate benchmark's vector world (bench/vectorloop.py) brings its own.
ExecutorFactory = Callable[[MeasureContext, AuditBackend], AuditExecutor]


class LoopRun:
    """One run of the product's loop on a bench world, in a temporary project folder."""

    def __init__(
        self,
        loaded: LoadedContract,
        on_event: Callable[[Update], None] | None = None,
        executor: ExecutorFactory | None = None,
        *,
        project: Path | None = None,
        run_id: str = "bench",
        policy_dir: Path = POLICIES,
    ) -> None:
        """A run in a temporary project folder, or (`project`) the next run `run_id` of a project
        folder the caller keeps (its refs, holdout ledger included, are shared by its runs), starting
        from `policy_dir`; its audits run in process (`executor`, the sim's by default)."""
        self.loaded = loaded
        self.on_event = on_event or (lambda _line: None)
        self.executor = executor or SimInProcess
        self.owned = project is None
        self.root = project or Path(tempfile.mkdtemp(prefix="sil-bench-", dir=SCRATCH if SCRATCH.is_dir() else None))
        self.run_id, self.policy_dir = run_id, policy_dir
        seeds = loaded.contract.measurement.seed_library
        if not (self.root / seeds).exists():
            (self.root / seeds).parent.mkdir(parents=True, exist_ok=True)
            (self.root / seeds).symlink_to(ROOT / seeds)
        self.rc = self.open()

    def open(self) -> RunContext:
        holder: dict[str, AuditExecutor] = {}

        def execute(reqs: list[AuditRequest]) -> list[AuditResult]:
            return holder["sim"](reqs)

        cfg = RunConfig(
            repo_root=self.root,
            run_dir=self.root / "state" / "runs" / self.run_id,
            policy_dir=self.policy_dir,
            on_event=self.on_event,
            execute=execute,
        )
        rc = open_run(self.loaded, cfg, MEASUREMENT_HASH)
        holder["sim"] = self.executor(rc.measure, rc.backend)
        return rc

    def documents(self, set_id: str) -> dict[str, dict[str, Any]]:
        return self.rc.store.documents(self.rc.store.stored_set(set_id))

    def delivered(self, arm: str) -> dict[str, dict[str, Any]]:
        """The policy set the arm delivers: its champion after the final phase."""
        state = self.rc.state.arms.get(arm)
        return self.rc.store.documents(state.champion if state else self.rc.state.origin)

    def certification(self, arm: str) -> CertifyRecord | None:
        """The arm's certification record, if its champion was certified."""
        records = [c for c in self.rc.book.payloads("certify", CertifyRecord) if c.arm == arm]
        return records[-1] if records else None

    def search_champion(self, arm: str) -> dict[str, dict[str, Any]]:
        """The arm's champion as its search left it, before any certification rolled it back."""
        cert = self.certification(arm)
        return self.documents(cert.policy_set) if cert else self.delivered(arm)

    def close(self) -> None:
        if self.owned:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> LoopRun:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()
