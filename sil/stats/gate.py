"""KEEP / REVERT: the Sequential Paired Gate (SPG) and the run's error budget (pure, no I/O).

A candidate is judged on paired rounds (fitness.RoundStat): candidate and champion audited at
the same time on the same seeds. The gate has two stages (docs/statistics.md §3):

1. screen: one round, then its data are discarded for inference. It can only REVERT or let
   the candidate go on; it spends none of the run's alpha.
2. confirm: fresh rounds, group-sequential over at most K looks. O'Brien-Fleming-type
   Lan-DeMets spending with boundaries from exact recursive integration (Armitage,
   McPherson and Rowe), t-adjusted for the pooled noise estimate's degrees of freedom.
   KEEP needs every leg to have crossed its boundary on this confirmation's fresh rounds
   (an intersection-union test; each leg is its own group-sequential test, so a crossing
   stands once made): target superiority, non-inferiority on each critical dimension at its
   margin, and one composite non-inferiority test on the auxiliary dimensions. A leg with
   no data is unknown and blocks KEEP. Futility, conditional power and a harm veto stop early and only REVERT,
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
from dataclasses import dataclass, replace
from enum import StrEnum
from functools import lru_cache
from typing import TYPE_CHECKING, Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from sil.contract.schema import Promotion
from sil.stats.alphaspent import alpha_spent
from sil.stats.fitness import NoiseEstimate, RoundStat

if TYPE_CHECKING:  # numpy and scipy load on first use: reading a run (sil runs, status) needs neither
    import numpy as np

GRID_STEP = 0.02  # integration step for the boundary recursion, in units of one round's SD
GRID_HALF_WIDTH_SD = 9.0  # grid reaches this many SDs of S_K beyond the boundaries
KERNEL_HALF_WIDTH = 12.0  # normal increment kernel truncated at +-12 SD
AUX_LEG = "auxiliary_composite"
ALPHA_GRID_RATIO = 1.02  # forecast alpha levels are rounded down onto this log grid

Verdict = Literal["continue", "keep", "revert"]
GateStage = Literal["screen", "confirm", "certify"]
LegKind = Literal["target", "critical", "auxiliary"]
Spending = Literal["obf", "pocock"]


# ---------------------------------------------------------------------------- boundaries


def obf_spending(alpha: float, looks: int) -> np.ndarray:
    """Alpha spent at each of `looks` equally spaced looks: a*(t) = 2 - 2 Phi(z_{1-a/2}/sqrt t)."""
    import numpy as np
    from scipy import stats

    z = stats.norm.isf(alpha / 2)
    t = np.arange(1, looks + 1) / looks
    cumulative = np.concatenate([[0.0], 2 * stats.norm.sf(z / np.sqrt(t))])
    return np.diff(cumulative)


def pocock_spending(alpha: float, looks: int) -> np.ndarray:
    """Lan-DeMets Pocock-type spending a*(t) = alpha ln(1 + (e - 1) t): spends early, so a
    leg with ample evidence crosses in fewer rounds (at a higher last boundary than OBF)."""
    import numpy as np

    t = np.arange(1, looks + 1) / looks
    cumulative = np.concatenate([[0.0], alpha * np.log1p((math.e - 1) * t)])
    return np.diff(cumulative)


SPENDING = {"obf": obf_spending, "pocock": pocock_spending}


@lru_cache(maxsize=1024)
def obf_boundaries(alpha: float, looks: int, spending: Spending = "obf") -> tuple[float, ...]:
    """One-sided z boundaries c_1..c_K: reject H0 (mean >= 0) at look k if Z_k <= -c_k.

    Z_k = S_k / sqrt(k), S_k a sum of k iid N(0, 1) rounds. The crossing probability at each
    look, given no earlier crossing, equals the O'Brien-Fleming-type spending increment. The
    sub-density of S_k on the continuation region is carried forward on a grid by direct
    convolution with the N(0, 1) increment; crossing masses are integrated exactly in log
    space, so increments as small as 1e-16 (early looks at small alpha) stay accurate.
    c_k = inf when nothing is spent at look k.
    """
    import numpy as np
    from scipy import stats

    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    if looks < 1:
        raise ValueError(f"looks must be >= 1, got {looks}")
    increments = SPENDING[spending](alpha, looks)
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
    import numpy as np
    from scipy import optimize, special, stats

    if target <= 1e-300:
        return -math.inf
    if mass is None:
        return float(stats.norm.ppf(target))
    keep = mass > 0
    log_mass, points = np.log(mass[keep]), grid[keep]
    log_target = math.log(target)

    def excess(s: float) -> float:
        v = log_mass + special.log_ndtr(s - points)
        top = v.max()
        return float(top + np.log(np.exp(v - top).sum())) - log_target

    lo, hi = grid[0] - 40.0, grid[-1]
    if excess(lo) >= 0:
        return -math.inf
    return float(optimize.brentq(excess, lo, hi, xtol=1e-9))


@lru_cache(maxsize=8192)
def t_boundaries(alpha: float, looks: int, df: int | None, spending: Spending = "obf") -> tuple[float, ...]:
    """Boundaries moved to the t scale: c' = F^-1_{t,df}(Phi(c)). df None = known sigma."""
    import numpy as np
    from scipy import stats

    z = obf_boundaries(alpha, looks, spending)
    if df is None:
        return z
    if df < 1:
        raise ValueError(f"df must be >= 1, got {df}")
    with np.errstate(divide="ignore"):
        return tuple(float(c) for c in stats.t.isf(stats.norm.sf(np.array(z)), df))


