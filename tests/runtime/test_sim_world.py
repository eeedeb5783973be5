"""The simulated world: determinism, common random numbers, missingness, truth, effect mixture."""

from __future__ import annotations

import numpy as np
import pytest

from sil.contract.simparams import EffectMixture, SimParams
from sil_runtime.sim.world import (
    CANDIDATE_TYPES,
    DEFAULT_DRIFT_LOADING,
    World,
    draw_candidate,
    draw_effect,
    effect_field,
)

DIMS = ("target", "crit_a", "crit_b", "aux")
CRITICAL = ("crit_a", "crit_b")
INTERCEPTS = {"target": 2.1, "crit_a": 0.9, "crit_b": 0.7, "aux": 1.2}


def params(**kw) -> SimParams:
    return SimParams(intercepts=INTERCEPTS, drift_loading={"target": 1.0}, **kw)


def only(kind: str, **ranges: tuple[float, float]) -> EffectMixture:
    """A mixture of one candidate type, with the given effect ranges."""
    return EffectMixture(**{t: float(t == kind) for t in CANDIDATE_TYPES}, **ranges)


def quiet(**kw) -> SimParams:
    """No drift and no missingness, so means and correlations are pure audit noise."""
    return params(drift_sd=0.0, p_missing_cell=0.0, p_missing_dimension=0.0, **kw)


def test_same_inputs_give_same_scores_across_instances():
    theta = np.zeros((10, 4))
    a = World(params(), DIMS, 10).audit(theta, 17, "pair-1", "audit-1")
    b = World(params(), DIMS, 10).audit(theta, 17, "pair-1", "audit-1")
    np.testing.assert_array_equal(a, b)
    c = World(params(), DIMS, 10).audit(theta, 17, "pair-1", "audit-2")
    assert not np.array_equal(np.nan_to_num(a), np.nan_to_num(c))


def test_scores_are_ordinal_1_to_10():
    w = World(params(), DIMS, 10)
    y = np.array([w.audit(np.zeros(w.shape), i, f"p{i}", f"o{i}") for i in range(200)])
    seen = y[~np.isnan(y)]
    assert seen.min() >= 1 and seen.max() <= 10 and np.all(seen == np.round(seen))


def test_world_seed_changes_seed_difficulty_and_drift():
    a, b = World(params(world_seed=1), DIMS, 10), World(params(world_seed=2), DIMS, 10)
    assert not np.allclose(a.seed_difficulty, b.seed_difficulty)
    assert a.drift(5) != b.drift(5)


def test_drift_is_deterministic_stationary_and_lazy():
    w = World(params(), DIMS, 10)
    late = w.drift(3000)
    path = np.array([w.drift(t) for t in range(3001)])
    assert path[-1] == late == World(params(), DIMS, 10).drift(3000)
    assert 0.4 < path.std() < 1.0  # stationary SD 0.7 over ~150 correlation times
    lag1 = np.corrcoef(path[:-1], path[1:])[0, 1]
    assert lag1 == pytest.approx(np.exp(-1 / 20), abs=0.03)


def test_drift_trend_and_loading():
    w = World(params(drift_sd=0.0, drift_trend=0.01), DIMS, 10)
    assert w.drift(100) == pytest.approx(1.0)
    np.testing.assert_allclose(w.loading, [1.0] + [DEFAULT_DRIFT_LOADING] * 3)
    with pytest.raises(ValueError):
        w.drift(-1)


def _paired_cell_correlation(rho: float, rounds: int = 1500) -> float:
    w = World(quiet(pair_correlation=rho), DIMS, 10)
    theta = np.zeros(w.shape)
    a = np.array([w.audit(theta, 0, f"r{i}", f"r{i}-champ") for i in range(rounds)])
    b = np.array([w.audit(theta, 0, f"r{i}", f"r{i}-cand") for i in range(rounds)])
    # residuals around each seed's mean remove the frozen seed difficulty
    ra, rb = a - a.mean(axis=0), b - b.mean(axis=0)
    return float(np.corrcoef(ra[..., 0].ravel(), rb[..., 0].ravel())[0, 1])


def test_common_random_numbers_correlate_paired_arms():
    assert _paired_cell_correlation(0.5) > 0.3
    assert abs(_paired_cell_correlation(0.0)) < 0.05


def test_pair_correlation_shrinks_paired_difference_sd():
    def round_sd(rho):
        w = World(quiet(pair_correlation=rho), DIMS, 10)
        theta = np.zeros(w.shape)
        d = [
            w.audit(theta, 0, f"r{i}", "x" + str(i)).mean(0)[0] - w.audit(theta, 0, f"r{i}", "y" + str(i)).mean(0)[0]
            for i in range(1500)
        ]
        return np.std(d)

    assert round_sd(0.5) < 0.85 * round_sd(0.0)


def test_missingness_rates():
    p = params(p_missing_cell=0.05, p_missing_dimension=0.03)
    w = World(p, DIMS, 10)
    y = np.array([w.audit(np.zeros(w.shape), 0, f"p{i}", f"o{i}") for i in range(3000)])
    whole_dim = np.isnan(y).all(axis=1).any(axis=1).mean()
    assert whole_dim == pytest.approx(0.03, abs=0.012)
    expected_cells = 0.05 + 0.95 * 0.03 / len(DIMS)
    assert np.isnan(y).mean() == pytest.approx(expected_cells, abs=0.006)


