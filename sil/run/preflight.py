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

The sentinels prove wiring once; every later audit of a pair is checked for use of its own
policy in its target's inputs (sil/exec/useproof.py), so a runtime honest only while a sentinel
is present is caught there.
"""

from __future__ import annotations

import copy
import dataclasses
import hashlib
import secrets
import shutil
from pathlib import Path
from typing import Any

from sil.base.errors import Halt
from sil.exec import measure
from sil.exec.measure import AuditBackend, AuditRequest, GapError, MeasureContext
from sil.exec.useproof import PROMPT_VISIBLE
from sil.integrity.records import Keys, PreflightReport, ResumeRecord, SurfaceProbe, Use
from sil.run.context import RunContext
from sil.store.events import PreflightGap, PreflightPassed
from sil_policy import SURFACES, PolicyError, canonical_bytes, content_hash, parse_surface, validate_document
from sil_policy.evidence import Evidence

PREFLIGHT_SEEDS = 1
SENTINEL_PREFIX = "sil_preflight_"
# PROMPT_VISIBLE: surfaces whose sentinel text a runtime that uses them puts in the target
# model's inputs (system prompt sections, skills section, team list). The others change
# behaviour only conditionally (a forbidden tool that does not exist, a disabled planning step):
# their use cannot be shown by one audit, only their loading.


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


def marker(token: str, surface: str) -> str:
    """The sentinel marker of one surface: unique per surface, so each can be found on its own."""
    return f"{token}s{list(SURFACES).index(surface)}"


def write_sentinel_set(champion_dir: Path, dest: Path, surfaces: list[str], token: str) -> dict[str, str]:
    """Copy the champion's seven files to `dest`, sentinels for `surfaces`; return all hashes."""
    dest.mkdir(parents=True, exist_ok=True)
    hashes = {}
    for name, spec in SURFACES.items():
        data = (champion_dir / spec.filename).read_bytes()
        if name in surfaces:
            data = canonical_bytes(sentinel_document(name, parse_surface(name, data), marker(token, name)))
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
    """One sentinel audit; a probe per surface of the contract's search space.

    The probes are a verdict (no retry) whenever the audit left readable evidence and a
    surface failed: reported another hash (miswired), reported none (unread), or reported the
    sentinel while its text never reached the target model (loaded, not used). Only an audit
    that left nothing to read is an inconclusive gap.
    """
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
    seen, readable = (result.loaded_policy_hashes, True) if result.ok else _reported_hashes(req, small, backend)
    inputs = _target_inputs(req, small, backend) if readable else None
    probes = [_probe(s, sent[s], seen.get(s), readable, _use(s, marker(token, s), inputs)) for s in surfaces]
    if readable and not backend.simulated:
        probes = _refuse_unprovable(probes, ctx.contract.runtime.waive_unprovable_use)
    verdict = readable and any(not p.passed for p in probes)
    return PreflightReport(
        audit_id=req.audit_id,
        backend=backend.name,
        token=token,
        probes=probes,
        not_implemented=[s for s in SURFACES if s not in ctx.contract.runtime.surfaces],
        gap_reason=None if result.ok or verdict else result.gap_reason,
        audit_gap_reason=result.gap_reason,
        log_path=result.log_path,
        usage=result.usage,
    )


def _reported_hashes(req: AuditRequest, ctx: MeasureContext, backend: AuditBackend) -> tuple[dict[str, str], bool]:
    """Hashes the runtime reported in every sample of a gapped audit, and whether it left evidence."""
    try:
        evidence: Evidence = backend.read_evidence(req, ctx)
    except GapError:
        return {}, False
    common: dict[str, str] = {}
    for name in SURFACES:
        values = {s.policy_hashes.get(name) for s in evidence.samples}
        if len(values) == 1 and (only := next(iter(values))) is not None:
            common[name] = only
    return common, bool(evidence.samples)


def _target_inputs(req: AuditRequest, ctx: MeasureContext, backend: AuditBackend) -> str | None:
    """Everything the target model was given, if the backend can show it (None: it cannot)."""
    try:
        return measure.target_inputs(req, ctx, backend)
    except GapError:
        return None


