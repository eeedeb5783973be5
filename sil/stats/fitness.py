"""Per-round paired statistics and the run's noise estimate (pure numpy, no I/O).

A *round* audits the candidate and the current champion at the same time on the same frozen
seeds. Its statistic, per dimension, is the mean over seeds scored in *both* arms of
(candidate - champion) of *oriented* scores: scores are 1-10, and a dimension whose rubric
direction is higher-is-better is flipped (11 - score) in `score_matrix`, the one place where
direction enters. Every statistic downstream (gate legs, noise, intervals) is then "lower is
better": a negative difference is an improvement, whatever the dimension's direction. Drift and per-seed difficulty enter both arms alike and cancel.

The noise of that statistic is a property of the measurement system, not of a candidate. The
never arm runs as concurrent A/A pairs (same policy in both arms, true difference zero); those
pairs plus the within-candidate residuals of past candidates pool into one between-round SD
per dimension. The gate freezes a snapshot (`NoiseEstimate`) before each confirmation, so no
candidate sets its own threshold.

    champ = score_matrix(champion_scores, seed_ids, dims, higher_better={"admirable"})  # [n_seeds, D]
    cand = score_matrix(candidate_scores, seed_ids, dims)
    r = paired_round(cand, champ, dims, min_coverage=0.7)      # RoundStat
    pool.add_aa(paired_round(a1, a2, dims, 0.7)); noise = pool.estimate()
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Collection, Mapping, Sequence
from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

from sil.contract.schema import Promotion

if TYPE_CHECKING:  # numpy loads on first use: reading a run (sil runs, status) needs none
    import numpy as np

# Scores are integers averaged over ~10 seeds: a dimension pinned at the floor in every A/A
# pair gives a pooled SD of exactly 0, which would make any nonzero difference an infinite
# statistic. The floor is far below any real between-round SD (0.6-0.9 points).
MIN_SIGMA = 0.05
# Orienting a higher-is-better 1-10 score: 11 - score keeps it on 1-10 with 1 the best.
FLIP_SUM = 11.0


def score_matrix(
    scores: Mapping[str, Mapping[str, float | None]],
    seed_ids: Sequence[str],
    dims: Sequence[str],
    higher_better: Collection[str] = (),
) -> np.ndarray:
    """Per-seed, per-dimension oriented scores of one audit as a [n_seeds, D] array; NaN = not scored.

    `scores` maps seed id -> {dimension: score or None}. Seeds absent from `scores` and
    dimensions absent or None are missing, never zero. Dimensions in `higher_better` are
    flipped (FLIP_SUM - score), so lower is better in every column.
    """
    import numpy as np

    unknown = sorted(set(scores) - set(seed_ids))
    if unknown:
        raise ValueError(
            f"scores for seeds outside the frozen seed set: {unknown}; "
            "the audit ran a different seed library than the contract's"
        )
    out = np.full((len(seed_ids), len(dims)), np.nan)
    for i, seed in enumerate(seed_ids):
        row = scores.get(seed, {})
        for k, dim in enumerate(dims):
            value = row.get(dim)
            if value is None:
                continue
            value = float(value)
            if not math.isfinite(value):
                continue
            out[i, k] = FLIP_SUM - value if dim in higher_better else value
    return out


class RoundStat(BaseModel):
    """One paired round, per dimension. None = not measured well enough to compare.

    `label` names the round in the ledger (empty for rounds built in memory, e.g. the bench).
    """

    model_config = ConfigDict(frozen=True)
    diff: dict[str, float | None]  # mean over common seeds of (candidate - champion)
    n_seeds: dict[str, int]  # seeds scored in both arms
    se: dict[str, float | None]  # within-round paired SE (diagnostic: ignores batch effects)
    level: dict[str, float | None] = {}  # champion mean, same seeds
    imputed: dict[str, int] = {}  # candidate-missing cells bounded (missing="bound"), per dim
    label: str = ""
    # certification rounds only: each seed's difference, in the seed set's order (None: not scored
    # in both), so a claim about seeds never used can measure the effect's spread between seeds
    seed_diff: dict[str, list[float | None]] = {}
    # a screen of the candidate's audit alone: the champion audits it was compared with (their mean)
    reference: list[str] = []

    def labelled(self, label: str) -> RoundStat:
        return self.model_copy(update={"label": label})


def bound_missing(candidate: np.ndarray, champion: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Candidate matrix with each cell the champion arm scored and the candidate arm did not
    set to the candidate's worst score on that dimension in this audit (never below the
    champion's own cell), and the count of such cells per dimension.

    Lower is better, so a missing candidate cell can only count against the candidate: when
    failing seeds go unscored (missing not at random), dropping them would flatter it.
    """
    import numpy as np

    gap = np.isnan(candidate) & ~np.isnan(champion)
    with np.errstate(invalid="ignore"), warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)  # an all-NaN column has no worst score
        worst = np.nanmax(candidate, axis=0)
    fill = np.fmax(np.broadcast_to(worst, candidate.shape), champion)
    return np.where(gap, fill, candidate), gap.sum(axis=0)


