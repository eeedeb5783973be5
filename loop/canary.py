"""The judge-drift canary: re-judge a frozen set of stored transcripts, halt on a shift (layer L3).

The canary transcripts ship with the measurement (`<seed_library>/canary/*.md`, covered by
its manifest): front matter `reference: {dimension: score}` (what the judge gave when the
measurement was frozen), body the rendered transcript. Re-judged at the start of the run,
between phases and at the end, the same transcripts must get the same scores; a mean shift
of any contract dimension larger than `measurement.canary_max_shift` means the judge itself
changed (a model update behind the same name), and the run halts with the reason recorded.
Never-arm pairs cannot see this: a judge shift moves both arms alike.

Re-judging is implemented for the simulated judge (its drift knob is
`sim.judge_drift_per_tick`); the contract refuses the canary on other backends.

    canary_check(rc, "start")      # records a CanaryRecord once per label; raises Halt on drift
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import yaml

from loop.context import RunContext
from loop.errors import Halt
from loop.records import CanaryRecord, Keys
from sil_runtime.sim.params import SimParams

CANARY_DIR = "canary"
SCORE_RANGE = (1.0, 10.0)


@dataclass(frozen=True)
class CanaryItem:
    id: str
    reference: dict[str, float]
    transcript: str


def load_canary(measurement_root: Path) -> list[CanaryItem]:
    """The stored canary transcripts (empty when the measurement ships none)."""
    items = []
    for path in sorted((measurement_root / CANARY_DIR).glob("*.md")):
        text = path.read_text(encoding="utf-8")
        head, _, body = text.removeprefix("---\n").partition("\n---\n")
        meta = yaml.safe_load(head) or {}
        reference = meta.get("reference")
        if not isinstance(reference, dict):
            raise Halt(f"canary transcript {path} has no 'reference: {{dimension: score}}' front matter")
        items.append(CanaryItem(path.stem, {str(k): float(v) for k, v in reference.items()}, body.strip()))
    return items


def sim_rejudge(items: list[CanaryItem], params: SimParams, tick: int) -> dict[str, dict[str, float]]:
    """The simulated judge's scores of the stored transcripts at `tick` (it drifts with its knob)."""
    lo, hi = SCORE_RANGE
    shift = params.judge_drift_per_tick * tick
    return {i.id: {d: float(np.clip(v + shift, lo, hi)) for d, v in i.reference.items()} for i in items}


def mean_shift(items: list[CanaryItem], scores: dict[str, dict[str, float]], dims: list[str]) -> dict[str, float]:
    out = {}
    for dim in dims:
        diffs = [scores[i.id][dim] - i.reference[dim] for i in items if dim in i.reference and dim in scores[i.id]]
        if diffs:
            out[dim] = round(float(np.mean(diffs)), 4)
    return out


def canary_check(rc: RunContext, label: str) -> None:
    """Re-judge the canary once per `label`; halt when a dimension's mean shift exceeds the limit."""
    limit = rc.contract.measurement.canary_max_shift
    if limit is None:
        return
    key = Keys.canary(label)
    record = rc.book.get("canary", key, CanaryRecord)
    if record is None:
        items = load_canary(rc.measure.measurement_root)
        if not items:
            raise Halt(f"measurement.canary_max_shift is set but {rc.measure.measurement_root / CANARY_DIR} is empty")
        assert rc.contract.sim is not None  # the contract allows the canary on the sim backend only
        scores = sim_rejudge(items, rc.contract.sim, rc.state.tick)
        shift = mean_shift(items, scores, rc.contract.dimensions())
        halted = any(abs(v) > limit for v in shift.values())
        record = CanaryRecord(
            label=label, tick=rc.state.tick, items=len(items), shift=shift, max_shift=limit, halted=halted
        )
        rc.book.once(key, record)
    if record.halted:
        worst = max(record.shift, key=lambda d: abs(record.shift[d]))
        raise Halt(
            f"judge-drift canary ({label}, tick {record.tick}): re-judged stored transcripts moved "
            f"{worst} by {record.shift[worst]:+.2f} (limit {record.max_shift}); the judge changed, "
            "so no comparison across this run is trustworthy"
        )
    rc.emit(f"canary ({label}): {record.items} stored transcripts re-judged, largest shift within {limit}")
