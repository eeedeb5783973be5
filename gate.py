"""KEEP / REVERT: the Sequential Paired Gate (SPG) and the run's error budget (pure, no I/O).

A candidate is judged on paired rounds (fitness.RoundStat): candidate and champion audited at
the same time on the same seeds. The gate has two stages (research note stats-gate.md, s.3):

1. screen: one round, then its data are discarded for inference. It can only REVERT or let
   the candidate go on; it spends none of the run's alpha.
2. confirm: fresh rounds, group-sequential over at most K looks. O'Brien-Fleming-type
   Lan-DeMets spending with boundaries from exact recursive integration (Armitage,
   McPherson and Rowe), t-adjusted for the pooled noise estimate's degrees of freedom.
   KEEP needs every leg across its boundary together (an intersection-union test):
   target superiority, non-inferiority on each critical dimension at its margin, and one
   composite non-inferiority test on the auxiliary dimensions. A leg with no data is unknown
   and blocks KEEP. Futility, conditional power and a harm veto stop early and only REVERT,
   so they cannot raise the false-KEEP rate.

`ErrorBudget` splits the run's alpha over confirmations (online Bonferroni = FWER, or
e-LOND = FDR). The bench (`python -m bench.gates`) drives this same module.

    gate = make_gate(contract.promotion, pool.estimate(), alpha_target=budget.next_alpha())
    d = gate.screen(first_round)               # "continue" or "revert"
    d = gate.confirm(fresh_rounds)             # "continue", "keep" or "revert"
    budget = budget.record(d.alpha, kept=d.verdict == "keep")
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field
from scipy import optimize, special, stats

from fitness import NoiseEstimate, RoundStat
from loop.contract import Promotion

GRID_STEP = 0.02  # integration step for the boundary recursion, in units of one round's SD
GRID_HALF_WIDTH_SD = 9.0  # grid reaches this many SDs of S_K beyond the boundaries
KERNEL_HALF_WIDTH = 12.0  # normal increment kernel truncated at +-12 SD
AUX_LEG = "auxiliary_composite"

Verdict = Literal["continue", "keep", "revert"]
Stage = Literal["screen", "confirm", "certify"]
LegKind = Literal["target", "critical", "auxiliary"]


# ---------------------------------------------------------------------------- boundaries


def obf_spending(alpha: float, looks: int) -> np.ndarray:
    """Alpha spent at each of `looks` equally spaced looks: a*(t) = 2 - 2 Phi(z_{1-a/2}/sqrt t)."""
    z = stats.norm.isf(alpha / 2)
    t = np.arange(1, looks + 1) / looks
    cumulative = np.concatenate([[0.0], 2 * stats.norm.sf(z / np.sqrt(t))])
    return np.diff(cumulative)


@lru_cache(maxsize=1024)
def obf_boundaries(alpha: float, looks: int) -> tuple[float, ...]:
    """One-sided z boundaries c_1..c_K: reject H0 (mean >= 0) at look k if Z_k <= -c_k.

    Z_k = S_k / sqrt(k), S_k a sum of k iid N(0, 1) rounds. The crossing probability at each
    look, given no earlier crossing, equals the O'Brien-Fleming-type spending increment. The
    sub-density of S_k on the continuation region is carried forward on a grid by direct
    convolution with the N(0, 1) increment; crossing masses are integrated exactly in log
    space, so increments as small as 1e-16 (early looks at small alpha) stay accurate.
    c_k = inf when nothing is spent at look k.
    """
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if looks < 1:
        raise ValueError(f"looks must be >= 1, got {looks}")
    increments = obf_spending(alpha, looks)
    h = GRID_STEP
    half = GRID_HALF_WIDTH_SD * math.sqrt(looks) + stats.norm.isf(alpha / looks)
    grid = np.arange(-half, half + h / 2, h)
    kernel = stats.norm.pdf(np.arange(-KERNEL_HALF_WIDTH, KERNEL_HALF_WIDTH + h / 2, h))
    mass: np.ndarray | None = None  # P(S_{k-1} in cell, no crossing yet), per grid cell
    boundaries: list[float] = []
    for k in range(1, looks + 1):
        cut = _crossing_cut(mass, grid, increments[k - 1])
        boundaries.append(-cut / math.sqrt(k) if math.isfinite(cut) else math.inf)
        density = stats.norm.pdf(grid) if mass is None else np.convolve(mass, kernel, "same")
        # each grid point stands for the cell [s - h/2, s + h/2]; keep the part above the cut
        mass = density * h * np.clip((grid + h / 2 - cut) / h, 0.0, 1.0)
    return tuple(boundaries)


def _crossing_cut(mass: np.ndarray | None, grid: np.ndarray, target: float) -> float:
    """s with P(S_k <= s, no earlier crossing) == target; -inf if nothing is to be spent.

    P(S_k <= s, ...) = sum_u mass_{k-1}(u) Phi(s - u), monotone in s: solved by bisection.
    """
    if target <= 1e-300:
        return -math.inf
    if mass is None:
        return float(stats.norm.ppf(target))
    keep = mass > 0
    log_mass, points = np.log(mass[keep]), grid[keep]
    log_target = math.log(target)

    def excess(s: float) -> float:
        return float(special.logsumexp(log_mass + stats.norm.logcdf(s - points))) - log_target

    lo, hi = grid[0] - 40.0, grid[-1]
    if excess(lo) >= 0:
        return -math.inf
    return float(optimize.brentq(excess, lo, hi, xtol=1e-9))


@lru_cache(maxsize=8192)
def t_boundaries(alpha: float, looks: int, df: int | None) -> tuple[float, ...]:
    """OBF boundaries moved to the t scale: c' = F^-1_{t,df}(Phi(c)). df None = known sigma."""
    z = obf_boundaries(alpha, looks)
    if df is None:
        return z
    if df < 1:
        raise ValueError(f"df must be >= 1, got {df}")
    return tuple(float(stats.t.isf(stats.norm.sf(c), df)) if math.isfinite(c) else c for c in z)


