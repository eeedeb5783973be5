"""`sil compare RUN_A RUN_B`: two runs of one contract family side by side (L3).

Same family = same contract_id, or one contract is the other's `parent`. The comparison
lists what differed (contract fields, measurement, policy start) and the effects per arm and
per edited policy path.

    cmp = compare_runs(load_run(a), load_run(b))
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel

from sil.base.errors import Refused
from sil.review.runview import RunView
from sil.review.summary import build_summary, conclusion


class ArmSide(BaseModel):
    arm: str
    a: str
    b: str


class PathSide(BaseModel):
    edit: str
    a: str
    b: str


class Comparison(BaseModel):
    run_a: str
    run_b: str
    differences: list[str]
    arms: list[ArmSide]
    edits: list[PathSide]
    conclusion_a: str
    conclusion_b: str


def _flatten(obj: object, prefix: str = "") -> dict[str, str]:
    if isinstance(obj, dict):
        out: dict[str, str] = {}
        for k, v in obj.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: repr(obj)}


def _arm_text(arm: dict[str, Any]) -> str:
    if not arm["changed"]:
        return f"{arm['keeps']} KEEP / {arm['candidates']}; unchanged"
    tc = arm["target_change"]
    ch = "not re-measured" if tc is None else f"{tc[0]:+.2f} [{tc[1]:+.2f}, {tc[2]:+.2f}]"
    return f"{arm['keeps']} KEEP / {arm['candidates']}; Δ target {ch}"


def _edits(view: RunView) -> dict[str, str]:
    verdicts = {(v["arm"], v["mutation_id"]): v["verdict"] for v in view.of_type("verdict")}
    out: dict[str, str] = {}
    for m in view.of_type("mutation"):
        mut = m["mutation"]
        key = f"{m['arm']}:{mut['surface']}.{mut['path']}"
        v = verdicts.get((m["arm"], mut["mutation_id"]), "pending")
        out[key] = f"{out[key]}, {v}" if key in out else v
    return out


def _summary(view: RunView) -> tuple[dict[str, Any], str]:
    if view.state is None or view.contract is None:
        raise Refused(f"run {view.run_id} has no readable state or contract snapshot: {'; '.join(view.problems)}")
    s = build_summary(view.state, view.records, view.contract, "")
    return s.model_dump(mode="json"), conclusion(s)


def compare_runs(a: RunView, b: RunView) -> Comparison:
    ca, cb = a.contract, b.contract
    sa, concl_a = _summary(a)
    sb, concl_b = _summary(b)
    assert ca is not None and cb is not None
    family = ca.contract_id == cb.contract_id or ca.contract_hash == cb.parent or cb.contract_hash == ca.parent
    if not family:
        raise Refused(
            f"{a.run_id} ({ca.contract_id}) and {b.run_id} ({cb.contract_id}) are not one contract family "
            "(same contract_id, or one is the other's parent); compare runs of one experiment"
        )
    fa, fb = _flatten(ca.model_dump(mode="json")), _flatten(cb.model_dump(mode="json"))
    diffs = [
        f"{k}: {fa.get(k, '—')} → {fb.get(k, '—')}" for k in sorted(fa.keys() | fb.keys()) if fa.get(k) != fb.get(k)
    ]
    sta, stb = a.state, b.state
    assert sta is not None and stb is not None
    if sta.measurement_hash != stb.measurement_hash:
        diffs.append(f"frozen measurement: {sta.measurement_hash[:12]} → {stb.measurement_hash[:12]}")
    if sta.origin != stb.origin:
        diffs.append(f"starting policy set: {sta.origin.set_id} → {stb.origin.set_id}")
    arms_a = {x["arm"]: x for x in sa["arms"]}
    arms_b = {x["arm"]: x for x in sb["arms"]}
    arms = [
        ArmSide(arm=n, a=_arm_text(arms_a[n]) if n in arms_a else "—", b=_arm_text(arms_b[n]) if n in arms_b else "—")
        for n in ("never", "random", "gate")
        if n in arms_a or n in arms_b
    ]
    ea, eb = _edits(a), _edits(b)
    edits = [PathSide(edit=k, a=ea.get(k, "—"), b=eb.get(k, "—")) for k in sorted(ea.keys() | eb.keys())]
    return Comparison(
        run_a=a.run_id,
        run_b=b.run_id,
        differences=diffs or ["nothing in the contract, measurement or starting policy"],
        arms=arms,
        edits=edits,
        conclusion_a=concl_a,
        conclusion_b=concl_b,
    )