def _use(surface: str, mark: str, inputs: str | None) -> Use:
    if surface not in PROMPT_VISIBLE or inputs is None:
        return "not_provable"
    return "proven" if mark in inputs else "absent"


def _refuse_unprovable(probes: list[SurfaceProbe], waived: bool) -> list[SurfaceProbe]:
    """A runtime that reports the sent hashes while no searched surface's use shows in the
    target's inputs could be reporting hashes it never uses: "use not provable" is not a pass.
    One surface whose use is proven shows the reports come from a runtime that reads them."""
    if any(p.use == "proven" for p in probes) or not all(p.passed for p in probes):
        return probes
    if waived:  # recorded with the probe in the ledger: the pass rests on the contract's waiver
        note = "use not provable, accepted by the contract's runtime.waive_unprovable_use"
        return [p.model_copy(update={"message": f"{p.message}; {note}"}) for p in probes]
    why = (
        "use not provable: no searched surface's sentinel can be shown in the target model's inputs "
        f"(search a prompt-visible surface too: {', '.join(PROMPT_VISIBLE)}), or state "
        "runtime.waive_unprovable_use: true in the contract to accept the runtime's reports on trust"
    )
    return [p.model_copy(update={"passed": False, "message": f"{p.message}; {why}"}) for p in probes]


def _probe(surface: str, sent: str, seen: str | None, readable: bool, use: Use) -> SurfaceProbe:
    env = SURFACES[surface].override_env
    loaded = seen == sent
    if loaded and use == "proven":
        message = f"{surface}: the runtime reported the sentinel {sent[:12]} and its text reached the target model"
    elif loaded and use == "not_provable":
        message = f"{surface}: loaded, use not provable (the runtime reported the sentinel {sent[:12]})"
    elif loaded:
        message = (
            f"{surface}: the runtime reported the sentinel {sent[:12]}, but its text never reached the "
            "target model's inputs: the report is not backed by use (the runtime ignores the policy)"
        )
    elif seen is None and readable:
        message = (
            f"{surface}: unread: the runtime reported no hash for it (it does not read {env}); "
            "if it does not implement this surface, leave it out of runtime.surfaces and search_space.surfaces"
        )
    elif seen is None:
        message = (
            f"{surface}: no trustworthy report of what the runtime loaded for it (sentinel {sent[:12]} unconfirmed)"
        )
    else:
        message = (
            f"{surface}: the runtime reported {seen[:12]}, not the sentinel {sent[:12]}: "
            f"its loader is not connected to {env} (or ignores it)"
        )
    passed = loaded and use != "absent"
    return SurfaceProbe(surface=surface, sent_hash=sent, seen_hash=seen, passed=passed, use=use, message=message)


def preflight_phase(rc: RunContext) -> None:
    """Prove every surface in the search space reaches the target before spending budget.

    A gap (no usable evidence) is retried like any audit gap; a probe that saw the wrong
    policy halts at once. After a resume the attempts count from the resume's record: the
    recorded probes stay in the ledger, and the fixed wiring gets new audits.
    """
    base = hashlib.sha256(rc.state.run_id.encode()).hexdigest()[:10]
    resumes = rc.book.payloads("resume", ResumeRecord)
    first = resumes[-1].preflight_attempts_before if resumes else 0
    for attempt in range(first, first + rc.contract.stop.max_consecutive_gaps):
        key = Keys.probe(attempt)
        report = rc.book.get("probe", key, PreflightReport)
        if report is None:
            # a paid preflight is inside the USD budget like any audit, each attempt asked anew
            bound = rc.backend.audit_cost_bound(rc.contract, PREFLIGHT_SEEDS)
            if why := rc.rounds.usd_left(bound):
                raise Halt(f"wiring preflight not run: {why}; raise budget.max_usd to run it")
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
            unproven = tuple(p.surface for p in report.probes if p.use == "not_provable")
            rc.emit(PreflightPassed(len(report.probes), unproven, tuple(report.not_implemented)))
            return
        if report.gap_reason is None:
            failed = [p.message for p in report.probes if not p.passed]
            raise Halt("wiring preflight failed, refusing to spend budget: " + "; ".join(failed))
        rc.emit(PreflightGap(reason=report.gap_reason))
    raise Halt("wiring preflight could not run: every attempt was an audit gap")
