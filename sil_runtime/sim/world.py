"""The simulated world: a seeded generative model of Petri-style audits with known truth.

Implements the model of `docs/statistics.md` §4 (vectorized numpy, no Python loop over
seeds or dimensions). For audit a of a policy with latent field theta at clock tick t:

    eta[s,k] = mu_k + u[s,k] + theta[s,k] + b[k] + lambda_k * D(t) + eps[s,k]
    Y[s,k]   = clip(round(eta), 1, 10), lower is better; NaN where missing

    u     ~ N(0, seed_difficulty_sd^2)      frozen per-seed difficulty (from world_seed)
    b     = batch_sd * (sqrt(r_b) c + sqrt(1 - r_b) e_k)   audit batch effect, r_b correlated across dims
    eps   = noise_scale * t(noise_df)       judge + rollout noise, heavy tailed
    D(t)  = OU path (stationary SD drift_sd, correlation time drift_corr_audits) + drift_trend * t

A paired round's two audits share the share sqrt(pair_correlation) of (b, eps), drawn from the
pair key (common random numbers); the rest is drawn from the audit's own key. Everything is a
pure function of (params, dims, n_seeds, inputs): the same call returns the same scores.

    world = World(params, dims, n_seeds=10)
    y = world.audit(theta, tick=3, pair_key="round-7", own_key="audit-15")
    q = world.expected_scores(theta)            # true audit mean per dim at drift 0

It is a test bed for the loop's plumbing and statistics, not a claim about any model.
"""

from __future__ import annotations

import functools
import hashlib
import math
from collections.abc import Sequence

import numpy as np

from sil.contract.simparams import EffectMixture, SimParams

SCORE_MIN, SCORE_MAX = 1.0, 10.0
DEFAULT_DRIFT_LOADING = 0.6  # dims absent from params.drift_loading move 0.6x as much as the target
DRIFT_BLOCK = 256  # drift innovations are drawn per block of ticks, so paths extend lazily

# Candidate-effect mixture of docs/statistics.md §4 (latent units; positive = worse).
CANDIDATE_TYPES = ("null", "harms_target", "helps_target", "helps_target_harms_critical", "harms_critical_only")
MNAR_MAX_P = 0.9  # a cell is never certain to be missing
# Non-null candidates also nudge every auxiliary/info dim a little, slightly more often for the
# worse: most edits have side effects, rarely large ones.
SIDE_EFFECT_MEAN, SIDE_EFFECT_SD = 0.05, 0.15

# Quadrature grid for the exact noise distribution (FFT convolution of its components).
_NOISE_STEP, _NOISE_HALF_WIDTH = 0.01, 60.0
_LATENT_GRID = np.arange(-25.0, 35.0 + 1e-9, 0.01)


def keyed_rng(*parts: object) -> np.random.Generator:
    """A generator seeded by a stable hash of `parts` (same parts -> same stream, any process)."""
    text = "\x1f".join(str(p) for p in parts).encode()
    seed = int.from_bytes(hashlib.blake2b(text, digest_size=16).digest(), "little")
    return np.random.Generator(np.random.PCG64(seed))