# ---------------------------------------------------------------------------- verdicts


class LegResult(BaseModel):
    """One hypothesis of the intersection-union test at the current look.

    statistic = sum(X - null) / (sigma sqrt n), boundary = -c'_n at the leg's own look n.
    A leg's group-sequential test rejects H0 the first time its statistic is at or below
    its boundary (`crossed_at`, the round number); with latching that rejection stands for
    the rest of the confirmation. passed None = unknown (no data or no noise estimate),
    which blocks KEEP.
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
    crossed_at: int | None = None


class Ending(StrEnum):
    """How a candidate's judging ended, by kind (its `reason` says the same in words)."""

    CONTINUE = "continue"  # not ended: another round
    KEEP = "keep"
    SCREEN = "screen"  # the screen round reverted it
    ALPHA_SPENT = "alpha spent"  # the run's error budget had nothing left for it
    FUTILITY = "futility"
    CONDITIONAL_POWER = "cond. power"
    HARM_VETO = "harm veto"
    HORIZON = "K rounds"  # no KEEP by the last look it could afford
    BUDGET = "audits spent"  # stopped before a decision: no audits left
    COIN = "coin"  # the random arm's coin reverted it
    OTHER = "other"  # a judge that names no rule (e.g. the bench's oracles)


class GateDecision(BaseModel):
    model_config = ConfigDict(frozen=True)
    verdict: Verdict
    stage: GateStage
    look: int
    reason: str
    legs: list[LegResult]
    alpha: float  # the target leg's level: what a confirmation spends of the run's budget
    diagnostics: dict[str, float] = {}
    # the rule that decided, for the judge's outcome; not written to the ledger, whose records keep
    # the reason (so a decision read back from one says CONTINUE here)
    ending: Ending = Field(default=Ending.CONTINUE, exclude=True)


class Gate(Protocol):
    def screen(self, first: RoundStat) -> GateDecision: ...

    def confirm(self, rounds: Sequence[RoundStat], horizon: int | None = None) -> GateDecision: ...


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
    spending: Spending = "obf"
    # Variance that sampling the seeds adds to the leg's mean (a claim about seeds never used):
    # fixed once the seeds are, so it does not shrink with rounds (0: a claim about these seeds).
    seed_var: float = 0.0

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
        leg = _single(dim, "target", -promotion.superiority_margin, alpha_target, noise)
        legs.append(replace(leg, spending=promotion.target_spending))
    for dim in promotion.critical_dimensions:
        margin = critical_margin(promotion, noise, dim)
        leg = _single(dim, "critical", margin, promotion.alpha_noninferiority, noise)
        legs.append(replace(leg, spending=promotion.ni_spending))
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
                spending=promotion.ni_spending,
            )
        )
    return legs


