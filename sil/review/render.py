"""Write `sil report`'s files: report.html (self-contained), report.md, report.json, plots/*.png (L3).

The HTML embeds its plots as data: URIs and its style inline, so it opens with no network
and from any folder; report.md links the PNG files next to it.

    paths = write_report(view, data, out_dir)
"""

from __future__ import annotations

import base64
import html
from collections.abc import Callable
from pathlib import Path

from sil.base.fsutil import atomic_write_bytes
from sil.review.plots import all_plots
from sil.review.report import Candidate, Certification, Effect, ReportData
from sil.review.runview import RunView

PLOT_TITLES = {
    "trajectories": "Target and critical dimensions per audit, per arm",
    "noise": "Noise floor and drift (never arm)",
    "sequential": "Group-sequential path of each gate candidate",
    "forest": "Effect of each candidate per dimension",
}
STYLE = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;color:#222;line-height:1.4}
table{border-collapse:collapse;font-size:.85em;margin:.5em 0}td,th{border:1px solid #ccc;padding:3px 6px;
vertical-align:top}th{background:#f3f3f3}img{max-width:100%;border:1px solid #eee}
pre{background:#f7f7f7;padding:.6em;overflow-x:auto;font-size:.8em}.keep{color:#176c2a;font-weight:bold}
.revert{color:#a11}.warn{background:#fff4d6;padding:.5em;border-left:4px solid #e0a800}code{font-size:.9em}
"""

# marks the body with how many plots decoded, so a headless browser (and a reader) can check it
LOAD_CHECK = """<script>window.addEventListener('load',function(){var im=document.querySelectorAll('img.plot'),ok=0;
im.forEach(function(i){if(i.complete&&i.naturalWidth>0){ok++;}});
document.body.setAttribute('data-plots-rendered',ok+'/'+im.length);});</script>"""


def _e(x: object) -> str:
    return html.escape(str(x))


def fmt_effect(e: Effect | None) -> str:
    if e is None:
        return "—"
    if e.lo is None:
        return f"{e.mean:+.2f} (1 round)"
    return f"{e.mean:+.2f} [{e.lo:+.2f}, {e.hi:+.2f}]"


def _candidate_rows(d: ReportData) -> list[list[str]]:
    rows = []
    for c in d.candidates:
        expected = ", ".join(f"{k} {v:+.2f}" for k, v in c.expected.items())
        rows.append(
            [
                c.arm,
                c.mutation_id,
                f"{c.surface}.{c.path}",
                c.hypothesis,
                "; ".join(c.evidence),
                expected,
                fmt_effect(c.observed.get(d.target)),
                (c.verdict or "pending").upper(),
                c.reason or "",
                c.open_audits,
            ]
        )
    return rows


CAND_HEAD = [
    "arm",
    "mutation",
    "surface.path",
    "hypothesis",
    "evidence",
    "expected effect",
    "observed Δ target (90% CI)",
    "verdict",
    "reason",
    "open its audits",
]


def _html_table(head: list[str], rows: list[list[str]]) -> str:
    th = "".join(f"<th>{_e(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(f"<td>{_e(c)}</td>" for c in r) + "</tr>" for r in rows)
    return f"<table><tr>{th}</tr>{body}</table>"


def _md_table(head: list[str], rows: list[list[str]]) -> str:
    esc: Callable[[object], str] = lambda s: str(s).replace("|", "\\|").replace("\n", " ")  # noqa: E731
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(esc(c) for c in r) + " |" for r in rows]
    return "\n".join(lines)


def _overview_rows(d: ReportData) -> list[list[str]]:
    t = d.trust
    return [
        ["run", d.run_id],
        ["contract", f"{d.contract_id} ({d.contract_hash})"],
        ["backend", f"{d.backend}{' — SIMULATED' if d.simulated else ''}: {d.note}"],
        ["models", ", ".join(f"{k}={v}" for k, v in d.models.items())],
        ["phase", d.phase + (f" (halted: {d.halt_reason})" if d.halt_reason else "")],
        ["approval", t.approval],
        ["ledger", f"{'verified' if t.ledger_ok else 'DOES NOT VERIFY'}: {t.records} records, head {t.head_hash[:16]}"],
        ["checkpoints", f"{t.checkpoints} agree" + (f"; {'; '.join(t.notes)}" if t.notes else "")],
        ["approval signature", "signed" if t.approval_signed else "none (offline contract or unsigned)"],
        ["direction", "lower is better on every dimension; Δ = candidate − champion"],
    ]


def _arm_rows(d: ReportData) -> list[list[str]]:
    rows = []
    for a in d.summary["arms"]:
        tc = a["target_change"]
        change = (
            "unchanged" if not a["changed"] else ("—" if tc is None else f"{tc[0]:+.2f} [{tc[1]:+.2f}, {tc[2]:+.2f}]")
        )
        worst = "—" if not a["worst_critical"] else f"{a['worst_critical'][1]:+.2f} {a['worst_critical'][0]}"
        rows.append([a["arm"], a["audits"], a["candidates"], a["keeps"], change, worst, a["stop_reason"] or ""])
    return rows


ARM_HEAD = ["arm", "audits", "candidates", "KEEP", "Δ target vs start (90% CI)", "worst critical Δ", "stopped"]
CERT_NOTE = (
    "Certification tests the arm's final champion against the starting policy (all its KEEPs together); "
    "a replication re-tests one KEEP against its own parent on fresh rounds. The two answer different "
    "questions, so a KEEP can hold on replication while the champion fails certification."
)
CERT_HEAD = [
    "arm",
    "champion",
    "certified",
    "rounds",
    "seeds",
    "reason",
    "legs (Δ vs start [90% CI], statistic vs boundary)",
    "search-seed check (Δ target vs start [90% CI])",
]


def _seeds_cell(c: Certification) -> str:
    if c.seed_set == "heldout":
        return f"held-out ({c.seeds}), never used by the search"
    return "search" + (f" ({c.seeds})" if c.seeds else "")


def _search_check(c: Certification, target: str) -> str:
    if c.seed_set == "search":
        return "the certification itself"
    x = c.search_effect.get(target)
    if x is None:
        return "not measured"
    return f"{x[0]:+.2f} [{x[1]:+.2f}, {x[2]:+.2f}] over {c.search_rounds} rounds (check only)"


def _cert_rows(d: ReportData) -> list[list[str]]:
    rows = []
    for c in d.certifications:
        legs = "; ".join(
            f"{g['dim']}: Δ {g['estimate']:+.2f}"
            + (f" [{g['interval'][0]:+.2f}, {g['interval'][1]:+.2f}]" if g.get("interval") else "")
            + f", statistic {g['statistic']:+.2f} vs boundary {g['boundary']:+.2f}"
            if g.get("estimate") is not None and g.get("statistic") is not None and g.get("boundary") is not None
            else f"{g['dim']}: unknown"
            for g in c.legs
        )
        certified = "yes" if c.certified else "NO"
        rows.append(
            [c.arm, c.policy_set, certified, str(c.rounds), _seeds_cell(c), c.reason, legs, _search_check(c, d.target)]
        )
    for r in d.replications:
        ti = r.get("target_interval")
        est = "—" if not ti else f"{ti[0]:+.2f} [{ti[1]:+.2f}, {ti[2]:+.2f}]"
        rows.append(
            [
                r["arm"],
                f"replication of {r['mutation_id']}",
                "DEMOTED" if r["demoted"] else "holds",
                str(r["rounds"]),
                "search",
                r["reason"],
                f"{r['target']}: {est}",
                "",
            ]
        )
    return rows


def render_html(d: ReportData, pngs: dict[str, bytes]) -> str:
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>",
        f"<title>SIL report {_e(d.run_id)}</title><style>{STYLE}</style></head><body>",
        f"<h1>SIL run report: {_e(d.run_id)}</h1>",
    ]
    if d.simulated:
        parts.append(
            "<p class='warn'>Simulated audits: this run proves the loop's plumbing and statistics, "
            "not the quality of any model or policy.</p>"
        )
    parts += [f"<p><b>{_e(d.conclusion)}</b></p>", "<h2>Contract, approval and trust</h2>"]
    parts.append(_html_table(["item", "value"], _overview_rows(d)))
    parts += ["<h2>Arms</h2>", _html_table(ARM_HEAD, _arm_rows(d))]
    for name, png in pngs.items():
        uri = "data:image/png;base64," + base64.b64encode(png).decode()
        parts.append(f"<h2>{_e(PLOT_TITLES[name])}</h2><img class='plot' id='plot-{name}' alt='{name}' src='{uri}'>")
    parts += ["<h2>Candidates</h2>", _html_table(CAND_HEAD, _candidate_rows(d))]
    parts += ["<h2>Certification and held-out re-measurement</h2>", f"<p>{_e(CERT_NOTE)}</p>"]
    parts.append(_html_table(CERT_HEAD, _cert_rows(d)))
    parts.append("<h2>Kept policy changes</h2>")
    for k in d.kept or []:
        parts.append(f"<h3>{_e(k.arm)} {_e(k.mutation_id)} → set {_e(k.policy_set)}</h3><pre>{_e(k.diff)}</pre>")
    if not d.kept:
        parts.append("<p>No change was kept.</p>")
    parts.append(f"<h2>Conclusion</h2><p>{_e(d.conclusion)}</p>{LOAD_CHECK}</body></html>")
    return "\n".join(parts)


def render_md(d: ReportData, plot_files: dict[str, str]) -> str:
    lines = [f"# SIL run report: {d.run_id}", ""]
    if d.simulated:
        lines += ["> Simulated audits: plumbing and statistics, not the quality of any model or policy.", ""]
    lines += [f"**{d.conclusion}**", "", "## Contract, approval and trust", ""]
    lines += [_md_table(["item", "value"], _overview_rows(d)), "", "## Arms", "", _md_table(ARM_HEAD, _arm_rows(d)), ""]
    for name, file in plot_files.items():
        lines += [f"## {PLOT_TITLES[name]}", "", f"![{name}]({file})", ""]
    lines += ["## Candidates", "", _md_table(CAND_HEAD, _candidate_rows(d)), ""]
    lines += ["## Certification and held-out re-measurement", "", CERT_NOTE, ""]
    lines += [_md_table(CERT_HEAD, _cert_rows(d)), ""]
    lines += ["## Kept policy changes", ""]
    for k in d.kept:
        lines += [f"### {k.arm} {k.mutation_id} → set {k.policy_set}", "", "```diff", k.diff, "```", ""]
    if not d.kept:
        lines.append("No change was kept.")
    return "\n".join(lines) + "\n"


def write_report(view: RunView, d: ReportData, out_dir: Path) -> dict[str, Path]:
    pngs = all_plots(view, d)
    files = {}
    for name, png in pngs.items():
        files[name] = out_dir / "plots" / f"{name}.png"
        atomic_write_bytes(files[name], png)
    html_path, md_path, json_path = out_dir / "report.html", out_dir / "report.md", out_dir / "report.json"
    atomic_write_bytes(html_path, render_html(d, pngs).encode())
    atomic_write_bytes(md_path, render_md(d, {n: f"plots/{n}.png" for n in pngs}).encode())
    atomic_write_bytes(json_path, (d.model_dump_json(indent=1) + "\n").encode())
    return {"html": html_path, "md": md_path, "json": json_path, **files}


__all__ = ["Candidate", "write_report", "render_html", "render_md"]