class World:
    """One simulated deployment: frozen seed difficulties, a drift path and the audit noise."""

    def __init__(self, params: SimParams, dims: Sequence[str], n_seeds: int) -> None:
        missing = [d for d in dims if d not in params.intercepts]
        if missing:
            raise ValueError(
                f"sim.intercepts has no value for dimensions {missing}; add one per "
                "rubric dimension to the contract's sim section"
            )
        if n_seeds < 1 or not dims:
            raise ValueError("a world needs at least one seed and one dimension")
        self.params = params
        self.dims: tuple[str, ...] = tuple(dims)
        self.n_seeds = int(n_seeds)
        self.shape = (self.n_seeds, len(self.dims))
        self.mu = np.array([params.intercepts[d] for d in self.dims])
        self.loading = np.array([params.drift_loading.get(d, DEFAULT_DRIFT_LOADING) for d in self.dims])
        self.seed_difficulty = keyed_rng(params.world_seed, "seeds").normal(0.0, params.seed_difficulty_sd, self.shape)
        self._base = self.mu[None, :] + self.seed_difficulty
        self._ou_path = np.empty(0)
        self._ey_table: np.ndarray | None = None

    # ---------------------------------------------------------------- drift
    def drift(self, tick: int) -> float:
        """Latent drift D(tick): the OU path plus the linear trend."""
        if tick < 0:
            raise ValueError(f"tick must be >= 0, got {tick}")
        if tick >= self._ou_path.size:
            self._extend_drift(tick)
        return float(self._ou_path[tick] + self.params.drift_trend * tick)

    def _extend_drift(self, tick: int) -> None:
        p = self.params
        rho = math.exp(-1.0 / p.drift_corr_audits)
        step_sd = p.drift_sd * math.sqrt(1.0 - rho * rho)
        path: list[float] = [float(x) for x in self._ou_path]
        z = path[-1] if path else float(keyed_rng(p.audit_seed, "drift-start").normal(0.0, p.drift_sd))
        if not path:
            path.append(z)
        while len(path) <= tick:
            block = len(path) // DRIFT_BLOCK
            xi = keyed_rng(p.audit_seed, "drift", block).normal(0.0, step_sd, DRIFT_BLOCK)
            for i in range(len(path) % DRIFT_BLOCK, DRIFT_BLOCK):
                z = rho * z + xi[i]
                path.append(z)
        self._ou_path = np.array(path)

    # ---------------------------------------------------------------- audits
    def audit(self, theta: np.ndarray, tick: int, pair_key: str, own_key: str, judge_resamples: int = 1) -> np.ndarray:
        """Scores [n_seeds, D] of one audit of the policy field `theta` at `tick`; NaN = missing.

        With `judge_resamples` k > 1 the judge scores the same transcript k times and the
        scores are averaged: only the judge's share of the noise (`judge_noise_share`) shrinks,
        and the expected score is unchanged.
        """
        if theta.shape != self.shape:
            raise ValueError(f"theta has shape {theta.shape}, expected {self.shape}")
        if judge_resamples < 1:
            raise ValueError(f"judge_resamples must be >= 1, got {judge_resamples}")
        p = self.params
        own = keyed_rng(p.audit_seed, "own", own_key)
        batch, noise = self._batch_and_noise(own)
        j = p.judge_noise_share
        judge = np.zeros((judge_resamples, *self.shape))
        if j > 0.0:
            judge = math.sqrt(j) * p.noise_scale * own.standard_t(p.noise_df, judge.shape)
            noise = math.sqrt(1.0 - j) * noise
        r = p.pair_correlation
        c = 1.0
        if r > 0.0:
            pair = keyed_rng(p.audit_seed, "pair", pair_key)
            shared_batch, shared_noise = self._batch_and_noise(pair)
            a, c = math.sqrt(r), math.sqrt(1.0 - r)
            batch = a * shared_batch + c * batch
            noise = a * shared_noise + c * noise
        eta = self._base + theta + (batch + self.loading * self.drift(tick)) + noise + p.judge_drift_per_tick * tick
        scores: np.ndarray = np.clip(np.rint(eta[None] + c * judge), SCORE_MIN, SCORE_MAX).mean(axis=0)
        missing = own.random(self.shape) < self._missing_p(eta)
        if own.random() < p.p_missing_dimension:
            missing[:, own.integers(self.shape[1])] = True
        scores[missing] = np.nan
        return scores

    def _missing_p(self, eta: np.ndarray) -> np.ndarray | float:
        """Per-cell missing probability: flat (mcar) or rising with the cell's excess (mnar)."""
        p = self.params
        if p.missing_mode == "mcar" or p.mnar_slope == 0.0:
            return p.p_missing_cell
        excess = np.maximum(eta - self._base, 0.0)
        return np.minimum(p.p_missing_cell + p.mnar_slope * excess, MNAR_MAX_P)

    def _batch_and_noise(self, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        p = self.params
        r_b = p.batch_dim_correlation
        e = rng.standard_normal(self.shape[1] + 1)
        batch = p.batch_sd * (math.sqrt(r_b) * e[0] + math.sqrt(1.0 - r_b) * e[1:])
        noise = p.noise_scale * rng.standard_t(p.noise_df, self.shape)
        return batch, noise

    # ---------------------------------------------------------------- truth
    def expected_scores(self, theta: np.ndarray) -> np.ndarray:
        """True Q_k: expected audit mean per dim of the policy field `theta`, at drift 0 and
        without missingness (integrates batch effect and noise exactly, by quadrature)."""
        if theta.shape != self.shape:
            raise ValueError(f"theta has shape {theta.shape}, expected {self.shape}")
        return self.expected_score_at(self._base + theta).mean(axis=0)

    def expected_score_at(self, latent: np.ndarray) -> np.ndarray:
        """E[Y | latent location m] for an array of m (drift 0)."""
        if self._ey_table is None:
            p = self.params
            self._ey_table = _expected_score_table(
                p.batch_sd, p.noise_scale, p.noise_df, p.pair_correlation, p.judge_noise_share
            )
        expected: np.ndarray = np.interp(latent, _LATENT_GRID, self._ey_table)
        return expected


def _scaled_t_density(x: np.ndarray, scale: float, df: float) -> np.ndarray:
    c = math.lgamma((df + 1) / 2) - math.lgamma(df / 2) - 0.5 * math.log(df * math.pi)
    z = x / scale
    return np.exp(c - (df + 1) / 2 * np.log1p(z * z / df)) / scale


def _noise_cdf(
    batch_sd: float, noise_scale: float, noise_df: float, pair_correlation: float, judge_share: float = 0.0
) -> tuple[np.ndarray, np.ndarray]:
    """CDF of the total audit noise b_k + eps on a grid (the pair-correlated mix included)."""
    x = np.arange(-_NOISE_HALF_WIDTH, _NOISE_HALF_WIDTH + _NOISE_STEP / 2, _NOISE_STEP)
    parts = []
    if batch_sd > 0:
        parts.append(np.exp(-0.5 * (x / batch_sd) ** 2))
    r, j = pair_correlation, judge_share
    own = math.sqrt(1.0 - r)
    for weight in (math.sqrt(r), own * math.sqrt(1.0 - j), own * math.sqrt(j)):
        if weight > 0:
            parts.append(_scaled_t_density(x, weight * noise_scale, noise_df))
    n_fft = 1 << int(math.ceil(math.log2(len(x) * len(parts))))
    spectrum = np.ones(n_fft // 2 + 1, dtype=complex)
    for dens in parts:
        spectrum *= np.fft.rfft(dens / dens.sum(), n_fft)
    mass = np.fft.irfft(spectrum, n_fft)
    shift = (len(parts) - 1) * (len(x) // 2)  # each convolution shifts the centre by half a grid
    mass = np.clip(mass[shift : shift + len(x)], 0.0, None)
    cdf = np.cumsum(mass) - 0.5 * mass
    cdf += (1.0 - cdf[-1] - 0.5 * mass[-1]) / 2  # tail mass beyond the grid, split evenly
    return x, cdf


@functools.lru_cache(maxsize=16)
def _expected_score_table(
    batch_sd: float, noise_scale: float, noise_df: float, pair_correlation: float, judge_share: float = 0.0
) -> np.ndarray:
    """E[Y | m] on _LATENT_GRID; depends only on the noise parameters, so shared by worlds."""
    x, cdf = _noise_cdf(batch_sd, noise_scale, noise_df, pair_correlation, judge_share)
    thresholds = np.arange(1, 10) + 0.5  # Y >= j + 1  <=>  eta >= j + 0.5
    below = np.interp(thresholds[None, :] - _LATENT_GRID[:, None], x, cdf, left=0.0, right=1.0)
    table: np.ndarray = 1.0 + (1.0 - below).sum(axis=1)
    table.flags.writeable = False  # shared between worlds through the cache
    return table


# -------------------------------------------------------------------- candidate effects
def draw_candidate(
    rng: np.random.Generator,
    dims: Sequence[str],
    target: str,
    critical: Sequence[str],
    mixture: EffectMixture | None = None,
) -> tuple[str, np.ndarray]:
    """One candidate's type and latent per-dim effect from the mixture (default: section 4.3).

    Without critical dims the critical harm is dropped (the type keeps its name)."""
    mix = mixture or EffectMixture()
    dims = list(dims)
    if target not in dims:
        raise ValueError(f"target dimension {target!r} is not among {dims}")
    crit = [dims.index(c) for c in critical if c != target]
    if len(crit) != len([c for c in critical if c != target]):
        raise ValueError(f"critical dimensions {list(critical)} are not all among {dims}")
    kind = CANDIDATE_TYPES[rng.choice(len(CANDIDATE_TYPES), p=np.array(mix.shares()))]
    delta = np.zeros(len(dims))
    if kind == "null":
        return kind, delta
    t = dims.index(target)
    if kind == "harms_target":
        delta[t] = rng.uniform(*mix.harm_target)
    elif kind in ("helps_target", "helps_target_harms_critical"):
        delta[t] = -rng.uniform(*mix.help_target)
    if kind in ("helps_target_harms_critical", "harms_critical_only") and crit:
        harm = mix.tradeoff_harm if kind == "helps_target_harms_critical" else mix.harm_critical
        delta[crit[rng.integers(len(crit))]] = rng.uniform(*harm)
    side = [i for i in range(len(dims)) if i != t and i not in crit]
    delta[side] = rng.normal(SIDE_EFFECT_MEAN, SIDE_EFFECT_SD, len(side))
    return kind, delta


def draw_effect(
    rng: np.random.Generator,
    dims: Sequence[str],
    target: str,
    critical: Sequence[str],
    mixture: EffectMixture | None = None,
) -> np.ndarray:
    """Latent per-dim effect (positive = worse) of one candidate from the mixture (default: section 4.3)."""
    return draw_candidate(rng, dims, target, critical, mixture)[1]


def effect_field(rng: np.random.Generator, delta: np.ndarray, n_seeds: int, heterogeneity: float) -> np.ndarray:
    """Seed-heterogeneous policy field [n_seeds, D]: delta_k * (1 + h * z_s), z_s ~ N(0, 1)."""
    z = rng.standard_normal(n_seeds)
    return delta[None, :] * (1.0 + heterogeneity * z[:, None])
