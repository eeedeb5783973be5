"""The end-of-run summary, built only from the run state and its ledger.

summary = build_summary(state, book.records, contract, note=backend.note)
render(summary, console)
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable

import numpy as np
from pydantic import BaseModel
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from sil.contract.prepare import SeedSet
from sil.contract.schema import Contract
from sil.integrity.ledger import Record
from sil.integrity.records import NoiseRecord, canary_halt, parse_payload
from sil.review.status import confirmations
from sil.review.usecounts import COUNTED_OVER
from sil.stats import fitness
from sil.stats.horizon import Outlook
from sil.store.champion import ChampionStatus, champion_status
from sil.store.runstate import RunState

INTERVAL_LEVEL = 0.9


class ArmLine(BaseModel):
    arm: str
    audits: int
    candidates: int
    keeps: int
    reverts: int
    changed: bool
    target_change: tuple[float, float, float] | None
    worst_critical: tuple[str, float] | None
    stop_reason: str | None
    champion: str = ""  # the champion's status in words (sil/store/champion.py), the same in every view
    standing: str = "unchanged"
    champion_set: str = ""
    demoted: int = 0  # KEEPs taken back later (certification or replication)
    measured_on: SeedSet = "search"  # the seeds of its re-measurement (held-out: its certification's)


class Confirmation(BaseModel):
    """The gate champion's effect on the target vs the start, on both seed sets, side by side.

    `certified_on` names the seeds the certification used; the other set's effect is a check.
    Effects are (mean, lo, hi) over the rounds' own spread, None when not measured.
    """

    certified: bool
    certified_on: SeedSet
    heldout: tuple[float, float, float] | None = None
    heldout_rounds: int = 0
    heldout_seeds: int | None = None
    search: tuple[float, float, float] | None = None
    search_rounds: int = 0
    # its horizon's outlook in words when even a clean champion was unlikely to pass (below certify_power)
    short_outlook: str | None = None


class Summary(BaseModel):
    run_id: str
    phase: str
    halt_reason: str | None
    backend: str
    note: str
    target: str
    target_higher_is_better: bool = False  # levels are raw scores; every Δ is oriented (negative = better)
    baseline_mean: float | None
    never_mean: float | None
    drift: float | None
    noise_sigma: dict[str, float]  # the pool at the end: A/A pairs and the decided candidates' rounds
    noise_df: dict[str, int]
    noise_pairs: int = 0  # A/A pairs in the pool
    noise_candidates: int = 0  # decided candidates whose rounds the pool took in
    aa_sigma: dict[str, float] = {}  # the never arm's A/A pairs alone (the calibration record)
    aa_mean_diff: float | None
    arms: list[ArmLine]
    audits: int
    gaps: int
    usd: float
    elapsed_s: float
    mutator_calls: int = 0
    mutator_usd: float = 0.0
    proposer_gaps: int = 0
    alpha_run: float
    alpha_spent: float
    confirmations: int
    confirmation: Confirmation | None = None
    canary_halt: str | None = None  # the judge-drift canary halted: no comparison in the run is trustworthy
    error_design: str = "fwer"
    alpha_search: float | None = None  # two-stage: the search stage's level per confirmation
    alpha_certify: float | None = None
    random_certified: bool = False  # budget.certify_random: the random arm faced the gate's certification
    claim: str = "heldout"  # certification.claim: about the certification's seeds, or seeds never used
    project_alpha: float | None = None  # certification.project_alpha (None: a guarantee per run)
    certify_level: float | None = None  # the level the gate champion's certification ran at
    # per surface where a pair's arms differ, how many audits showed its use (sil/exec/useproof.py)
    use: dict[str, int] = {}


def use_counts(records: list[Record]) -> dict[str, int]:
    """How often a pair or screen audit's differing surface was proven, not provable or refuted in use."""
    counts = Counter(u for r in records if r.type == "audit" for u in r.payload.get("use", {}).values())
    return {k: counts[k] for k in ("proven", "not_provable", "refuted") if counts[k]}


def _level(records: list[Record], arm: str, dim: str) -> float | None:
    vals = [
        v
        for r in records
        if r.type == "audit" and r.payload["arm"] == arm and r.payload["status"] == "ok"
        for row in r.payload["scores"].values()
        if (v := row.get(dim)) is not None
    ]
    return float(np.mean(vals)) if vals else None


