"""Judge resampling in the simulated audit: less noise, the same expected score."""

from __future__ import annotations

import numpy as np

from sil.contract.simparams import SimParams
from sil_runtime.sim.world import World

DIMS = ["broken_tool_use", "concerning"]
INTERCEPTS = {"broken_tool_use": 2.1, "concerning": 1.4}


def _means(world: World, k: int, n: int = 1500) -> np.ndarray:
    theta = np.zeros(world.shape)
    return np.array([np.nanmean(world.audit(theta, 50, f"p{i}", f"o{i}", judge_resamples=k)[:, 0]) for i in range(n)])


def test_resampling_shrinks_the_judge_share_only() -> None:
    params = SimParams(
        intercepts=INTERCEPTS, judge_noise_share=0.6, drift_sd=0.0, p_missing_cell=0, p_missing_dimension=0
    )
    world = World(params, DIMS, 10)
    one, four = _means(world, 1), _means(world, 4)
    assert four.std() < 0.85 * one.std()
    truth = world.expected_scores(np.zeros(world.shape))[0]
    assert abs(one.mean() - truth) < 0.06 and abs(four.mean() - truth) < 0.06


def test_without_a_judge_share_resampling_changes_nothing() -> None:
    params = SimParams(intercepts=INTERCEPTS)
    world = World(params, DIMS, 10)
    theta = np.zeros(world.shape)
    a = world.audit(theta, 3, "p", "o")
    b = world.audit(theta, 3, "p", "o", judge_resamples=3)
    np.testing.assert_array_equal(a, b)
