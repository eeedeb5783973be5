"""The KEEP/REVERT procedures the benchmark compares, each driving a `SimRun` to its budget.

- single_audit: the autoresearch habit. A 5-audit stored baseline; KEEP when one candidate
  audit beats it by a 0.3 margin on the target with no critical above baseline + se + 0.3;
  a KEEP overwrites the baseline with that audit.
- geode: GEODE-style. Trimmed 5-audit stored baseline with its stderr; each candidate is
  audited `replicates` times; strict critical reject above baseline + stderr + 0.5; promote
  when the target gain exceeds 1 sigma (sqrt of both stderrs squared); a promotion stores
  the candidate's measurement as the new baseline.
- fixed_k: the single-audit rule as a screen, then K fresh replicates whose mean must pass
  the same rule; a KEEP stores the replicate mean as the baseline.
- random: accept with probability 1/2 after one audit.  oracle: knows the truth, 1 audit.

The loop's own gate, the certified oracle and the posterior references are not procedures here:
they run in the product's loop (bench/vectorloop.py, `bench.gates.loop_plan`).
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from bench.simrun import SimRun

BASELINE_AUDITS = 5
MARGIN = 0.3  # single-audit and fixed-K: target must beat the baseline by this
CRITICAL_MARGIN = 0.3  # ... and no critical above baseline + se + this
GEODE_CRITICAL_MARGIN = 0.5
GEODE_GAIN_SIGMAS = 1.0
GEODE_REPLICATES = 3
FIXED_K = 3


def audit_mean(y: np.ndarray) -> np.ndarray:
    """Per-dim mean over scored seeds; NaN where a dim has none."""
    return mean_and_se(y)[0]


def mean_and_se(rows: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Column means and standard errors ignoring NaN (NaN where too few values)."""
    seen = ~np.isnan(rows)
    n = seen.sum(axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(seen, rows, 0.0).sum(axis=0) / n
        ss = np.where(seen, rows - mean, 0.0) ** 2
        se = np.sqrt(ss.sum(axis=0) / (n - 1) / n)
    return mean, np.where(n >= 2, se, np.nan)


def _stored_baseline(run: SimRun, trimmed: bool) -> tuple[np.ndarray, np.ndarray]:
    """Mean and across-audit stderr of BASELINE_AUDITS audits of the champion."""
    means = np.array([audit_mean(run.audit(run.theta)) for _ in range(BASELINE_AUDITS)])
    if trimmed and len(means) >= 4:  # drop the single highest and lowest, per dim
        means = np.sort(means, axis=0)[1:-1]  # NaN sorts last: a missing audit is dropped
    return mean_and_se(means)


def _passes_margin(m: np.ndarray, base: np.ndarray, se: np.ndarray, crit: list[int]) -> bool:
    if np.isnan(m[0]) or m[0] > base[0] - MARGIN:
        return False
    return not any(m[c] > base[c] + se[c] + CRITICAL_MARGIN for c in crit if not np.isnan(m[c]))


def _overwrite(old: np.ndarray, new: np.ndarray) -> np.ndarray:
    """Store a new baseline; dimensions it did not measure keep their old value."""
    return np.where(np.isnan(new), old, new)


def run_single_audit(run: SimRun, _settings: object) -> None:
    base, se = _stored_baseline(run, trimmed=False)
    for cand in run.candidates:
        if run.left() < 1:
            return
        y = run.audit(run.theta + cand.field)
        m = audit_mean(y)
        keep = _passes_margin(m, base, se, run.critical_idx)
        run.decide(cand, keep, 1)
        if keep:
            base, se = _overwrite(base, m), _overwrite(se, mean_and_se(y)[1])


def run_fixed_k(run: SimRun, _settings: object) -> None:
    base, se = _stored_baseline(run, trimmed=False)
    for cand in run.candidates:
        if run.left() < 1:
            return
        m = audit_mean(run.audit(run.theta + cand.field))
        if not _passes_margin(m, base, se, run.critical_idx) or run.left() < FIXED_K:
            run.decide(cand, False, 1)
            continue
        reps = np.array([audit_mean(run.audit(run.theta + cand.field)) for _ in range(FIXED_K)])
        mean, rep_se = mean_and_se(reps)
        keep = _passes_margin(mean, base, se, run.critical_idx)
        run.decide(cand, keep, 1 + FIXED_K)
        if keep:
            base, se = _overwrite(base, mean), _overwrite(se, rep_se)


def run_geode(run: SimRun, _settings: object) -> None:
    base, se = _stored_baseline(run, trimmed=True)
    for cand in run.candidates:
        if run.left() < GEODE_REPLICATES:
            return
        reps = np.array([audit_mean(run.audit(run.theta + cand.field)) for _ in range(GEODE_REPLICATES)])
        mean, cand_se = mean_and_se(reps)
        keep = _geode_promotes(mean, cand_se, base, se, run.critical_idx)
        run.decide(cand, keep, GEODE_REPLICATES)
        if keep:
            base, se = _overwrite(base, mean), _overwrite(se, cand_se)


def _geode_promotes(m: np.ndarray, m_se: np.ndarray, base: np.ndarray, se: np.ndarray, crit: list[int]) -> bool:
    if np.isnan(m[0]) or np.isnan(base[0]):
        return False  # a missing targeted dim rejects
    if any(m[c] > base[c] + se[c] + GEODE_CRITICAL_MARGIN for c in crit if not np.isnan(m[c])):
        return False  # critical strict reject
    sigma = math.sqrt(np.nan_to_num(se[0]) ** 2 + np.nan_to_num(m_se[0]) ** 2)
    return bool(base[0] - m[0] > GEODE_GAIN_SIGMAS * sigma)


def run_random(run: SimRun, settings: np.random.Generator) -> None:
    for cand in run.candidates:
        if run.left() < 1:
            return
        run.audit(run.theta + cand.field)
        run.decide(cand, bool(settings.random() < 0.5), 1)


def run_oracle(run: SimRun, _settings: object) -> None:
    for cand in run.candidates:
        if run.left() < 1:
            return
        run.used += 1  # charged one audit per candidate, as if it had looked
        delta = run.true_delta(cand.field)
        run.decide(cand, bool(delta[0] < 0 and not run.harms(delta)), 1)


# Any: each procedure takes its own settings type (a Generator, or none).
Procedure = Callable[[SimRun, Any], None]
PROCEDURES: dict[str, Procedure] = {
    "single_audit": run_single_audit,
    "geode": run_geode,
    "fixed_k": run_fixed_k,
    "random": run_random,
    "oracle": run_oracle,
}
