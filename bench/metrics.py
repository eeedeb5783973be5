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
- Wald ratio: audits per decision / the Wald-Wolfowitz lower bound on expected audits per
  decision for any sequential test with the procedure's own in-stream false-KEEP rate and
  miss rate, on paired rounds (2 audits) of the measured SD, at the mean true improvement of
  the good candidates it decided. Not shown ("-") when the bound is below 0.1 audits
  (a procedure no better than a coin, such as the random arm).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bench.simrun import RunSummary

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

    def admissible(self, alpha_run: float) -> bool:
        return self.false_keep_run <= alpha_run and self.p_worse <= P_WORSE_LIMIT


def aggregate(method: str, runs: Sequence[RunSummary], sd_round: float) -> Row:
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
        wald_ratio=_wald_ratio(runs, per_decision, sd_round),
        alpha_spent=float(np.mean([r.alpha_spent for r in runs])),
        certified=float(np.mean(certified)) if certified else float("nan"),
    )


def _wald_ratio(runs: Sequence[RunSummary], per_decision: float, sd_round: float) -> float:
    n_null = sum(r.null_decisions for r in runs)
    n_good = sum(r.good_decisions for r in runs)
    n_all = sum(r.decisions for r in runs)
    if not (n_null and n_good and n_all):
        return float("nan")
    alpha = max(sum(r.null_keeps for r in runs), 0.5) / n_null  # half a count if none
    beta = min(max(1 - sum(r.good_keeps for r in runs) / n_good, 1e-3), 1 - 1e-3)
    effect = sum(r.good_effect_sum for r in runs) / n_good
    if alpha + beta >= 1:
        return float("nan")  # no better than a coin: the bound is 0
    e0, e1 = wald_bound_rounds(alpha, beta, effect, sd_round)
    bound = 2 * (n_null * e0 + n_good * e1) / n_all
    return per_decision / bound if bound >= MIN_WALD_AUDITS else float("nan")


HEADER = (
    "| method | cands/run | audits/dec | KEEPs/run | P(false KEEP) | P(harmful KEEP) | bad share "
    "| final dT (+-SE) | worst crit | P(worse) | Wald ratio | alpha spent | admissible |"
)


def format_table(rows: Sequence[Row], alpha_run: float) -> str:
    lines = [HEADER, "|" + "---|" * 13]
    for r in rows:
        wald = "-" if math.isnan(r.wald_ratio) else f"{r.wald_ratio:.1f}"
        spent = f"{r.alpha_spent:.3f}" if r.alpha_spent else "-"
        lines.append(
            f"| {r.method} | {r.decisions:.0f} | {r.audits_per_decision:.2f} | {r.keeps:.2f} "
            f"| {r.false_keep_run:.3f} | {r.harmful_keep_run:.3f} | {r.bad_share:.3f} "
            f"| {r.final_target:+.3f} +- {r.final_target_se:.3f} | {r.final_critical:+.3f} "
            f"| {r.p_worse:.3f} | {wald} | {spent} | {'yes' if r.admissible(alpha_run) else 'NO'} |"
        )
    return "\n".join(lines)
