"""Benchmark metrics over many runs, Wald's lower bound, and the printed tables.

All metrics are against the simulated truth (`World.expected_scores`), lower is better:
- false-KEEP run probability: P(some KEEP whose true target change is >= 0);
- harmful-KEEP run probability: P(some KEEP worsening a critical dim by more than its
  harm tolerance, the contract's `promotion.harm_tolerance`);
- bad share: mean over runs of (false or harmful KEEPs) / max(1, KEEPs);
- audits per decision: audits spent on candidates / candidates decided (calibration and
  stored baselines excluded, as in the research note);
- final target change and worst critical change of the final champion vs the start;
- P(final worse): final target change > 0 or a critical change above its tolerance;
- Wald ratio: all audits the procedure spent (calibration included) / the sum over its
  decisions of the Wald-Wolfowitz lower bound on expected audits for that one decision, at
  that candidate's own true target change, for any sequential test on paired rounds
  (2 audits) of the measured SD with the procedure's own in-stream false-KEEP rate (per null
  decision) and miss rate (per good decision). A good candidate (better, no harm) needs the
  KEEP bound at its own effect; any other the REVERT bound against the design effect d
  (futility_effect), moved by its own harm. Each bound is capped at the K-round truncation
  (2K audits). 1.0 = no audit wasted for the error rates achieved. Not shown ("-") when the
  procedure is no better than a coin (alpha + beta >= 1) or above alpha_run in false KEEPs.
- where the audits go (`by_kind`): per candidate type of the effect mixture, decisions and
  audits per run, the share of all candidate audits, audits per decision and the KEEP rate;
- `WaldPoint.audits` at alpha per test = alpha_run / J_max and beta = 0.2 is the useful
  operating point the bench prints for reference (what a powerful test would need).
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from bench.simrun import RunSummary
from sil_runtime.sim.world import CANDIDATE_TYPES

P_WORSE_LIMIT = 0.1
MIN_WALD_AUDITS = 0.1  # below this the bound says "no information used": ratio not shown


def wald_bound_rounds(alpha: float, beta: float, effect: float, sd: float) -> tuple[float, float]:
    """Lower bounds on E[rounds] under H0 (no effect) and H1 (effect), Gaussian shift."""
    kl = effect**2 / (2 * sd**2)
    e1 = (1 - beta) * math.log((1 - beta) / alpha) + beta * math.log(beta / (1 - alpha))
    e0 = (1 - alpha) * math.log((1 - alpha) / beta) + alpha * math.log(alpha / (1 - beta))
    return max(e0, 0.0) / kl, max(e1, 0.0) / kl


@dataclass(frozen=True)
class Row:
    method: str
    runs: int
    decisions: float
    audits_per_decision: float
    keeps: float
    false_keep_run: float
    harmful_keep_run: float
    bad_share: float
    final_target: float
    final_target_se: float
    final_critical: float
    p_worse: float
    wald_ratio: float
    alpha_spent: float
    certified: float
    # the two-stage design guarantees the delivered champion, not each KEEP: admissible when
    # P(worse) <= alpha_certify; None = the FWER criterion (every KEEP at alpha_run, P(worse) <= 0.1)
    delivered_alpha: float | None = None

    def admissible(self, alpha_run: float) -> bool:
        if self.delivered_alpha is not None:
            return self.p_worse <= self.delivered_alpha
        return self.false_keep_run <= alpha_run and self.p_worse <= P_WORSE_LIMIT

    def criterion(self, alpha_run: float) -> str:
        """The admissibility rule this row is held to, with its figures."""
        if self.delivered_alpha is not None:
            return f"P(worse) {self.p_worse:.3f} <= alpha_certify {self.delivered_alpha}; P(false KEEP) {self.false_keep_run:.3f} reported"
        return f"P(false KEEP) {self.false_keep_run:.3f} <= {alpha_run}, P(worse) {self.p_worse:.3f} <= {P_WORSE_LIMIT}"


@dataclass(frozen=True)
class WaldPoint:
    """The operating point of the per-decision Wald bound."""

    alpha: float  # per test: alpha_run / J_max
    beta: float
    design_effect: float  # d of the futility rule: the alternative a REVERT is tested against
    looks: int  # K: each bound is capped at 2K audits

    def audits(self, effect: float, good: bool, sd: float) -> float:
        """Lower bound on the audits one decision on a candidate of true `effect` needs."""
        if good:
            shift = -effect  # improvement (effect < 0)
            bound = wald_bound_rounds(self.alpha, self.beta, shift, sd)[1]
        else:
            shift = self.design_effect + max(effect, 0.0)
            bound = wald_bound_rounds(self.alpha, self.beta, shift, sd)[0]
        return 2 * min(bound, self.looks)


def in_stream_point(runs: Sequence[RunSummary], design_effect: float, looks: int) -> WaldPoint | None:
    """The procedure's own error rates as a Wald operating point, or None if no better than a coin."""
    n_null = sum(r.null_decisions for r in runs)
    n_good = sum(r.good_decisions for r in runs)
    if not (n_null and n_good):
        return None
    alpha = max(sum(r.null_keeps for r in runs), 0.5) / n_null  # half a count if none
    beta = min(max(1 - sum(r.good_keeps for r in runs) / n_good, 1e-3), 1 - 1e-3)
    return WaldPoint(alpha, beta, design_effect, looks) if alpha + beta < 1 else None