def critical_margin(promotion: Promotion, noise: NoiseEstimate, dim: str) -> float:
    """The NI margin for a critical dimension, derived from its harm tolerance and never larger:
    min(harm_margin_share * tolerance, critical_margin, critical_margin_sd * sigma_c)."""
    margin = min(promotion.harm_margin_share * promotion.tolerance(dim), promotion.critical_margin)
    sigma = noise.sigma.get(dim)
    if promotion.critical_margin_sd is None or sigma is None:
        return margin
    return min(margin, promotion.critical_margin_sd * sigma)


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


def leg_result(leg: Leg, rounds: Sequence[RoundStat], looks: int, latch: bool = True) -> LegResult:
    """Test one leg on the rounds so far; its information index is its own count of rounds.

    With `latch`, the leg passes if it crossed at any of its looks so far (a group-sequential
    rejection is final); without, only if it is across its boundary at the current look.
    """
    xs: list[float] = []
    total, stat, c = 0.0, 0.0, 0.0
    crossed_at: int | None = None
    sigma = leg.sigma
    usable = sigma is not None and leg.df is not None
    bounds = t_boundaries(leg.alpha, looks, leg.df, leg.spending) if usable else ()
    for i, r in enumerate(rounds, start=1):
        x = leg.value(r)
        if x is None:
            continue
        xs.append(x)
        total += x
        if sigma is not None and usable:
            n = len(xs)
            spread = sigma * math.sqrt(n) if not leg.seed_var else math.sqrt(sigma * sigma * n + n * n * leg.seed_var)
            stat = (total - n * leg.null) / spread
            c = bounds[min(n, looks) - 1]
            if crossed_at is None and stat <= -c:
                crossed_at = i
    n = len(xs)
    base = LegResult(
        dim=leg.name,
        kind=leg.kind,
        n=n,
        estimate=total / n if n else None,
        null=leg.null,
        alpha=leg.alpha,
        sigma=leg.sigma,
        df=leg.df,
        statistic=None,
        boundary=None,
        passed=None,
    )
    if n == 0 or not usable:
        return base
    passed = crossed_at is not None if latch else stat <= -c
    return base.model_copy(
        update={
            "statistic": stat,
            # a look that spends nothing (many looks, a small alpha) has no finite boundary: None,
            # so the ledger, which holds only finite JSON, can record it; the leg cannot pass there
            "boundary": -c if math.isfinite(c) else None,
            "passed": bool(passed),
            "crossed_at": crossed_at if latch else (len(rounds) if passed else None),
        }
    )


# ---------------------------------------------------------------------------- SPG


