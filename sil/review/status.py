"""Where a run stands, and the row `sil runs` lists it in, from its verified ledger (L3).

`sil runs`, `sil status` (and `--json`) and the sweep table read a run here, through
`runview.load_run`: the ledger verified as `sil ledger verify` verifies it in the same
environment, the state and contract snapshots held to the ledger. A run whose ledger does not
verify, or whose snapshots disagree with it, says so in every view; a run folder that cannot be
read at all is listed with the reason and hides no other run.

    status = run_status(load_run(run_dir))   # phase, arm, candidate, look k of K, budgets, ETA
    rows = [overview_of(d) for d in run_dirs(root)]

A run is "running" while its lock's owner file names a live process on this host; the ETA
extrapolates the mean seconds per audit so far over the audits the run can still make.
"""

from __future__ import annotations

import json
import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

from sil.base.locks import OWNER_SUFFIX, RUN_LOCK
from sil.integrity.records import AuditRecord, RoundRecord
from sil.review.usecounts import (
    COUNTED_OVER,
    NOT_PROVABLE_MEANS,
    NOT_PROVABLE_SHORT,
    candidate_rounds,
    surface_counts,
    verdict_counts,
    words,
)
from sil.store.champion import ChampionStatus, champions

if TYPE_CHECKING:  # the models alone are light: a cached row is read without the run's models
    from sil.review.runview import RunView

LAST_VERDICTS = 5
FINAL_PHASES = ("done", "halted")


class Verdict(BaseModel):
    model_config = ConfigDict(defer_build=True)  # built on first use: `sil runs` needs only its row
    arm: str
    mutation_id: str
    verdict: str
    reason: str
    use: dict[str, int] = {}  # its pair and screen audits' proof of use (sil/review/usecounts.py)


class RunStatus(BaseModel):
    model_config = ConfigDict(defer_build=True)  # built on first use: `sil runs` needs only its row
    run_id: str
    running: bool
    phase: str
    arm: str | None
    candidate: str | None
    look: int | None
    looks: int | None
    audits: int
    audits_planned: int | None
    max_audits: int | None
    gaps: int
    usd: float
    max_usd: float | None
    alpha_spent: float
    alpha_run: float | None
    elapsed_s: float
    eta_s: float | None
    halt_reason: str | None
    stopped: bool = False  # neither running nor finished: resume it
    resume: str = ""
    champions: dict[str, ChampionStatus] = {}
    last_verdicts: list[Verdict]
    problems: list[str]
    two_stage: bool = False  # promotion.error_design two_stage: a fixed level per search confirmation
    confirmations: int = 0
    verified: bool = False  # the ledger verifies and the snapshots agree with it
    ledger: str = ""  # what was checked, or why it does not verify
    use: dict[str, dict[str, int]] = {}  # per surface: pair and screen audits that proved / could not prove its use
    use_note: str = NOT_PROVABLE_MEANS


class RunOverview(BaseModel):
    run_id: str
    contract_id: str | None
    contract_hash: str | None
    backend: str | None
    simulated: bool
    phase: str
    audits: int
    max_audits: int | None
    usd: float
    keeps: dict[str, int]
    demoted: dict[str, int] = {}  # KEEPs taken back later, per arm
    champion: str = ""  # the gate champion's status in words (sil/store/champion.py)
    verified: bool
    verify_note: str


def is_running(run_dir: Path) -> bool:
    """True while a live process on this host holds the run's lock (owner file present)."""
    try:
        info = json.loads((run_dir / (RUN_LOCK + OWNER_SUFFIX)).read_text())
        if info.get("host") != socket.gethostname():
            return True  # another host: cannot check its pid, trust the owner file
        os.kill(int(info["pid"]), 0)
        return True
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return False


def stopped(phase: str, running: bool) -> bool:
    """Neither running nor finished: interrupted (Ctrl-C, a crash, a killed process)."""
    return not running and phase not in FINAL_PHASES and phase != "unknown"


def resume_hint(run_dir: Path) -> str:
    """The command that resumes the run, from the project root."""
    project = run_dir.parents[2]  # a sweep run's project is its own workspace
    cd = (
        f"cd {project.relative_to(project.parents[2])} && "
        if project.parent.name == "sweeps" and project.parents[1].name == "state"
        else ""
    )
    return f"{cd}sil run --run-id {run_dir.name}"


