"""Wiring preflight: before any budget is spent, prove each searched surface reaches the runtime.

Every surface in the contract's search space gets a sentinel: a valid copy of the champion's
file with a unique marker added (a section, a name, a line of text), so its hash is new. One
cheap audit (the contract's backend, models and settings, on the first frozen seed only) runs
with all sentinels in place; a surface passes when the runtime reported the sentinel's hash
for it. A loader that is not connected to its OVERRIDE path reports another hash, and the
surface fails with a message that names it. An audit that yields no trustworthy report of
what was loaded makes the probe inconclusive (`gap_reason`): unknown is not a pass.

    report = run_preflight(ctx, champion_dir, work_dir, backend)
    if not report.passed:
        raise SystemExit(report.summary())
    preflight_phase(rc)          # the run's phase: retries gaps, records each probe, halts on a miswire
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import secrets
import shutil
from pathlib import Path
from typing import Any

import measure
from loop.context import RunContext
from loop.errors import Halt
from loop.records import Keys, PreflightReport, SurfaceProbe
from measure import AuditBackend, AuditRequest, GapError, MeasureContext
from sil_policy import SURFACES, PolicyError, canonical_bytes, content_hash, parse_surface, validate_document
from sil_policy.evidence import Evidence

PREFLIGHT_SEEDS = 1
SENTINEL_PREFIX = "sil_preflight_"


def sentinel_document(surface: str, document: dict[str, Any], token: str) -> dict[str, Any]:
    """A valid copy of `document` that differs by a marker naming `token`."""
    doc = copy.deepcopy(document)
    name, text = f"{SENTINEL_PREFIX}{token}", f"[preflight {token}]"
    if surface == "wrapper_prompt":
        doc["sections"][name] = text
    elif surface == "tool_policy":
        doc["forbidden_tools"].append(name)
    elif surface == "decomposition":
        doc["suffix"] = f"{doc['suffix']} {text}".strip()
    elif surface == "reflection":
        doc["description"] = f"{doc['description']} {text}".strip()
    elif surface == "skill_catalog":
        doc["skills"][name] = {"description": text, "user_invocable": False}
    elif surface == "agent_contracts":
        doc["agents"][name] = {"role": text, "system_prompt": text, "tools": []}
    elif surface == "tool_descriptions":
        doc["tools"][name] = {"description": text, "hints": []}
    else:
        raise PolicyError(f"no sentinel defined for surface {surface!r}")
    return validate_document(surface, doc)


def write_sentinel_set(champion_dir: Path, dest: Path, surfaces: list[str], token: str) -> dict[str, str]:
    """Copy the champion's seven files to `dest`, sentinels for `surfaces`; return all hashes."""
    dest.mkdir(parents=True, exist_ok=True)
    hashes = {}
    for name, spec in SURFACES.items():
        data = (champion_dir / spec.filename).read_bytes()
        if name in surfaces:
            data = canonical_bytes(sentinel_document(name, parse_surface(name, data), token))
        (dest / spec.filename).write_bytes(data)
        hashes[name] = content_hash(data)
    return hashes


def cheap_context(ctx: MeasureContext, dest: Path) -> MeasureContext:
    """The same contract on a copy of the frozen measurement holding its first seed(s) only."""
    shutil.copytree(ctx.measurement_root / "rubric", dest / "rubric", dirs_exist_ok=True)
    (dest / "seeds").mkdir(parents=True, exist_ok=True)
    seeds = ctx.seed_ids[:PREFLIGHT_SEEDS]
    for seed in seeds:
        shutil.copyfile(ctx.measurement_root / "seeds" / f"{seed}.md", dest / "seeds" / f"{seed}.md")
    return dataclasses.replace(ctx, measurement_root=dest.resolve(), seed_ids=tuple(seeds))


