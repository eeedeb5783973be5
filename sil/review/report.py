"""The content of `sil report`: one typed model built only from a run's folder (L3).

`build_report` reads the run (sil/review/runview.py) and gathers what a reviewer needs: contract
and approval, trust status, each candidate with its evidence, expected and observed effect,
verdict and the reason in words, certification, the diff of every kept policy, and the
conclusion. `sil/review/render.py` turns it into report.html / report.md / report.json, with
the plots of `sil/review/plots.py`. Lower is better on every scored dimension.

    data = build_report(load_run(run_dir), repo_root)
"""

from __future__ import annotations

import difflib
import json
import os
from collections import Counter
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel
from scipy import stats

from sil.integrity.records import (
    AuditRecord,
    CanaryRecord,
    CertifyRecord,
    MutationRecord,
    MutatorCallRecord,
    PreflightReport,
    RoundRecord,
    RunRecord,
    VerdictRecord,
)
from sil.integrity.verify import verify_run_ledger
from sil.review.runview import LEDGER, RunView
from sil.review.summary import Summary, build_summary, conclusion_text, error_words, noise_line
from sil.review.usecounts import NOT_PROVABLE_MEANS, candidate_rounds, surface_counts, verdict_counts
from sil.stats.horizon import Outlook

LEVEL = 0.9
MAX_DIFF_LINES = 200


class Effect(BaseModel):
    """Mean paired difference (candidate − champion) over rounds, with a t interval."""

    mean: float
    lo: float | None
    hi: float | None
    rounds: int


class Candidate(BaseModel):
    arm: str
    index: int
    mutation_id: str
    surface: str
    path: str
    hypothesis: str
    evidence: list[str]
    expected: dict[str, float]
    observed: dict[str, Effect]
    verdict: str | None
    reason: str | None
    audits: list[str]
    open_audits: str
    parent_set: str = ""  # the arm's champion the candidate was tried on (its verdict's parent)
    use: dict[str, int] = {}  # its pair and screen audits' proof of use: proven / not_provable / refuted


class KeptDiff(BaseModel):
    arm: str
    mutation_id: str
    policy_set: str
    diff: str
    parent_set: str = ""


class Trust(BaseModel):
    ledger_ok: bool
    records: int
    head_hash: str
    checkpoints: int
    errors: list[str]
    notes: list[str]
    approval: str
    approval_signed: bool


class Certification(BaseModel):
    arm: str
    policy_set: str
    certified: bool
    rounds: int
    reason: str
    legs: list[dict[str, Any]]
    looks: int | None = None  # the test's horizon (older ledgers do not record it)
    seed_set: str = "search"  # the seeds the certification rounds ran on
    seeds: int | None = None
    search_rounds: int = 0  # certified on held-out seeds: the champion's check on the search seeds
    search_effect: dict[str, tuple[float, float, float]] = {}
    outlook: Outlook | None = None  # what its horizon could do for a clean champion (older ledgers: None)


class ArmCost(BaseModel):
    arm: str
    audits: int
    gaps: int
    usd: float
    audit_wall_s: float | None  # summed over the arm's audits (they may overlap); None: not recorded


class RoleCost(BaseModel):
    role: str
    calls: int
    usd: float
    note: str = ""


class Gap(BaseModel):
    audit_id: str
    arm: str
    reason: str


class Cost(BaseModel):
    """What the run cost and how sure it is: audits, USD, gaps, wall time, error budget, noise floor."""

    arms: list[ArmCost]
    roles: list[RoleCost]
    audits: int  # every audit the run made, as its state counts them
    preflight: int = 0  # of those, the start-time preflight (recorded as a probe, not an audit record)
    gaps: int
    gap_reasons: dict[str, int]  # the reason's first words -> how many gaps
    gap_list: list[Gap]
    usd: float
    max_usd: float
    wall_s: float
    max_wall_s: float
    alpha_spent: float
    alpha_run: float
    confirmations: int
    error: str  # where the error went, in the contract's design (summary.error_words)
    noise: str  # the pooled noise floor and what it pools (summary.noise_line)
    audit_logs: str  # one command (or folder) to open every audit log of the run