def ledger_word(view: RunView) -> tuple[bool, str]:
    """Whether the run verifies (its ledger, and its snapshots against it), and what was checked or why not."""
    report = view.verification
    errors = [*(report.errors if report is not None else []), *view.problems]
    if errors:
        return False, "; ".join(errors[:2]) + (f" (and {len(errors) - 2} more)" if len(errors) > 2 else "")
    if report is None:
        return False, "not verified"
    return True, f"{report.records} records, " + ", ".join(report.checked[1:] or ["no checkpoints"])


def _current(view: RunView) -> tuple[str | None, str | None, int | None]:
    s = view.state
    if s is None or s.phase not in s.arms:
        return None, None, None
    pending = s.arms[s.phase].pending
    if pending is None:
        return s.phase, None, None
    m = pending.mutation
    return s.phase, f"{m.mutation_id} {m.surface}.{m.path}", pending.trial.rounds


def _champions(view: RunView) -> dict[str, ChampionStatus]:
    if view.state is None:
        return {}
    try:
        return champions(view.state, view.records)
    except (ValueError, TypeError, KeyError) as ex:  # a malformed record: already one of the problems
        if str(ex) not in view.problems:
            view.problems.append(str(ex))
        return {}


def _audits(view: RunView) -> tuple[int, int]:
    """Audits and gaps as the ledger counts them (the state's, when the ledger cannot say)."""
    if view.counts is not None and view.records:
        return view.counts.audits, view.counts.gaps
    s = view.state
    return (s.audits, s.gaps) if s else (0, 0)


def run_status(view: RunView) -> RunStatus:
    from sil.exec.startchecks import planned_audits  # not at import: `sil runs` needs no run planner

    s, c = view.state, view.contract
    plan = planned_audits(c) if c else None
    arm, candidate, look = _current(view)
    audits, gaps = _audits(view)
    elapsed = s.elapsed_s if s else 0.0
    planned = plan.total if plan else None
    running = is_running(view.run_dir)
    halted = stopped(s.phase, running) if s else False
    eta = None
    if s and planned and audits and s.phase not in FINAL_PHASES and not halted:
        eta = round(elapsed / audits * max(planned - audits, 0), 1)
    champs = _champions(view)
    verdicts = [_verdict(view, v) for v in view.of_type("verdict")]
    verified, ledger = ledger_word(view)
    return RunStatus(
        run_id=view.run_id,
        running=running,
        phase=s.phase if s else "unknown",
        arm=arm,
        candidate=candidate,
        look=look,
        looks=(s.replicate_k + 1) if s and arm == "gate" else (1 if arm == "random" else None),
        audits=audits,
        audits_planned=planned,
        max_audits=c.budget.max_audits if c else None,
        gaps=gaps,
        usd=s.usd if s else 0.0,
        max_usd=c.budget.max_usd if c else None,
        alpha_spent=s.shared.budget.spent if s else 0.0,
        alpha_run=c.promotion.alpha_run if c else None,
        elapsed_s=round(elapsed, 1),
        eta_s=eta,
        halt_reason=s.halt_reason if s else None,
        stopped=halted,
        resume=resume_hint(view.run_dir),
        champions=champs,
        last_verdicts=verdicts[-LAST_VERDICTS:],
        problems=[*(view.verification.errors if view.verification else []), *view.problems],
        two_stage=s.shared.budget.mode == "fixed" if s else False,
        confirmations=s.shared.budget.confirmations if s else 0,
        verified=verified,
        ledger=ledger,
        use=surface_counts(view.payloads("audit", AuditRecord)),
    )


def _verdict(view: RunView, v: dict[str, Any]) -> Verdict:
    """A verdict as status shows it, with its pair and screen audits' proof of use (a malformed record reads '?')."""
    rounds = candidate_rounds(view.payloads("round", RoundRecord), str(v.get("arm")), str(v.get("mutation_id")))
    fields = {k: str(v.get(k, "?")) for k in ("arm", "mutation_id", "verdict", "reason")}
    return Verdict(**fields, use=verdict_counts(view.payloads("audit", AuditRecord), rounds))


