"""Write `sil report`'s files: report.html (self-contained), report.md, report.json, plots/*.png (L3).

The HTML embeds its plots as data: URIs and its style inline, so it opens with no network
and from any folder; report.md links the PNG files next to it.

    paths = write_report(view, data, out_dir)
"""

from __future__ import annotations

import base64
import html
import re
from pathlib import Path

from sil.base.fsutil import atomic_write_bytes, confined
from sil.review.plots import all_plots
from sil.review.report import Candidate, Certification, Cost, Effect, KeptDiff, ReportData
from sil.review.runview import RunView
from sil.review.summary import DIRECTION_LINE
from sil.review.usecounts import COUNTED_OVER, surface_words, words
from sil_policy.credentials import redact_data

PLOT_TITLES = {
    "trajectories": "Target and critical dimensions per audit, per arm",
    "noise": "Noise floor and drift (never arm)",
    "sequential": "Group-sequential path of each gate candidate",
    "forest": "Effect of each candidate per dimension",
}
# Tables size their columns to their words (a word never breaks, unless it alone is wider than the
# page) and scroll inside their own box when the page is narrower than the table.
STYLE = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1400px;padding:0 1em;color:#222;line-height:1.4}
.tw{overflow-x:auto;margin:.5em 0}
table{border-collapse:collapse;font-size:.85em;width:100%;table-layout:auto}
td,th{border:1px solid #ccc;padding:3px 6px;vertical-align:top;text-align:left}
td{overflow-wrap:break-word;white-space:pre-line}th{background:#f3f3f3;white-space:nowrap}
td.id,td.num,td.verdict{white-space:nowrap}img{max-width:100%;border:1px solid #eee}
pre{background:#f7f7f7;padding:.6em;overflow-x:auto;font-size:.8em;white-space:pre-wrap}
.keep{color:#176c2a;font-weight:bold}.revert{color:#a11;font-weight:bold}.pending{color:#666}
td.keep{background:#e6f4e9}td.revert{background:#fbe9e9}
.warn{background:#fff4d6;padding:.5em;border-left:4px solid #e0a800}code{font-size:.9em}
details summary{cursor:pointer;color:#555}table.kv td:first-child{font-weight:bold;white-space:nowrap}
"""

# marks the body with how many plots decoded and how many tables overflow the window, so a
# headless browser (and a reader) can check both
LOAD_CHECK = """<script>window.addEventListener('load',function(){var im=document.querySelectorAll('img.plot'),ok=0;
im.forEach(function(i){if(i.complete&&i.naturalWidth>0){ok++;}});
document.body.setAttribute('data-plots-rendered',ok+'/'+im.length);
var wide=0,scroll=0;document.querySelectorAll('.tw').forEach(function(t){
if(t.getBoundingClientRect().right>window.innerWidth+1){wide++;}if(t.scrollWidth>t.clientWidth+1){scroll++;}});
document.body.setAttribute('data-tables-overflowing',String(wide));
document.body.setAttribute('data-tables-scrolling',String(scroll));
document.body.setAttribute('data-page-width',String(document.documentElement.scrollWidth));});</script>"""


def _e(x: object) -> str:
    return html.escape(str(x))


def fmt_effect(e: Effect | None) -> str:
    if e is None:
        return "—"
    if e.lo is None:
        return f"{e.mean:+.2f} (1 round)"
    return f"{e.mean:+.2f} [{e.lo:+.2f}, {e.hi:+.2f}]"


SHARED_NOTE = (
    "A mutation tried by both arms is the same change applied to each arm's own champion at the time "
    "(the parent set under its id): the two verdicts answer different questions and can differ."
)


def _shared_ids(d: ReportData) -> set[str]:
    arms: dict[str, set[str]] = {}
    for c in d.candidates:
        arms.setdefault(c.mutation_id, set()).add(c.arm)
    return {m for m, a in arms.items() if len(a) > 1}


def _candidate_rows(d: ReportData) -> list[list[str]]:
    rows = []
    shared = _shared_ids(d)
    for c in _candidate_order(d):
        expected = ", ".join(f"{k} {v:+.2f}" for k, v in c.expected.items())
        rows.append(
            [
                (c.verdict or "pending").upper(),
                c.arm,
                f"{c.mutation_id}\non {c.parent_set}" if c.mutation_id in shared and c.parent_set else c.mutation_id,
                fmt_effect(c.observed.get(d.target)),
                words(c.use),
                c.reason or "",
                f"{c.surface}.{c.path}",
                expected,
                c.hypothesis,
                "; ".join(c.evidence),
                str(len(c.audits)),
            ]
        )
    return rows


def _candidate_order(d: ReportData) -> list[Candidate]:
    """The gate's candidates first (KEEPs leading), then the random arm's, each in proposal order."""
    rank = {"gate": 0, "random": 1}
    return sorted(d.candidates, key=lambda c: (rank.get(c.arm, 2), c.verdict != "keep", c.index))


CAND_HEAD = [
    "verdict",
    "arm",
    "mutation",
    "observed Δ target (90% CI)",
    "use shown (audits)",
    "reason",
    "surface.path",
    "expected effect",
    "hypothesis",
    "evidence",
    "audits",
]
NOWRAP = {0: "verdict", 1: "id", 2: "id", 10: "num"}  # columns whose cells never wrap


def _plural(n: int, word: str) -> str:
    return f"{n} {word}" + ("" if n == 1 else "s")


def _candidate_html(d: ReportData) -> str:
    th = "".join(f"<th>{_e(h)}</th>" for h in CAND_HEAD)
    body = []
    for r in _candidate_rows(d):
        cells = [f"<td class='verdict {_e(r[0].lower())}'>{_e(r[0])}</td>"]
        cells += [
            f"<td class='{NOWRAP[i]}'>{_e(r[i])}</td>" if i in NOWRAP else f"<td>{_e(r[i])}</td>" for i in range(1, 9)
        ]
        items = _plural(len(r[9].split("; ")) if r[9] else 0, "item")
        cells.append(f"<td><details><summary>{items}</summary>{_e(r[9])}</details></td>")
        cells.append(f"<td class='num'>{_e(r[10])}</td>")
        body.append("<tr>" + "".join(cells) + "</tr>")
    return f"<div class='tw'><table id='candidates'><tr>{th}</tr>{''.join(body)}</table></div>"


VERDICT_CLASS = {"KEEP": "keep", "REVERT": "revert", "DEMOTED": "revert", "NO": "revert", "yes": "keep"}


def _td(cell: object) -> str:
    cls = VERDICT_CLASS.get(str(cell))
    return f"<td class='{cls}'>{_e(cell)}</td>" if cls else f"<td>{_e(cell)}</td>"


def _html_table(head: list[str], rows: list[list[str]], cls: str = "") -> str:
    """A table in its own scroll box: columns as wide as their words, scrolling on a narrow page."""
    th = "".join(f"<th>{_e(h)}</th>" for h in head)
    body = "".join("<tr>" + "".join(_td(c) for c in r) + "</tr>" for r in rows)
    return f"<div class='tw'><table{f' class={cls!r}' if cls else ''}><tr>{th}</tr>{body}</table></div>"


# Markdown's active characters: a Markdown viewer renders raw HTML, links and emphasis, so text
# from a hypothesis, a policy or a judge is escaped as in report.html (HTML) and then for Markdown.
_MD_ACTIVE = re.compile(r"([\\`*_\[\]{}()#+!|~])")


def _m(x: object) -> str:
    """Untrusted text for one line of report.md: HTML-escaped, Markdown-escaped, on one line."""
    return _MD_ACTIVE.sub(r"\\\1", html.escape(str(x), quote=False)).replace("\r", " ").replace("\n", " ")


def _fence(text: str) -> str:
    """A code fence longer than any backtick run in `text`, so the text cannot close it."""
    longest = max((len(r) for r in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


def _md_table(head: list[str], rows: list[list[str]]) -> str:
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    lines += ["| " + " | ".join(_m(c) for c in r) + " |" for r in rows]
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
        [
            "ledger",
            f"{'verified' if t.ledger_ok else 'DOES NOT VERIFY'}: {t.records} records, head {t.head_hash[:16]}"
            + "".join(f"; {e}" for e in t.errors),
        ],
        ["checkpoints", f"{t.checkpoints} agree" + (f"; {'; '.join(t.notes)}" if t.notes else "")],
        ["approval signature", "signed" if t.approval_signed else "none (offline contract or unsigned)"],
        ["audit logs", d.cost.audit_logs if d.cost else "—"],
        [f"use of the policy shown ({COUNTED_OVER}, per surface)", f"{surface_words(d.use)}. {d.use_note}"],
        ["direction", DIRECTION_LINE.removeprefix("all dimensions: ")],
    ]


def _arm_rows(d: ReportData) -> list[list[str]]:
    rows = []
    for a in d.summary["arms"]:
        tc = a["target_change"]
        change = (
            "unchanged" if not a["changed"] else ("—" if tc is None else f"{tc[0]:+.2f} [{tc[1]:+.2f}, {tc[2]:+.2f}]")
        )
        if not a["changed"] and a.get("standing") == "rolled_back":
            change = "unchanged (rolled back)"
        worst = "—" if not a["worst_critical"] else f"{a['worst_critical'][1]:+.2f} {a['worst_critical'][0]}"
        keeps = f"{a['keeps']} ({a['demoted']} demoted)" if a.get("demoted") else str(a["keeps"])
        champion = a.get("champion", "")
        rows.append([a["arm"], champion, a["audits"], a["candidates"], keeps, change, worst, a["stop_reason"] or ""])
    return rows


ARM_HEAD = [
    "arm",
    "champion",
    "audits",
    "candidates",
    "KEEP",
    "Δ target vs start (90% CI)",
    "worst critical Δ",
    "stopped",
]
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


def _rounds_cell(c: Certification) -> str:
    rounds = str(c.rounds) if c.looks is None else f"{c.rounds} of up to {c.looks}"
    return rounds if c.outlook is None else f"{rounds} ({c.outlook.words()})"


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


REPL_HEAD = ["arm", "KEEP replicated", "outcome", "rounds", "seeds", "reason", "Δ target vs its own parent [90% CI]"]
REPL_NOTE = "Each replication re-tests one KEEP against the policy it was kept on (its parent), not against the start."


def _replication_rows(d: ReportData) -> list[list[str]]:
    rows = []
    for r in d.replications:
        ti = r.get("target_interval")
        est = "—" if not ti else f"{ti[0]:+.2f} [{ti[1]:+.2f}, {ti[2]:+.2f}]"
        outcome = "DEMOTED" if r["demoted"] else ("holds" if r.get("conclusive", True) else "inconclusive")
        rows.append(
            [r["arm"], r["mutation_id"], outcome, str(r["rounds"]), "search", r["reason"], f"{r['target']}: {est}"]
        )
    return rows


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
        ).replace("; ", ";\n")
        certified = "yes" if c.certified else "NO"
        later = [x for x in d.demotions if x["arm"] == c.arm and x["policy_set"] == c.policy_set]
        if c.certified and later:
            certified = "yes, then demoted: " + "; ".join(f"KEEP {x['mutation_id']} by a {x['cause']}" for x in later)
        rows.append(
            [
                c.arm,
                c.policy_set,
                certified,
                _rounds_cell(c),
                _seeds_cell(c),
                c.reason,
                legs,
                _search_check(c, d.target),
            ]
        )
    return rows


def _cost_rows(c: Cost) -> list[list[str]]:
    gaps = "; ".join(f"{n}× {k}" for k, n in c.gap_reasons.items()) or "none"
    return [
        ["audits", f"{c.audits} audits ({c.preflight} preflight), {c.gaps} gaps"],
        ["USD", f"{c.usd:.2f} of max_usd {c.max_usd:g}"],
        ["wall time", f"{c.wall_s:.0f} s of max_wall_s {c.max_wall_s:g}"],
        ["error design" if c.error.startswith("two-stage") else "α (error budget)", c.error],
        ["noise floor", c.noise],
        ["gaps by reason", gaps],
    ]


COST_ARM_HEAD = ["arm", "audits", "gaps", "USD", "audit wall time (s, summed)"]
COST_ROLE_HEAD = ["role", "calls", "USD", "note"]
GAP_HEAD = ["audit", "arm", "gap reason"]


def wall(seconds: float | None) -> str:
    return "—" if seconds is None else f"{seconds:.0f}"  # None: the preflight records no wall time


def _cost_tables(c: Cost) -> list[tuple[str, list[str], list[list[str]]]]:
    arms = [[a.arm, str(a.audits), str(a.gaps), f"{a.usd:.2f}", wall(a.audit_wall_s)] for a in c.arms]
    roles = [[r.role, str(r.calls), f"{r.usd:.2f}", r.note] for r in c.roles]
    gaps = [[g.audit_id, g.arm, g.reason] for g in c.gap_list]
    return [("per arm", COST_ARM_HEAD, arms), ("per role", COST_ROLE_HEAD, roles), ("gaps (first 20)", GAP_HEAD, gaps)]


def _cost_html(d: ReportData) -> list[str]:
    if d.cost is None:
        return []
    parts = ["<h2 id='cost'>Cost and confidence</h2>", _html_table(["item", "value"], _cost_rows(d.cost), "kv")]
    for title, head, rows in _cost_tables(d.cost):
        if rows:
            parts += [f"<h3>{_e(title)}</h3>", _html_table(head, rows)]
    parts.append("<p>Certification legs: see <a href='#certification'>Certification</a>.</p>")
    return parts


def _cost_md(d: ReportData) -> list[str]:
    if d.cost is None:
        return []
    lines = ["## Cost and confidence", "", _md_table(["item", "value"], _cost_rows(d.cost)), ""]
    for title, head, rows in _cost_tables(d.cost):
        if rows:
            lines += [f"### {title}", "", _md_table(head, rows), ""]
    return lines


def _kept_order(d: ReportData) -> list[KeptDiff]:
    """The gate's KEEPs first (the changes a reviewer would promote), each arm's in the order they were kept."""
    return sorted(d.kept, key=lambda k: k.arm != "gate")


def _kept_title(d: ReportData, k: KeptDiff) -> str:
    same_arm = [x for x in d.kept if x.arm == k.arm]
    step = same_arm.index(k) + 1
    return f"{k.arm} KEEP {step} of {len(same_arm)}: {k.mutation_id}, set {k.parent_set} → {k.policy_set}"


def render_html(d: ReportData, pngs: dict[str, bytes]) -> str:
    parts = [
        "<!doctype html><html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>",
        f"<title>SIL report {_e(d.run_id)}</title><style>{STYLE}</style></head><body>",
        f"<h1>SIL run report: {_e(d.run_id)}</h1>",
    ]
    if d.simulated:
        parts.append(
            "<p class='warn'>Simulated audits: this run proves the loop's plumbing and statistics, "
            "not the quality of any model or policy.</p>"
        )
    parts += [f"<p><b>{_e(d.conclusion)}</b></p>", "<h2>Contract, approval and trust</h2>"]
    parts.append(_html_table(["item", "value"], _overview_rows(d), "kv"))
    parts += ["<h2>Arms</h2>", _html_table(ARM_HEAD, _arm_rows(d))]
    parts += _cost_html(d)
    parts += ["<h2>Candidates</h2>", f"<p>Use shown: {_e(d.use_note)}.</p>", _candidate_html(d)]
    if _shared_ids(d):
        parts.append(f"<p>{_e(SHARED_NOTE)}</p>")
    parts += ["<h2 id='certification'>Certification and held-out re-measurement</h2>", f"<p>{_e(CERT_NOTE)}</p>"]
    parts.append(_html_table(CERT_HEAD, _cert_rows(d)))
    if d.replications:
        parts += ["<h3>Replications</h3>", f"<p>{_e(REPL_NOTE)}</p>", _html_table(REPL_HEAD, _replication_rows(d))]
    for name, png in pngs.items():
        uri = "data:image/png;base64," + base64.b64encode(png).decode()
        parts.append(f"<h2>{_e(PLOT_TITLES[name])}</h2><img class='plot' id='plot-{name}' alt='{name}' src='{uri}'>")
    parts.append("<h2>Kept policy changes</h2>")
    for k in _kept_order(d):
        parts.append(f"<h3>{_e(_kept_title(d, k))}</h3><pre>{_e(k.diff)}</pre>")
    if not d.kept:
        parts.append("<p>No change was kept.</p>")
    parts.append(f"<h2>Conclusion</h2><p>{_e(d.conclusion)}</p>{LOAD_CHECK}</body></html>")
    return "\n".join(parts)


def render_md(d: ReportData, plot_files: dict[str, str]) -> str:
    lines = [f"# SIL run report: {_m(d.run_id)}", ""]
    if d.simulated:
        lines += ["> Simulated audits: plumbing and statistics, not the quality of any model or policy.", ""]
    lines += [f"**{_m(d.conclusion)}**", "", "## Contract, approval and trust", ""]
    lines += [_md_table(["item", "value"], _overview_rows(d)), "", "## Arms", "", _md_table(ARM_HEAD, _arm_rows(d)), ""]
    lines += _cost_md(d)
    lines += ["## Candidates", "", f"Use shown: {_m(d.use_note)}.", ""]
    lines += [_md_table(CAND_HEAD, _candidate_rows(d)), ""]
    if _shared_ids(d):
        lines += [SHARED_NOTE, ""]
    lines += ["## Certification and held-out re-measurement", "", CERT_NOTE, ""]
    lines += [_md_table(CERT_HEAD, _cert_rows(d)), ""]
    if d.replications:
        lines += ["### Replications", "", REPL_NOTE, "", _md_table(REPL_HEAD, _replication_rows(d)), ""]
    for name, file in plot_files.items():
        lines += [f"## {PLOT_TITLES[name]}", "", f"![{name}]({file})", ""]
    lines += ["## Kept policy changes", ""]
    for k in _kept_order(d):
        fence = _fence(k.diff)
        lines += [
            f"### {_m(_kept_title(d, k))}",
            "",
            f"{fence}diff",
            k.diff,
            fence,
            "",
        ]
    if not d.kept:
        lines.append("No change was kept.")
    return "\n".join(lines) + "\n"


def write_report(view: RunView, d: ReportData, out_dir: Path, root: Path | None = None) -> dict[str, Path]:
    """Write the report files into `out_dir`, which must resolve inside `root` (default: itself),
    as must every file in it: a planted symlink never takes the report elsewhere."""
    confined(out_dir, root or out_dir)
    for sub in ("plots", "report.html", "report.md", "report.json"):
        confined(out_dir / sub, out_dir)
    # the ledger refuses credentials on the way in; a report leaves the machine, so it is redacted again
    d = ReportData.model_validate(redact_data(d.model_dump(mode="json")))
    pngs = all_plots(view, d)
    files = {}
    for name, png in pngs.items():
        files[name] = confined(out_dir / "plots" / f"{name}.png", out_dir)
        atomic_write_bytes(files[name], png)
    html_path, md_path, json_path = out_dir / "report.html", out_dir / "report.md", out_dir / "report.json"
    atomic_write_bytes(html_path, render_html(d, pngs).encode())
    atomic_write_bytes(md_path, render_md(d, {n: f"plots/{n}.png" for n in pngs}).encode())
    atomic_write_bytes(json_path, (d.model_dump_json(indent=1) + "\n").encode())
    return {"html": html_path, "md": md_path, "json": json_path, **files}


__all__ = ["Candidate", "write_report", "render_html", "render_md"]
