"""The judge-drift canary: re-judge a frozen set of stored transcripts, halt on a shift (layer L3).

The canary transcripts ship with the measurement (`<seed_library>/canary/*.md`, covered by
its manifest): front matter `reference: {dimension: score}` (what the judge gave when the
measurement was frozen), body the rendered transcript. Re-judged at the start of the run,
between phases and at the end, the same transcripts must get the same scores; a mean shift
of any contract dimension larger than `measurement.canary_max_shift` means the judge itself
changed (a model update behind the same name), and the run halts with the reason recorded.
Never-arm pairs cannot see this: a judge shift moves both arms alike.

Re-judging: by the backend's own judge where it has one (`AuditBackend.canary_judge`: the sim
backend's simulated judge, whose drift knob is `sim.judge_drift_per_tick`); else (the petri
backend) by the contract's judge model, called in
this process with Petri's own judging prompt (the pinned inspect-petri's), the measurement's
rubric (descriptions in the prompt, guides in the `answer` tool's fields) and the stored
transcript, so a judge that drifts only on the audits' prompt drifts here too. A paid judge's re-judging is asked of the run's
USD budget at its worst case before it starts (the final one is held back from the audits, see
`reserve`), charged at the judge's price and recorded with the canary record; its calls go
through the call journal (sil/exec/modelcalls.py), so a crash never makes the run pay for them twice.

    canary_check(rc, "start")      # records a CanaryRecord once per label; raises Halt on drift
"""

from __future__ import annotations

import hashlib
import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import yaml

from sil.base.errors import Halt
from sil.contract import prepare
from sil.contract.schema import Contract, RoleModel
from sil.exec.measure import AuditBackend
from sil.exec.modelcalls import CallJournal, CallKey, WallTimeReached, role_model, run_bounded, trusted_tokens
from sil.integrity.records import CanaryRecord, Keys
from sil.run.context import RunContext
from sil.store.events import CanaryPassed

if TYPE_CHECKING:  # at run time inspect-ai is imported only where the judge model is called
    from inspect_ai.model import ModelOutput

CANARY_DIR = "canary"
END_LABEL = "end"
MAX_OUTPUT_TOKENS = 1000  # an answer is one tool call with a number per dimension
CHARS_PER_TOKEN_BOUND = 3  # worst-case bound: real tokenizers average about 4 characters
TRANSCRIPT_BEGIN, TRANSCRIPT_END = "[BEGIN TRANSCRIPT]", "[END TRANSCRIPT]"  # around a stored transcript
SCORE_RANGE = (1.0, 10.0)


@dataclass(frozen=True)
class CanaryItem:
    id: str
    reference: dict[str, float]
    transcript: str
    # (name, description, guide) of each dimension of the measurement's rubric, as the audits' judge gets them
    rubric: tuple[tuple[str, str, str], ...] = ()


def load_canary(measurement_root: Path) -> list[CanaryItem]:
    """The stored canary transcripts (empty when the measurement ships none)."""
    items: list[CanaryItem] = []
    if not (measurement_root / CANARY_DIR).is_dir():
        return items
    rubric = tuple((d.name, d.description, d.guide) for d in prepare.load_rubric(measurement_root))
    for path in sorted((measurement_root / CANARY_DIR).glob("*.md")):
        text = path.read_text(encoding="utf-8")
        head, _, body = text.removeprefix("---\n").partition("\n---\n")
        meta = yaml.safe_load(head) or {}
        reference = meta.get("reference")
        if not isinstance(reference, dict):
            raise Halt(f"canary transcript {path} has no 'reference: {{dimension: score}}' front matter")
        items.append(CanaryItem(path.stem, {str(k): float(v) for k, v in reference.items()}, body.strip(), rubric))
    return items


@dataclass(frozen=True)
class Rejudged:
    """The judge's scores of the stored transcripts and what the re-judging cost."""

    scores: dict[str, dict[str, float]]
    usd: float = 0.0
    calls: int = 0


def judge_prompt(item: CanaryItem) -> str:
    """Petri's own judging prompt (the pinned inspect-petri's) with the measurement's rubric and the
    stored transcript, so a judge that drifts only on the audits' prompt drifts here too."""
    from inspect_petri._judge.judge import HIGHLIGHTS_DESCRIPTION, JUDGE_PROMPT

    body = item.transcript.split(TRANSCRIPT_BEGIN, 1)[-1].split(TRANSCRIPT_END, 1)[0].strip()
    return JUDGE_PROMPT.format(
        messages=body,
        branch_context="",
        highlights_description=HIGHLIGHTS_DESCRIPTION,
        scoring_dimensions="\n".join(f"- **{name}**: {description}" for name, description, _ in item.rubric),
        instructions="",
    )