def run_overview(view: RunView) -> RunOverview:
    s, c = view.state, view.contract
    run = view.counts.run if view.counts is not None else None
    champs = _champions(view)
    verified, note = ledger_word(view)
    keeps = view.counts.keeps if view.counts is not None and view.records else {}
    return RunOverview(
        run_id=view.run_id,
        contract_id=run.contract_id if run else None,
        contract_hash=run.contract_hash if run else None,
        backend=run.backend if run else None,
        simulated=view.simulated,
        phase=(f"stopped ({s.phase})" if stopped(s.phase, is_running(view.run_dir)) else s.phase) if s else "unknown",
        audits=_audits(view)[0],
        max_audits=c.budget.max_audits if c else None,
        usd=s.usd if s else 0.0,
        keeps={a: keeps.get(a, 0) for a in s.arms} if s else keeps,
        demoted={a: ch.demoted for a, ch in champs.items() if ch.demoted},
        champion=champs["gate"].words if "gate" in champs else "",
        verified=verified,
        verify_note=note,
    )


def overview_of(run_dir: Path) -> RunOverview:
    """The run's row of `sil runs`; a folder that cannot be read at all is a row saying why."""
    from sil.review.runview import load_run

    try:
        return run_overview(load_run(run_dir))
    except Exception as ex:  # noqa: BLE001 - one odd folder must not hide the other runs
        return broken_row(run_dir.name, f"cannot be read: {ex.__class__.__name__}: {ex}")


def broken_row(run_id: str, reason: str) -> RunOverview:
    return RunOverview(
        run_id=run_id,
        contract_id=None,
        contract_hash=None,
        backend=None,
        simulated=False,
        phase="unknown",
        audits=0,
        max_audits=None,
        usd=0.0,
        keeps={},
        verified=False,
        verify_note=reason,
    )


def _dur(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    m, sec = divmod(int(seconds), 60)
    return f"{m}m{sec:02d}s" if m else f"{sec}s"


def confirmations(n: int) -> str:
    return f"{n} search confirmation{'' if n == 1 else 's'}"


def error_line(st: RunStatus) -> str:
    """Where the run's error goes: a run budget (fwer, elond) or a fixed level per search step."""
    if st.two_stage:
        return (
            f"error design two-stage: {confirmations(st.confirmations)} at a fixed α_search each; "
            "the guarantee is the final certification's"
        )
    return f"error budget α spent {st.alpha_spent:.4f} of {st.alpha_run if st.alpha_run is not None else '—'}"


def _of(n: int, total: int | None) -> str:
    return f"{n} of {total} planned" if total is not None else str(n)


def status_lines(st: RunStatus) -> list[str]:
    """The human-readable `sil status` text."""
    state = " (running)" if st.running else (f" — stopped; resume with: {st.resume}" if st.stopped else "")
    lines = [
        f"run {st.run_id}: {st.phase}{state}",
        f"ledger verifies: {st.ledger}" if st.verified else "LEDGER DOES NOT VERIFY (see the notes below)",
        f"audits {_of(st.audits, st.audits_planned)} (limit {st.max_audits}), gaps {st.gaps}, "
        f"USD {st.usd:.2f} of {f'{st.max_usd:.2f}' if st.max_usd is not None else '—'}",
        error_line(st),
        f"elapsed {_dur(st.elapsed_s)}" + ("" if st.stopped else f", ETA {_dur(st.eta_s)}"),
    ]
    if st.arm:
        look = f", look {st.look} of {st.looks}" if st.look is not None and st.looks else ""
        lines.append(f"arm {st.arm}: candidate {st.candidate or '— (between candidates)'}{look}")
    for c in st.champions.values():
        if c.keeps:
            lines.append(f"{c.arm} champion {c.set_id}: {c.words}")
    for v in st.last_verdicts:
        use = f" [use: {words(v.use)}]" if v.use else ""
        lines.append(f"  {v.arm} {v.mutation_id}: {v.verdict.upper()} — {v.reason}{use}")
    lines += [f"use shown in {COUNTED_OVER}, {surface}: {words(counts)}" for surface, counts in st.use.items()]
    if any(c.get("not_provable") for c in st.use.values()):
        lines.append(NOT_PROVABLE_SHORT)
    if st.halt_reason:
        lines.append(f"HALTED: {st.halt_reason} — fix the cause, then run the same `sil run` again to resume")
    lines += [f"note: {p}" for p in st.problems]
    return lines
