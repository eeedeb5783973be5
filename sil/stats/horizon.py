"""The certification's horizon sized from what the search measured (docs/statistics.md §3).

With `budget.certify_horizon: search`, the rounds held back for certifying an arm's champion
are the fewest that give the certification a planned power of `budget.certify_power` at the
champion's effect as the search estimated it (the sum, over the arm's KEEPs, of each KEEP's
mean paired difference on its own rounds), never fewer than a floor (a champion that moved the
target by the gate's design effect and no critical dimension), never more than
`certify_rounds`. Everything it reads is search-phase data (the frozen noise pool and the
search's rounds), so the horizon is fixed before the certification's first round and the
certification's level is untouched: only its power and the search's share of the budget move.

    effect = champion_effect({}, keep_rounds)                  # after each KEEP, summed
    looks = sized_looks(promotion, noise, effect, cap=70, power=0.8, sigma_scale=1.29)

The planned power of a leg at n rounds is Phi((null - delta) sqrt(n) / sigma - c_n), c_n the
leg's last boundary (t-adjusted, the certification's own spending), and the champion's the
product over the legs (every leg must reject: an intersection-union test). It ignores the
earlier looks' chances to reject, so it slightly understates the power.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

from pydantic import BaseModel, ConfigDict

from sil.contract.schema import Promotion
from sil.stats.fitness import NoiseEstimate, RoundStat
from sil.stats.gate import make_certify_gate, t_boundaries
from sil.stats.judges import Trial


def round_means(rounds: Sequence[RoundStat]) -> dict[str, float]:
    """Per dimension, the mean paired difference over the rounds that measured it."""
    sums: dict[str, list[float]] = {}
    for r in rounds:
        for dim, x in r.diff.items():
            if x is not None:
                sums.setdefault(dim, []).append(x)
    return {dim: sum(xs) / len(xs) for dim, xs in sums.items()}


def kept_on(trial: Trial) -> list[RoundStat]:
    """The rounds a KEEP's effect is estimated from: its confirmation rounds (the screen round
    selected the candidate, so it is left out), or the coin's one round (chosen by no data)."""
    if trial.confirm:
        return list(trial.confirm)
    return [trial.screen] if trial.screen is not None else []


def champion_effect(effect: Mapping[str, float], keep_rounds: Sequence[RoundStat]) -> dict[str, float]:
    """The champion's estimated change from the start after one more KEEP decided on
    `keep_rounds` (candidate minus the champion it replaced): the KEEPs' estimates add up."""
    step = round_means(keep_rounds)
    return {dim: effect.get(dim, 0.0) + step.get(dim, 0.0) for dim in {*effect, *step}}


def _norm_cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


def planned_power(
    promotion: Promotion,
    noise: NoiseEstimate,
    effect: Mapping[str, float],
    looks: int,
    sigma_scale: float = 1.0,
    alpha: float | None = None,
) -> float:
    """P(the certification with `looks` rounds at level `alpha` (None: alpha_certify) certifies a
    champion whose true change is `effect`, by its last look; 0 when a leg has no noise estimate
    (an unknown leg cannot pass)."""
    drifts = leg_drifts(promotion, noise, effect, looks, sigma_scale, alpha)
    return 0.0 if drifts is None else power_at(drifts, looks)


def leg_drifts(
    promotion: Promotion,
    noise: NoiseEstimate,
    effect: Mapping[str, float],
    looks: int,
    sigma_scale: float = 1.0,
    alpha: float | None = None,
) -> list[tuple[float, float]] | None:
    """Per leg of a `looks`-round certification: its drift per sqrt(round), (null - delta) / sigma
    at the champion's `effect`, and its last boundary c; None when a leg has no noise estimate."""
    gate = make_certify_gate(promotion, noise, looks, alpha=alpha, sigma_scale=sigma_scale)
    out = []
    for leg in gate.legs:
        if leg.sigma is None or leg.df is None or leg.sigma <= 0:
            return None
        c = t_boundaries(leg.alpha, looks, leg.df, leg.spending)[looks - 1]
        delta = sum(w * effect.get(dim, 0.0) for dim, w in leg.weights)
        out.append(((leg.null - delta) / leg.sigma, c))
    return out


