"""Where a run stands, read from its folder without locking it: `sil status` and `sil runs` (L3).

    status = run_status(load_run(run_dir))      # phase, arm, candidate, look k of K, budgets, ETA
    rows = [run_overview(load_run(d)) for d in run_dirs(root)]

A run is "running" while its lock's owner file names a live process on this host; the ETA
extrapolates the mean seconds per audit so far over the audits the run can still make.
"""

from __future__ import annotations

import json
import os
import re
import socket
from collections.abc import Callable

from pydantic import BaseModel

from sil.base.locks import OWNER_SUFFIX, RUN_LOCK
from sil.integrity.verify import verify_chain_and_checkpoints
from sil.review.runview import LEDGER, RunView
from sil.store.champion import ChampionStatus, champions

LAST_VERDICTS = 5
LONG_FLOAT = re.compile(r"-?\d+\.\d{4,}")


def readable(line: str) -> str:
    """The line with raw floats (0.33897813308452085) cut to three significant digits."""
    return LONG_FLOAT.sub(lambda m: f"{float(m.group()):.3g}", line)


class Verdict(BaseModel):
    arm: str
    mutation_id: str
    verdict: str
    reason: str


class RunStatus(BaseModel):
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


def is_running(view: RunView) -> bool:
    """True while a live process on this host holds the run's lock (owner file present)."""
    try:
        info = json.loads((view.run_dir / (RUN_LOCK + OWNER_SUFFIX)).read_text())
        if info.get("host") != socket.gethostname():
            return True  # another host: cannot check its pid, trust the owner file
        os.kill(int(info["pid"]), 0)
        return True
    except (OSError, ValueError, KeyError, TypeError):
        return False


FINAL_PHASES = ("done", "halted")


def stopped(phase: str, running: bool) -> bool:
    """Neither running nor finished: interrupted (Ctrl-C, a crash, a killed process)."""
    return not running and phase not in FINAL_PHASES and phase != "unknown"


def resume_hint(view: RunView) -> str:
    """The command that resumes the run, from the project root."""
    cd = (
        f"cd {view.project.relative_to(view.project.parents[2])} && "
        if view.project.parent.name == "sweeps" and view.project.parents[1].name == "state"
        else ""
    )
    return f"{cd}sil run --run-id {view.run_id}"


def _current(view: RunView) -> tuple[str | None, str | None, int | None]:
    s = view.state
    if s is None or s.phase not in s.arms:
        return None, None, None
    pending = s.arms[s.phase].pending
    if pending is None:
        return s.phase, None, None
    m = pending.mutation
    return s.phase, f"{m.mutation_id} {m.surface}.{m.path}", pending.trial.rounds


def run_status(view: RunView) -> RunStatus:
    from sil.exec.startchecks import planned_audits  # not at import: `sil runs` needs no run planner

    s, c = view.state, view.contract
    plan = planned_audits(c) if c else None
    arm, candidate, look = _current(view)
    audits = s.audits if s else 0
    elapsed = s.elapsed_s if s else 0.0
    planned = plan.total if plan else None
    running = is_running(view)
    halted = stopped(s.phase, running) if s else False
    eta = None
    if s and planned and audits and s.phase not in FINAL_PHASES and not halted:
        eta = round(elapsed / audits * max(planned - audits, 0), 1)
    verdicts = [Verdict(**{k: v[k] for k in Verdict.model_fields}) for v in view.of_type("verdict")]
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
        gaps=s.gaps if s else 0,
        usd=s.usd if s else 0.0,
        max_usd=c.budget.max_usd if c else None,
        alpha_spent=s.shared.budget.spent if s else 0.0,
        alpha_run=c.promotion.alpha_run if c else None,
        elapsed_s=round(elapsed, 1),
        eta_s=eta,
        halt_reason=s.halt_reason if s else None,
        stopped=halted,
        resume=resume_hint(view),
        champions=champions(s, view.records) if s else {},
        last_verdicts=verdicts[-LAST_VERDICTS:],
        problems=view.problems,
    )


def run_overview(view: RunView) -> RunOverview:
    s, c = view.state, view.contract
    run = view.first("contract") or {}
    report = verify_chain_and_checkpoints(view.run_dir / LEDGER, view.run_dir.parents[2])
    note = f"{report.records} records, {report.checkpoints} checkpoints" if report.ok else "; ".join(report.errors[:2])
    champs = champions(s, view.records) if s else {}
    return RunOverview(
        run_id=view.run_id,
        contract_id=run.get("contract_id"),
        contract_hash=run.get("contract_hash"),
        backend=run.get("backend"),
        simulated=view.simulated,
        phase=(f"stopped ({s.phase})" if stopped(s.phase, is_running(view)) else s.phase) if s else "unknown",
        audits=s.audits if s else 0,
        max_audits=c.budget.max_audits if c else None,
        usd=s.usd if s else 0.0,
        keeps={a: st.keeps for a, st in s.arms.items()} if s else {},
        demoted={a: c.demoted for a, c in champs.items() if c.demoted},
        champion=champs["gate"].words if "gate" in champs else "",
        verified=report.ok,
        verify_note=note,
    )


def _dur(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    m, sec = divmod(int(seconds), 60)
    return f"{m}m{sec:02d}s" if m else f"{sec}s"


def status_lines(st: RunStatus) -> list[str]:
    """The human-readable `sil status` text."""
    of: Callable[[int, int | None], str] = lambda n, total: f"{n}/{total}" if total is not None else str(n)  # noqa: E731
    state = " (running)" if st.running else (f" — stopped; resume with: {st.resume}" if st.stopped else "")
    lines = [
        f"run {st.run_id}: {st.phase}{state}",
        f"audits {of(st.audits, st.audits_planned)} (limit {st.max_audits}), gaps {st.gaps}, "
        f"USD {st.usd:.2f} of {st.max_usd if st.max_usd is not None else '—'}",
        f"error budget α spent {st.alpha_spent:.4f} of {st.alpha_run if st.alpha_run is not None else '—'}",
        f"elapsed {_dur(st.elapsed_s)}" + ("" if st.stopped else f", ETA {_dur(st.eta_s)}"),
    ]
    if st.arm:
        look = f", look {st.look} of {st.looks}" if st.look is not None and st.looks else ""
        lines.append(f"arm {st.arm}: candidate {st.candidate or '— (between candidates)'}{look}")
    for c in st.champions.values():
        if c.keeps:
            lines.append(f"{c.arm} champion {c.set_id}: {c.words}")
    for v in st.last_verdicts:
        lines.append(f"  {v.arm} {v.mutation_id}: {v.verdict.upper()} — {v.reason}")
    if st.halt_reason:
        lines.append(f"HALTED: {st.halt_reason} — fix the cause, then run the same `sil run` again to resume")
    lines += [f"note: {p}" for p in st.problems]
    return [readable(line) for line in lines]