def cost_bound(judge: RoleModel, items: list[CanaryItem]) -> float:
    """Worst-case USD of one re-judging: every prompt at the input price, every answer at its cap."""
    if judge.price is None:
        return 0.0
    p = judge.price
    tokens_in = sum(len(judge_prompt(i)) // CHARS_PER_TOKEN_BOUND + 1 for i in items)
    return (tokens_in * p.input_per_mtok + len(items) * MAX_OUTPUT_TOKENS * p.output_per_mtok) / 1e6


def model_rejudge(
    items: list[CanaryItem],
    judge: RoleModel,
    dims: list[str],
    work_dir: Path | None = None,
    label: str = "",
    wall_left: float | None = None,
) -> Rejudged:
    """Scores the judge model gives each stored transcript through the `answer` tool, and their cost.

    Each call goes through the call journal in `work_dir`: a re-judging interrupted by a crash
    replays the answers already paid for, and charges the bound of a call whose answer was lost.
    """
    from inspect_ai.model import ChatMessageUser, ModelOutput
    from inspect_ai.tool import ToolInfo, ToolParam, ToolParams

    guides = {name: guide for i in items for name, _, guide in i.rubric}
    schema = ToolParams(
        properties={d: ToolParam(type="integer", description=guides.get(d) or None) for d in dims}, required=list(dims)
    )
    answer = ToolInfo(name="answer", description="Score the transcript, 1-10 per dimension.", parameters=schema)
    model = role_model(judge, max_tokens=MAX_OUTPUT_TOKENS)

    async def ask(item: CanaryItem, journal: CallJournal) -> tuple[ModelOutput, float]:
        lost = journal.lost(ModelOutput)
        if (saved := journal.replay(ModelOutput)) is not None:  # paid before a crash, never recorded
            return saved, lost.usd + _priced(judge, item, saved)
        journal.begin(cost_bound(judge, [item]), lost)
        out = await model.generate([ChatMessageUser(content=judge_prompt(item))], tools=[answer])
        journal.finish(out.model_dump_json())
        return out, lost.usd + _priced(judge, item, out)

    async def all_items() -> list[tuple[ModelOutput, float]]:
        return [await ask(i, _journal(work_dir, label, n, i)) for n, i in enumerate(items)]

    scores, usd = {}, 0.0
    try:
        answers = run_bounded(all_items(), wall_left, "judge-drift canary")
    except WallTimeReached as ex:
        raise Halt(str(ex)) from None
    for item, (out, cost) in zip(items, answers, strict=True):
        calls = [c for c in out.message.tool_calls or [] if c.function == "answer"]
        if not calls:
            raise Halt(f"judge-drift canary: {judge.model} gave no answer for the stored transcript {item.id}")
        scores[item.id] = usable_scores(calls[0].arguments, [d for d in dims if d in item.reference], item.id)
        usd += cost
    return Rejudged(scores=scores, usd=round(usd, 6), calls=len(items))


def usable_scores(answer: dict[str, Any], dims: list[str], item: str) -> dict[str, float]:
    """Every compared dimension as a finite 1-10 number; an answer that is not is unusable, and an
    unusable canary is a failed canary (a string or NaN must never read as "no shift")."""
    lo, hi = SCORE_RANGE
    out = {}
    for dim in dims:
        v = answer.get(dim)
        if isinstance(v, bool) or not isinstance(v, int | float) or not math.isfinite(v) or not lo <= v <= hi:
            raise UnusableCanary(f"the judge's answer for the stored transcript {item} has no 1-10 number for {dim}")
        out[dim] = float(v)
    return out


class UnusableCanary(Halt):
    """The judge's re-judging gave answers the canary cannot compare."""


def _journal(work_dir: Path | None, label: str, n: int, item: CanaryItem) -> CallJournal:
    sha = hashlib.sha256(judge_prompt(item).encode()).hexdigest()
    return CallJournal(work_dir, CallKey(arm=f"canary-{label}", index=n, attempt=0, call=0, prompt_sha256=sha))


def _priced(judge: RoleModel, item: CanaryItem, out: ModelOutput) -> float:
    """An answer's cost at the judge's price; an answer without usage is charged its bound."""
    p = judge.price
    if p is None:
        return 0.0
    if (tokens := trusted_tokens(out.usage)) is None:  # missing or bad usage: its bound
        return cost_bound(judge, [item])
    return (tokens[0] * p.input_per_mtok + tokens[1] * p.output_per_mtok) / 1e6


def rejudge(rc: RunContext, items: list[CanaryItem], label: str) -> Rejudged:
    if (own := rc.backend.canary_judge(rc.contract)) is not None:
        return Rejudged(scores=own({i.id: i.reference for i in items}, rc.state.tick))
    judge, dims = rc.contract.models.judge, rc.contract.dimensions()
    return model_rejudge(items, judge, dims, rc.run_dir / CANARY_DIR, label, rc.rounds.wall_left())


def mean_shift(items: list[CanaryItem], scores: dict[str, dict[str, float]], dims: list[str]) -> dict[str, float]:
    out = {}
    for dim in dims:
        diffs = [scores[i.id][dim] - i.reference[dim] for i in items if dim in i.reference and dim in scores[i.id]]
        if diffs:
            out[dim] = round(float(np.mean(diffs)), 4)
    return out


def reserve(contract: Contract, measurement_root: Path, backend: AuditBackend) -> float:
    """The USD to hold back for the final re-judging, so the audits cannot spend it first."""
    if contract.measurement.canary_max_shift is None or backend.canary_judge(contract) is not None:
        return 0.0
    try:
        return cost_bound(contract.models.judge, load_canary(measurement_root))
    except Halt:
        return 0.0  # an unreadable canary halts at its first check, with the reason


def canary_check(rc: RunContext, label: str) -> None:
    """Re-judge the canary once per `label`; halt when a dimension's mean shift exceeds the limit."""
    limit = rc.contract.measurement.canary_max_shift
    if limit is None:
        return
    key = Keys.canary(label)
    record = rc.book.get("canary", key, CanaryRecord)
    if record is None:
        record = measure_shift(rc, label, limit)
        if rc.book.once(key, record) is not None:
            rc.state.usd += record.usd
    if record.halted and record.unusable:
        raise Halt(
            f"judge-drift canary ({label}, tick {record.tick}) failed: {record.unusable}; a judge whose "
            "answers cannot be compared may have changed, so no comparison across this run is trustworthy"
        )
    if record.halted:
        worst = max(record.shift, key=lambda d: abs(record.shift[d]))
        raise Halt(
            f"judge-drift canary ({label}, tick {record.tick}): re-judged stored transcripts moved "
            f"{worst} by {record.shift[worst]:+.2f} (limit {record.max_shift}); the judge changed, "
            "so no comparison across this run is trustworthy"
        )
    rc.emit(CanaryPassed(label=label, items=record.items, limit=limit))


def measure_shift(rc: RunContext, label: str, limit: float) -> CanaryRecord:
    """Re-judge the stored transcripts, within the run's USD budget, and say how far they moved."""
    items = load_canary(rc.measure.measurement_root)
    if not items:
        raise Halt(f"measurement.canary_max_shift is set but {rc.measure.measurement_root / CANARY_DIR} is empty")
    if label == END_LABEL:
        rc.rounds.reserve_usd = 0.0  # what was held back for this last re-judging
    bound = 0.0 if rc.backend.canary_judge(rc.contract) is not None else cost_bound(rc.contract.models.judge, items)
    if bound and (why := rc.rounds.usd_left(bound)):
        raise Halt(f"judge-drift canary ({label}) not run: {why}; raise budget.max_usd to re-judge")
    unusable = None
    try:
        result = rejudge(rc, items, label)
        shift = mean_shift(items, result.scores, rc.contract.dimensions())
    except UnusableCanary as ex:
        result, shift, unusable = Rejudged(scores={}, usd=bound, calls=len(items)), {}, str(ex)
    if not shift and unusable is None:
        unusable = "no contract dimension of the stored transcripts could be compared"
    halted = unusable is not None or any(abs(v) > limit for v in shift.values())
    return CanaryRecord(
        unusable=unusable,
        label=label,
        tick=rc.state.tick,
        items=len(items),
        shift=shift,
        max_shift=limit,
        halted=halted,
        usd=result.usd,
        calls=result.calls,
    )