def test_expected_scores_match_monte_carlo_and_move_with_theta():
    for rho in (0.0, 0.5):
        w = World(quiet(pair_correlation=rho), DIMS, 10)
        theta = np.zeros(w.shape)
        y = np.array([w.audit(theta, 0, f"p{i}", f"o{i}") for i in range(4000)])
        np.testing.assert_allclose(w.expected_scores(theta), y.mean(axis=(0, 1)), atol=0.03)
    worse = theta.copy()
    worse[:, 0] += 1.0
    gain = w.expected_scores(worse) - w.expected_scores(theta)
    assert 0.3 < gain[0] < 1.0 and np.allclose(gain[1:], 0)


def test_missing_intercept_is_a_clear_error():
    with pytest.raises(ValueError, match="intercepts"):
        World(params(), (*DIMS, "unknown_dim"), 10)
    with pytest.raises(ValueError, match="shape"):
        World(params(), DIMS, 10).audit(np.zeros((3, 4)), 0, "p", "o")


def test_candidate_mixture_shares_and_shapes():
    rng = np.random.default_rng(0)
    draws = [draw_candidate(rng, DIMS, "target", CRITICAL) for _ in range(4000)]
    shares = np.array([sum(k == t for k, _ in draws) for t in CANDIDATE_TYPES]) / len(draws)
    np.testing.assert_allclose(shares, EffectMixture().shares(), atol=0.025)
    for kind, d in draws:
        crit_harm = d[1:3].max()
        if kind == "null":
            assert not d.any()
        elif kind == "harms_target":
            assert 0.2 <= d[0] <= 1.0 and crit_harm == 0
        elif kind == "helps_target":
            assert -1.5 <= d[0] <= -0.3 and crit_harm == 0
        elif kind == "helps_target_harms_critical":
            assert d[0] < 0 and 0.5 <= crit_harm <= 1.5 and np.count_nonzero(d[1:3]) == 1
        else:
            assert d[0] == 0 and 0.5 <= crit_harm <= 1.5
    assert draw_effect(np.random.default_rng(3), DIMS, "target", CRITICAL).shape == (4,)


def test_effect_field_is_seed_heterogeneous_around_delta():
    delta = np.array([-1.0, 0.0, 0.5, 0.0])
    field = effect_field(np.random.default_rng(1), delta, 4000, 0.5)
    assert field.shape == (4000, 4)
    np.testing.assert_allclose(field.mean(0), delta, atol=0.03)
    assert field[:, 0].std() == pytest.approx(0.5, abs=0.03)
    assert not field[:, 1].any()


def test_custom_mixture_draws_tradeoffs_in_its_ranges():
    mix = only("helps_target_harms_critical", tradeoff_harm=(0.3, 0.8))
    rng = np.random.default_rng(1)
    for _ in range(200):
        kind, d = draw_candidate(rng, DIMS, "target", CRITICAL, mix)
        assert kind == "helps_target_harms_critical"
        assert d[0] < 0 and 0.3 <= d[1:3].max() <= 0.8


def test_mixture_shares_must_sum_to_one():
    with pytest.raises(ValueError, match="sum to"):
        EffectMixture(null=0.9)


def test_mnar_loses_the_failing_cells_more_often():
    base = params(p_missing_cell=0.05, p_missing_dimension=0.0)
    mnar = base.model_copy(update={"missing_mode": "mnar", "mnar_slope": 0.3})
    harm = np.full((200, len(DIMS)), 1.0)
    rates = {}
    for name, p in (("mcar", base), ("mnar", mnar)):
        w = World(p, DIMS, 200)
        good = np.mean([np.isnan(w.audit(np.zeros(w.shape), 0, f"g{i}", f"g{i}")).mean() for i in range(10)])
        bad = np.mean([np.isnan(w.audit(harm, 0, f"b{i}", f"b{i}")).mean() for i in range(10)])
        rates[name] = (good, bad)
    assert abs(rates["mcar"][0] - rates["mcar"][1]) < 0.02  # mcar: missingness ignores the policy
    assert rates["mnar"][1] > rates["mnar"][0] + 0.05  # mnar: the worse policy loses more cells


def test_the_landscape_draws_each_edits_effect_from_the_contracts_mixture() -> None:
    """`sim.effect_mixture` reaches the runtime's own landscape, not only the bench's vector world."""
    from sil_runtime.sim.landscape import Edit, edit_field

    harms = only("harms_target", harm_target=(0.4, 0.5))
    edits = [Edit("prompt_wrapper", f"path{i}", f"{i:064x}") for i in range(40)]
    fields = [edit_field(e, DIMS, "target", CRITICAL, 8, params(effect_mixture=harms)) for e in edits]
    deltas = np.array([f[:, 0].mean() for f in fields])
    assert (deltas > 0).all(), "every edit harms the target under this mixture"
    default = [edit_field(e, DIMS, "target", CRITICAL, 8, params())[:, 0].mean() for e in edits]
    assert (np.array(default) < 0).any(), "the default mixture has edits that help the target"


def test_another_noise_seed_audits_the_same_world_afresh() -> None:
    theta = np.zeros((5, len(DIMS)))
    same = World(params(), DIMS, 5)
    again = World(params(noise_seed=20261129), DIMS, 5)  # the world_seed's own stream, named
    fresh = World(params(noise_seed=11), DIMS, 5)
    a = same.audit(theta, 3, "p", "a1")
    np.testing.assert_array_equal(a, again.audit(theta, 3, "p", "a1"))
    assert not np.array_equal(np.nan_to_num(a), np.nan_to_num(fresh.audit(theta, 3, "p", "a1")))
    np.testing.assert_array_equal(same.seed_difficulty, fresh.seed_difficulty)  # the same world
    np.testing.assert_allclose(same.expected_scores(theta), fresh.expected_scores(theta))
    assert same.drift(40) != fresh.drift(40)
