"""The plots of `sil report`, drawn with matplotlib (Agg, no display) to PNG bytes (L3).

    pngs = all_plots(view, data)     # {"trajectories": b"...", "noise": ..., "sequential": ..., "forest": ...}

Every plot says that lower is better; each is drawn from the ledger records only.
"""

from __future__ import annotations

import io

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402
from scipy import stats  # noqa: E402

from sil.review.report import LEVEL, ReportData  # noqa: E402
from sil.review.runview import RunView  # noqa: E402

DPI = 90
ARMS = ("never", "random", "gate")
MAX_SEQ_PANELS = 12
BOUNDARY_FLOOR = -12.0  # early O'Brien-Fleming boundaries are far below any statistic: clip the view


def _png(fig: Figure) -> bytes:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=DPI, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _audit_means(view: RunView, arm: str, dim: str) -> list[tuple[int, float, float, str]]:
    """(audit number in the run, mean over seeds, 90% half-width, role) per ok audit of an arm."""
    out = []
    n = 0
    for a in view.of_type("audit"):
        n += 1
        if a["arm"] != arm or a["status"] != "ok":
            continue
        vals = np.array([row[dim] for row in a["scores"].values() if row.get(dim) is not None], dtype=float)
        if vals.size == 0:
            continue
        half = (
            stats.t.ppf(0.5 + LEVEL / 2, vals.size - 1) * vals.std(ddof=1) / np.sqrt(vals.size) if vals.size > 1 else 0
        )
        out.append((n, float(vals.mean()), float(half), a["role"]))
    return out


def keep_points(view: RunView) -> dict[str, list[int]]:
    """Per arm: the audit number in the run at which each of its KEEP verdicts was recorded."""
    out: dict[str, list[int]] = {}
    n = 0
    for r in view.records:
        if r.type == "audit":
            n += 1
        elif r.type == "verdict" and r.payload["verdict"] == "keep":
            out.setdefault(r.payload["arm"], []).append(n)
    return out


# the never arm's two audits of a pair run the same policy: A and B, not candidate and champion
SERIES = {"never": (("B (A/A pair)", "tab:orange"), ("A (A/A pair)", "tab:blue"))}
DEFAULT_SERIES = (("candidate", "tab:orange"), ("champion", "tab:blue"))


def trajectories(view: RunView, data: ReportData) -> bytes:
    """Per arm (columns): target and critical dimension levels per audit, with 90% intervals and KEEPs."""
    arms = [a for a in ARMS if any(x["arm"] == a for x in view.of_type("audit"))] or ["baseline"]
    dims = [data.target, *data.critical]
    keeps = keep_points(view)
    fig, axes = plt.subplots(
        len(dims), len(arms), figsize=(4.2 * len(arms), 1.9 * len(dims) + 0.6), squeeze=False, layout="constrained"
    )
    for j, arm in enumerate(arms):
        for i, dim in enumerate(dims):
            ax = axes[i][j]
            pts = _audit_means(view, arm, dim)
            for is_cand, (role, colour) in zip((True, False), SERIES.get(arm, DEFAULT_SERIES), strict=True):
                sel = [p for p in pts if ("cand" in p[3]) == is_cand]
                if sel:
                    x, y, h = zip(*[(p[0], p[1], p[2]) for p in sel], strict=True)
                    ax.errorbar(x, y, yerr=h, fmt="o", ms=2.5, lw=0.6, color=colour, label=role)
            for k, at in enumerate(keeps.get(arm, [])):
                ax.axvline(at, color="tab:green", lw=1, ls="--", label="KEEP" if k == 0 else None)
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
            if i == 0:
                ax.set_title(f"{arm} arm", fontsize=9)
                ax.legend(fontsize=6, loc="upper right")
            if j == 0:
                ax.set_ylabel(dim.replace("_", "\n", 1), fontsize=7)
            ax.tick_params(labelsize=7)
    fig.suptitle(f"score per audit (mean over seeds, {LEVEL:.0%} CI); lower is better; dashed green: KEEP", fontsize=9)
    fig.supxlabel("audit number in the run", fontsize=8)
    return _png(fig)


def noise(view: RunView, data: ReportData) -> bytes:
    """The never arm: A/A differences (noise floor) and the unchanged policy's level (drift)."""
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(10, 3.2), layout="constrained")
    aa = [r for r in view.of_type("round") if r["kind"] == "aa" and r["diff"].get(data.target) is not None]
    sigma = data.summary.get("noise_sigma", {}).get(data.target)
    ys = [r["diff"][data.target] for r in aa]
    ax1.plot(range(1, len(ys) + 1), ys, "o-", ms=3, color="tab:gray")
    ax1.axhline(0, color="black", lw=0.6)
    if sigma:
        ax1.axhspan(-sigma, sigma, color="tab:blue", alpha=0.12, label=f"±σ̂ = {sigma:.2f}")
        ax1.legend(fontsize=7)
    ax1.set_title(f"never arm A/A pairs: Δ {data.target} (B − A)", fontsize=9)
    ax1.set_xlabel("A/A pair")
    ax1.set_ylabel(f"Δ {data.target}")
    ax1.xaxis.set_major_locator(MaxNLocator(integer=True))
    base = data.summary.get("baseline_mean")
    pts = _audit_means(view, "never", data.target)
    if pts:
        x, y, h, _ = zip(*pts, strict=True)
        ax2.errorbar(x, y, yerr=h, fmt="o", ms=3, lw=0.6, color="tab:gray", label="never arm audits")
    if base is not None:
        ax2.axhline(base, color="tab:green", ls="--", lw=1, label=f"baseline {base:.2f}")
    ax2.set_title(f"drift of the unchanged policy: {data.target} (lower is better)", fontsize=9)
    ax2.set_xlabel("audit number in the run")
    ax2.set_ylabel(data.target)
    ax2.xaxis.set_major_locator(MaxNLocator(integer=True))
    ax2.legend(fontsize=7)
    return _png(fig)


