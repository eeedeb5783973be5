"""`sil noise CONTRACT`: where the noise of a paired difference comes from, measured on real audits.

An A/A pair audits the starting policy twice; its difference D is pure noise. Its variance is
    Var(D) = 2 (target + auditor + judge / k)
per audit mean over seeds, with k judge passes per transcript. The command measures it three ways:
- `pairs` A/A pairs with independent audits (no seed): all three parts;
- `pairs` A/A pairs with common random numbers (both audits' auditor seeded alike): the
  auditor part cancels where the auditor's sampling repeats under a seed;
- every transcript judged `passes` times: the spread between passes is the judge part
  (a model judge through `inspect score`; the rule-based judge re-applies its rules).
Then auditor = (Var_free - Var_crn) / 2 and target = Var_crn / 2 - judge / passes (each
clipped at 0), and Var(D) is predicted for k = 1, 2, 4 with and without CRN.

    report = measure_noise(loaded, root, pairs=4, passes=2)
    write_report(report, out, command)

Beside its audits (state/noise/<contract_id>-<stamp>/noise.json) it keeps the parts as a
`MeasuredNoise`, from which `sil check` predicts a run's round noise before any run
(sil/run/outlookcheck.py).
"""

from __future__ import annotations

import platform
import subprocess
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict

from sil.base.fsutil import atomic_write_bytes
from sil.contract.approval import frozen_measurement_hash
from sil.contract.schema import RUBRIC_PREFIX, Contract, LoadedContract
from sil.exec.measure import AuditRequest, AuditResult, JudgePassReader, MeasureContext, run_audits
from sil.policies.store import read_policy_dir
from sil.stats.fitness import NoiseEstimate

KS = (1, 2, 4)
POLICIES = Path("state/policies")


@dataclass
class DimNoise:
    """One dimension's variance parts, per audit mean (points squared)."""

    target: float
    auditor: float
    judge: float
    var_free: float
    var_crn: float

    def predicted(self, k: int, crn: bool) -> float:
        return 2 * (self.target + (0.0 if crn else self.auditor) + self.judge / k)

    def shares(self) -> tuple[float, float, float]:
        total = self.target + self.auditor + self.judge
        if total <= 0:
            return (0.0, 0.0, 0.0)
        return (self.target / total, self.auditor / total, self.judge / total)


@dataclass
class NoiseReport:
    contract: Contract
    pairs: int
    passes: int
    used_free: int
    used_crn: int
    gaps: list[str]
    dims: dict[str, DimNoise] = field(default_factory=dict)
    wall_s: float = 0.0
    mean_tokens: float = 0.0


NOISE_FILE = "noise.json"


class MeasuredNoise(BaseModel):
    """What `sil noise` measured, kept beside its audits for `sil check` to read before a run."""

    model_config = ConfigDict(frozen=True)
    contract_id: str
    measurement_hash: str
    backend: str
    measured_at: str  # ISO 8601, UTC
    used_free: int
    used_crn: int
    dims: dict[str, DimNoise]

    @classmethod
    def of(cls, report: NoiseReport, measurement_hash: str, measured_at: datetime) -> MeasuredNoise:
        c = report.contract
        return cls(
            contract_id=c.contract_id,
            measurement_hash=measurement_hash,
            backend=c.backend,
            measured_at=measured_at.isoformat(timespec="seconds"),
            used_free=report.used_free,
            used_crn=report.used_crn,
            dims=report.dims,
        )

    def estimate(self, judge_resamples: int, crn: bool) -> NoiseEstimate | None:
        """The SD of a run's paired round statistic under these settings, as the parts predict it
        (None: fewer than two usable pairs). Its df are the pairs of the design the run uses."""
        pairs = self.used_crn if crn else self.used_free
        if pairs < 2 or not self.dims:
            return None
        return NoiseEstimate(
            sigma={d: float(np.sqrt(n.predicted(judge_resamples, crn))) for d, n in self.dims.items()},
            df={d: pairs - 1 for d in self.dims},
            n_pairs=pairs,
        )


def keep_measured(report: NoiseReport, root: Path, work: Path) -> Path:
    """Write the report's parts to `work`/noise.json, keyed by the frozen measurement they measured."""
    measured = MeasuredNoise.of(report, frozen_measurement_hash(report.contract, root), datetime.now(UTC))
    path = work / NOISE_FILE
    atomic_write_bytes(path, measured.model_dump_json(indent=1).encode())
    return path