def aggregate(
    method: str,
    runs: Sequence[RunSummary],
    sd_round: float,
    design: tuple[float, int] = (0.5, 16),
    delivered_alpha: float | None = None,
) -> Row:
    decisions = sum(r.decisions for r in runs)
    audits = sum(r.audits for r in runs)
    final_t = np.array([r.final_target for r in runs])
    final_c = np.array([r.final_critical for r in runs])
    per_decision = audits / max(1, decisions)
    certified = [r.certified for r in runs if r.certified is not None]
    return Row(
        method=method,
        runs=len(runs),
        decisions=decisions / len(runs),
        audits_per_decision=per_decision,
        keeps=float(np.mean([r.keeps for r in runs])),
        false_keep_run=float(np.mean([r.false_keep for r in runs])),
        harmful_keep_run=float(np.mean([r.harmful_keep for r in runs])),
        bad_share=float(np.mean([r.bad_share for r in runs])),
        final_target=float(final_t.mean()),
        final_target_se=float(final_t.std(ddof=1) / math.sqrt(len(runs))) if len(runs) > 1 else 0.0,
        final_critical=float(final_c.mean()),
        p_worse=float(np.mean((final_t > 0) | np.array([r.final_harm for r in runs]))),
        wald_ratio=_wald_ratio(runs, sd_round, in_stream_point(runs, *design)),
        alpha_spent=float(np.mean([r.alpha_spent for r in runs])),
        certified=float(np.mean(certified)) if certified else float("nan"),
        delivered_alpha=delivered_alpha,
    )


def _wald_ratio(runs: Sequence[RunSummary], sd_round: float, point: WaldPoint | None) -> float:
    """Audits spent (calibration included) / the sum of per-decision Wald bounds."""
    if point is None:
        return float("nan")
    bound = sum(point.audits(e, g, sd_round) for r in runs for e, g in zip(r.effects, r.good, strict=True))
    spent = sum(r.used for r in runs)
    return spent / bound if bound >= MIN_WALD_AUDITS * max(1, len(runs)) else float("nan")


HEADER = (
    "| method | cands/run | audits/dec | KEEPs/run | P(false KEEP) | P(harmful KEEP) | bad share "
    "| final dT (+-SE) | worst crit | P(worse) | Wald ratio | alpha spent | certified | admissible |"
)


def format_table(rows: Sequence[Row], alpha_run: float) -> str:
    lines = [HEADER, "|" + "---|" * 14]
    for r in rows:
        # the bound presumes the operating point's error rates: not shown for a procedure
        # whose run-level false-KEEP rate is above alpha_run (it does not meet them)
        hide = math.isnan(r.wald_ratio) or r.false_keep_run > alpha_run
        wald = "-" if hide else f"{r.wald_ratio:.1f}"
        spent = f"{r.alpha_spent:.3f}" if r.alpha_spent else "-"
        cert = "-" if math.isnan(r.certified) else f"{r.certified:.2f}"
        lines.append(
            f"| {r.method} | {r.decisions:.0f} | {r.audits_per_decision:.2f} | {r.keeps:.2f} "
            f"| {r.false_keep_run:.3f} | {r.harmful_keep_run:.3f} | {r.bad_share:.3f} "
            f"| {r.final_target:+.3f} +- {r.final_target_se:.3f} | {r.final_critical:+.3f} "
            f"| {r.p_worse:.3f} | {wald} | {spent} | {cert} | {'yes' if r.admissible(alpha_run) else 'NO'} |"
        )
    return "\n".join(lines)


@dataclass(frozen=True)
class KindRow:
    """Where one procedure's candidate audits went, for one candidate type of the mixture."""

    method: str
    kind: str
    decisions: float  # per run
    audits: float  # per run
    share: float  # of all candidate audits
    audits_per_decision: float
    keep_rate: float
    endings: tuple[tuple[str, float], ...] = ()  # share of decisions per ending, most frequent first


def by_kind(method: str, runs: Sequence[RunSummary]) -> list[KindRow]:
    """Decisions, audits and KEEPs per candidate type (types that were never decided are left out)."""
    total = sum(sum(r.decision_audits) for r in runs) or 1.0
    rows = []
    for kind in CANDIDATE_TYPES:
        cells = [
            (a, k, e)
            for r in runs
            for t, a, k, e in zip(r.kinds, r.decision_audits, r.kept, r.endings or ("",) * len(r.kinds), strict=True)
            if t == kind
        ]
        if not cells:
            continue
        audits = sum(c[0] for c in cells)
        counts = Counter(c[2] for c in cells if c[2])
        rows.append(
            KindRow(
                method=method,
                kind=kind,
                decisions=len(cells) / len(runs),
                audits=audits / len(runs),
                share=audits / total,
                audits_per_decision=audits / len(cells),
                keep_rate=sum(c[1] for c in cells) / len(cells),
                endings=tuple((e, n / len(cells)) for e, n in counts.most_common()),
            )
        )
    return rows