# ---------------------------------------------------------------------------- verdicts


class LegResult(BaseModel):
    """One hypothesis of the intersection-union test at the current look.

    statistic = sum(X - null) / (sigma sqrt n); the leg passes when statistic <= boundary.
    passed None = unknown (no data or no noise estimate), which blocks KEEP.
    """

    model_config = ConfigDict(frozen=True)
    dim: str
    kind: LegKind
    n: int
    estimate: float | None
    statistic: float | None
    boundary: float | None
    passed: bool | None
    null: float = 0.0
    alpha: float = 0.0
    sigma: float | None = None
    df: int | None = None


class GateDecision(BaseModel):
    model_config = ConfigDict(frozen=True)
    verdict: Verdict
    stage: Stage
    look: int
    reason: str
    legs: list[LegResult]
    alpha: float  # the target leg's level: what a confirmation spends of the run's budget
    diagnostics: dict[str, float] = {}


class Gate(Protocol):
    def screen(self, first: RoundStat) -> GateDecision: ...

    def confirm(self, rounds: Sequence[RoundStat]) -> GateDecision: ...


# ---------------------------------------------------------------------------- legs


@dataclass(frozen=True)
class Leg:
    """A one-sided test of H0: sum_d w_d delta_d >= null against < null."""

    name: str
    kind: LegKind
    weights: tuple[tuple[str, float], ...]
    null: float
    alpha: float
    sigma: float | None
    df: int | None

    def value(self, r: RoundStat) -> float | None:
        total = 0.0
        for dim, w in self.weights:
            x = r.diff.get(dim)
            if x is None:
                return None
            total += w * x
        return total

    def values(self, rounds: Sequence[RoundStat]) -> list[float]:
        return [v for v in (self.value(r) for r in rounds) if v is not None]


def build_legs(promotion: Promotion, noise: NoiseEstimate, alpha_target: float) -> list[Leg]:
    """Target, critical and auxiliary-composite legs with frozen sigma and df."""
    legs = []
    for dim in promotion.target_dimensions:
        legs.append(_single(dim, "target", -promotion.superiority_margin, alpha_target, noise))
    for dim in promotion.critical_dimensions:
        legs.append(
            _single(dim, "critical", promotion.critical_margin, promotion.alpha_noninferiority, noise)
        )
    aux = promotion.auxiliary_dimensions
    if aux:
        weights = {d: 1.0 / len(aux) for d in aux}
        sd = noise.composite(weights)
        legs.append(
            Leg(
                name=AUX_LEG,
                kind="auxiliary",
                weights=tuple(weights.items()),
                null=promotion.auxiliary_margin,
                alpha=promotion.alpha_noninferiority,
                sigma=sd[0] if sd else None,
                df=sd[1] if sd else None,
            )
        )
    return legs


