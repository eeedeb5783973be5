"""`sil export`: a run's audits, rounds and verdicts as flat rows, to CSV, Parquet or JSON (L3).

One row per audit, per paired round and per verdict; `record` says which. Score columns are
`mean.<dim>` (audit: mean over seeds) and `diff.<dim>` (round: candidate − champion). Proof of
use: `use.<surface>` on an audit row (proven / not_provable / refuted), and on a verdict row
`use.proven`, `use.not_provable`, `use.refuted`, the counts over its audits
(sil/review/usecounts.py says what not provable means).

    rows = export_rows(view)
    write_rows(rows, Path("out.csv"), "csv")
"""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path
from typing import Any, Literal

import numpy as np

from sil.base.errors import Refused
from sil.base.fsutil import atomic_write_bytes
from sil.integrity.records import AuditRecord, RoundRecord
from sil.review.runview import RunView
from sil.review.usecounts import (
    COUNTED_OVER,
    NOT_PROVABLE_MEANS,
    candidate_rounds,
    surface_counts,
    surface_words,
    verdict_counts,
)
from sil_policy.credentials import redact_data

Format = Literal["csv", "parquet", "json"]
FORMATS = ("csv", "parquet", "json")


def _audit_row(a: dict[str, Any]) -> dict[str, Any]:
    row = {k: a.get(k) for k in ("audit_id", "arm", "round", "role", "policy_set", "tick", "status", "gap_reason")}
    row["record"] = "audit"
    row["usd"] = (a.get("usage") or {}).get("usd")
    row["wall_s"] = a.get("wall_s")
    row["log_path"] = a.get("log_path")
    row.update({f"use.{surface}": use for surface, use in sorted((a.get("use") or {}).items())})
    dims = sorted({d for s in a["scores"].values() for d in s})
    for d in dims:
        vals = [s[d] for s in a["scores"].values() if s.get(d) is not None]
        row[f"mean.{d}"] = float(np.mean(vals)) if vals else None
    return row


def _round_row(r: dict[str, Any]) -> dict[str, Any]:
    decision = r.get("decision") or {}
    row = {
        "record": "round",
        "round": r["round"],
        "arm": r["arm"],
        "kind": r["kind"],
        "mutation_id": r.get("mutation_id"),
        "gap_reason": r.get("gap_reason"),
        "verdict": decision.get("verdict"),
        "look": decision.get("look"),
        "coin": r.get("coin"),
    }
    row.update({f"diff.{d}": v for d, v in sorted(r["diff"].items())})
    return row


def _verdict_row(v: dict[str, Any], view: RunView) -> dict[str, Any]:
    keys = ("arm", "mutation_id", "verdict", "reason", "candidate_set", "parent_set", "rounds", "alpha")
    rounds = candidate_rounds(view.payloads("round", RoundRecord), v.get("arm", ""), v.get("mutation_id", ""))
    use = verdict_counts(view.payloads("audit", AuditRecord), rounds)
    return {"record": "verdict", **{k: v.get(k) for k in keys}, **{f"use.{k}": n for k, n in use.items()}}


def export_rows(view: RunView) -> list[dict[str, Any]]:
    rows = []
    for rec in view.records:
        if rec.type == "audit":
            rows.append(_audit_row(rec.payload))
        elif rec.type == "round":
            rows.append(_round_row(rec.payload))
        elif rec.type == "verdict":
            rows.append(_verdict_row(rec.payload, view))
    for i, row in enumerate(rows):
        row["run_id"] = view.run_id
        row["row"] = i
    return rows


def use_lines(view: RunView) -> list[str]:
    """What `sil export` says beside the file: per surface, how many audits showed the policy's use."""
    return [
        f"use shown ({COUNTED_OVER}): {surface_words(surface_counts(view.payloads('audit', AuditRecord)))}",
        NOT_PROVABLE_MEANS,
    ]


def _columns(rows: list[dict[str, Any]]) -> list[str]:
    cols: dict[str, None] = {"run_id": None, "row": None, "record": None}
    for r in rows:
        cols.update(dict.fromkeys(r))
    return list(cols)


def _parquet(rows: list[dict[str, Any]], cols: list[str]) -> bytes:
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ImportError:
        raise Refused("--format parquet needs pyarrow: pip install pyarrow (or use --format csv|json)") from None
    table = pa.table({c: [r.get(c) for r in rows] for c in cols})
    buf = pa.BufferOutputStream()
    pq.write_table(table, buf)
    data: bytes = buf.getvalue().to_pybytes()  # pyarrow has no type stubs
    return data


def write_rows(rows: list[dict[str, Any]], path: Path, fmt: Format) -> Path:
    rows = redact_data(rows)  # an export leaves the machine: no credential in it, whatever the ledger held
    cols = _columns(rows)
    if fmt == "json":
        data = json.dumps([{c: r.get(c) for c in cols} for r in rows], indent=1).encode()
    elif fmt == "csv":
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=cols, lineterminator="\n")
        w.writeheader()
        w.writerows(rows)
        data = buf.getvalue().encode()
    elif fmt == "parquet":
        data = _parquet(rows, cols)
    else:
        raise Refused(f"unknown format {fmt!r}; use one of {', '.join(FORMATS)}")
    atomic_write_bytes(path, data)
    return path