def with_measurement(contract: Contract, **changes: object) -> Contract:
    data = contract.model_dump()
    data["measurement"] = {**data["measurement"], **changes}
    return Contract.model_validate(data)


def _requests(
    run_dir: Path, tag: str, pairs: int, hashes: dict[str, str], policy_dir: Path, crn: bool
) -> list[AuditRequest]:
    reqs = []
    for i in range(pairs):
        key = f"noise-{tag}-{i}" if crn else None
        for arm in ("a", "b"):
            audit_id = f"{tag}-{i}-{arm}"
            reqs.append(
                AuditRequest(
                    audit_id=audit_id,
                    audit_dir=run_dir / audit_id,
                    policy_dir=policy_dir,
                    policy_hashes=hashes,
                    tick=i,
                    pair_key=key,
                )
            )
    return reqs


@dataclass
class Design:
    """One design's usable pairs: each pair's difference and each audit's between-pass variance."""

    diffs: dict[str, list[float]]
    judge: dict[str, list[float]]
    gaps: list[str]
    pairs: int = 0


def _diffs(results: list[AuditResult], ctx: MeasureContext, passes: int, pass_means: JudgePassReader) -> Design:
    design = Design(diffs={d: [] for d in ctx.dimensions}, judge={d: [] for d in ctx.dimensions}, gaps=[])
    for a, b in zip(results[::2], results[1::2], strict=True):
        bad = [r for r in (a, b) if not r.ok]
        if bad:
            design.gaps += [f"{r.audit_id}: {r.gap_reason}" for r in bad]
            continue
        pa, pb = pass_means(a, ctx, passes), pass_means(b, ctx, passes)
        design.pairs += 1
        for d in ctx.dimensions:
            design.diffs[d].append(float(np.mean([p[d] for p in pa]) - np.mean([p[d] for p in pb])))
            for ps in (pa, pb):
                design.judge[d].append(float(np.var([p[d] for p in ps], ddof=1)) if passes > 1 else 0.0)
    return design


def measure_noise(loaded: LoadedContract, root: Path, pairs: int, passes: int, out_dir: Path) -> NoiseReport:
    """Run the A/A pairs (free and CRN) with `passes` judge passes each, and split the variance."""
    import time

    from sil.exec.backends import make_backend

    base = loaded.contract
    rule_based = base.models.judge.model.startswith(RUBRIC_PREFIX)
    k_audit = 1 if rule_based else passes  # a rule-based judge is re-applied in-process instead
    policy_set, _ = read_policy_dir(root / POLICIES)
    backend = make_backend(base.backend)
    reader = backend.judge_passes()
    if reader is None:  # `sil noise` refuses it first; this guards a direct call
        raise ValueError(f"backend {base.backend!r} keeps no judge passes apart: its noise cannot be split")
    start = time.monotonic()
    designs: dict[str, Design] = {}
    results_all: list[AuditResult] = []
    for tag, crn in (("free", False), ("crn", True)):
        contract = with_measurement(base, common_random_numbers=crn, judge_resamples=k_audit)
        ctx = MeasureContext.from_contract(contract, root)
        results = run_audits(_requests(out_dir, tag, pairs, policy_set.hashes, root / POLICIES, crn), ctx, backend)
        results_all += results
        designs[tag] = _diffs(results, ctx, passes, reader)
    free, crn_d = designs["free"], designs["crn"]
    ok = [r for r in results_all if r.ok]
    report = NoiseReport(
        contract=base,
        pairs=pairs,
        passes=passes,
        used_free=free.pairs,
        used_crn=crn_d.pairs,
        gaps=free.gaps + crn_d.gaps,
        wall_s=round(time.monotonic() - start, 1),
        mean_tokens=float(np.mean([r.usage.input_tokens + r.usage.output_tokens for r in ok])) if ok else 0.0,
    )
    for d in free.diffs:
        if free.pairs < 2 or crn_d.pairs < 2:
            break
        v_free = float(np.var(free.diffs[d], ddof=1))
        v_crn = float(np.var(crn_d.diffs[d], ddof=1))
        judge = float(np.mean(free.judge[d] + crn_d.judge[d]))
        auditor = max(0.0, (v_free - v_crn) / 2)
        target = max(0.0, v_crn / 2 - judge / passes)
        report.dims[d] = DimNoise(target=target, auditor=auditor, judge=judge, var_free=v_free, var_crn=v_crn)
    return report


def _commit(root: Path) -> str:
    try:
        head = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        return head.stdout.strip() or "unknown (not a git checkout)"
    except OSError:
        return "unknown (git not found)"


