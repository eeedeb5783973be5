"""fitness.py: paired round statistics, the pooled noise estimate and summary intervals."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from sil.stats.fitness import MIN_SIGMA, NoiseEstimate, NoisePool, RoundStat, interval, paired_round, score_matrix

DIMS = ["t", "c"]
SEEDS = ["s1", "s2", "s3", "s4"]


def rs(**diff: float | None) -> RoundStat:
    return RoundStat(diff=dict(diff), n_seeds={d: 10 for d in diff}, se={d: None for d in diff})


def test_score_matrix_marks_absent_and_none_as_missing():
    m = score_matrix({"s1": {"t": 2, "c": None}, "s3": {"t": 4.0, "c": 1}}, SEEDS, DIMS)
    assert m.shape == (4, 2)
    assert m[0, 0] == 2 and math.isnan(m[0, 1])
    assert np.isnan(m[1]).all() and np.isnan(m[3]).all()
    assert m[2].tolist() == [4.0, 1.0]


def test_score_matrix_rejects_seeds_outside_the_frozen_set():
    with pytest.raises(ValueError, match="outside the frozen seed set"):
        score_matrix({"other": {"t": 1}}, SEEDS, DIMS)


def test_paired_round_uses_only_seeds_scored_in_both_arms():
    cand = np.array([[1, 5], [2, 5], [np.nan, 5], [9, np.nan]], dtype=float)
    champ = np.array([[3, 4], [3, 4], [1, 4], [np.nan, 4]], dtype=float)
    r = paired_round(cand, champ, DIMS, min_coverage=0.5)
    assert r.n_seeds == {"t": 2, "c": 3}
    assert r.diff["t"] == pytest.approx(-1.5)  # seeds 1-2 only: (1-3 + 2-3)/2
    assert r.diff["c"] == pytest.approx(1.0)
    assert r.level["t"] == pytest.approx(3.0)
    assert r.se["t"] == pytest.approx(np.std([-2, -1], ddof=1) / math.sqrt(2))


def test_paired_round_low_coverage_is_unknown_not_zero():
    cand = np.array([[1, 5], [2, 5], [np.nan, 5], [np.nan, 5]], dtype=float)
    champ = np.ones((4, 2))
    r = paired_round(cand, champ, DIMS, min_coverage=0.7)
    assert r.diff["t"] is None and r.se["t"] is None
    assert r.diff["c"] == pytest.approx(4.0)


def test_paired_round_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="n_seeds, D"):
        paired_round(np.ones((4, 2)), np.ones((3, 2)), DIMS, 0.7)


def test_round_stat_round_trips_through_dict():
    r = rs(t=-0.5, c=None)
    assert RoundStat.model_validate_json(r.model_dump_json()) == r


def test_noise_pool_sigma_from_aa_pairs_and_candidate_residuals():
    pool = NoisePool()
    for x in (0.5, -1.0, 0.3):
        pool.add_aa(rs(t=x, c=None))
    pool.add_candidate([rs(t=-1.0, c=0.2), rs(t=-2.0, c=None), rs(t=0.0, c=0.4)])
    est = pool.estimate()
    # A/A: sum x^2 with df 3; candidate: residuals about -1.0 (1, 0, 1) with df 2
    ss = 0.25 + 1.0 + 0.09 + 2.0
    assert est.df["t"] == 5
    assert est.sigma["t"] == pytest.approx(math.sqrt(ss / 5))
    assert est.df["c"] == 1 and est.sigma["c"] == pytest.approx(math.sqrt(0.02))
    assert est.n_pairs == 3 and est.n_candidates == 1


def test_noise_pool_single_round_candidate_adds_no_information():
    pool = NoisePool()
    pool.add_aa(rs(t=1.0))
    pool.add_candidate([rs(t=-3.0)])
    assert pool.estimate().df["t"] == 1 and pool.estimate().sigma["t"] == pytest.approx(1.0)


def test_noise_pool_floors_sigma_and_reports_drift():
    pool = NoisePool()
    for level in (2.0, 2.0, 3.0, 3.5):
        pool.add_aa(RoundStat(diff={"t": 0.0}, n_seeds={"t": 10}, se={"t": 0.0}, level={"t": level}))
    est = pool.estimate()
    assert est.sigma["t"] == MIN_SIGMA
    assert est.drift["t"] == pytest.approx(3.25 - 2.0)
    assert est.aa_mean["t"] == 0.0


def test_noise_pool_serialises_for_crash_resume():
    pool = NoisePool()
    pool.add_aa(rs(t=0.4, c=-0.2))
    pool.add_candidate([rs(t=-1.0, c=0.1), rs(t=-0.2, c=0.3)])
    again = NoisePool.model_validate_json(pool.model_dump_json())
    assert again.estimate() == pool.estimate()


def test_composite_sigma_uses_the_estimated_correlation():
    rng = np.random.default_rng(0)
    pool = NoisePool()
    for _ in range(4000):
        z = rng.normal(size=2)
        pool.add_aa(rs(a=z[0], b=0.8 * z[0] + 0.6 * z[1]))
    est = pool.estimate()
    assert est.corr["a"]["b"] == pytest.approx(0.8, abs=0.05)
    sd, df = est.composite({"a": 0.5, "b": 0.5})
    assert sd == pytest.approx(math.sqrt(0.25 * (2 + 2 * 0.8)), abs=0.05)
    assert df == 4000
    assert est.composite({"a": 0.5, "zzz": 0.5}) is None


def test_interval_between_round_t_interval():
    rounds = [rs(t=x) for x in (-1.0, -0.5, 0.0)]
    mean, lo, hi = interval(rounds, "t", level=0.9)
    half = stats.t.ppf(0.95, 2) * 0.5 / math.sqrt(3)
    assert mean == pytest.approx(-0.5)
    assert (lo, hi) == pytest.approx((-0.5 - half, -0.5 + half))
    assert interval(rounds[:1], "t") is None
    assert interval([rs(t=None)], "t") is None


def test_interval_with_pooled_noise_works_from_one_round():
    noise = NoiseEstimate(sigma={"t": 0.8}, df={"t": 12}, n_pairs=12)
    mean, lo, hi = interval([rs(t=-0.4)], "t", level=0.8, noise=noise)
    half = stats.t.ppf(0.9, 12) * 0.8
    assert (mean, lo, hi) == pytest.approx((-0.4, -0.4 - half, -0.4 + half))


def test_bounded_missing_counts_a_candidate_gap_as_its_worst_score():
    champ = np.array([[3.0, 2.0], [4.0, 2.0], [2.0, np.nan], [5.0, 2.0]])
    cand = np.array([[2.0, 1.0], [np.nan, 1.0], [1.0, 1.0], [1.0, np.nan]])
    dropped = paired_round(cand, champ, ["t", "c"], 0.5)
    bounded = paired_round(cand, champ, ["t", "c"], 0.5, missing="bound")
    # drop: seeds 0, 2, 3 on t: (-1 - 1 - 4) / 3; bound: seed 1 counts as max(2, 4) - 4 = 0
    assert dropped.diff["t"] == pytest.approx(-2.0)
    assert bounded.diff["t"] == pytest.approx(-6.0 / 4)
    assert bounded.imputed == {"t": 1, "c": 1} and dropped.imputed == {}
    # c: the candidate's worst is 1 but the champion scored 2, so the gap counts as 2 - 2 = 0
    assert bounded.diff["c"] == pytest.approx(-2.0 / 3)
    assert bounded.n_seeds["t"] == 4 and dropped.n_seeds["t"] == 3
    assert bounded.diff["t"] >= dropped.diff["t"]  # a gap never makes the candidate look better


def test_bounded_missing_keeps_coverage_on_real_scores():
    champ = np.full((4, 1), 3.0)
    cand = np.array([[2.0], [np.nan], [np.nan], [np.nan]])
    assert paired_round(cand, champ, ["t"], 0.5, missing="bound").diff["t"] is None


def test_trim_makes_the_target_statistic_robust_to_one_wild_seed():
    champ = np.full((10, 2), 3.0)
    cand = np.full((10, 2), 2.0)
    cand[0] = 10.0  # one seed's judge went wild on both dims
    r = paired_round(cand, champ, ["t", "c"], 0.7, trim={"t": 0.2})
    assert r.diff["t"] == pytest.approx(-1.0)  # trimmed: the outlier is cut
    assert r.diff["c"] == pytest.approx((7.0 - 9.0) / 10)  # untrimmed dims keep the plain mean
