"""One readable line per ledger record, for `sil ledger show` (L3).

    describe(record, dims=["broken_tool_use", "concerning"])   # show these dimensions first

Figures are rounded to two decimals; per-dimension figures show the target and critical
dimensions (the `dims` given), else the first three.
"""

from __future__ import annotations

from collections.abc import Callable
from contextvars import ContextVar
from typing import Any

from sil.integrity.ledger import Record

SHOWN = 3
_dims: ContextVar[list[str] | None] = ContextVar("dims", default=None)


def _pick(values: dict[str, Any]) -> list[tuple[str, float]]:
    """The dimensions to show, in order: the requested ones present, else the first SHOWN."""
    want = _dims.get()
    keys = [d for d in want if d in values] if want else list(values)[:SHOWN]
    return [(d, values[d]) for d in keys if values.get(d) is not None]


def _scores_line(p: dict[str, Any]) -> str:
    if p["status"] != "ok":
        return f"GAP: {p['gap_reason']}"
    counts = p["sample_counts"]
    return f"{len(p['scores'])} seeds, min samples/dim {min(counts.values()) if counts else 0}"


def _diff_line(p: dict[str, Any]) -> str:
    shown = [f"{d}={v:+.2f}" for d, v in _pick(p.get("diff", {}))]
    decision = p.get("decision") or {}
    verdict = decision.get("verdict")
    return " ".join(shown) + (f" → {verdict}" if verdict else "")


def _reference_note(p: dict[str, Any]) -> str:
    """A screen of the candidate's audit alone says what it was compared with."""
    refs = p.get("reference") or []
    return f", candidate alone vs the champion's last {len(refs)} audits" if refs else ""


_DESCRIBE: dict[str, Callable[[dict[str, Any]], str]] = {
    "contract": lambda p: (
        f"{p['contract_id']} {p['contract_hash'][:12]} backend={p['backend']} approval: {p['approval']}"
    ),
    "baseline": lambda p: (
        f"set {p['policy_set']} means " + ", ".join(f"{d}={v:.2f}" for d, v in _pick(p["per_dimension_mean"]))
    ),
    "mutation": lambda p: (
        f"{p['mutation']['mutation_id']} [{p['arm']}] {p['mutation']['surface']}."
        f"{p['mutation']['path']}: {p['mutation']['hypothesis'][:60]}"
    ),
    "intent": lambda p: f"{p['action']} {p['key']}",
    "applied": lambda p: f"{p['mutation_id']} {p['surface']} {p['from_hash'][:8]}→{p['to_hash'][:8]}",
    "audit": lambda p: f"{p['audit_id']} set {p['policy_set']} tick {p['tick']}: {_scores_line(p)}",
    "round": lambda p: f"{p['round']} ({p['kind']}{_reference_note(p)}) {_diff_line(p)}",
    "verdict": lambda p: f"{p['mutation_id']} [{p['arm']}] {p['verdict'].upper()}: {p['reason']}",
    "promote": lambda p: f"{p['mutation_id']} [{p['arm']}] champion → {p['policy_set']}",
    "user_promote": lambda p: f"[{p['arm']}] champion {p['policy_set']} copied to {p['to']} by {p['by']}",
    "revert": lambda p: f"{p['mutation_id']} [{p['arm']}] restored {p['surface']} {p['to_hash'][:8]}",
    "noise": lambda p: "sigma " + ", ".join(f"{d}={v:.2f}" for d, v in _pick(p["estimate"]["sigma"])),
    "certify": lambda p: (
        f"[{p['arm']}] champion {p['policy_set']} "
        f"{'CERTIFIED' if p['certified'] else 'NOT certified'} after {p['rounds']} rounds"
        + (f": {p['reason']}" if p.get("reason") else "")
        + "".join(
            f"; {g['dim']} {g['estimate']:+.2f}"
            + (f" [{g['interval'][0]:+.2f}, {g['interval'][1]:+.2f}]" if g.get("interval") else "")
            + (
                f" (statistic {g['statistic']:+.2f}, boundary {g['boundary']:+.2f})"
                if g.get("boundary") is not None and g.get("statistic") is not None
                else ""
            )
            for g in p.get("legs", [])
            if g.get("estimate") is not None
        )
    ),
    "stop": lambda p: f"{p['reason']} after {p['audits']} audits ({p['gaps']} gaps)",
    "halt": lambda p: p["reason"],
    "resume": lambda p: f"resumed into {p['phase']} after: {p['after_halt']} (retries start afresh)",
}


def _round_floats(value: object) -> object:
    if isinstance(value, float):
        return round(value, 2)
    if isinstance(value, dict):
        return {k: _round_floats(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_round_floats(v) for v in value]
    return value


def describe(rec: Record, dims: list[str] | None = None) -> str:
    token = _dims.set(dims)
    try:
        return _describe(rec)
    finally:
        _dims.reset(token)


def _describe(rec: Record) -> str:
    p = _round_floats(rec.payload)
    assert isinstance(p, dict)
    fn = _DESCRIBE.get(rec.type)
    try:
        text = fn(p) if fn else ", ".join(f"{k}={v}" for k, v in p.items() if k != "_key")[:160]
    except (KeyError, TypeError, ValueError):
        text = str({k: v for k, v in p.items() if k != "_key"})[:160]
    return text + (" [simulated]" if rec.simulated else "")
