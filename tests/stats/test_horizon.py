"""The certification's horizon sized from the search's estimates (sil/stats/horizon.py)."""

from __future__ import annotations

import numpy as np
import pytest

from sil.contract.schema import Promotion
from sil.stats.fitness import NoiseEstimate, RoundStat
from sil.stats.horizon import champion_effect, kept_on, planned_power, reserved_looks, sized_looks
from sil.stats.judges import Trial, certify

DIMS = ["t", "c1", "c2"]
NOISE = NoiseEstimate(sigma={d: 0.7 for d in DIMS}, df={d: 40 for d in DIMS}, n_pairs=40)


def promo(tolerance: float = 0.5) -> Promotion:
    return Promotion(
        target_dimensions=["t"], critical_dimensions=["c1", "c2"], error_design="two_stage", harm_tolerance=tolerance
    )


def stat(**diff: float) -> RoundStat:
    return RoundStat(diff=dict(diff), n_seeds={d: 10 for d in diff}, se={d: None for d in diff})


def test_the_horizon_is_the_fewest_rounds_that_reach_the_power():
    effect = {"t": -0.6, "c1": 0.0, "c2": 0.0}
    n = sized_looks(promo(), NOISE, effect, cap=100, power=0.8)
    assert 1 < n < 100
    assert planned_power(promo(), NOISE, effect, n) >= 0.8 > planned_power(promo(), NOISE, effect, n - 1)


def test_a_champion_closer_to_its_tolerance_or_a_stricter_tolerance_needs_more_rounds():
    clear = {"t": -0.6, "c1": -0.1, "c2": 0.0}
    near = {"t": -0.6, "c1": 0.2, "c2": 0.0}
    assert sized_looks(promo(), NOISE, clear, 100, 0.8) < sized_looks(promo(), NOISE, near, 100, 0.8)
    assert sized_looks(promo(0.5), NOISE, clear, 100, 0.8) < sized_looks(promo(0.3), NOISE, clear, 100, 0.8)
    assert sized_looks(promo(), NOISE, clear, 100, 0.6) < sized_looks(promo(), NOISE, clear, 100, 0.9)


def test_a_champion_the_certification_cannot_pass_gets_the_whole_cap():
    beyond = {"t": -0.6, "c1": 0.6, "c2": 0.0}  # estimated past its tolerance of 0.5
    assert sized_looks(promo(), NOISE, beyond, cap=40, power=0.8) == 40
    with pytest.raises(ValueError, match="cap"):
        sized_looks(promo(), NOISE, beyond, cap=0, power=0.8)


def test_planned_power_matches_the_certifications_pass_rate():
    """The planned power at n rounds against the sequential certification itself, simulated:
    it counts only the last look, so it may understate the pass rate a little, never overstate it."""
    effect, n, reps = {"t": -0.5, "c1": 0.1, "c2": 0.0}, 20, 600
    rng = np.random.default_rng(7)
    passed = 0
    for _ in range(reps):
        rounds = [stat(**{d: effect[d] + 0.7 * rng.standard_normal() for d in DIMS}) for _ in range(n)]
        passed += certify(promo(), _pool(), rounds, n).verdict == "keep"
    planned, se = planned_power(promo(), NOISE, effect, n), np.sqrt(0.25 / reps)
    assert planned - 3 * se <= passed / reps <= planned + 0.08


def _pool():
    from sil.stats.fitness import NoisePool

    pool = NoisePool()
    rng = np.random.default_rng(3)
    for _ in range(40):
        pool.add_aa(stat(**{d: 0.7 * rng.standard_normal() for d in DIMS}))
    return pool


def test_the_reserve_is_the_floor_until_the_search_finds_something_and_the_cap_without_noise():
    floor = reserved_looks(promo(), NOISE, None, cap=70, power=0.8)
    assert 1 < floor < 70
    assert reserved_looks(promo(), None, None, cap=70, power=0.8) == 70
    clear = {"t": -1.5, "c1": -0.3, "c2": -0.3}  # needs fewer than the floor: the floor holds
    assert reserved_looks(promo(), NOISE, clear, cap=70, power=0.8) == floor
    near = {"t": -0.6, "c1": 0.3, "c2": 0.0}
    assert reserved_looks(promo(), NOISE, near, cap=70, power=0.8) > floor


def test_fewer_held_out_seeds_widen_the_noise_and_lengthen_the_horizon():
    effect = {"t": -0.6, "c1": 0.0, "c2": 0.0}
    assert sized_looks(promo(), NOISE, effect, 100, 0.8) < sized_looks(promo(), NOISE, effect, 100, 0.8, 1.3)


def test_the_champions_effect_adds_up_its_keeps_estimated_on_their_confirmation_rounds():
    screen = stat(t=-3.0, c1=0.0)  # selected the candidate: not part of the estimate
    trial = Trial(screen=screen, confirm=[stat(t=-0.4, c1=0.1), stat(t=-0.6, c1=0.3)])
    assert kept_on(trial) == list(trial.confirm)
    first = champion_effect({}, kept_on(trial))
    assert first == pytest.approx({"t": -0.5, "c1": 0.2})
    coin = Trial(screen=stat(t=-0.2, c2=0.1))  # the coin's one round, chosen by no data
    assert champion_effect(first, kept_on(coin)) == pytest.approx({"t": -0.7, "c1": 0.2, "c2": 0.1})
    assert kept_on(Trial()) == []


def test_the_outlook_is_the_planned_power_of_a_clean_champion_and_the_rounds_that_reach_the_goal():
    from sil.stats.horizon import floor_effect, outlook

    seen = outlook(promo(0.3), NOISE, looks=20, goal=0.8)
    assert seen is not None
    assert seen.power == pytest.approx(planned_power(promo(0.3), NOISE, floor_effect(promo(0.3)), 20))
    assert seen.short and seen.needed is not None and seen.needed > 20
    # with the 20-round boundaries held, `needed` is the first round count that reaches the goal
    at = outlook(promo(0.3), NOISE, looks=seen.needed, goal=0.8)
    assert at is not None and at.power >= 0.8 - 0.02  # the boundaries grow a little with more looks
    assert "about" in seen.words() and "reach 0.8" in seen.words()
    clear = outlook(promo(0.5), NOISE, looks=100, goal=0.8)
    assert clear is not None and not clear.short and "reach" not in clear.words()


def test_no_outlook_without_noise_and_no_round_count_when_a_leg_cannot_pass():
    from sil.stats.horizon import outlook

    unknown = NoiseEstimate(sigma={"t": 0.7}, df={"t": 40}, n_pairs=40)  # the critical legs have no noise
    assert outlook(promo(), unknown, looks=20, goal=0.8) is None
    hopeless = promo(0.5).model_copy(update={"futility_effect": 1e-9})  # the target leg's drift is ~0
    seen = outlook(hopeless, NOISE, looks=20, goal=0.8)
    assert seen is not None and seen.short and seen.needed is None
    assert "no number of rounds reaches 0.8" in seen.words()
