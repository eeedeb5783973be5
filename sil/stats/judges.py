"""The arm policy: how a candidate arm judges its candidates (pure; the loop and the bench share it).

A judge decides, round by round, what a candidate's paired rounds mean. It holds no I/O and
no state of its own: the run-level state it reads and updates (`JudgeState`: the noise pool
and the run's error budget) and the candidate's own judging state (`Trial`) are passed in and
returned, so the loop can persist them after every step and the bench can keep them in
memory. The same code path decides in both (`tests/bench/test_bench_equivalence.py`).

- `CoinJudge` (random arm): one round, then a seeded coin: the negative control.
- `GateJudge` (gate arm): a screen round (noise frozen, alpha allocated from the error budget
  by forecast), then group-sequential confirmation rounds (gate.py) until KEEP or REVERT.
- `certify`: the final test of a champion against the starting policy.

    judge = GateJudge(promotion)
    trial, outcome = judge.judge(trial, stat, shared, ArmBudget(audits_left=120, audits_spent=40), index)
    shared = judge.close(trial, outcome.verdict, shared)      # once the verdict is final
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, model_validator

from sil.contract.schema import Promotion
from sil.stats.fitness import NoiseEstimate, NoisePool, RoundStat
from sil.stats.gate import (
    Ending,
    ErrorBudget,
    GateDecision,
    expected_confirmations,
    for_fresh_seeds,
    make_certify_gate,
    make_gate,
)

RANDOM_ACCEPT_P = 0.5
COIN_STREAM = 99  # the coin's rng stream, apart from the proposer's
Verdict = Literal["continue", "keep", "revert"]
CandidateRoundKind = Literal["screen", "confirm", "random"]
Claim = Literal["heldout", "fresh"]  # what a certification claims: these held-out seeds, or seeds never used


class JudgeState(BaseModel):
    """Run-level state the gate arm reads and updates: noise pool and error budget."""

    pool: NoisePool = NoisePool()
    budget: ErrorBudget

    @classmethod
    def start(cls, promotion: Promotion) -> JudgeState:
        return cls(budget=ErrorBudget.from_promotion(promotion))


class Trial(BaseModel):
    """One candidate's judging state: the level it is tested at, its frozen noise, its rounds."""

    alpha: float | None = None  # set at the screen; None = spends nothing of the run's alpha
    noise: NoiseEstimate | None = None  # frozen at the screen: no candidate sets its own threshold
    screen: RoundStat | None = None
    confirm: list[RoundStat] = []

    @property
    def rounds(self) -> int:
        return len(self.confirm) + (1 if self.screen is not None else 0)


class Outcome(BaseModel):
    """What a judge concluded from one round."""

    model_config = ConfigDict(frozen=True)
    verdict: Verdict
    reason: str
    kind: str  # the kind of round just judged: random, screen or confirm
    decision: GateDecision | None = None
    coin: float | None = None
    # how the judging ended, by kind: what a reader branches on, never `reason` (filled from the
    # verdict when not given: a keep or continue says it, a revert naming no rule ends as OTHER)
    ending: Ending = Ending.OTHER

    @model_validator(mode="before")
    @classmethod
    def _ending_of_a_plain_verdict(cls, data: Any) -> Any:
        if isinstance(data, dict) and "ending" not in data:
            plain = {"keep": Ending.KEEP, "continue": Ending.CONTINUE}
            data = {**data, "ending": plain.get(data.get("verdict", ""), Ending.OTHER)}
        return data

    @model_validator(mode="after")
    def _ended_as_said(self) -> Outcome:
        if self.verdict != "revert" and self.ending != (Ending.KEEP if self.verdict == "keep" else Ending.CONTINUE):
            raise ValueError(f"a {self.verdict} outcome cannot end as {self.ending.value!r}")
        return self


@dataclass(frozen=True)
class ArmBudget:
    """What an arm can still afford: audits left (arm and run budgets) and audits spent so far."""

    audits_left: int
    audits_spent: int


class Judge(Protocol):
    name: str
    keeps_by_test: bool  # a KEEP must carry a decision that passes gate.should_promote

    def stop_reason(self, shared: JudgeState) -> str | None:
        """Why no further candidate may start, or None."""
        ...

    def next_kind(self, trial: Trial) -> CandidateRoundKind:
        """The kind of the candidate's next round (a label and ledger field)."""
        ...

    def judge(
        self, trial: Trial, stat: RoundStat, shared: JudgeState, budget: ArmBudget, index: int
    ) -> tuple[Trial, Outcome]:
        """Take one round into account; the outcome says continue, keep or revert."""
        ...

    def close(self, trial: Trial, verdict: str, shared: JudgeState) -> JudgeState:
        """Account a final verdict in the run-level state (alpha spent, noise pooled)."""
        ...