@dataclass(frozen=True)
class EarlyStops:
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
    rules: EarlyStops = EarlyStops()
    stage: GateStage = "confirm"
    latch: bool = True  # a leg that crossed stays rejected (each leg is its own GS test)

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
                verdict="revert",
                stage="screen",
                look=1,
                legs=legs,
                alpha=0.0,
                reason="screen failed: " + "; ".join(failures),
                ending=Ending.SCREEN,
            )
        return GateDecision(
            verdict="continue",
            stage="screen",
            look=1,
            legs=legs,
            alpha=0.0,
            reason="screen passed; confirmation on fresh rounds",
        )

    def confirm(self, rounds: Sequence[RoundStat], horizon: int | None = None) -> GateDecision:
        """Decide after len(rounds) fresh rounds. `horizon` = rounds the caller can still
        afford in total (defaults to K); it only sharpens the conditional-power stop."""
        n = len(rounds)
        if not 1 <= n <= self.looks:
            raise ValueError(f"confirm needs 1..{self.looks} fresh rounds, got {n}")
        horizon = self.looks if horizon is None else max(n, min(horizon, self.looks))
        legs = [leg_result(leg, rounds, self.looks, self.latch) for leg in self.legs]

        def decide(verdict: Verdict, reason: str, diag: dict[str, float], ending: Ending) -> GateDecision:
            return GateDecision(
                verdict=verdict,
                stage=self.stage,
                look=n,
                legs=legs,
                alpha=self.alpha,
                reason=reason,
                diagnostics=diag,
                ending=ending,
            )

        if legs and all(r.passed for r in legs):
            return decide("keep", f"all {len(legs)} legs crossed their boundaries by look {n}", {}, Ending.KEEP)
        crossed = {r.dim for r in legs if r.passed}
        (rule, stop), diag = self._early_stop(rounds, n, horizon, crossed)
        if stop:
            return decide("revert", stop, diag, rule)
        if n >= horizon:
            unknown = [r.dim for r in legs if r.passed is None]
            why = f"; unknown: {', '.join(unknown)}" if unknown else ""
            return decide("revert", f"no KEEP after {n} rounds{why}", diag, Ending.HORIZON)
        return decide("continue", f"look {n} of {self.looks}: no boundary crossed by all legs", diag, Ending.CONTINUE)

    def _early_stop(
        self, rounds: Sequence[RoundStat], n: int, horizon: int, crossed: set[str]
    ) -> tuple[tuple[Ending, str], dict[str, float]]:
        """The early stop that applies (its rule and reason; an empty reason: none), and the diagnostics."""
        rules, diag = self.rules, dict[str, float]()
        if not rules.enabled:
            return (Ending.CONTINUE, ""), diag
        for leg in self.legs:
            if leg.sigma is None:
                continue
            xs = leg.values(rounds)
            k, s = len(xs), sum(xs)
            if leg.kind == "target" and leg.name not in crossed:
                d = rules.futility_effect
                shifted = s - k * leg.null
                llr = (-d * shifted - k * d * d / 2) / leg.sigma**2
                diag[f"futility_llr:{leg.name}"] = llr
                if llr <= math.log(rules.futility_beta):
                    return (Ending.FUTILITY, f"futility: {leg.name} evidence favours no effect over {d:.3g}"), diag
                cp = self._conditional_power(leg, shifted, k, horizon - n)
                if cp is not None:
                    diag[f"conditional_power:{leg.name}"] = cp
                    if cp < rules.cp_floor:
                        why = f"conditional power {cp:.3f} < {rules.cp_floor:g} on {leg.name}"
                        return (Ending.CONDITIONAL_POWER, why), diag
            elif leg.kind == "critical":
                m = leg.null
                llr = (m * s - k * m * m / 2) / leg.sigma**2
                diag[f"harm_llr:{leg.name}"] = llr
                if llr >= math.log(1 / rules.harm_veto_beta):
                    return (Ending.HARM_VETO, f"harm veto: {leg.name} evidence of a {m:.3g} regression"), diag
        return (Ending.CONTINUE, ""), diag

    def _conditional_power(self, leg: Leg, shifted: float, k: int, remaining: int) -> float | None:
        """P(cross at the last affordable look | data so far, true effect = design effect)."""
        if remaining <= 0:
            return None
        final = min(k + remaining, self.looks)
        if leg.sigma is None:
            return None
        c = t_boundaries(leg.alpha, self.looks, leg.df, leg.spending)[final - 1]
        need = -c * leg.sigma * math.sqrt(final)  # S at the final look must be <= need
        mean = shifted - remaining * self.rules.futility_effect
        return _norm_cdf((need - mean) / (leg.sigma * math.sqrt(remaining)))


def _norm_cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))  # scalar; scipy's cdf is 100x slower here


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
        return SequentialPairedGate(self.legs, self.looks, self.alpha, self.screen_sd, self.screen_critical_sd).screen(
            first
        )

    def confirm(self, rounds: Sequence[RoundStat], horizon: int | None = None) -> GateDecision:
        n = len(rounds)
        if not 1 <= n <= self.looks:
            raise ValueError(f"confirm needs 1..{self.looks} fresh rounds, got {n}")
        last = n >= (self.looks if horizon is None else min(horizon, self.looks))
        # one look at the end: c = t_{1-alpha}; no latching, earlier prefixes are not looks
        legs = [leg_result(leg, rounds, 1, latch=False) for leg in self.legs]
        if not last:
            return GateDecision(
                verdict="continue",
                stage="confirm",
                look=n,
                legs=legs,
                alpha=self.alpha,
                reason=f"fixed design: decision after {self.looks} rounds",
            )
        if all(r.passed for r in legs):
            return GateDecision(
                verdict="keep",
                stage="confirm",
                look=n,
                legs=legs,
                alpha=self.alpha,
                reason=f"all {len(legs)} legs passed after {n} rounds",
                ending=Ending.KEEP,
            )
        failed = [r.dim for r in legs if not r.passed]
        return GateDecision(
            verdict="revert",
            stage="confirm",
            look=n,
            legs=legs,
            alpha=self.alpha,
            reason=f"not passed after {n} rounds: {', '.join(failed)}",
            ending=Ending.HORIZON,
        )


