"""Calibration of the simulated audit against the noise seen in practice (docs/statistics.md §4).

Simulates many worlds (world_seed varied from the bench's world 0) of an unchanged policy with
the default contract's `sim` parameters and prints each calibration figure next to its target. Simulated figures:
they check the model's noise, not any model's behaviour.

    python bench/calibrate_sim.py                 # 3000 worlds, program.md, ~15 s
    python bench/calibrate_sim.py --worlds 500 --contract other.md
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import numpy as np

from bench.proposers import WORLD0
from sil.contract import prepare
from sil.contract.schema import load_contract
from sil.contract.simparams import SimParams
from sil_runtime.sim.world import World

REPO = Path(__file__).resolve().parents[1]
BASELINE_TICKS = range(0, 5)  # the 5-audit baseline
NEVER_TICKS = range(5, 15)  # the never arm's 10 audits, right after
NULL_TICKS = range(15, 35)  # 20 single audits of null candidates
FIXED_TICK, REPLICATE_TICK = 50, 40
FIXED_AUDITS, REPLICATES = 6, 3
OBSERVED_JUMP = 0.71  # never arm 3.38 minus baseline 2.667
PAIRED_ROUNDS = 3000

# (label, calibration target (docs/statistics.md §4), what was observed in the real run)
TARGETS = {
    "true_mean": (2.64, "baseline 2.667"),
    "true_mean_sd": (0.33, ""),
    "baseline_mean": (2.69, "2.667"),
    "never_minus_baseline_sd": (0.44, "+0.71"),
    "p_abs_jump": (0.10, "observed |diff| 0.71"),
    "fixed_time_sd": (0.55, ""),
    "best_of_20_minus_truth": (-1.01, "1.6 vs ~2.7-3.4"),
    "p_best_of_20_le_minus_1_5": (0.08, ""),
    "median_range_of_3": (0.90, "0.8 (3.0-3.8)"),
}
PAIRED_TARGETS = {"independent": 0.84, "CRN rho=0.5": 0.62, "30 seeds": 0.57, "30 seeds + CRN": 0.41}


def target_mean(world: World, theta: np.ndarray, tick: int, key: str) -> float:
    return float(np.nanmean(world.audit(theta, tick, key, key)[:, 0]))


def simulate_world(params: SimParams, dims: list[str], n_seeds: int, w: int) -> dict[str, float]:
    world = World(params, dims, n_seeds)
    theta = np.zeros(world.shape)
    truth = world.expected_scores(theta)[0]
    # an audit that dropped the target dimension counts as not run (NaN-aware statistics)
    base = np.nanmean([target_mean(world, theta, t, f"b{t}") for t in BASELINE_TICKS])
    never = np.nanmean([target_mean(world, theta, t, f"n{t}") for t in NEVER_TICKS])
    fixed = [target_mean(world, theta, FIXED_TICK, f"f{i}") for i in range(FIXED_AUDITS)]
    best = np.nanmin([target_mean(world, theta, t, f"c{t}") for t in NULL_TICKS])
    reps = [target_mean(world, theta, REPLICATE_TICK, f"r{i}") for i in range(REPLICATES)]
    return {
        "truth": truth,
        "base": base,
        "never": never,
        "fixed_sd": np.nanstd(fixed, ddof=1),
        "best": best,
        "range3": np.nanmax(reps) - np.nanmin(reps),
    }


def paired_round_sd(params: SimParams, dims: list[str], n_seeds: int) -> np.ndarray:
    """SD over worlds of one A/A round: mean over seeds scored in both arms of (a - b), per dim."""
    rng = np.random.default_rng(7)
    diffs = []
    for r in range(PAIRED_ROUNDS):
        world = World(params.model_copy(update={"world_seed": params.world_seed + r}), dims, n_seeds)
        theta, tick = np.zeros(world.shape), int(rng.integers(0, 250))
        a = world.audit(theta, tick, f"pair{r}", f"a{r}")
        b = world.audit(theta, tick, f"pair{r}", f"b{r}")
        diffs.append(np.nanmean(a - b, axis=0))
    return np.nanstd(np.array(diffs), axis=0)


def report(results: list[dict[str, float]]) -> dict[str, float]:
    col = {k: np.array([r[k] for r in results]) for k in results[0]}
    jump = col["never"] - col["base"]
    best_gap = col["best"] - col["truth"]
    return {
        "true_mean": col["truth"].mean(),
        "true_mean_sd": col["truth"].std(),
        "baseline_mean": col["base"].mean(),
        "never_minus_baseline_sd": jump.std(),
        "p_abs_jump": float((np.abs(jump) >= OBSERVED_JUMP).mean()),
        "fixed_time_sd": float(np.nanmedian(col["fixed_sd"])),
        "best_of_20_minus_truth": float(np.median(best_gap)),
        "p_best_of_20_le_minus_1_5": float((best_gap <= -1.5).mean()),
        "median_range_of_3": float(np.nanmedian(col["range3"])),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--worlds", type=int, default=3000)
    ap.add_argument("--contract", type=Path, default=REPO / "program.md")
    args = ap.parse_args()
    try:
        params = load_contract(args.contract).contract.settings(SimParams)
    except ValueError:
        raise SystemExit(f"{args.contract} has no sim section: calibration needs backend sim") from None
    dims = [d.name for d in prepare.load_rubric()]
    target = params.landscape_target
    dims.remove(target)
    dims.insert(0, target)  # column 0 is the target
    n_seeds = len(prepare.load_seeds())
    warnings.filterwarnings("ignore", category=RuntimeWarning)  # all-NaN slices are expected
    start = time.monotonic()
    results = [  # numbered from the bench's world 0, as the quoted figures were, whichever world the contract runs
        simulate_world(params.model_copy(update={"world_seed": WORLD0[0] + w}), dims, n_seeds, w)
        for w in range(args.worlds)
    ]
    print(
        f"SIMULATED calibration: {args.worlds} worlds, {n_seeds} seeds, target {target} "
        f"(unchanged policy, default sim params from {args.contract.name})\n"
    )
    print(f"{'figure':28s} {'simulated':>10s} {'target':>10s}  observed")
    for key, value in report(results).items():
        ref, observed = TARGETS[key]
        print(f"{key:28s} {value:10.3f} {ref:10.3f}  {observed}")
    print("\npaired-round SD (A/A, one candidate minus one concurrent champion audit)")
    crit = [
        dims.index(c)
        for c in (
            "input_hallucination",
            "unprompted_deception_toward_user",
            "cooperation_with_human_misuse",
            "concerning",
        )
        if c in dims
    ]
    for label, update, seeds in (
        ("independent", {}, n_seeds),
        ("CRN rho=0.5", {"pair_correlation": 0.5}, n_seeds),
        ("30 seeds", {}, 30),
        ("30 seeds + CRN", {"pair_correlation": 0.5}, 30),
    ):
        sd = paired_round_sd(params.model_copy(update=update), dims, seeds)
        crit_sd = f"critical {sd[crit].min():.2f}-{sd[crit].max():.2f}" if crit else ""
        print(f"  {label:16s} target {sd[0]:.3f} (calibration target {PAIRED_TARGETS[label]:.2f})  {crit_sd}")
    print(f"\n{time.monotonic() - start:.1f} s")


if __name__ == "__main__":
    main()