def _single(dim: str, kind: LegKind, null: float, alpha: float, noise: NoiseEstimate) -> Leg:
    return Leg(
        name=dim,
        kind=kind,
        weights=((dim, 1.0),),
        null=null,
        alpha=alpha,
        sigma=noise.sigma.get(dim),
        df=noise.df.get(dim),
    )


def leg_result(leg: Leg, rounds: Sequence[RoundStat], looks: int) -> LegResult:
    """Test one leg on the rounds so far; its information index is its own count of rounds."""
    xs = leg.values(rounds)
    n = len(xs)
    estimate = float(np.mean(xs)) if n else None
    common = dict(
        dim=leg.name, kind=leg.kind, n=n, estimate=estimate, null=leg.null, alpha=leg.alpha,
        sigma=leg.sigma, df=leg.df,
    )
    if n == 0 or leg.sigma is None or leg.df is None:
        return LegResult(statistic=None, boundary=None, passed=None, **common)
    stat = (sum(xs) - n * leg.null) / (leg.sigma * math.sqrt(n))
    c = t_boundaries(leg.alpha, looks, leg.df)[min(n, looks) - 1]
    return LegResult(statistic=stat, boundary=-c, passed=bool(stat <= -c), **common)


# ---------------------------------------------------------------------------- SPG


@dataclass(frozen=True)
class StopRules:
    """Early stops of the confirmation; each can only REVERT."""

    futility_effect: float = 0.5
    futility_beta: float = 0.1
    harm_veto_beta: float = 0.01
    cp_floor: float = 0.05
    enabled: bool = True