LegPaths = dict[str, list[tuple[int, float, float | None]]]  # leg -> (look, statistic, boundary)


def leg_paths(view: RunView) -> dict[str, LegPaths]:
    """Per gate candidate: every leg's statistic and boundary per look of its confirmation."""
    paths: dict[str, LegPaths] = {}
    for r in view.of_type("round"):
        if r["arm"] != "gate" or r["kind"] != "confirm" or not r.get("decision"):
            continue
        for leg in r["decision"]["legs"]:
            if leg.get("statistic") is not None:
                point = (leg["n"], leg["statistic"], leg.get("boundary"))
                paths.setdefault(r["mutation_id"], {}).setdefault(leg["dim"], []).append(point)
    return paths


def shown_legs(legs: LegPaths, target: str, reason: str) -> list[str]:
    """The target leg and the legs that decided: named in the verdict's reason, else the failing ones."""
    named = [d for d in legs if d != target and d in reason]
    if not named:
        last = {d: pts[-1] for d, pts in legs.items()}
        named = [d for d, (_, st, b) in last.items() if d != target and b is not None and st > b][:2]
    return [d for d in (target, *named) if d in legs]


def sequential(view: RunView, data: ReportData) -> bytes:
    """Each gate candidate's legs per look against their boundaries: the target and the leg that stopped it."""
    paths = leg_paths(view)
    names = list(paths)[:MAX_SEQ_PANELS]
    cols = min(4, max(1, len(names)))
    rows = max(1, -(-len(names) // cols))
    fig, axes = plt.subplots(rows, cols, figsize=(3.4 * cols, 2.7 * rows + 0.6), squeeze=False, layout="constrained")
    gate = {c.mutation_id: c for c in data.candidates if c.arm == "gate"}
    for ax, name in zip(axes.flat, names, strict=False):
        cand = gate.get(name)
        verdict = ((cand.verdict if cand else None) or "?").upper()
        last = 1
        for k, leg in enumerate(shown_legs(paths[name], data.target, (cand.reason or "") if cand else "")):
            pts = sorted(paths[name][leg])
            n = [p[0] for p in pts]
            colour = f"C{k}"
            ax.plot(n, [p[1] for p in pts], "o-", ms=3, color=colour, label=leg)
            bnd = [max(p[2], BOUNDARY_FLOOR) if p[2] is not None else np.nan for p in pts]
            ax.plot(n, bnd, "--", lw=1, color=colour)
            last = max(last, n[-1])
        ax.axhline(0, color="black", lw=0.5)
        ax.set_title(f"{name[:12]} → {verdict}", fontsize=8)
        ax.set_xlabel("look (confirmation round)", fontsize=7)
        ax.set_ylabel("statistic", fontsize=7)
        ax.set_xlim(0.5, last + 0.5)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.tick_params(labelsize=7)
        ax.legend(fontsize=6, loc="best")
    for ax in list(axes.flat)[len(names) :]:
        ax.axis("off")
    if not names:
        axes[0][0].text(0.5, 0.5, "no gate candidate reached confirmation", ha="center", va="center")
    fig.suptitle(
        f"gate: leg statistics per look (solid), each passes at or below its dashed boundary (clipped at {BOUNDARY_FLOOR:g}); "
        "the target leg and the legs that decided",
        fontsize=9,
    )
    return _png(fig)


def forest(view: RunView, data: ReportData) -> bytes:
    """Per candidate and dimension: observed mean paired difference with its interval."""
    dims = [data.target, *data.critical]
    cands = [c for c in data.candidates if c.observed]
    fig, axes = plt.subplots(
        1, len(dims), figsize=(2.6 * len(dims), 0.32 * len(cands) + 1.8), sharey=True, layout="constrained"
    )
    axes = np.atleast_1d(axes)
    labels = [f"{c.arm[:1]}:{c.mutation_id[:8]}" for c in cands]
    colours = {"keep": "tab:green", "revert": "tab:red"}
    for ax, dim in zip(axes, dims, strict=True):
        for y, c in enumerate(cands):
            e = c.observed.get(dim)
            if e is None:
                continue
            err = None if e.lo is None or e.hi is None else [[e.mean - e.lo], [e.hi - e.mean]]
            ax.errorbar(e.mean, y, xerr=err, fmt="o", ms=3, color=colours.get(c.verdict or "", "tab:gray"))
        ax.axvline(0, color="black", lw=0.6)
        ax.set_title(dim, fontsize=7)
        ax.tick_params(labelsize=7)
    axes[0].set_yticks(range(len(cands)), labels, fontsize=6)
    axes[0].invert_yaxis()
    fig.suptitle(
        f"effect per candidate (candidate − champion, {LEVEL:.0%} CI; one-round rows use the A/A noise floor); "
        "left of 0 is better; green KEEP, red REVERT",
        fontsize=9,
    )
    fig.supxlabel("Δ (candidate − champion)", fontsize=8)
    return _png(fig)


PLOTS = {"trajectories": trajectories, "noise": noise, "sequential": sequential, "forest": forest}


def all_plots(view: RunView, data: ReportData) -> dict[str, bytes]:
    return {name: fn(view, data) for name, fn in PLOTS.items()}