def power_at(drifts: Sequence[tuple[float, float]], rounds: float) -> float:
    """The planned power after `rounds` rounds, every leg's boundary held at its c: the product of
    the legs' Phi(drift sqrt(rounds) - c)."""
    return math.prod(_norm_cdf(d * math.sqrt(rounds) - c) for d, c in drifts)


def sized_looks(
    promotion: Promotion,
    noise: NoiseEstimate,
    effect: Mapping[str, float],
    cap: int,
    power: float,
    sigma_scale: float = 1.0,
    alpha: float | None = None,
) -> int:
    """The fewest rounds (1..cap) whose planned power reaches `power`; `cap` when none does.

    Planned power grows with the rounds for a champion the certification can pass (each leg's
    drift (null - delta) sqrt(n) / sigma outgrows the boundary), so a bisection finds it."""
    if cap < 1:
        raise ValueError(f"the certification's cap must be >= 1 round, got {cap}")

    def enough(n: int) -> bool:
        return planned_power(promotion, noise, effect, n, sigma_scale, alpha) >= power

    if not enough(cap):
        return cap
    low, high = 0, cap  # enough(high) holds; enough(low) is taken to fail
    while high - low > 1:
        mid = (low + high) // 2
        low, high = (low, mid) if enough(mid) else (mid, high)
    return high


def floor_effect(promotion: Promotion) -> dict[str, float]:
    """The change a champion the search has not found yet is planned for: the target lowered
    by the gate's design effect (`futility_effect`), no critical dimension moved."""
    return {dim: -promotion.futility_effect for dim in promotion.target_dimensions}


def reserved_looks(
    promotion: Promotion,
    noise: NoiseEstimate | None,
    effect: Mapping[str, float] | None,
    cap: int,
    power: float,
    sigma_scale: float = 1.0,
    alpha: float | None = None,
) -> int:
    """Rounds to hold back for certifying an arm's champion while its search goes on:
    the champion's sized horizon (`effect` None = still the start) at the level the
    certification will run at (`alpha`; None: alpha_certify), never below what a future champion
    at the floor effect needs. Without a noise estimate yet, the whole cap."""
    if noise is None or not noise.sigma:
        return cap
    floor = sized_looks(promotion, noise, floor_effect(promotion), cap, power, sigma_scale, alpha)
    if effect is None:
        return floor
    return max(floor, sized_looks(promotion, noise, effect, cap, power, sigma_scale, alpha))


class Outlook(BaseModel):
    """What a certification of `looks` rounds can do for a clean champion (one that lowered the
    target by the gate's design effect and moved no critical dimension), before the search finds
    anything: its planned power, the power the contract plans for, and about how many rounds
    would reach it (None: no number of rounds does)."""

    model_config = ConfigDict(frozen=True)
    power: float
    looks: int
    goal: float
    needed: int | None

    @property
    def short(self) -> bool:
        return self.power < self.goal

    def words(self) -> str:
        said = f"planned power {self.power:.2f} for a clean champion in {self.looks} rounds"
        if not self.short:
            return said
        more = "no number of rounds reaches" if self.needed is None else f"about {self.needed} rounds reach"
        return f"{said}; {more} {self.goal:g}"


MAX_ROUNDS = 100_000


def outlook(
    promotion: Promotion,
    noise: NoiseEstimate,
    looks: int,
    goal: float,
    sigma_scale: float = 1.0,
    alpha: float | None = None,
) -> Outlook | None:
    """The certification's outlook for a clean champion (`floor_effect`); None without a noise
    estimate for every leg. The rounds needed keep the boundaries of a `looks`-round test (they
    grow a little with more looks), so they are a slight underestimate."""
    drifts = leg_drifts(promotion, noise, floor_effect(promotion), looks, sigma_scale, alpha)
    if drifts is None:
        return None
    power = power_at(drifts, looks)
    needed = None
    if all(d > 0 for d, _ in drifts) and power_at(drifts, MAX_ROUNDS) >= goal:
        low, high = 0, MAX_ROUNDS  # power_at grows with the rounds when every drift is positive
        while high - low > 1:
            mid = (low + high) // 2
            low, high = (low, mid) if power_at(drifts, mid) >= goal else (mid, high)
        needed = high
    return Outlook(power=power, looks=looks, goal=goal, needed=needed)