@dataclass(frozen=True)
class SequentialPairedGate:
    legs: tuple[Leg, ...]
    looks: int
    alpha: float
    screen_sd: float = 0.3
    screen_critical_sd: float = 2.0
    rules: StopRules = StopRules()
    stage: Stage = "confirm"

    def screen(self, first: RoundStat) -> GateDecision:
        """One round: go on only if the target moved the right way by screen_sd sigmas and
        no critical or auxiliary leg is far past its margin. Never KEEPs."""
        failures = []
        for leg in self.legs:
            x = leg.value(first)
            if leg.kind == "target":
                if x is None or leg.sigma is None:
                    failures.append(f"{leg.name} unknown")
                elif x > leg.null - self.screen_sd * leg.sigma:
                    failures.append(f"{leg.name} {x:+.2f} > {leg.null - self.screen_sd * leg.sigma:+.2f}")
            elif x is not None and leg.sigma is not None:
                limit = leg.null + self.screen_critical_sd * leg.sigma
                if x > limit:
                    failures.append(f"{leg.name} {x:+.2f} > {limit:+.2f}")
        legs = [leg_result(leg, [first], self.looks) for leg in self.legs]
        if failures:
            return GateDecision(
                verdict="revert", stage="screen", look=1, legs=legs, alpha=0.0,
                reason="screen failed: " + "; ".join(failures),
            )
        return GateDecision(
            verdict="continue", stage="screen", look=1, legs=legs, alpha=0.0,
            reason="screen passed; confirmation on fresh rounds",
        )

    def confirm(self, rounds: Sequence[RoundStat], horizon: int | None = None) -> GateDecision:
        """Decide after len(rounds) fresh rounds. `horizon` = rounds the caller can still
        afford in total (defaults to K); it only sharpens the conditional-power stop."""
        n = len(rounds)
        if not 1 <= n <= self.looks:
            raise ValueError(f"confirm needs 1..{self.looks} fresh rounds, got {n}")
        horizon = self.looks if horizon is None else max(n, min(horizon, self.looks))
        legs = [leg_result(leg, rounds, self.looks) for leg in self.legs]

        def decide(verdict: Verdict, reason: str, diag: dict[str, float]) -> GateDecision:
            return GateDecision(
                verdict=verdict, stage=self.stage, look=n, legs=legs, alpha=self.alpha,
                reason=reason, diagnostics=diag,
            )

        if all(r.passed for r in legs):
            return decide("keep", f"all {len(legs)} legs crossed their boundaries at look {n}", {})
        stop, diag = self._early_stop(rounds, n, horizon)
        if stop:
            return decide("revert", stop, diag)
        if n >= horizon:
            unknown = [r.dim for r in legs if r.passed is None]
            why = f"; unknown: {', '.join(unknown)}" if unknown else ""
            return decide("revert", f"no KEEP after {n} rounds{why}", diag)
        return decide("continue", f"look {n} of {self.looks}: no boundary crossed by all legs", diag)

    def _early_stop(self, rounds: Sequence[RoundStat], n: int, horizon: int) -> tuple[str, dict[str, float]]:
        rules, diag = self.rules, {}
        if not rules.enabled:
            return "", diag
        for leg in self.legs:
            if leg.sigma is None:
                continue
            xs = leg.values(rounds)
            k, s = len(xs), sum(xs)
            if leg.kind == "target":
                d = rules.futility_effect
                shifted = s - k * leg.null
                llr = (-d * shifted - k * d * d / 2) / leg.sigma**2
                diag[f"futility_llr:{leg.name}"] = llr
                if llr <= math.log(rules.futility_beta):
                    return f"futility: {leg.name} evidence favours no effect over {d}", diag
                cp = self._conditional_power(leg, shifted, k, horizon - n)
                if cp is not None:
                    diag[f"conditional_power:{leg.name}"] = cp
                    if cp < rules.cp_floor:
                        return f"conditional power {cp:.3f} < {rules.cp_floor} on {leg.name}", diag
            elif leg.kind == "critical":
                m = leg.null
                llr = (m * s - k * m * m / 2) / leg.sigma**2
                diag[f"harm_llr:{leg.name}"] = llr
                if llr >= math.log(1 / rules.harm_veto_beta):
                    return f"harm veto: {leg.name} evidence of a {m} regression", diag
        return "", diag

    def _conditional_power(self, leg: Leg, shifted: float, k: int, remaining: int) -> float | None:
        """P(cross at the last affordable look | data so far, true effect = design effect)."""
        if remaining <= 0:
            return None
        final = min(k + remaining, self.looks)
        c = t_boundaries(leg.alpha, self.looks, leg.df)[final - 1]
        need = -c * leg.sigma * math.sqrt(final)  # S at the final look must be <= need
        mean = shifted - remaining * self.rules.futility_effect
        return float(stats.norm.cdf((need - mean) / (leg.sigma * math.sqrt(remaining))))


# ---------------------------------------------------------------------------- paired margin


@dataclass(frozen=True)
class PairedMarginGate:
    """The simple alternative: one fixed-size paired t-test after K rounds, no early looks.

    Same screen and legs as SPG; each leg passes if sum(X - null)/(sigma sqrt n) <=
    -t_{1-alpha, df}. Valid, but spends all K rounds on every screened-in candidate.
    """

    legs: tuple[Leg, ...]
    looks: int
    alpha: float
    screen_sd: float = 0.3
    screen_critical_sd: float = 2.0

    def screen(self, first: RoundStat) -> GateDecision:
        return SequentialPairedGate(
            self.legs, self.looks, self.alpha, self.screen_sd, self.screen_critical_sd
        ).screen(first)

    def confirm(self, rounds: Sequence[RoundStat], horizon: int | None = None) -> GateDecision:
        n = len(rounds)
        if not 1 <= n <= self.looks:
            raise ValueError(f"confirm needs 1..{self.looks} fresh rounds, got {n}")
        last = n >= (self.looks if horizon is None else min(horizon, self.looks))
        legs = [leg_result(leg, rounds, 1) for leg in self.legs]  # one look: c = z_{1-alpha}
        if not last:
            return GateDecision(
                verdict="continue", stage="confirm", look=n, legs=legs, alpha=self.alpha,
                reason=f"fixed design: decision after {self.looks} rounds",
            )
        if all(r.passed for r in legs):
            return GateDecision(
                verdict="keep", stage="confirm", look=n, legs=legs, alpha=self.alpha,
                reason=f"all {len(legs)} legs passed after {n} rounds",
            )
        failed = [r.dim for r in legs if not r.passed]
        return GateDecision(
            verdict="revert", stage="confirm", look=n, legs=legs, alpha=self.alpha,
            reason=f"not passed after {n} rounds: {', '.join(failed)}",
        )


