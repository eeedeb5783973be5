"""One readable line per ledger record, for `sil ledger show`."""

from __future__ import annotations

from ledger import Record


def _scores_line(p: dict) -> str:
    if p["status"] != "ok":
        return f"GAP: {p['gap_reason']}"
    counts = p["sample_counts"]
    return f"{len(p['scores'])} seeds, min samples/dim {min(counts.values()) if counts else 0}"


def _diff_line(p: dict) -> str:
    shown = [f"{d}={v:+.2f}" for d, v in list(p.get("diff", {}).items())[:3] if v is not None]
    decision = p.get("decision") or {}
    verdict = decision.get("verdict")
    return " ".join(shown) + (f" → {verdict}" if verdict else "")


_DESCRIBE = {
    "contract": lambda p: (
        f"{p['contract_id']} {p['contract_hash'][:12]} backend={p['backend']} approval: {p['approval']}"
    ),
    "baseline": lambda p: (
        f"set {p['policy_set']} means "
        + ", ".join(f"{d}={v:.2f}" for d, v in list(p["per_dimension_mean"].items())[:3] if v is not None)
    ),
    "mutation": lambda p: (
        f"{p['mutation']['mutation_id']} [{p['arm']}] {p['mutation']['surface']}."
        f"{p['mutation']['path']}: {p['mutation']['hypothesis'][:60]}"
    ),
    "intent": lambda p: f"{p['action']} {p['key']}",
    "applied": lambda p: f"{p['mutation_id']} {p['surface']} {p['from_hash'][:8]}→{p['to_hash'][:8]}",
    "audit": lambda p: f"{p['audit_id']} set {p['policy_set']} tick {p['tick']}: {_scores_line(p)}",
    "round": lambda p: f"{p['round']} ({p['kind']}) {_diff_line(p)}",
    "verdict": lambda p: f"{p['mutation_id']} [{p['arm']}] {p['verdict'].upper()}: {p['reason']}",
    "promote": lambda p: f"{p['mutation_id']} [{p['arm']}] champion → {p['policy_set']}",
    "user_promote": lambda p: f"[{p['arm']}] champion {p['policy_set']} copied to {p['to']} by {p['by']}",
    "revert": lambda p: f"{p['mutation_id']} [{p['arm']}] restored {p['surface']} {p['to_hash'][:8]}",
    "noise": lambda p: "sigma " + ", ".join(f"{d}={v:.2f}" for d, v in list(p["estimate"]["sigma"].items())[:3]),
    "certify": lambda p: (
        f"[{p['arm']}] champion {p['policy_set']} "
        f"{'CERTIFIED' if p['certified'] else 'NOT certified'} after {p['rounds']} rounds"
    ),
    "stop": lambda p: f"{p['reason']} after {p['audits']} audits ({p['gaps']} gaps)",
    "halt": lambda p: p["reason"],
}


def describe(rec: Record) -> str:
    p = rec.payload
    fn = _DESCRIBE.get(rec.type)
    try:
        text = fn(p) if fn else ", ".join(f"{k}={v}" for k, v in p.items() if k != "_key")[:160]
    except (KeyError, TypeError, ValueError):
        text = str({k: v for k, v in p.items() if k != "_key"})[:160]
    return text + (" [simulated]" if rec.simulated else "")