def render(report: NoiseReport, command: str, root: Path) -> str:
    """The report as Markdown, headed by how and where it was measured."""
    c = report.contract
    kinds = c.role_kinds()
    machine = f"{platform.node()}: {platform.platform()}, {platform.machine()}, {_cpus()} CPUs"
    lines = [
        f"# A/A noise of `{c.contract_id}`: target, auditor and judge shares",
        "",
        f"- command: `{command}`",
        f"- date: {datetime.now(UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- commit: {_commit(root)}",
        f"- machine: {machine}",
        f"- runs: {4 * report.pairs} audits ({report.pairs} + {report.pairs} A/A pairs), {report.passes} judge passes each",
        f"- contract: {c.contract_id} ({c.contract_hash[:12]}); "
        + "; ".join(f"{r}: {getattr(c.models, r).model} ({kinds[r]})" for r in ("auditor", "target", "judge")),
        f"- design: {report.pairs} A/A pairs without a seed and {report.pairs} with common random numbers "
        f"(auditor seeded alike), every transcript judged {report.passes} times; used {report.used_free} + "
        f"{report.used_crn} pairs; {len(report.gaps)} gap(s); {report.wall_s:.0f} s wall; "
        f"{report.mean_tokens:.0f} tokens per audit on average (as the server reported them)",
        "",
        "Variance parts of one audit's mean over seeds (points²); Var(D) is the paired difference's.",
        "",
        "| dimension | target | auditor | judge | shares t/a/j | Var(D) free | Var(D) CRN | "
        + " | ".join(f"pred. k={k} free / CRN" for k in KS)
        + " |",
        "|---|---|---|---|---|---|---|" + "---|" * len(KS),
    ]
    for d, n in report.dims.items():
        t, a, j = n.shares()
        preds = " | ".join(f"{n.predicted(k, False):.3f} / {n.predicted(k, True):.3f}" for k in KS)
        lines.append(
            f"| {d} | {n.target:.4f} | {n.auditor:.4f} | {n.judge:.4f} | {t:.2f}/{a:.2f}/{j:.2f} | "
            f"{n.var_free:.4f} | {n.var_crn:.4f} | {preds} |"
        )
    if report.gaps:
        lines += ["", "Gaps (pairs left out):", *[f"- {g[:300]}" for g in report.gaps]]
    lines += ["", *decision(report), "", *CAVEATS]
    return "\n".join(lines) + "\n"


def decision(report: NoiseReport) -> list[str]:
    """What the figures decide about the two levers, for this contract's roles."""
    if not report.dims:
        return ["## What this decides", "", "Nothing: fewer than two usable pairs per design."]
    auditor = max(n.shares()[1] for n in report.dims.values())
    judge = max(n.shares()[2] for n in report.dims.values())
    crn = "pays" if auditor >= 0.1 else "buys nothing measurable"
    k = "pays" if judge >= 0.25 else "buys nothing measurable"
    return [
        "## What this decides",
        "",
        f"- common random numbers: largest auditor share {auditor:.2f}; seeding the auditor alike {crn} here "
        "(default stays off unless it pays).",
        f"- judge_resamples: largest judge share {judge:.2f}; more judge passes {k} here (default stays 1 "
        "unless it pays).",
        f"- with {report.used_free} + {report.used_crn} pairs a variance estimate is rough (its relative standard "
        "error is about sqrt(2/(n-1))): read the shares as an order of magnitude.",
    ]


CAVEATS = [
    "## What a 135M model's noise does and does not tell",
    "",
    "- It does tell how the pipeline's noise splits for *this* contract: a sampled local target, a "
    "deterministic scripted auditor and a deterministic rule-based judge. Deterministic roles contribute "
    "zero by construction, so here all the noise is the target's own sampling.",
    "- It does not tell the split for a frontier target with a model auditor and a model judge: there the "
    "auditor's and the judge's sampling add noise of their own, the target is far more consistent (or "
    "differently inconsistent), and whether a provider honours `seed` decides what CRN can cancel. "
    "The levers of issue 10 must be decided from this command run on that contract.",
    "- To measure yours: `sil noise --contract YOUR_CONTRACT --pairs 8 --passes 2 --out docs/results/noise-NAME.md` "
    "(it spends 4 x pairs audits and passes - 1 re-judgings of each; model judges are charged).",
]


def _cpus() -> int:
    import os

    return os.cpu_count() or 0