def _stop_reason(reason: str | None, status: ChampionStatus) -> str | None:
    """The arm's stop reason, without a "champion certified" note that a later demotion made stale."""
    if reason is None or status.standing == "certified":
        return reason
    return reason.split("; champion certified")[0]


def _arm_line(state: RunState, name: str, contract: Contract, records: list[Record]) -> ArmLine:
    arm = state.arms[name]
    status = champion_status(state, records, name)
    target = contract.promotion.target_dimensions[0]
    changed = status.changed
    rounds = list(arm.final_rounds)
    cert = next((r.payload for r in reversed(records) if r.type == "certify" and r.payload["arm"] == name), None)
    tchange = fitness.interval(rounds, target, INTERVAL_LEVEL) if changed and rounds else None
    worst = None
    if changed and rounds:
        means = {
            d: float(np.mean([r.diff[d] for r in rounds if r.diff.get(d) is not None] or [np.nan]))
            for d in contract.promotion.critical_dimensions
        }
        d = max(means, key=lambda k: -np.inf if np.isnan(means[k]) else means[k])
        worst = (d, round(means[d], 3))
    return ArmLine(
        arm=name,
        audits=arm.audits,
        candidates=arm.candidates,
        keeps=arm.keeps,
        reverts=arm.reverts,
        changed=changed,
        target_change=tchange,
        worst_critical=worst,
        stop_reason=_stop_reason(arm.stop_reason, status),
        champion=status.words,
        standing=status.standing,
        champion_set=status.set_id,
        demoted=status.demoted,
        measured_on=cert.get("seed_set", "search") if cert is not None else "search",
    )


def _confirmation(state: RunState, records: list[Record], target: str) -> Confirmation | None:
    """Search-seed and held-out effects of the certified (or rolled back) gate champion."""
    cert = next((r.payload for r in records if r.type == "certify" and r.payload["arm"] == "gate"), None)
    arm = state.arms.get("gate")
    if cert is None or arm is None:
        return None
    on: SeedSet = cert.get("seed_set", "search")
    final = fitness.interval(arm.final_rounds, target, INTERVAL_LEVEL) if arm.final_rounds else None
    seen = Outlook.model_validate(cert["outlook"]) if cert.get("outlook") else None
    short = seen.words() if seen is not None and seen.short else None
    if on == "search":
        return Confirmation(
            certified=cert["certified"],
            certified_on=on,
            search=final,
            search_rounds=len(arm.final_rounds),
            short_outlook=short,
        )
    check = fitness.interval(arm.search_rounds, target, INTERVAL_LEVEL) if arm.search_rounds else None
    return Confirmation(
        certified=cert["certified"],
        certified_on=on,
        heldout=final,
        heldout_rounds=len(arm.final_rounds),
        heldout_seeds=cert.get("seeds"),
        search=check,
        search_rounds=len(arm.search_rounds),
        short_outlook=short,
    )


def _aa_sigma(records: list[Record]) -> dict[str, float]:
    calibration = next((r for r in records if r.type == "noise"), None)
    if calibration is None:
        return {}
    payload = parse_payload("noise", calibration.payload)
    return payload.estimate.sigma if isinstance(payload, NoiseRecord) else {}


def build_summary(
    state: RunState, records: list[Record], contract: Contract, note: str, higher_better: frozenset[str] = frozenset()
) -> Summary:
    target = contract.promotion.target_dimensions[0]
    base = next((r.payload["per_dimension_mean"].get(target) for r in records if r.type == "baseline"), None)
    never = _level(records, "never", target)
    est = state.shared.pool.estimate() if state.shared.pool.n_pairs else None
    aa = [v for r in state.aa_rounds if (v := r.diff.get(target)) is not None]
    budget = state.shared.budget
    return Summary(
        run_id=state.run_id,
        phase=state.phase,
        halt_reason=state.halt_reason,
        backend=contract.backend,
        note=note,
        target=target,
        target_higher_is_better=target in higher_better,
        baseline_mean=base,
        never_mean=never,
        drift=None if base is None or never is None else never - base,
        noise_sigma=dict(est.sigma) if est else {},
        noise_df=dict(est.df) if est else {},
        noise_pairs=state.shared.pool.n_pairs,
        noise_candidates=state.shared.pool.n_candidates,
        aa_sigma=_aa_sigma(records),
        aa_mean_diff=float(np.mean(aa)) if aa else None,
        arms=[_arm_line(state, a, contract, records) for a in ("never", "random", "gate") if a in state.arms],
        audits=state.audits,
        gaps=state.gaps,
        usd=state.usd,
        elapsed_s=round(state.elapsed_s, 1),
        mutator_calls=sum(1 for r in records if r.type == "mutator_call"),
        mutator_usd=round(state.mutator_usd, 6),
        proposer_gaps=sum(1 for r in records if r.type == "proposer_gap"),
        alpha_run=contract.promotion.alpha_run,
        alpha_spent=budget.spent,
        confirmations=budget.confirmations,
        confirmation=_confirmation(state, records, target),
        canary_halt=canary_halt(records),
        error_design=contract.promotion.error_design,
        alpha_search=contract.promotion.alpha_search,
        alpha_certify=contract.promotion.alpha_certify,
        random_certified=contract.budget.certify_random and contract.budget.certify_rounds > 0,
        claim=contract.certification.claim,
        project_alpha=contract.certification.project_alpha,
        certify_level=_certify_level(records),
        use=use_counts(records),
    )