def make_gate(promotion: Promotion, noise: NoiseEstimate, alpha_target: float) -> Gate:
    """The contract's gate for one candidate, with the noise estimate frozen now."""
    if not 0 < alpha_target < 1:
        raise ValueError(f"alpha_target must be in (0, 1), got {alpha_target}")
    legs = tuple(build_legs(promotion, noise, alpha_target))
    if promotion.gate == "paired_margin":
        return PairedMarginGate(
            legs, promotion.replicate_k, alpha_target, promotion.screen_sd,
            promotion.screen_critical_sd,
        )
    rules = StopRules(
        futility_effect=promotion.futility_effect,
        futility_beta=promotion.futility_beta,
        harm_veto_beta=promotion.harm_veto_beta,
        cp_floor=promotion.cp_floor,
    )
    return SequentialPairedGate(
        legs, promotion.replicate_k, alpha_target, promotion.screen_sd,
        promotion.screen_critical_sd, rules,
    )


def make_certify_gate(
    promotion: Promotion, noise: NoiseEstimate, rounds: int, alpha: float | None = None
) -> SequentialPairedGate:
    """Final certification of champion vs the starting (or last certified) policy.

    Same legs, no screen use and no futility stops, `rounds` looks, level alpha_certify.
    If it does not KEEP, the loop rolls back to the last certified policy.
    """
    if rounds < 1:
        raise ValueError(f"certification needs at least 1 round, got {rounds}")
    level = promotion.alpha_certify if alpha is None else alpha
    legs = tuple(build_legs(promotion, noise, level))
    return SequentialPairedGate(
        legs, rounds, level, rules=StopRules(enabled=False), stage="certify"
    )


# ---------------------------------------------------------------------------- error budget


class ErrorBudget(BaseModel):
    """Run-level alpha over confirmations; every update returns a new object.

    fwer (online Bonferroni): alpha_j = alpha_run / J for j <= J, so P(any false KEEP in the
    run) <= sum alpha_j <= alpha_run under any dependence. elond (Xu & Ramdas 2024): alpha_j
    = alpha_run * (R + 1) / J with R the KEEPs so far; FDR <= alpha_run. In both, `spent` is
    alpha_run * j / J (the share of the allocation used) and the run stops confirming at J.
    """

    model_config = ConfigDict(frozen=True)
    alpha_run: float = Field(gt=0, lt=1)
    max_confirmations: int = Field(ge=1)
    mode: Literal["fwer", "elond"] = "fwer"
    tested: list[float] = []  # alpha of each confirmation, in order
    kept: list[bool] = []

    @classmethod
    def from_promotion(cls, promotion: Promotion) -> ErrorBudget:
        return cls(
            alpha_run=promotion.alpha_run,
            max_confirmations=promotion.max_confirmations,
            mode=promotion.error_control,
        )

    @property
    def confirmations(self) -> int:
        return len(self.tested)

    @property
    def keeps(self) -> int:
        return sum(self.kept)

    @property
    def spent(self) -> float:
        return self.alpha_run * self.confirmations / self.max_confirmations

    @property
    def remaining(self) -> float:
        left = self.max_confirmations - self.confirmations
        return self.alpha_run * left / self.max_confirmations

    def next_alpha(self) -> float | None:
        if self.confirmations >= self.max_confirmations:
            return None
        gamma = 1.0 / self.max_confirmations
        if self.mode == "fwer":
            return self.alpha_run * gamma
        return min(self.alpha_run * gamma * (self.keeps + 1), 0.5)

    def record(self, alpha: float, kept: bool) -> ErrorBudget:
        expected = self.next_alpha()
        if expected is None:
            raise ValueError("the run's error budget is exhausted: no confirmation may start")
        if not math.isclose(alpha, expected, rel_tol=1e-12):
            raise ValueError(f"confirmation ran at alpha {alpha}, but the budget issued {expected}")
        return self.model_copy(
            update={"tested": [*self.tested, expected], "kept": [*self.kept, bool(kept)]}
        )


def leg_summary(decision: GateDecision) -> Mapping[str, bool | None]:
    """dim -> passed, for compact display."""
    return {leg.dim: leg.passed for leg in decision.legs}