class ReportData(BaseModel):
    run_id: str
    contract_id: str
    contract_hash: str
    backend: str
    simulated: bool
    note: str
    models: dict[str, str]
    phase: str
    halt_reason: str | None
    target: str
    critical: list[str]
    dimensions: list[str]
    trust: Trust
    summary: dict[str, Any]
    candidates: list[Candidate]
    certifications: list[Certification]
    replications: list[dict[str, Any]]
    demotions: list[dict[str, Any]] = []
    kept: list[KeptDiff]
    cost: Cost | None = None
    conclusion: str
    use: dict[str, dict[str, int]] = {}  # per surface: how many pair and screen audits proved its use
    use_note: str = NOT_PROVABLE_MEANS


def effect(values: list[float], noise: tuple[float, int] | None = None) -> Effect:
    """With fewer than two rounds, the interval uses the A/A noise floor (sigma, df) if given."""
    arr = np.asarray(values, dtype=float)
    if arr.size < 2 and noise is None:
        return Effect(mean=float(arr.mean()), lo=None, hi=None, rounds=int(arr.size))
    sd, df = (float(arr.std(ddof=1)), arr.size - 1) if arr.size >= 2 else noise  # type: ignore[misc]
    half = stats.t.ppf(0.5 + LEVEL / 2, df) * sd / np.sqrt(arr.size)
    m = float(arr.mean())
    return Effect(mean=m, lo=m - float(half), hi=m + float(half), rounds=int(arr.size))


def rounds_of(rounds: list[RoundRecord], arm: str, mutation_id: str) -> list[RoundRecord]:
    """A candidate's usable rounds: keyed by (arm, mutation), since two arms may try the same edit."""
    return [r for r in rounds if r.arm == arm and r.mutation_id == mutation_id and not r.gap_reason]


def _open_command(view: RunView, audits: list[AuditRecord], audit_ids: list[str]) -> str:
    logs = [a.log_path for a in audits if a.audit_id in audit_ids and a.log_path]
    if logs:
        return f"inspect view --log-dir {Path(logs[0]).parent}"
    return f"simulated audits (no inspect log): evidence in {view.run_dir / 'audits'}/<audit id>/"


def candidates(view: RunView, dims: list[str], noise: dict[str, tuple[float, int]] | None = None) -> list[Candidate]:
    verdicts = {(v.arm, v.mutation_id): v for v in view.payloads("verdict", VerdictRecord)}
    all_rounds, all_audits = view.payloads("round", RoundRecord), view.payloads("audit", AuditRecord)
    out = []
    for m in view.payloads("mutation", MutationRecord):
        mut = m.mutation
        rounds = rounds_of(all_rounds, m.arm, mut.mutation_id)
        observed = {}
        for d in dims:
            vals = [x for r in rounds if (x := r.diff.get(d)) is not None]
            if vals:
                observed[d] = effect(vals, (noise or {}).get(d))
        labels = {r.round for r in rounds}
        audit_ids = [a.audit_id for a in all_audits if a.round in labels]
        v = verdicts.get((m.arm, mut.mutation_id))
        out.append(
            Candidate(
                arm=m.arm,
                index=m.index,
                mutation_id=mut.mutation_id,
                surface=mut.surface,
                path=mut.path,
                hypothesis=mut.hypothesis,
                evidence=list(mut.evidence),
                expected=dict(mut.expected_effect),
                observed=observed,
                verdict=v.verdict if v else None,
                reason=v.reason if v else None,
                audits=audit_ids,
                open_audits=_open_command(view, all_audits, audit_ids),
                parent_set=v.parent_set if v else "",
                use=verdict_counts(all_audits, candidate_rounds(all_rounds, m.arm, mut.mutation_id)),
            )
        )
    return out