def _certify_level(records: list[Record]) -> float | None:
    """The level of the gate champion's certification, as its decision recorded it."""
    cert = next((r.payload for r in records if r.type == "certify" and r.payload["arm"] == "gate"), None)
    return None if cert is None or cert.get("decision") is None else cert["decision"]["alpha"]


def _fmt(x: float | None, nd: int = 3) -> str:
    return "—" if x is None else f"{x:+.{nd}f}"


def conclusion(s: Summary) -> str:
    """One honest sentence about the gate arm's result."""
    if s.canary_halt:  # the judge itself changed: no difference measured in this run can be trusted
        return f"conclusion: not trustworthy — {s.canary_halt}; no comparison across this run is valid"
    gate_arm = next((a for a in s.arms if a.arm == "gate"), None)
    if gate_arm is None:
        return "conclusion: no gate arm in this run"
    if gate_arm.standing == "rolled_back":
        short = s.confirmation.short_outlook if s.confirmation else None
        weak = f" (an underpowered certification: {short}; a real find may have been rolled back)" if short else ""
        return (
            f"conclusion: the gate kept {gate_arm.keeps} change(s), but the champion was "
            f"{gate_arm.champion} — no robust improvement{weak}"
        )
    if not gate_arm.changed:
        return (
            "conclusion: no candidate passed the gate — no clear improvement at this noise level "
            f"({gate_arm.candidates} tried)"
        )
    if gate_arm.target_change is None:
        return "conclusion: the gate kept a change, but it was not re-measured against the start"
    m, lo, hi = gate_arm.target_change
    where = " on the held-out seeds" if s.confirmation and s.confirmation.certified_on == "heldout" else ""
    if hi < 0:
        return f"conclusion: the gate champion improves {s.target} by {-m:.2f}{where} (interval excludes 0)"
    return (
        f"conclusion: the gate kept {gate_arm.keeps} change(s), but the re-measured difference "
        f"{m:+.2f} [{lo:+.2f}, {hi:+.2f}] does not exclude no improvement"
    )


ARMS_ON_AVERAGE = (
    "one run is one draw: what the gate adds on average shows over many runs "
    "(`sil sweep`; for the default simulated world, docs/results/arms-default.md)"
)


def arms_comparison(s: Summary) -> str | None:
    """How the gate's delivered change compares with the random arm's on this run, or None."""
    gate = next((a for a in s.arms if a.arm == "gate"), None)
    coin = next((a for a in s.arms if a.arm == "random"), None)
    if gate is None or coin is None or s.canary_halt:
        return None
    g, r = _delivered(gate), _delivered(coin)
    if g is None or r is None:
        return None
    where = " on the held-out seeds" if gate.measured_on == coin.measured_on == "heldout" else ""
    if abs(g - r) < 0.005:
        verdict = "the two arms delivered the same change"
    else:
        better = "gate" if g < r else "random arm"
        verdict = f"the {better} delivered {abs(g - r):.2f} more (the difference is not tested)"
    return f"gate vs random on this run: Δ {s.target} {g:+.2f} vs {r:+.2f}{where}; {verdict}; {ARMS_ON_AVERAGE}"


def _delivered(arm: ArmLine) -> float | None:
    """The arm's delivered change of the target: 0 when it delivers the start, None if not measured."""
    if not arm.changed or arm.standing == "rolled_back":
        return 0.0
    return None if arm.target_change is None else arm.target_change[0]