class CoinJudge:
    """The random arm: one paired round (recorded, never used), then a seeded coin decides."""

    name = "random"
    keeps_by_test = False

    def __init__(self, run_seed: int) -> None:
        self.run_seed = run_seed

    def stop_reason(self, shared: JudgeState) -> str | None:
        return None

    def next_kind(self, trial: Trial) -> CandidateRoundKind:
        return "random"

    def judge(
        self, trial: Trial, stat: RoundStat, shared: JudgeState, budget: ArmBudget, index: int
    ) -> tuple[Trial, Outcome]:
        import numpy as np

        coin = float(np.random.default_rng([self.run_seed, COIN_STREAM, index]).random())
        verdict: Verdict = "keep" if coin < RANDOM_ACCEPT_P else "revert"
        trial = trial.model_copy(update={"screen": stat})
        ending = Ending.KEEP if verdict == "keep" else Ending.COIN
        reason = f"random arm coin flip ({coin:.3f})"
        return trial, Outcome(verdict=verdict, reason=reason, kind="random", coin=round(coin, 4), ending=ending)

    def close(self, trial: Trial, verdict: str, shared: JudgeState) -> JudgeState:
        return shared


class GateJudge:
    """The gate arm: screen, then sequential paired confirmation within the run's error budget."""

    name = "gate"
    keeps_by_test = True

    def __init__(self, promotion: Promotion) -> None:
        self.promotion = promotion

    def stop_reason(self, shared: JudgeState) -> str | None:
        return None if shared.budget.next_alpha() is not None else "run error budget (alpha) fully spent"

    def next_kind(self, trial: Trial) -> CandidateRoundKind:
        return "screen" if trial.screen is None else "confirm"

    def judge(
        self, trial: Trial, stat: RoundStat, shared: JudgeState, budget: ArmBudget, index: int
    ) -> tuple[Trial, Outcome]:
        if trial.screen is None:
            return self._screen(stat, shared, budget)
        return self._confirm(trial, stat, budget)

    def _screen(self, stat: RoundStat, shared: JudgeState, budget: ArmBudget) -> tuple[Trial, Outcome]:
        noise = shared.pool.estimate()
        forecast = expected_confirmations(budget.audits_left, budget.audits_spent, shared.budget.confirmations)
        alpha = shared.budget.next_alpha(forecast)
        if alpha is None:
            trial = Trial(screen=stat, noise=noise)
            why = "run error budget (alpha) fully spent"
            return trial, Outcome(verdict="revert", reason=why, kind="screen", ending=Ending.ALPHA_SPENT)
        decision = make_gate(self.promotion, noise, alpha).screen(stat)
        if decision.verdict == "revert":  # a screened-out candidate spends no alpha
            return Trial(screen=stat, noise=noise), Outcome(
                verdict="revert",
                reason=f"screen: {decision.reason}",
                kind="screen",
                decision=decision,
                ending=decision.ending,
            )
        trial = Trial(alpha=alpha, noise=noise, screen=stat)
        return trial, Outcome(verdict="continue", reason=decision.reason, kind="screen", decision=decision)

    def _confirm(self, trial: Trial, stat: RoundStat, budget: ArmBudget) -> tuple[Trial, Outcome]:
        if trial.alpha is None or trial.noise is None:
            raise ValueError("a confirmation round needs a screened-in trial (alpha and noise frozen)")
        confirm = [*trial.confirm, stat]
        horizon = len(confirm) + budget.audits_left // 2
        decision = make_gate(self.promotion, trial.noise, trial.alpha).confirm(confirm, horizon=horizon)
        trial = trial.model_copy(update={"confirm": confirm})
        outcome = Outcome(
            verdict=decision.verdict, reason=decision.reason, kind="confirm", decision=decision, ending=decision.ending
        )
        return trial, outcome

    def close(self, trial: Trial, verdict: str, shared: JudgeState) -> JudgeState:
        if trial.alpha is None:
            return shared
        pool = shared.pool.model_copy(deep=True)
        pool.add_candidate(trial.confirm)
        budget = shared.budget.record(trial.alpha, verdict == "keep")
        return JudgeState(pool=pool, budget=budget)


def certify(
    promotion: Promotion,
    pool: NoisePool,
    rounds: list[RoundStat],
    looks: int,
    sigma_scale: float = 1.0,
    *,
    alpha: float | None = None,
    claim: Claim = "heldout",
) -> GateDecision:
    """The champion-vs-start certification after `rounds` (at most `looks` of them), at `alpha`
    (None: alpha_certify), claiming an effect on the rounds' seeds (heldout) or on seeds never
    used (fresh: the seeds' sampling variance enters every leg)."""
    gate = make_certify_gate(promotion, pool.estimate(), looks, alpha=alpha, sigma_scale=sigma_scale)
    if claim == "fresh":
        gate = for_fresh_seeds(gate, rounds)
    return gate.confirm(rounds)


def seed_count_scale(pool_seeds: int, round_seeds: int) -> float:
    """How much wider the frozen sigma is made for rounds on `round_seeds` seeds.

    The pool's sigma is the between-round SD of a mean over `pool_seeds` seeds; the per-seed
    noise part of a mean over fewer seeds grows by sqrt(pool_seeds / round_seeds), and the
    batch part does not shrink with more seeds, so the scale is never below 1 (conservative
    both ways, assuming the two seed sets are equally noisy per seed).
    """
    if pool_seeds < 1 or round_seeds < 1:
        raise ValueError(f"seed counts must be >= 1, got {pool_seeds} and {round_seeds}")
    return max(1.0, math.sqrt(pool_seeds / round_seeds))


def judge_for(arm: str, promotion: Promotion, run_seed: int) -> Judge:
    """The judging strategy of a candidate arm."""
    if arm == "gate":
        return GateJudge(promotion)
    if arm == "random":
        return CoinJudge(run_seed)
    raise ValueError(f"arm {arm!r} judges no candidates")