def format_by_kind(rows: Sequence[KindRow]) -> str:
    lines = [
        "| method | candidate type | decisions/run | audits/run | share of audits | audits/dec | KEEP rate | ended by |"
    ]
    lines.append("|" + "---|" * 8)
    for r in rows:
        ended = ", ".join(f"{e} {share:.2f}" for e, share in r.endings) or "-"
        lines.append(
            f"| {r.method} | {r.kind} | {r.decisions:.2f} | {r.audits:.1f} | {r.share:.0%} "
            f"| {r.audits_per_decision:.1f} | {r.keep_rate:.3f} | {ended} |"
        )
    return "\n".join(lines)


def provenance(argv: Sequence[str], runs: str, seconds: float | None = None) -> str:
    """The header of a results file: the command that wrote it, when, at which commit, where.

    Every figure a README quotes must come from a file with this header (tests/test_readme_figures.py).
    """
    import datetime
    import os
    import platform
    import shlex
    import subprocess

    def git(*args: str) -> str:
        try:
            return subprocess.run(["git", *args], capture_output=True, text=True, timeout=10).stdout.strip()
        except (OSError, subprocess.SubprocessError):
            return ""

    commit = git("rev-parse", "--short", "HEAD") or "unknown"
    dirty = " (with uncommitted changes)" if git("status", "--porcelain", "--untracked-files=no") else ""
    load = f", load {os.getloadavg()[0]:.1f}" if hasattr(os, "getloadavg") else ""
    took = f"; took {seconds:.0f} s" if seconds is not None else ""
    return (
        f"- command: `python -m {shlex.join(argv)}`\n"
        f"- date: {datetime.datetime.now(datetime.UTC).strftime('%Y-%m-%d %H:%M UTC')}{took}\n"
        f"- commit: {commit}{dirty}\n"
        f"- machine: {platform.node()}, {os.cpu_count()} cores{load}\n"
        f"- runs: {runs}\n"
        "- SIMULATED: figures about the simulated world, not about any model or policy.\n"
    )


def against_section(
    previous: Path,
    why: str | None,
    before: dict[tuple[str, str], dict[str, Any]],
    now: dict[tuple[str, str], dict[str, Any]],
) -> str:
    """The section saying how far each row moved from the earlier results file, and why."""
    intro = moved_intro(previous, why)
    return f"## Against `{previous}` (before this run)\n\n{intro}\n\n{moved_table(before, now)}"


def moved_intro(previous: Path, why: str | None) -> str:
    """Why rows moved from an earlier results file: the reason the person re-measuring gave
    (`--why`), and the commit the earlier file was measured at, so `git log` shows the rest."""
    md = previous.with_suffix(".md")
    lines = md.read_text(encoding="utf-8").splitlines() if md.is_file() else []
    was = next((x.removeprefix("- commit: ").split()[0] for x in lines if x.startswith("- commit: ")), None)
    since = f"commit {was} (what changed since: `git log {was}..`)" if was else "an unrecorded commit"
    return (
        (f"Why the figures moved: {why}\n\n" if why else "")
        + f"The earlier file was measured at {since}. The SE of a difference treats the two files as "
        "independent, an approximation when their worlds overlap. A move within about two standard errors "
        "is what other noise draws give; a larger one comes from what changed."
    )


def previous_rows(path: Path) -> dict[tuple[str, str], dict[str, Any]]:
    """The rows of an earlier results file (.json), by (tolerance or "", row name)."""
    data = json.loads(path.read_text(encoding="utf-8"))
    if "tolerances" in data:
        return {(tol, r["proposer"]): r for tol, t in data["tolerances"].items() for r in t["rows"]}
    return {("", r["proposer"]): r for r in data["rows"]}


def moved_table(before: dict[tuple[str, str], dict[str, Any]], now: dict[tuple[str, str], dict[str, Any]]) -> str:
    """How far each row's headline figures moved from the earlier results file to this one."""
    lines = [
        "| row | final true target change: before → now (moved, in SE of the difference) "
        "| P(worse) before → now | KEEPs/run before → now |",
        "|---|---|---|---|",
    ]
    for key, r in now.items():
        old = before.get(key)
        name = f"{key[0]} {key[1]}".strip()
        if old is None:
            lines.append(
                f"| {name} | new row: {r['final_target']:+.3f} | {r['p_final_worse']:.3f} | {r['keeps_per_run']:.2f} |"
            )
            continue
        d = r["final_target"] - old["final_target"]
        se = math.hypot(r["final_target_se"] or 0.0, old["final_target_se"] or 0.0)
        z = f", {d / se:+.1f} SE" if se > 0 else ""
        lines.append(
            f"| {name} | {old['final_target']:+.3f} → {r['final_target']:+.3f} ({d:+.3f}{z}) "
            f"| {old['p_final_worse']:.3f} → {r['p_final_worse']:.3f} | {old['keeps_per_run']:.2f} → {r['keeps_per_run']:.2f} |"
        )
    return "\n".join(lines) + "\n"