def noise_line(s: Summary) -> str:
    """The pooled noise floor the gate used at the end, and the never arm's A/A pairs alone."""
    t = s.target
    if t not in s.noise_sigma:
        return "noise floor: not measured"
    pooled = f"{s.noise_pairs} never-arm A/A pairs" + (
        f" + the rounds of {s.noise_candidates} decided candidates" if s.noise_candidates else ""
    )
    line = f"noise floor of {t} (pooled: {pooled}): σ̂={s.noise_sigma[t]:.2f} (df {s.noise_df.get(t, 0)})"
    if s.noise_candidates and t in s.aa_sigma:
        line += f"; the A/A pairs alone: σ̂={s.aa_sigma[t]:.2f}"
    return line + f"; mean A/A difference {_fmt(s.aa_mean_diff)}"


USE_NOTE = (
    "; not provable: the runtime's evidence cannot show whether that surface's text reached the target "
    "(docs/guarantees.md)"
)
DIRECTION_LINE = (
    "all dimensions: lower is better; Δ vs start (table, certification) = champion − start; "
    "Δ in verdict reasons = candidate − champion (negative = improvement)"
)


def _effect(x: tuple[float, float, float] | None, rounds: int) -> str:
    return "not measured" if x is None else f"{x[0]:+.2f} [{x[1]:+.2f}, {x[2]:+.2f}] over {rounds} rounds"


def confirmation_lines(s: Summary) -> list[str]:
    """The gate champion's search-seed and held-out effects, saying which one certified it."""
    c = s.confirmation
    if c is None:
        return []
    gate_arm = next((a for a in s.arms if a.arm == "gate"), None)
    verdict = "certified" if c.certified else "NOT certified (rolled back)"
    if c.certified and gate_arm is not None and gate_arm.standing != "certified":
        verdict = f"certified, since {gate_arm.champion}"
    head = f"gate champion vs start, Δ {s.target} ({INTERVAL_LEVEL:.0%} CI):"
    if c.certified_on == "search":
        return [
            f"{head} search seeds {_effect(c.search, c.search_rounds)}; {verdict} on the search seeds "
            "(the measurement has no held-out seeds, or the contract asked for the search seeds)"
        ]
    return [
        f"{head} held-out seeds ({c.heldout_seeds}, never used by the search) {_effect(c.heldout, c.heldout_rounds)}"
        f" — {verdict} on these;",
        f"  search seeds (the ones the search chose it on) {_effect(c.search, c.search_rounds)} — a check only",
    ]


RANDOM_ARM_LINE = (
    "random arm: a negative control that keeps each candidate on a coin flip, untested and never "
    "certified; its Δ measures the proposer, not a decision rule, and carries no guarantee"
)
CERTIFIED_RANDOM_ARM_LINE = (
    "random arm: keeps each candidate on a coin flip, then its champion faces the gate's certification; "
    "gate minus random is what the gate's judgement adds over chance under the same delivery rule"
)


def random_arm_line(s: Summary) -> str:
    """How to read the random arm, in one line: certified like the gate's or an untested control."""
    return CERTIFIED_RANDOM_ARM_LINE if s.random_certified else RANDOM_ARM_LINE


def error_words(s: Summary) -> str:
    """Where the run's error went, in the contract's design: a two-stage run has no run-level budget to spend."""
    if s.error_design == "two_stage":
        return (
            f"two-stage — {confirmations(s.confirmations)} at α_search={s.alpha_search} each "
            f"(search steps); the guarantee is the certification's, {guarantee_words(s)}"
        )
    return f"{s.alpha_spent:.4f} of α_run={s.alpha_run} spent over {s.confirmations} confirmations"


CLAIM_WORDS = {
    "heldout": "a claim about the held-out seeds themselves (fresh audits)",
    "fresh": "a claim about seeds the project never used (the held-out seeds read as a sample)",
}


def guarantee_words(s: Summary) -> str:
    """The certification's level, whose error it is (the run's or the project's), and its claim."""
    claim = CLAIM_WORDS.get(s.claim, s.claim)
    if s.project_alpha is None:
        return f"at α_certify={s.alpha_certify}, per run; {claim}"
    level = "" if s.certify_level is None else f"at {s.certify_level:.4g} "
    return f"{level}of the project's α={s.project_alpha} on this seed set (`sil runs`); {claim}"


def error_line(s: Summary) -> str:
    return f"error {'design' if s.error_design == 'two_stage' else 'budget'}: {error_words(s)}"


