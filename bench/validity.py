"""Type-I validity of the loop's confirmation test under a pure null (research note s.5.5).

Each replicate: a fresh simulated world, `calibration_pairs` concurrent A/A pairs for the
noise estimate, a gap of 5-150 ticks (so the test runs at another point of the drift path),
then up to K paired rounds of a candidate identical to the champion. Target leg only; no
screen, no critical legs, no early stops: this measures the boundaries themselves (the full
gate can only be more conservative). Both nominal levels are tested on the same data.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from bench.simrun import SimRun
from sil.contract.schema import Promotion
from sil.contract.simparams import SimParams
from sil.stats.fitness import NoisePool, RoundStat, paired_round_for
from sil.stats.gate import make_gate
from sil_runtime.sim.world import World

LOOKS = 12
LEVELS = (0.05, 0.01)
SCENARIOS: dict[str, dict[str, float | str]] = {
    "independent": {},
    "CRN rho=0.5": {"pair_correlation": 0.5},
    "down trend": {"drift_trend": -0.005},
    "t2.5 tails": {"noise_df": 2.5},
    "heavy missing": {"p_missing_cell": 0.15, "p_missing_dimension": 0.08},
    "mnar": {"missing_mode": "mnar", "mnar_slope": 0.15},
}


@dataclass(frozen=True)
class ValidityRow:
    scenario: str
    alpha: float
    rate: float
    reps: int

    @property
    def mc_se(self) -> float:
        return math.sqrt(self.alpha * (1 - self.alpha) / self.reps)

    @property
    def within_mc_error(self) -> bool:
        """Not above nominal by more than 2.5 Monte-Carlo SEs (conservative is fine)."""
        return self.rate <= self.alpha + 2.5 * self.mc_se


# The loop gate's statistic settings the type-I test inherits (the rest is target-only).
STATISTIC_FIELDS = ("min_seed_coverage", "missing_policy", "target_trim", "target_spending")


def null_promotion(target: str, calibration_pairs: int, loop: Promotion | None = None) -> Promotion:
    inherited = {f: getattr(loop, f) for f in STATISTIC_FIELDS} if loop else {}
    return Promotion(
        target_dimensions=[target],
        critical_dimensions=[],
        replicate_k=LOOKS,
        calibration_pairs=calibration_pairs,
        futility_beta=1e-12,
        cp_floor=0.0,
        **inherited,
    )


def one_replicate(
    params: SimParams, dims: Sequence[str], n_seeds: int, promo: Promotion, rng: np.random.Generator
) -> dict[float, bool]:
    run = SimRun(World(params, dims, n_seeds), [], budget=10_000, name="validity", critical_idx=[])
    pool = NoisePool()
    for _ in range(promo.calibration_pairs):
        a, b = run.audit_pair(run.theta, run.theta)
        pool.add_aa(paired_round_for(a, b, dims, promo))
    run.used += int(rng.integers(5, 151))  # time passes before the candidate is tested
    noise = pool.estimate()
    gates = {a: make_gate(promo, noise, a) for a in LEVELS}
    open_levels, kept = set(LEVELS), {a: False for a in LEVELS}
    rounds: list[RoundStat] = []
    while open_levels and len(rounds) < LOOKS:
        a, b = run.audit_pair(run.theta, run.theta)
        rounds.append(paired_round_for(a, b, dims, promo))
        for level in list(open_levels):
            verdict = gates[level].confirm(rounds).verdict
            if verdict != "continue":
                kept[level] = verdict == "keep"
                open_levels.discard(level)
    return kept


def validity_table(
    base: SimParams, dims: Sequence[str], n_seeds: int, loop: Promotion, reps: int, seed: int
) -> list[ValidityRow]:
    promo = null_promotion(dims[0], loop.calibration_pairs, loop)
    rows: list[ValidityRow] = []
    for s_index, (name, update) in enumerate(SCENARIOS.items()):
        hits = {a: 0 for a in LEVELS}
        for i in range(reps):
            params = base.model_copy(update={**update, "world_seed": seed + 100_000 * s_index + i})
            rng = np.random.default_rng(np.random.SeedSequence([seed, s_index, i]))
            for level, kept in one_replicate(params, dims, n_seeds, promo, rng).items():
                hits[level] += kept
        rows.extend(ValidityRow(name, a, hits[a] / reps, reps) for a in LEVELS)
    return rows


def format_validity(rows: Sequence[ValidityRow]) -> str:
    lines = ["| scenario | nominal alpha | P(false KEEP) | MC se | within MC error |", "|---|---|---|---|---|"]
    for r in rows:
        ok = "yes" if r.within_mc_error else "NO"
        lines.append(f"| {r.scenario} | {r.alpha:.2f} | {r.rate:.4f} | {r.mc_se:.4f} | {ok} |")
    return "\n".join(lines)
