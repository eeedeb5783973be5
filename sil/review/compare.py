"""`sil compare RUN...`: any two or more runs side by side (L3).

Runs of one contract family (same contract_id, or one is another's `parent`) are the usual
case; runs of different contracts are compared too, and say so. The comparison lists what
differed in the set-up (contract fields, measurement, starting policy) and in the outcome
(conclusion, each arm's verdicts and effect, each edit's verdict, cost), one column per run.

    cmp = compare_runs([load_run(a), load_run(b)])
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from sil.base.errors import Refused
from sil.review.runview import RunView
from sil.review.summary import Summary, build_summary, conclusion, error_words


class Row(BaseModel):
    item: str
    values: list[str]  # one per run, in the runs' order

    @property
    def differs(self) -> bool:
        return len(set(self.values)) > 1


class Comparison(BaseModel):
    runs: list[str]
    same_family: bool
    setup: list[Row]  # contract fields, measurement and starting policy that differ
    outcome: list[Row]  # conclusion and cost, every run
    arms: list[Row]
    edits: list[Row]
    conclusions: list[str]

    def differences(self) -> list[str]:
        """What differed, set-up first, in words (empty: nothing at all)."""
        rows = [*self.setup, *(r for r in (*self.outcome, *self.arms, *self.edits) if r.differs)]
        return [f"{r.item}: " + " | ".join(r.values) for r in rows]


def _flatten(obj: object, prefix: str = "") -> dict[str, str]:
    if isinstance(obj, dict):
        out: dict[str, str] = {}
        for k, v in obj.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: repr(obj)}


def _arm_text(arm: dict[str, Any]) -> str:
    head = f"{arm['keeps']} KEEP / {arm['candidates']}"
    if not arm["changed"]:
        return f"{head}; {arm.get('champion') or 'unchanged'}"
    tc = arm["target_change"]
    ch = "not re-measured" if tc is None else f"{tc[0]:+.2f} [{tc[1]:+.2f}, {tc[2]:+.2f}]"
    return f"{head}; Δ target {ch}; {arm.get('champion', '')}"


def _edits(view: RunView) -> dict[str, str]:
    verdicts = {(v["arm"], v["mutation_id"]): v["verdict"] for v in view.of_type("verdict")}
    out: dict[str, str] = {}
    for m in view.of_type("mutation"):
        mut = m["mutation"]
        key = f"{m['arm']}:{mut['surface']}.{mut['path']}"
        v = verdicts.get((m["arm"], mut["mutation_id"]), "pending")
        out[key] = f"{out[key]}, {v}" if key in out else v
    return out


def _summary(view: RunView) -> Summary:
    if view.state is None or view.contract is None:
        raise Refused(f"run {view.run_id} has no readable state or contract snapshot: {'; '.join(view.problems)}")
    return build_summary(view.state, view.records, view.contract, "")


def _family(views: list[RunView]) -> bool:
    cs = [v.contract for v in views if v.contract is not None]
    ids = {c.contract_id for c in cs}
    hashes = {c.contract_hash for c in cs}
    return len(ids) == 1 or all(c.parent in hashes or c.contract_hash in {d.parent for d in cs} for c in cs)


def _setup(views: list[RunView]) -> list[Row]:
    flat = [_flatten(v.contract.model_dump(mode="json")) if v.contract else {} for v in views]
    keys = sorted(set().union(*flat))
    rows = [Row(item=k, values=[f.get(k, "—") for f in flat]) for k in keys]
    rows.append(
        Row(item="frozen measurement", values=[v.state.measurement_hash[:12] if v.state else "—" for v in views])
    )
    rows.append(Row(item="starting policy set", values=[v.state.origin.set_id if v.state else "—" for v in views]))
    return [r for r in rows if r.differs]


def _rows(names: list[str], per_run: list[dict[str, str]]) -> list[Row]:
    return [Row(item=n, values=[d.get(n, "—") for d in per_run]) for n in names]


def compare_runs(views: list[RunView]) -> Comparison:
    if len(views) < 2:
        raise Refused("compare needs two or more runs (`sil runs` lists them)")
    sums = [_summary(v) for v in views]
    arms = [{a.arm: _arm_text(a.model_dump(mode="json")) for a in s.arms} for s in sums]
    edits = [_edits(v) for v in views]
    cost = [
        {
            "audits (gaps)": f"{s.audits} ({s.gaps})",
            "USD": f"{s.usd:.2f}",
            "wall": f"{s.elapsed_s:.0f}s",
            "error": error_words(s),
            "conclusion": conclusion(s),
        }
        for s in sums
    ]
    return Comparison(
        runs=[v.run_id for v in views],
        same_family=_family(views),
        setup=_setup(views),
        outcome=_rows(["conclusion", "audits (gaps)", "USD", "wall", "error"], cost),
        arms=_rows([a for a in ("never", "random", "gate") if any(a in x for x in arms)], arms),
        edits=_rows(sorted(set().union(*edits)), edits),
        conclusions=[conclusion(s) for s in sums],
    )