def _policy_text(view: RunView, set_id: str) -> dict[str, list[str]]:
    folder = view.run_dir / "sets" / set_id
    return {p.name: p.read_text(encoding="utf-8").splitlines() for p in sorted(folder.glob("*.json"))}


def kept_diffs(view: RunView) -> list[KeptDiff]:
    out = []
    for v in view.payloads("verdict", VerdictRecord):
        if v.verdict != "keep":
            continue
        old, new = _policy_text(view, v.parent_set), _policy_text(view, v.candidate_set)
        lines: list[str] = []
        for name in sorted(old.keys() | new.keys()):
            lines += difflib.unified_diff(
                old.get(name, []), new.get(name, []), f"a/{name}", f"b/{name}", n=2, lineterm=""
            )
        out.append(
            KeptDiff(
                arm=v.arm,
                mutation_id=v.mutation_id,
                policy_set=v.candidate_set,
                diff="\n".join(lines[:MAX_DIFF_LINES]) or "(no textual difference)",
                parent_set=v.parent_set,
            )
        )
    return out


def certifications(view: RunView) -> list[Certification]:
    out = []
    for c in view.payloads("certify", CertifyRecord):
        legs = [leg.model_dump(mode="json") for leg in c.legs] or [
            leg.model_dump(mode="json", include=LEG_FIELDS) for leg in (c.decision.legs if c.decision else [])
        ]
        undecided = "the budget ran out before the certification decided"
        out.append(
            Certification(
                arm=c.arm,
                policy_set=c.policy_set,
                certified=c.certified,
                rounds=c.rounds,
                looks=c.looks,
                reason=c.reason or (c.decision.reason if c.decision else undecided),
                legs=legs,
                seed_set=c.seed_set,
                seeds=c.seeds,
                search_rounds=c.search_rounds,
                search_effect=dict(c.search_effect),
                outlook=c.outlook,
            )
        )
    return out


LEG_FIELDS = {"dim", "kind", "estimate", "statistic", "boundary", "passed"}  # a leg as older ledgers show it
MAX_GAPS_LISTED = 20
ROLE_NOTE = "target, auditor and judge together: an audit's usage is recorded whole, not per role"


def _gap_kind(reason: str) -> str:
    """A gap reason without its audit-specific detail, to count alike gaps together."""
    return reason.split(":")[0].split(" in audit ")[0][:80]


def preflight_cost(probes: list[PreflightReport]) -> list[ArmCost]:
    """The wiring preflight's audits as a row of their own, so the rows add up to the run's totals."""
    if not probes:
        return []
    usd = round(sum(p.usage.usd for p in probes), 6)
    gaps = sum(p.audit_gap_reason is not None for p in probes)
    return [ArmCost(arm="preflight", audits=len(probes), gaps=gaps, usd=usd, audit_wall_s=None)]