def make_gate(promotion: Promotion, noise: NoiseEstimate, alpha_target: float) -> Gate:
    """The contract's gate for one candidate, with the noise estimate frozen now."""
    if not 0 < alpha_target < 1:
        raise ValueError(f"alpha_target must be in (0, 1), got {alpha_target}")
    legs = tuple(build_legs(promotion, noise, alpha_target))
    if promotion.gate == "paired_margin":
        return PairedMarginGate(
            legs,
            promotion.replicate_k,
            alpha_target,
            promotion.screen_sd,
            promotion.screen_critical_sd,
        )
    rules = EarlyStops(
        futility_effect=promotion.futility_effect,
        futility_beta=promotion.futility_beta,
        harm_veto_beta=promotion.harm_veto_beta,
        cp_floor=promotion.cp_floor,
    )
    return SequentialPairedGate(
        legs,
        promotion.replicate_k,
        alpha_target,
        promotion.screen_sd,
        promotion.screen_critical_sd,
        rules,
    )


def make_certify_gate(
    promotion: Promotion, noise: NoiseEstimate, rounds: int, alpha: float | None = None, sigma_scale: float = 1.0
) -> SequentialPairedGate:
    """Final certification of champion vs the starting (or last certified) policy.

    Same legs, no screen use and no futility stops, `rounds` looks, level alpha_certify.
    If it does not KEEP, the loop rolls back to the last certified policy. `sigma_scale`
    widens every leg's frozen sigma (rounds on fewer seeds than the noise was estimated on);
    the margins stay those of the unscaled noise, so a noisier round never loosens them.
    """
    if rounds < 1:
        raise ValueError(f"certification needs at least 1 round, got {rounds}")
    if sigma_scale < 1.0:
        raise ValueError(f"sigma_scale must be >= 1 (only ever widened), got {sigma_scale}")
    level = promotion.alpha_certify if alpha is None else alpha
    legs = tuple(
        replace(leg, sigma=None if leg.sigma is None else leg.sigma * sigma_scale)
        for leg in build_legs(promotion, noise, level)
    )
    if promotion.error_design == "two_stage":  # the guarantee's legs: target and critical only
        legs = tuple(_guarantee_leg(promotion, leg, level) for leg in legs if leg.kind != "auxiliary")
    return SequentialPairedGate(legs, rounds, level, rules=EarlyStops(enabled=False), stage="certify")


def for_fresh_seeds(gate: SequentialPairedGate, rounds: Sequence[RoundStat]) -> SequentialPairedGate:
    """The certification as a claim about seeds never used: each leg's mean over the rounds' seeds
    is read as an estimate of the mean over all seeds, so the variance of sampling the seeds
    (`seed_sampling_var`, widened for the few seeds it is estimated from) is added to the round
    noise at every look. The added term is the same at every look, so the looks' statistics
    correlate more than the boundaries assume, which only lowers the chance of crossing a boundary
    under the null (Slepian 1962): the level holds."""
    legs = tuple(replace(leg, seed_var=seed_sampling_var(leg, rounds)) for leg in gate.legs)
    return replace(gate, legs=legs)