def run_preflight(
    ctx: MeasureContext, champion_dir: Path, work_dir: Path, backend: AuditBackend, token: str | None = None
) -> PreflightReport:
    """One sentinel audit; a probe per surface of the contract's search space."""
    token = token or secrets.token_hex(6)
    surfaces = list(ctx.contract.search_space.surfaces)
    sent = write_sentinel_set(champion_dir, work_dir / "policies", surfaces, token)
    small = cheap_context(ctx, work_dir / "measurement")
    req = AuditRequest(
        audit_id=f"preflight-{token}",
        audit_dir=work_dir / "audit",
        policy_dir=work_dir / "policies",
        policy_hashes=sent,
        tick=0,
    )
    result = measure.run_audit(req, small, backend)
    seen = result.loaded_policy_hashes if result.ok else _reported_hashes(req, small, backend)
    probes = [_probe(s, sent[s], seen.get(s)) for s in surfaces]
    # a gap whose evidence shows a surface loading the wrong file is a wiring verdict, not a gap
    miswired = any(p.seen_hash is not None and not p.passed for p in probes)
    return PreflightReport(
        audit_id=req.audit_id,
        backend=backend.name,
        token=token,
        probes=probes,
        gap_reason=None if result.ok or miswired else result.gap_reason,
        audit_gap_reason=result.gap_reason,
        log_path=result.log_path,
        usage=result.usage,
    )


def _reported_hashes(req: AuditRequest, ctx: MeasureContext, backend: AuditBackend) -> dict[str, str]:
    """Hashes the runtime reported in every sample of a gapped audit (if it left evidence)."""
    try:
        evidence: Evidence = backend.read_evidence(req, ctx)
    except GapError:
        return {}
    common: dict[str, str] = {}
    for name in SURFACES:
        values = {s.policy_hashes.get(name) for s in evidence.samples}
        if len(values) == 1 and (only := next(iter(values))) is not None:
            common[name] = only
    return common


def _probe(surface: str, sent: str, seen: str | None) -> SurfaceProbe:
    env = SURFACES[surface].override_env
    if seen == sent:
        message = f"{surface}: the runtime reported the sentinel {sent[:12]}"
    elif seen is None:
        message = (
            f"{surface}: no trustworthy report of what the runtime loaded for it (sentinel {sent[:12]} unconfirmed)"
        )
    else:
        message = (
            f"{surface}: the runtime reported {seen[:12]}, not the sentinel {sent[:12]}: "
            f"its loader is not connected to {env} (or ignores it)"
        )
    return SurfaceProbe(surface=surface, sent_hash=sent, seen_hash=seen, passed=seen == sent, message=message)


def preflight_phase(rc: RunContext) -> None:
    """Prove every surface in the search space reaches the target before spending budget.

    A gap (no usable evidence) is retried like any audit gap; a probe that saw the wrong
    policy halts at once.
    """
    base = hashlib.sha256(rc.state.run_id.encode()).hexdigest()[:10]
    for attempt in range(rc.contract.stop.max_consecutive_gaps):
        key = Keys.probe(attempt)
        report = rc.book.get("probe", key, PreflightReport)
        if report is None:
            rc.rounds.recover([(key, rc.run_dir / key / "audit")])  # run_preflight's audit dir
            report = run_preflight(
                rc.measure,
                rc.store.set_dir(rc.state.origin),
                rc.run_dir / key,
                rc.backend,
                token=f"{base}{attempt:02d}",
            )
            rc.book.once(key, report)
            rc.state.audits += 1
            rc.state.usd += report.usage.usd
            rc.state.gaps += report.audit_gap_reason is not None
            rc.save()
        if report.passed:
            rc.emit(f"preflight: all {len(report.probes)} surfaces of the search space reach the target")
            return
        if report.gap_reason is None:
            failed = [p.message for p in report.probes if not p.passed]
            raise Halt("wiring preflight failed, refusing to spend budget: " + "; ".join(failed))
        rc.emit(f"  preflight audit gap: {report.gap_reason}")
    raise Halt("wiring preflight could not run: every attempt was an audit gap")