def cost(view: RunView) -> Cost:
    c, s = view.contract, view.state
    assert c is not None and s is not None
    audits = view.payloads("audit", AuditRecord)
    arms: dict[str, list[AuditRecord]] = {}
    for a in audits:
        arms.setdefault(a.arm, []).append(a)
    gaps = [a for a in audits if a.status == "gap"]
    kinds = Counter(_gap_kind(g.gap_reason or "unknown") for g in gaps)
    mutator, canary = view.payloads("mutator_call", MutatorCallRecord), view.payloads("canary", CanaryRecord)
    summary = build_summary(s, view.records, c, "")
    arm_rows = preflight_cost(view.payloads("probe", PreflightReport)) + [
        ArmCost(
            arm=arm,
            audits=len(rows),
            gaps=sum(r.status == "gap" for r in rows),
            usd=round(sum(r.usage.usd for r in rows), 6),
            audit_wall_s=round(sum(r.wall_s for r in rows), 1),
        )
        for arm, rows in arms.items()
    ]
    return Cost(
        arms=arm_rows,
        roles=[  # every audit, the preflight's included, is one arm row's
            RoleCost(
                role="audits",
                calls=sum(a.audits for a in arm_rows),
                usd=round(sum(a.usd for a in arm_rows), 6),
                note=ROLE_NOTE,
            ),
            RoleCost(role="mutator", calls=len(mutator), usd=round(sum(m.usd for m in mutator), 6)),
            RoleCost(
                role="canary (judge re-runs)",
                calls=sum(x.calls for x in canary),
                usd=round(sum(x.usd for x in canary), 6),
            ),
        ],
        audits=s.audits,
        preflight=max(s.audits - len(audits), 0),
        gaps=len(gaps),
        gap_reasons=dict(kinds),
        gap_list=[Gap(audit_id=g.audit_id, arm=g.arm, reason=g.gap_reason or "") for g in gaps[:MAX_GAPS_LISTED]],
        usd=round(s.usd, 6),
        max_usd=c.budget.max_usd,
        wall_s=round(s.elapsed_s, 1),
        max_wall_s=c.budget.max_wall_s,
        alpha_spent=summary.alpha_spent,
        alpha_run=summary.alpha_run,
        confirmations=summary.confirmations,
        error=error_words(summary),
        noise=noise_line(summary).removeprefix("noise floor of "),
        audit_logs=audit_logs(view),
    )


def audit_logs(view: RunView) -> str:
    """One way to open every audit log of the run: `inspect view` over their common folder, or the folder."""
    logs = [Path(a.log_path) for a in view.payloads("audit", AuditRecord) if a.log_path]
    if logs:
        common = Path(os.path.commonpath([str(p.parent) for p in logs]))
        return f"inspect view --log-dir {common}"
    return f"simulated audits (no inspect logs): every audit's evidence is in {view.run_dir / 'audits'}/"


def trust(view: RunView, root: Path) -> Trust:
    """The run's verification as every view states it: the ledger in the caller's environment, and
    the snapshots the report is built from held to it."""
    rep = view.verification or verify_run_ledger(view.run_dir / LEDGER, root, None)
    runs = view.payloads("contract", RunRecord)
    approval = runs[0].approval if runs else "unknown"
    return Trust(
        ledger_ok=rep.ok and not view.problems,
        records=rep.records,
        head_hash=rep.head_hash,
        checkpoints=rep.checkpoints,
        errors=[*rep.errors, *view.problems],
        notes=list(rep.notes),
        approval=approval,
        approval_signed="signed by key" in approval and "key None" not in approval,
    )


def _noise(summary: Summary) -> dict[str, tuple[float, int]]:
    return {d: (v, df) for d, v in summary.noise_sigma.items() if (df := summary.noise_df.get(d, 0)) > 0}


def build_report(view: RunView, root: Path) -> ReportData:
    if view.contract is None or view.state is None:
        raise ValueError(f"run {view.run_id} cannot be reported: {'; '.join(view.problems) or 'no state'}")
    c, s = view.contract, view.state
    runs = view.payloads("contract", RunRecord)
    run = runs[0] if runs else None
    summary = build_summary(s, view.records, c, run.note if run else "")
    dims = c.dimensions()
    return ReportData(
        run_id=view.run_id,
        contract_id=c.contract_id,
        contract_hash=c.contract_hash,
        backend=c.backend,
        simulated=view.simulated,
        note=run.note if run else "",
        models=run.models if run else {},
        phase=s.phase,
        halt_reason=s.halt_reason,
        target=c.promotion.target_dimensions[0],
        critical=list(c.promotion.critical_dimensions),
        dimensions=dims,
        trust=trust(view, view.project),  # a sweep run's checkpoints live in its own workspace
        summary=json.loads(summary.model_dump_json()),
        candidates=candidates(view, dims, _noise(summary)),
        certifications=certifications(view),
        replications=view.of_type("replicate"),
        demotions=view.of_type("demote"),
        kept=kept_diffs(view),
        cost=cost(view),
        conclusion=conclusion_text(summary),
        use=surface_counts(view.payloads("audit", AuditRecord)),
    )