def seed_sampling_var(leg: Leg, rounds: Sequence[RoundStat]) -> float:
    """Between-seed variance of each seed's mean difference over `rounds` (the leg's weighted
    sum), over the number of seeds S: the variance of the seeds' mean from drawing the seeds. It
    holds each seed's audit noise too, which the round noise counts already (conservative). It is
    estimated from S seeds, so it is widened by (t_{S-1} / z)^2 at the leg's level: a z boundary
    then acts as the t test on S - 1 degrees of freedom would. Infinite without per-seed data for
    at least two seeds: then nothing can be claimed."""
    import numpy as np
    from scipy import stats

    rows = []
    for r in rounds:
        cols = [r.seed_diff.get(dim) for dim, _ in leg.weights]
        if any(c is None for c in cols):
            continue
        values = [[np.nan if x is None else x for x in col] for col in cols if col is not None]
        weights = np.array([w for _, w in leg.weights])
        rows.append(weights @ np.array(values, dtype=float))
    if not rows:
        return math.inf
    table = np.array(rows)
    scored = ~np.isnan(table).all(axis=0)
    if scored.sum() < 2:
        return math.inf
    means = np.nanmean(table[:, scored], axis=0)
    few = (stats.t.ppf(1 - leg.alpha, len(means) - 1) / stats.norm.ppf(1 - leg.alpha)) ** 2
    return float(few * means.var(ddof=1) / len(means))


def _guarantee_leg(promotion: Promotion, leg: Leg, level: float) -> Leg:
    """Two-stage design: a critical leg of the certification tests the user's claim itself,
    H0: delta_c >= harm margin (share * tolerance, capped by critical_margin; no noise rule),
    at the certification's own level, so every leg of the guarantee is at alpha_certify. It spends
    O'Brien-Fleming-type, whatever the search's NI spending: the most power at the last look."""
    if leg.kind != "critical":
        return leg
    margin = min(promotion.harm_margin_share * promotion.tolerance(leg.name), promotion.critical_margin)
    return replace(leg, null=margin, alpha=level, spending="obf")


# ---------------------------------------------------------------------------- error budget


