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
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel
from scipy import stats

from sil.integrity.verify import verify_run_ledger
from sil.review.runview import LEDGER, RunView
from sil.review.summary import build_summary, conclusion

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


class KeptDiff(BaseModel):
    arm: str
    mutation_id: str
    policy_set: str
    diff: str


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
    seed_set: str = "search"  # the seeds the certification rounds ran on
    seeds: int | None = None
    search_rounds: int = 0  # certified on held-out seeds: the champion's check on the search seeds
    search_effect: dict[str, tuple[float, float, float]] = {}


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
    kept: list[KeptDiff]
    conclusion: str


def effect(values: list[float]) -> Effect:
    arr = np.asarray(values, dtype=float)
    if arr.size < 2:
        return Effect(mean=float(arr.mean()), lo=None, hi=None, rounds=int(arr.size))
    half = stats.t.ppf(0.5 + LEVEL / 2, arr.size - 1) * arr.std(ddof=1) / np.sqrt(arr.size)
    m = float(arr.mean())
    return Effect(mean=m, lo=m - float(half), hi=m + float(half), rounds=int(arr.size))


def rounds_of(view: RunView, mutation_id: str) -> list[dict[str, Any]]:
    return [r for r in view.of_type("round") if r.get("mutation_id") == mutation_id and not r.get("gap_reason")]


def _open_command(view: RunView, audit_ids: list[str]) -> str:
    logs = [a["log_path"] for a in view.of_type("audit") if a["audit_id"] in audit_ids and a.get("log_path")]
    if logs:
        return f"inspect view --log-dir {Path(logs[0]).parent}"
    return f"simulated audits (no inspect log): evidence in {view.run_dir / 'audits'}/<audit id>/"


def candidates(view: RunView, dims: list[str]) -> list[Candidate]:
    verdicts = {(v["arm"], v["mutation_id"]): v for v in view.of_type("verdict")}
    out = []
    for m in view.of_type("mutation"):
        mut = m["mutation"]
        rounds = rounds_of(view, mut["mutation_id"])
        observed = {}
        for d in dims:
            vals = [r["diff"][d] for r in rounds if r["diff"].get(d) is not None]
            if vals:
                observed[d] = effect(vals)
        audit_ids = [
            a["audit_id"] for a in view.of_type("audit") if a["round"] in {r["round"] for r in rounds} or False
        ]
        v = verdicts.get((m["arm"], mut["mutation_id"]), {})
        out.append(
            Candidate(
                arm=m["arm"],
                index=m["index"],
                mutation_id=mut["mutation_id"],
                surface=mut["surface"],
                path=mut["path"],
                hypothesis=mut["hypothesis"],
                evidence=list(mut["evidence"]),
                expected=dict(mut["expected_effect"]),
                observed=observed,
                verdict=v.get("verdict"),
                reason=v.get("reason"),
                audits=audit_ids,
                open_audits=_open_command(view, audit_ids),
            )
        )
    return out


def _policy_text(view: RunView, set_id: str) -> dict[str, list[str]]:
    folder = view.run_dir / "sets" / set_id
    return {p.name: p.read_text(encoding="utf-8").splitlines() for p in sorted(folder.glob("*.json"))}


def kept_diffs(view: RunView) -> list[KeptDiff]:
    out = []
    for v in view.of_type("verdict"):
        if v["verdict"] != "keep":
            continue
        old, new = _policy_text(view, v["parent_set"]), _policy_text(view, v["candidate_set"])
        lines: list[str] = []
        for name in sorted(old.keys() | new.keys()):
            lines += difflib.unified_diff(
                old.get(name, []), new.get(name, []), f"a/{name}", f"b/{name}", n=2, lineterm=""
            )
        out.append(
            KeptDiff(
                arm=v["arm"],
                mutation_id=v["mutation_id"],
                policy_set=v["candidate_set"],
                diff="\n".join(lines[:MAX_DIFF_LINES]) or "(no textual difference)",
            )
        )
    return out


def certifications(view: RunView) -> list[Certification]:
    out = []
    for c in view.of_type("certify"):
        decision = c.get("decision") or {}
        legs = c.get("legs") or [
            {k: leg.get(k) for k in ("dim", "kind", "estimate", "statistic", "boundary", "passed")}
            for leg in decision.get("legs", [])
        ]
        out.append(
            Certification(
                arm=c["arm"],
                policy_set=c["policy_set"],
                certified=c["certified"],
                rounds=c["rounds"],
                reason=c.get("reason") or decision.get("reason", "the budget ran out before the certification decided"),
                legs=legs,
                seed_set=c.get("seed_set", "search"),
                seeds=c.get("seeds"),
                search_rounds=c.get("search_rounds", 0),
                search_effect={d: tuple(v) for d, v in (c.get("search_effect") or {}).items()},
            )
        )
    return out


def trust(view: RunView, root: Path) -> Trust:
    rep = verify_run_ledger(view.run_dir / LEDGER, root, None)
    approval = (view.first("contract") or {}).get("approval", "unknown")
    return Trust(
        ledger_ok=rep.ok,
        records=rep.records,
        head_hash=rep.head_hash,
        checkpoints=rep.checkpoints,
        errors=list(rep.errors),
        notes=list(rep.notes),
        approval=approval,
        approval_signed="signed by key" in approval and "key None" not in approval,
    )


def build_report(view: RunView, root: Path) -> ReportData:
    if view.contract is None or view.state is None:
        raise ValueError(f"run {view.run_id} cannot be reported: {'; '.join(view.problems) or 'no state'}")
    c, s = view.contract, view.state
    run = view.first("contract") or {}
    summary = build_summary(s, view.records, c, run.get("note", ""))
    dims = c.dimensions()
    return ReportData(
        run_id=view.run_id,
        contract_id=c.contract_id,
        contract_hash=c.contract_hash,
        backend=c.backend,
        simulated=view.simulated,
        note=run.get("note", ""),
        models=run.get("models", {}),
        phase=s.phase,
        halt_reason=s.halt_reason,
        target=c.promotion.target_dimensions[0],
        critical=list(c.promotion.critical_dimensions),
        dimensions=dims,
        trust=trust(view, root),
        summary=json.loads(summary.model_dump_json()),
        candidates=candidates(view, dims),
        certifications=certifications(view),
        replications=view.of_type("replicate"),
        kept=kept_diffs(view),
        conclusion=conclusion(summary),
    )