def conclusion_text(s: Summary) -> str:
    """The conclusion and, when both candidate arms delivered, how they compare on this run."""
    comparison = arms_comparison(s)
    return conclusion(s) + (f". {comparison[0].upper()}{comparison[1:]}" if comparison else "")


WIDE = 160  # below this many columns the arms print as lines, not a table that would cut names


def _change_words(a: ArmLine) -> str:
    if not a.changed:
        return "0 (rolled back)" if a.standing == "rolled_back" else "0 (unchanged)"
    if a.target_change is None:
        return "changed, not re-measured"
    m, lo, hi = a.target_change
    return f"{m:+.2f} [{lo:+.2f}, {hi:+.2f}]" + (" held-out seeds" if a.measured_on == "heldout" else "")


def _arm_cells(a: ArmLine) -> list[str]:
    worst = "—" if a.worst_critical is None else f"{a.worst_critical[1]:+.2f} {a.worst_critical[0]}"
    keeps = f"{a.keeps} ({a.demoted} demoted)" if a.demoted else str(a.keeps)
    return [a.arm, str(a.audits), str(a.candidates), keeps, _change_words(a), worst, a.champion, a.stop_reason or ""]


def render_arms(s: Summary, console: Console) -> None:
    """The arms as a table on a wide terminal, as one block of lines each on a narrow one."""
    change_head = f"Δ {s.target} vs start ({INTERVAL_LEVEL:.0%} CI; − = better)"
    if console.width < WIDE:
        console.print(f"run {s.run_id} — {s.phase}  ({s.note})", highlight=False)
        for a in s.arms:
            arm, audits, cands, keeps, change, worst, champion, why = _arm_cells(a)
            console.print(f"{arm}: {audits} audits, {cands} candidates, {keeps} KEEP", highlight=False)
            console.print(f"  {change_head}: {change}; worst critical Δ {worst}", highlight=False)
            console.print(f"  champion: {champion}" + (f"; stopped: {why}" if why else ""), highlight=False)
        return
    table = Table(title=f"run {s.run_id} — {s.phase}", caption=s.note)
    heads = ["arm", "audits", "cand.", "KEEP", change_head, "worst critical Δ", "champion", "stopped because"]
    for i, col in enumerate(heads):
        table.add_column(col, overflow="fold", no_wrap=i < 4, ratio=None if i < 4 else 2)
    for a in s.arms:
        table.add_row(*_arm_cells(a))
    console.print(table)


def render(s: Summary, console: Console) -> None:
    render_arms(s, console)
    console.print(noise_line(s))
    level: Callable[[float | None], str] = lambda x: "—" if x is None else f"{x:.2f}"  # noqa: E731
    if s.target_higher_is_better:
        console.print(f"{s.target} is higher-is-better: levels are raw scores, every Δ is oriented (− = better)")
    console.print(
        f"drift of {s.target}: baseline {level(s.baseline_mean)} → never arm {level(s.never_mean)}"
        f" ({_fmt(s.drift, 2)} with no change at all)"
    )
    for line in confirmation_lines(s):
        console.print(line)
    console.print(conclusion(s))
    if comparison := arms_comparison(s):
        console.print(comparison)
    console.print(error_line(s))
    if any(a.arm == "random" for a in s.arms):
        console.print(random_arm_line(s))
    console.print(f"audits {s.audits} (gaps {s.gaps}), USD {s.usd:.2f}, wall {s.elapsed_s:.0f}s")
    if s.use:
        shown = ", ".join(f"{k.replace('_', ' ')} {v}" for k, v in s.use.items())
        console.print(
            f"proof that the runtime used the policy it was sent ({COUNTED_OVER} × surfaces they differ on): {shown}"
            + (USE_NOTE if s.use.get("not_provable") else "")
        )
    console.print(DIRECTION_LINE)
    if s.mutator_calls:
        console.print(
            f"mutator: {s.mutator_calls} model calls, USD {s.mutator_usd:.2f} of the total, "
            f"{s.proposer_gaps} proposer gaps; audits: USD {s.usd - s.mutator_usd:.2f}"
        )
    if s.halt_reason:
        console.print(f"[bold red]HALTED:[/] {escape(s.halt_reason)}")
        console.print(
            "next: fix the cause above, then run the same `sil run` command again; it resumes from the "
            "recorded state and repeats no finished audit (`sil status` shows where it stands)"
        )
