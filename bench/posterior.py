"""Posterior search references for bench.gates: each candidate decided by Bayes' rule, then certified.

Not a rule the loop offers: they measure what a search that decides from its data alone can
deliver once the loop's certification has passed its champion, so a gap to the certified oracle
can be split into what the data cannot tell and what the gate leaves behind.

- `posterior_true`: the prior is the world's own candidate mixture (true changes of fresh draws
  from `sim.effect_mixture`). No real search knows it; this is the best-informed reference.
- `posterior_learned`: the prior is learned from the run's own first rounds: per dimension, a
  nonparametric maximum-likelihood prior on a grid fitted by EM (Jiang & Zhang 2009; Koenker &
  Mizera 2014), the dimensions taken as independent: what a search could build.

After each paired round, P(good | rounds) is the posterior mass on changes that lower the target
and raise no critical dimension by more than `harm_slack` (score points). KEEP at >= keep_p,
REVERT at <= drop_p or after max_rounds. The rule is the gate arm's judge (`PosteriorJudge`) in
the product's loop (bench/vectorloop.py): the loop's calibration, rounds and budget, then its
certification of the champion.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

import numpy as np

from bench.simrun import candidate_stream
from bench.vectorloop import VectorWorld
from sil.contract.schema import Promotion
from sil.stats.fitness import RoundStat
from sil.stats.judges import ArmBudget, CandidateRoundKind, JudgeState, Outcome, Trial, Verdict
from sil_runtime.sim.world import keyed_rng

Prior = Literal["true", "learned"]
EM_STEPS = 60
GRID = np.linspace(-2.0, 2.0, 41)  # support of a learned per-dimension prior, score points


@dataclass(frozen=True)
class PosteriorSettings:
    promotion: Promotion
    certify_audits: int
    prior: Prior
    keep_p: float = 0.7
    drop_p: float = 0.1
    max_rounds: int = 24
    harm_slack: float = 0.3
    prior_draws: int = 300


def round_vector(stat: RoundStat, dims: tuple[str, ...]) -> np.ndarray:
    """One paired round's candidate-minus-champion means per dim; NaN where a dim is unscored."""
    return np.array([np.nan if stat.diff.get(d) is None else stat.diff[d] for d in dims], dtype=float)


def log_likelihood(atoms: np.ndarray, rounds: np.ndarray, sigma: np.ndarray) -> np.ndarray:
    """log P(rounds | change = atom) per atom, Gaussian rounds of SD sigma, NaN cells skipped."""
    seen = ~np.isnan(rounds) & ~np.isnan(sigma)[None, :]
    x = np.where(seen, rounds, 0.0)
    n = seen.sum(axis=0)
    total = x.sum(axis=0)
    s2 = np.where(np.isnan(sigma), 1.0, sigma) ** 2
    # sum_r (x_r - a)^2 = sum x^2 - 2 a sum x + n a^2; the first term is the same for every atom
    out: np.ndarray = ((2 * atoms * total - n * atoms**2) / (2 * s2)).sum(axis=1)
    return out


def posterior_weights(prior: np.ndarray, loglik: np.ndarray) -> np.ndarray:
    w = np.log(np.maximum(prior, 1e-300)) + loglik
    w = np.exp(w - w.max())
    weights: np.ndarray = w / w.sum()
    return weights


def npmle_prior(points: np.ndarray, sd: float) -> np.ndarray:
    """EM weights on GRID of a prior for one dimension, from its first-round observations."""
    lik = np.exp(-((points[:, None] - GRID[None, :]) ** 2) / (2 * sd**2))  # [obs, grid]
    w = np.full(len(GRID), 1.0 / len(GRID))
    for _ in range(EM_STEPS):
        resp = lik * w[None, :]
        resp /= np.maximum(resp.sum(axis=1, keepdims=True), 1e-300)
        w = resp.mean(axis=0)
    return w


