"""Where a run stands, read from its folder without locking it, as models (L3).

`sil status --json`, the sweep table, and `sil runs`/`sil status` whenever their quick reading
(glance.py) is unsure of a run read it here; both readings end in statusfacts.py's plain data.

    status = run_status(load_run(run_dir))      # phase, arm, candidate, look k of K, budgets, ETA
    rows = [run_overview(load_run(d)) for d in run_dirs(root)]

A run is "running" while its lock's owner file names a live process on this host; the ETA
extrapolates the mean seconds per audit so far over the audits the run can still make.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from sil.integrity.verify import verify_chain_and_checkpoints
from sil.review.runview import LEDGER, RunView
from sil.review.statusfacts import FINAL_PHASES as FINAL_PHASES
from sil.review.statusfacts import ChampionLine, OverviewRow, StatusFacts, VerdictLine, is_running, resume_hint, stopped
from sil.review.statusfacts import readable as readable
from sil.review.usecounts import NOT_PROVABLE_MEANS, candidate_rounds, surface_counts, verdict_counts, words
from sil.store.champion import ChampionStatus, champions

LAST_VERDICTS = 5


class Verdict(BaseModel):
    arm: str
    mutation_id: str
    verdict: str
    reason: str
    use: dict[str, int] = {}  # its pair audits' proof of use (sil/review/usecounts.py)


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
    two_stage: bool = False  # promotion.error_design two_stage: a fixed level per search confirmation
    confirmations: int = 0
    use: dict[str, dict[str, int]] = {}  # per surface: pair audits that proved / could not prove its use
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
    running = is_running(view.run_dir)
    halted = stopped(s.phase, running) if s else False
    eta = None
    if s and planned and audits and s.phase not in FINAL_PHASES and not halted:
        eta = round(elapsed / audits * max(planned - audits, 0), 1)
    verdicts = [_verdict(view, v) for v in view.of_type("verdict")]
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
        resume=resume_hint(view.run_dir),
        champions=champions(s, view.records) if s else {},
        last_verdicts=verdicts[-LAST_VERDICTS:],
        problems=view.problems,
        two_stage=s.shared.budget.mode == "fixed" if s else False,
        confirmations=s.shared.budget.confirmations if s else 0,
        use=surface_counts(view.of_type("audit")),
    )


def _verdict(view: RunView, v: dict[str, Any]) -> Verdict:
    rounds = candidate_rounds(view.of_type("round"), v["arm"], v["mutation_id"])
    use = verdict_counts(view.of_type("audit"), rounds)
    return Verdict(arm=v["arm"], mutation_id=v["mutation_id"], verdict=v["verdict"], reason=v["reason"], use=use)


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
        phase=(f"stopped ({s.phase})" if stopped(s.phase, is_running(view.run_dir)) else s.phase) if s else "unknown",
        audits=s.audits if s else 0,
        max_audits=c.budget.max_audits if c else None,
        usd=s.usd if s else 0.0,
        keeps={a: st.keeps for a, st in s.arms.items()} if s else {},
        demoted={a: c.demoted for a, c in champs.items() if c.demoted},
        champion=champs["gate"].words if "gate" in champs else "",
        verified=report.ok,
        verify_note=note,
    )


def status_facts(st: RunStatus) -> StatusFacts:
    """What `sil status` prints of a full status."""
    fields = st.model_dump(exclude={"champions", "last_verdicts", "use_note"})
    return StatusFacts(
        **fields,
        champions=[ChampionLine(c.arm, c.set_id, c.keeps, c.words) for c in st.champions.values()],
        last_verdicts=[VerdictLine(v.arm, v.mutation_id, v.verdict, v.reason, words(v.use)) for v in st.last_verdicts],
    )


def overview_row(r: RunOverview) -> OverviewRow:
    return OverviewRow(**r.model_dump())