def paired_round(
    candidate: np.ndarray,
    champion: np.ndarray,
    dims: Sequence[str],
    min_coverage: float,
    missing: Literal["drop", "bound"] = "drop",
    trim: Mapping[str, float] | None = None,
) -> RoundStat:
    """Paired round statistic from two concurrent audits' score matrices.

    A dimension with fewer than `min_coverage * n_seeds` seeds scored in both arms gets
    diff None: it is unknown for this round, not zero. With `missing="bound"` the candidate's
    missing cells are bounded first (`bound_missing`); coverage counts only real scores.
    `trim` maps a dimension to the share of seed differences cut at each end before the mean
    (a robust location for heavy-tailed audits; the noise pool sees the same statistic).
    """
    import numpy as np

    candidate = np.asarray(candidate, dtype=float)
    champion = np.asarray(champion, dtype=float)
    if candidate.shape != champion.shape or candidate.ndim != 2:
        raise ValueError(f"score matrices must both be [n_seeds, D]; got {candidate.shape} and {champion.shape}")
    if candidate.shape[1] != len(dims):
        raise ValueError(f"score matrices have {candidate.shape[1]} columns for {len(dims)} dims")
    if not 0 < min_coverage <= 1:
        raise ValueError(f"min_coverage must be in (0, 1], got {min_coverage}")
    need = max(1, math.ceil(min_coverage * candidate.shape[0] - 1e-9))
    scored = (~np.isnan(candidate) & ~np.isnan(champion)).sum(axis=0)
    imputed = np.zeros(len(dims), dtype=int)
    if missing == "bound":
        candidate, imputed = bound_missing(candidate, champion)
    both = ~np.isnan(candidate) & ~np.isnan(champion)
    n = both.sum(axis=0)
    d = np.where(both, candidate - champion, 0.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = d.sum(axis=0) / n
        level_mean = np.where(both, champion, 0.0).sum(axis=0) / n
        resid = np.where(both, d - mean, 0.0)
        sd = np.sqrt((resid**2).sum(axis=0) / (n - 1))
    for k, share in _trimmed(dims, trim):
        from scipy import stats  # on first use: reading a run needs no scipy

        mean[k] = stats.trim_mean(d[both[:, k], k], share) if n[k] else mean[k]
    ok = scored >= need
    diff: dict[str, float | None] = {}
    se: dict[str, float | None] = {}
    level: dict[str, float | None] = {}
    for k, dim in enumerate(dims):
        diff[dim] = float(mean[k]) if ok[k] else None
        level[dim] = float(level_mean[k]) if ok[k] else None
        se[dim] = float(sd[k] / math.sqrt(n[k])) if ok[k] and n[k] >= 2 else None
    n_seeds = {dim: int(n[k]) for k, dim in enumerate(dims)}
    bounded = {dim: int(imputed[k]) for k, dim in enumerate(dims) if imputed[k]}
    return RoundStat(diff=diff, n_seeds=n_seeds, se=se, level=level, imputed=bounded)


def seed_differences(candidate: np.ndarray, champion: np.ndarray, dims: Sequence[str]) -> dict[str, list[float | None]]:
    """Per dimension, each seed's candidate - champion difference (None where either is unscored)."""
    import numpy as np

    d = np.asarray(candidate, dtype=float) - np.asarray(champion, dtype=float)
    return {dim: [None if math.isnan(x) else float(x) for x in d[:, k]] for k, dim in enumerate(dims)}


def _trimmed(dims: Sequence[str], trim: Mapping[str, float] | None) -> list[tuple[int, float]]:
    return [(k, trim[dim]) for k, dim in enumerate(dims) if trim and trim.get(dim, 0.0) > 0.0]


def paired_round_for(
    candidate: np.ndarray, champion: np.ndarray, dims: Sequence[str], promotion: Promotion
) -> RoundStat:
    """`paired_round` with the contract's coverage, missing-data policy and target trim."""
    trim = {d: promotion.target_trim for d in promotion.target_dimensions}
    return paired_round(candidate, champion, dims, promotion.min_seed_coverage, promotion.missing_policy, trim)


class NoiseEstimate(BaseModel):
    """Frozen snapshot of the between-round SD of the paired statistic, per dimension.

    `drift` is the never arm's own movement: mean champion-arm level over the later half of
    the A/A pairs minus the earlier half (points; positive = scores rose with no change).
    `aa_mean` is the mean A/A difference, which should be near 0 (arm symmetry check).
    `batch_share` is 1 - mean(within-round se^2) / sigma^2: the part of the round variance
    that seed-level SEs cannot see.
    """

    model_config = ConfigDict(frozen=True)
    sigma: dict[str, float]
    df: dict[str, int]
    n_pairs: int
    n_candidates: int = 0
    drift: dict[str, float] = {}
    aa_mean: dict[str, float] = {}
    batch_share: dict[str, float] = {}
    corr: dict[str, dict[str, float]] = {}

    def composite(self, weights: Mapping[str, float]) -> tuple[float, int] | None:
        """SD and df of sum_d w_d X_d, or None if a dimension has no estimate."""
        import numpy as np

        dims = list(weights)
        if not dims or any(d not in self.sigma for d in dims):
            return None
        w = np.array([weights[d] * self.sigma[d] for d in dims])
        cov = np.eye(len(dims))
        for i, a in enumerate(dims):
            for j, b in enumerate(dims):
                if i != j:
                    cov[i, j] = self.corr.get(a, {}).get(b, 0.0)
        var = float(w @ cov @ w)
        return max(math.sqrt(max(var, 0.0)), MIN_SIGMA), min(self.df[d] for d in dims)


def _pair_key(a: str, b: str) -> str:
    return f"{a}|{b}" if a < b else f"{b}|{a}"


class NoisePool(BaseModel):
    """Running sums behind `NoiseEstimate`; serialise with model_dump / model_validate."""

    ss: dict[str, float] = {}
    df: dict[str, int] = {}
    cross: dict[str, float] = {}  # "a|b" -> sum of paired products, for composite legs
    cross_n: dict[str, int] = {}
    aa_sum: dict[str, float] = {}
    aa_n: dict[str, int] = {}
    aa_levels: dict[str, list[float]] = {}
    se2_sum: dict[str, float] = {}
    se2_n: dict[str, int] = {}
    n_pairs: int = 0
    n_candidates: int = 0

    def add_aa(self, r: RoundStat) -> None:
        """An A/A pair: both arms the same policy, so each difference is pure noise."""
        self.n_pairs += 1
        present = {d: v for d, v in r.diff.items() if v is not None}
        self._accumulate(present)
        for dim, x in present.items():
            self.aa_sum[dim] = self.aa_sum.get(dim, 0.0) + x
            self.aa_n[dim] = self.aa_n.get(dim, 0) + 1
            level = r.level.get(dim)
            if level is not None:
                self.aa_levels.setdefault(dim, []).append(level)
        self._add_se(r)

    def add_candidate(self, rounds: Sequence[RoundStat]) -> None:
        """All rounds of one finished candidate (screen included): residuals about its mean."""
        self.n_candidates += 1
        dims = {d for r in rounds for d, v in r.diff.items() if v is not None}
        means = {}
        for dim in dims:
            xs = [v for r in rounds if (v := r.diff.get(dim)) is not None]
            if len(xs) >= 2:
                means[dim] = sum(xs) / len(xs)
        for dim in means:
            self.df[dim] = self.df.get(dim, 0) - 1  # one df spent on the candidate's mean
        for r in rounds:
            present = {d: v - m for d, m in means.items() if (v := r.diff.get(d)) is not None}
            self._accumulate(present)
            self._add_se(r)

    def _accumulate(self, x: Mapping[str, float]) -> None:
        for dim, v in x.items():
            self.ss[dim] = self.ss.get(dim, 0.0) + v * v
            self.df[dim] = self.df.get(dim, 0) + 1
        keys = sorted(x)
        for i, a in enumerate(keys):
            for b in keys[i + 1 :]:
                key = _pair_key(a, b)
                self.cross[key] = self.cross.get(key, 0.0) + x[a] * x[b]
                self.cross_n[key] = self.cross_n.get(key, 0) + 1

    def _add_se(self, r: RoundStat) -> None:
        for dim, s in r.se.items():
            if s is not None and r.diff.get(dim) is not None:
                self.se2_sum[dim] = self.se2_sum.get(dim, 0.0) + s * s
                self.se2_n[dim] = self.se2_n.get(dim, 0) + 1

    def estimate(self) -> NoiseEstimate:
        import numpy as np

        sigma = {d: max(math.sqrt(self.ss[d] / df), MIN_SIGMA) for d, df in self.df.items() if df >= 1}
        df = {d: self.df[d] for d in sigma}
        corr: dict[str, dict[str, float]] = {}
        for key, total in self.cross.items():
            a, b = key.split("|")
            n = self.cross_n[key]
            if a in sigma and b in sigma and n >= 2:
                rho = float(np.clip(total / n / (sigma[a] * sigma[b]), -1.0, 1.0))
                corr.setdefault(a, {})[b] = rho
                corr.setdefault(b, {})[a] = rho
        batch = {d: 1.0 - (self.se2_sum[d] / self.se2_n[d]) / sigma[d] ** 2 for d in sigma if self.se2_n.get(d)}
        return NoiseEstimate(
            sigma=sigma,
            df=df,
            n_pairs=self.n_pairs,
            n_candidates=self.n_candidates,
            drift={d: _half_difference(v) for d, v in self.aa_levels.items() if len(v) >= 2},
            aa_mean={d: self.aa_sum[d] / n for d, n in self.aa_n.items() if n},
            batch_share=batch,
            corr=corr,
        )


def _half_difference(levels: Sequence[float]) -> float:
    import numpy as np

    half = len(levels) // 2
    return float(np.mean(levels[half:]) - np.mean(levels[:half]))


def interval(
    rounds: Sequence[RoundStat],
    dim: str,
    level: float = 0.9,
    noise: NoiseEstimate | None = None,
) -> tuple[float, float, float] | None:
    """Two-sided t-interval (mean, low, high) for a dimension's paired difference.

    With `noise`, the pooled SD and its df are used (tighter, and defined from one round);
    otherwise the rounds' own between-round SD (needs two rounds). None if not estimable.
    """
    import numpy as np

    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    xs = np.array([r.diff[dim] for r in rounds if r.diff.get(dim) is not None], dtype=float)
    n = len(xs)
    if noise is not None and dim in noise.sigma and n >= 1:
        sd, df = noise.sigma[dim], noise.df[dim]
    elif n >= 2:
        sd, df = float(xs.std(ddof=1)), n - 1
    else:
        return None
    from scipy import stats  # on first use: reading a run needs no scipy

    mean = float(xs.mean())
    half = float(stats.t.ppf(0.5 + level / 2, df)) * sd / math.sqrt(n)
    return mean, mean - half, mean + half