class TruePrior:
    """The world's own candidate mixture: true changes of fresh draws against the current champion."""

    def __init__(self, view: PriorView, settings: PosteriorSettings, sigma: np.ndarray) -> None:
        self.view, self.settings, self.sigma = view, settings, sigma
        self.atoms: np.ndarray | None = self._draw()

    def _draw(self) -> np.ndarray:
        world, promo = self.view.world.world, self.settings.promotion
        rng = keyed_rng(world.params.world_seed, "bench.posterior prior")
        draws = candidate_stream(world, rng, self.settings.prior_draws, world.dims[0], promo.critical_dimensions)
        theta = self.view.champion()
        base = world.expected_scores(theta)
        return np.array([world.expected_scores(theta + c.field) - base for c in draws])

    def observe_first(self, first: np.ndarray) -> None:
        pass  # known in advance: nothing to learn

    def champion_changed(self) -> None:
        self.atoms = None  # drawn again at the next round, against the champion the KEEP made

    def p_good(self, rounds: np.ndarray) -> float:
        if self.atoms is None:
            self.atoms = self._draw()
        crit = self.view.world.critical_idx
        good = (self.atoms[:, 0] < 0) & (self.atoms[:, crit] <= self.settings.harm_slack).all(axis=1)
        flat = np.full(len(self.atoms), 1.0 / len(self.atoms))
        post = posterior_weights(flat, log_likelihood(self.atoms, rounds, self.sigma))
        return float(post[good].sum())


class LearnedPrior:
    """One prior on GRID per dimension, fitted to the run's first rounds; dims taken as independent."""

    def __init__(self, view: PriorView, settings: PosteriorSettings, sigma: np.ndarray) -> None:
        self.view, self.settings, self.sigma = view, settings, sigma
        self.firsts: list[np.ndarray] = []
        self.per_dim: list[np.ndarray] = []

    def observe_first(self, first: np.ndarray) -> None:
        self.firsts.append(first)
        seen = np.array(self.firsts)
        flat = np.full(len(GRID), 1.0 / len(GRID))
        self.per_dim = [
            flat if np.isnan(self.sigma[j]) else npmle_prior(seen[~np.isnan(seen[:, j]), j], float(self.sigma[j]))
            for j in range(seen.shape[1])
        ]

    def champion_changed(self) -> None:
        pass  # the first rounds describe the proposer's stream, kept across champions

    def p_good(self, rounds: np.ndarray) -> float:
        """P(target < 0) times P(critical <= harm_slack) for each critical dim."""
        p = 1.0
        for j in [0, *self.view.world.critical_idx]:
            post = posterior_weights(self.per_dim[j], log_likelihood(GRID[:, None], rounds[:, [j]], self.sigma[[j]]))
            p *= float(post[GRID < 0].sum() if j == 0 else post[GRID <= self.settings.harm_slack].sum())
        return p


Book = TruePrior | LearnedPrior


@dataclass(frozen=True)
class PriorView:
    """What a prior sees of the run: its world, and the current champion's latent field."""

    world: VectorWorld
    champion: Callable[[], np.ndarray]


class PosteriorJudge:
    """The posterior rule as the gate arm's judge: one candidate's paired rounds until P(good)
    crosses keep_p or drop_p, or max_rounds; its KEEP comes from the posterior, not a test."""

    name = "posterior"
    keeps_by_test = False

    def __init__(self, view: PriorView, settings: PosteriorSettings) -> None:
        self.view, self.settings = view, settings
        self.book: Book | None = None
        self.rows: list[np.ndarray] = []

    def stop_reason(self, shared: JudgeState) -> str | None:
        return None

    def next_kind(self, trial: Trial) -> CandidateRoundKind:
        return "screen" if trial.screen is None else "confirm"

    def judge(
        self, trial: Trial, stat: RoundStat, shared: JudgeState, budget: ArmBudget, index: int
    ) -> tuple[Trial, Outcome]:
        kind = self.next_kind(trial)
        book = self.book or self.open_book(shared)
        if trial.screen is None:
            self.rows = []
        self.rows.append(round_vector(stat, tuple(self.view.world.dims)))
        if len(self.rows) == 1:
            book.observe_first(self.rows[0])
        p = book.p_good(np.array(self.rows))
        s = self.settings
        verdict: Verdict = "continue"
        if p >= s.keep_p:
            verdict = "keep"
        elif p <= s.drop_p or len(self.rows) >= s.max_rounds:
            verdict = "revert"
        update = {"screen": stat} if kind == "screen" else {"confirm": [*trial.confirm, stat]}
        return trial.model_copy(update=update), Outcome(verdict=verdict, reason=f"P(good) {p:.3f}", kind=kind)

    def open_book(self, shared: JudgeState) -> Book:
        """The prior, once the never arm's calibration has set the noise per dimension."""
        noise = shared.pool.estimate()
        sigma = np.array([noise.sigma.get(d, np.nan) for d in self.view.world.dims], dtype=float)
        self.book = (TruePrior if self.settings.prior == "true" else LearnedPrior)(self.view, self.settings, sigma)
        return self.book

    def close(self, trial: Trial, verdict: str, shared: JudgeState) -> JudgeState:
        if verdict == "keep" and self.book is not None:
            self.book.champion_changed()
        return shared