class ErrorBudget(BaseModel):
    """Run-level alpha over confirmations; every update returns a new object.

    fwer (online Bonferroni): each confirmation j gets alpha_j <= what is left, at most J
    confirmations, so P(any false KEEP in the run) <= sum alpha_j <= alpha_run under any
    dependence. Without a forecast alpha_j = alpha_run / J; with `expected_remaining` (how many
    more confirmations the audit budget will pay for, see `expected_confirmations`) the
    remaining alpha is spread over those instead, so alpha is not left unspent when the audit
    budget runs out first. The forecast uses only the past, which keeps the bound.
    With `recycle` (fwer only) a KEEP returns its alpha to the budget, as the graphical approach
    (Bretz et al. 2009) and online fallback (Tian & Ramdas 2021) pass on a rejected
    hypothesis' level: until the first false KEEP every recycled level came from a true
    improvement, so the levels of the null confirmations still sum to at most alpha_run and
    the FWER bound stands under any dependence (docs/gate-levers.md gives the argument).
    elond (Xu & Ramdas 2024): alpha_j = alpha_run * (R + 1) / J with R the KEEPs so far;
    FDR <= alpha_run; `spent` there is alpha_run * j / J, the share of the gamma sequence used.
    fixed (the search stage of the two-stage design): every confirmation runs at alpha_run, with
    no cap on their number; it bounds the false-KEEP rate per null confirmation, not per run.
    The run's guarantee is then the final certification's (docs/statistics.md §3); `spent` is
    the sum of the levels used, for the record only.
    """

    model_config = ConfigDict(frozen=True)
    alpha_run: float = Field(gt=0, lt=1)
    max_confirmations: int = Field(ge=1)
    mode: Literal["fwer", "elond", "fixed"] = "fwer"
    allocation: Literal["even", "forecast"] = "forecast"  # fwer: use expected_remaining?
    recycle: bool = False  # fwer: a KEEP's alpha returns to the budget
    tested: list[float] = []  # alpha of each confirmation, in order
    kept: list[bool] = []

    @classmethod
    def from_promotion(cls, promotion: Promotion) -> ErrorBudget:
        if promotion.error_design == "two_stage":
            return cls(alpha_run=promotion.alpha_search, max_confirmations=promotion.max_confirmations, mode="fixed")
        return cls(
            alpha_run=promotion.alpha_run,
            max_confirmations=promotion.max_confirmations,
            mode=promotion.error_control,
            allocation=promotion.alpha_allocation,
            recycle=promotion.alpha_recycle,
        )

    @property
    def confirmations(self) -> int:
        return len(self.tested)

    @property
    def keeps(self) -> int:
        return sum(self.kept)

    @property
    def spent(self) -> float:
        return alpha_spent(self.mode, self.alpha_run, self.max_confirmations, self.tested, self.kept, self.recycle)

    @property
    def remaining(self) -> float:
        return max(self.alpha_run - self.spent, 0.0)

    def next_alpha(self, expected_remaining: float | None = None) -> float | None:
        """Level for the next confirmation, or None when no confirmation may start."""
        if self.mode == "fixed":
            return self.alpha_run
        left = self.max_confirmations - self.confirmations
        if left <= 0:
            return None
        if self.mode == "elond":
            return min(self.alpha_run * (self.keeps + 1) / self.max_confirmations, 0.5)
        even = self.alpha_run / self.max_confirmations
        if expected_remaining is None or self.allocation == "even":
            alpha = min(even, self.remaining)
        else:
            share = self.remaining / max(1.0, min(float(left), expected_remaining))
            alpha = max(min(_grid_floor(share), self.remaining), min(even, self.remaining))
        return alpha if alpha > 0 else None

    def record(self, alpha: float, kept: bool) -> ErrorBudget:
        """Account one finished confirmation that ran at `alpha`."""
        if self.mode == "fixed":
            if not math.isclose(alpha, self.alpha_run, rel_tol=1e-12):
                raise ValueError(f"confirmation ran at alpha {alpha}, but the search stage's level is {self.alpha_run}")
        elif self.confirmations >= self.max_confirmations:
            raise ValueError("the run's error budget is exhausted: no confirmation may start")
        if self.mode == "elond":
            issued = self.next_alpha()
            if issued is None or not math.isclose(alpha, issued, rel_tol=1e-12):
                raise ValueError(f"confirmation ran at alpha {alpha}, but e-LOND issued {issued}")
        elif self.mode == "fwer" and not 0 < alpha <= self.remaining * (1 + 1e-12):
            raise ValueError(
                f"confirmation ran at alpha {alpha}, but only {self.remaining} of the run's error budget is left"
            )
        return self.model_copy(update={"tested": [*self.tested, float(alpha)], "kept": [*self.kept, bool(kept)]})


def _grid_floor(alpha: float) -> float:
    """Round down onto a 2% log grid, so boundary tables are reused across confirmations."""
    if alpha <= 0:
        return 0.0
    step = math.log(ALPHA_GRID_RATIO)
    return math.exp(math.floor(math.log(alpha) / step + 1e-9) * step)


PRIOR_AUDITS_PER_CONFIRMATION = 12.5  # research note: J_max = N / 12.5
PRIOR_WEIGHT = 2.0  # confirmations' worth of weight on that prior


def expected_confirmations(audits_left: int, audits_spent: int, confirmations: int) -> float:
    """Forecast of how many more confirmations `audits_left` will pay for.

    `audits_spent` = audits spent on candidates so far (screened-out ones included); the cost
    per confirmation is shrunk towards the prior while few confirmations have run.
    """
    cost = (audits_spent + PRIOR_WEIGHT * PRIOR_AUDITS_PER_CONFIRMATION) / (confirmations + PRIOR_WEIGHT)
    return max(audits_left, 0) / cost


def should_promote(decision: GateDecision) -> bool:
    """The one check before a promotion: a KEEP from a confirmation (or certification) in which
    every leg is known and crossed its boundary. A screen result or a bare scalar never is."""
    return (
        decision.verdict == "keep"
        and decision.stage in ("confirm", "certify")
        and bool(decision.legs)
        and all(leg.passed is True for leg in decision.legs)
    )


def leg_summary(decision: GateDecision) -> Mapping[str, bool | None]:
    """dim -> passed, for compact display."""
    return {leg.dim: leg.passed for leg in decision.legs}
