"""One simulated run of a gate procedure: the world, the clock, the audit budget and the truth.

Audits come from the embedded simulated world (`sil_runtime.sim.world.World`); true effects
come from `World.expected_scores` (expected audit mean at drift 0). Every procedure in one
run sees the same world (seed difficulties, drift path) and the same candidate sequence;
its audit noise is its own (audit keys carry the procedure's name).

    run = SimRun(world, candidates, budget=300, name="spg")
    y = run.audit(run.theta)                    # one audit of the champion, [n_seeds, D]
    a, b = run.audit_pair(cand, run.theta)      # a concurrent paired round
    run.decide(candidate, kept=True, audits=8)  # record the true effect, promote if kept

`judge_resamples` k > 1 has every audit's transcripts re-judged k times and averaged, as
`measurement.judge_resamples` does (`World.audit`); 1, the default, is a single judge pass.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from sil_runtime.sim.world import World, draw_candidate, effect_field


@dataclass(frozen=True)
class Candidate:
    kind: str
    field: np.ndarray  # latent policy change [n_seeds, D], added to the champion's field


def candidate_stream(
    world: World, rng: np.random.Generator, count: int, target: str, critical: list[str]
) -> list[Candidate]:
    """The world's candidate-effect mixture (`sim.effect_mixture`), seed-heterogeneous fields."""
    out = []
    for _ in range(count):
        kind, delta = draw_candidate(rng, world.dims, target, critical, world.params.effect_mixture)
        het = world.params.effect_heterogeneity
        out.append(Candidate(kind, effect_field(rng, delta, world.n_seeds, het)))
    return out


@dataclass
class Decision:
    kind: str
    delta: np.ndarray  # true change per dim had the candidate been kept (lower is better)
    kept: bool
    audits: float  # a shared champion audit is split over the candidates it served
    ending: str = ""  # how the decision ended (the judge's `Ending` value), where the procedure says


@dataclass
class SimRun:
    """Mutable state of one procedure's run: champion field, audits used, decisions."""

    world: World
    candidates: list[Candidate]
    budget: int
    name: str
    critical_idx: list[int]
    # harm tolerance per critical dim, in critical_idx order (the contract's harm_tolerance)
    tolerance: np.ndarray = field(default_factory=lambda: np.zeros(0))
    theta: np.ndarray = field(init=False)
    origin: np.ndarray = field(init=False)
    used: int = 0
    decisions: list[Decision] = field(default_factory=list)
    notes: dict[str, float] = field(default_factory=dict)
    judge_resamples: int = 1

    def __post_init__(self) -> None:
        if self.tolerance.size != len(self.critical_idx):
            raise ValueError(f"{len(self.critical_idx)} critical dims need as many harm tolerances")
        self.theta = np.zeros(self.world.shape)
        self.origin = self.theta.copy()
        self._origin_q = self.world.expected_scores(self.theta)
        self._champion_q = self._origin_q
        self._serial = 0

    def left(self) -> int:
        return self.budget - self.used

    def _key(self, what: str) -> str:
        self._serial += 1
        return f"{self.name}:{what}:{self._serial}"

    def audit(self, theta: np.ndarray) -> np.ndarray:
        """One audit at the current tick (one tick per audit spent)."""
        key = self._key("a")
        y = self.world.audit(theta, self.used, key, key, self.judge_resamples)
        self.used += 1
        return y

    def audit_pair(self, theta_a: np.ndarray, theta_b: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Two concurrent audits: same tick, shared pair key (correlated noise if the world has it)."""
        pair = self._key("pair")
        tick = self.used
        a = self.world.audit(theta_a, tick, pair, pair + ":a", self.judge_resamples)
        b = self.world.audit(theta_b, tick, pair, pair + ":b", self.judge_resamples)
        self.used += 2
        return a, b

    def true_delta(self, change: np.ndarray) -> np.ndarray:
        """True change per dim if `change` were applied to the current champion."""
        delta: np.ndarray = self.world.expected_scores(self.theta + change) - self._champion_q
        return delta

    def audit_group(self, thetas: list[np.ndarray]) -> list[np.ndarray]:
        """Concurrent audits of several policies: same tick, one shared pair key (CRN)."""
        pair = self._key("group")
        tick = self.used
        k = self.judge_resamples
        out = [self.world.audit(theta, tick, pair, f"{pair}:{i}", k) for i, theta in enumerate(thetas)]
        self.used += len(thetas)
        return out

    def decide(self, cand: Candidate, kept: bool, audits: float, ending: str = "") -> None:
        self.decisions.append(Decision(cand.kind, self.true_delta(cand.field), kept, audits, ending))
        if kept:
            self.set_champion(self.theta + cand.field)

    def set_champion(self, theta: np.ndarray) -> None:
        self.theta = theta
        self._champion_q = self.world.expected_scores(theta)

    def harms(self, delta: np.ndarray) -> bool:
        """Whether a true change worsens some critical dimension by more than its tolerance."""
        return bool(self.critical_idx) and bool((delta[self.critical_idx] > self.tolerance).any())

    def final_delta(self) -> np.ndarray:
        """True change of the final champion against the starting policy."""
        delta: np.ndarray = self._champion_q - self._origin_q
        return delta


@dataclass(frozen=True)
class RunSummary:
    """The per-run numbers the benchmark aggregates (small, picklable)."""

    decisions: int
    keeps: int
    audits: float  # audits spent on candidate decisions (calibration excluded)
    used: int
    false_keep: bool  # any KEEP with true target change >= 0
    harmful_keep: bool  # any KEEP worsening a critical dim by more than its harm tolerance
    bad_share: float  # (false or harmful KEEPs) / max(1, KEEPs)
    final_target: float
    final_critical: float  # worst critical change of the final champion
    null_decisions: int
    null_keeps: int
    good_decisions: int  # target better and no critical harm
    good_keeps: int
    good_effect_sum: float  # sum of |true target change| over good candidates decided
    final_harm: bool = False  # final champion worse than a critical dim's tolerance
    alpha_spent: float = 0.0
    bounded_cells: int = 0  # candidate-missing cells bounded (missing_policy bound)
    # per decided candidate: true target change, and whether it is good (better, no harm)
    effects: tuple[float, ...] = ()
    good: tuple[bool, ...] = ()
    certified: bool | None = None  # outcome of the final certification, if one ran
    # per decided candidate: its mixture type and the audits its decision cost
    kinds: tuple[str, ...] = ()
    decision_audits: tuple[float, ...] = ()
    kept: tuple[bool, ...] = ()
    endings: tuple[str, ...] = ()


def summarize(run: SimRun) -> RunSummary:
    crit = run.critical_idx
    d_t = np.array([d.delta[0] for d in run.decisions])
    kept = np.array([d.kept for d in run.decisions], dtype=bool)
    null = d_t >= 0
    harm = np.array([run.harms(d.delta) for d in run.decisions], dtype=bool)
    good = ~null & ~harm
    final = run.final_delta()
    return RunSummary(
        decisions=len(run.decisions),
        keeps=int(kept.sum()),
        audits=float(sum(d.audits for d in run.decisions)),
        used=run.used,
        false_keep=bool((kept & null).any()),
        harmful_keep=bool((kept & harm).any()),
        bad_share=float((kept & (null | harm)).sum() / max(1, kept.sum())),
        final_target=float(final[0]),
        final_critical=float(final[crit].max()) if crit else 0.0,
        null_decisions=int(null.sum()),
        null_keeps=int((kept & null).sum()),
        good_decisions=int(good.sum()),
        good_keeps=int((kept & good).sum()),
        good_effect_sum=float(-d_t[good].sum()),
        final_harm=run.harms(final),
        alpha_spent=float(run.notes.get("alpha_spent", 0.0)),
        bounded_cells=int(run.notes.get("bounded_cells", 0)),
        effects=tuple(float(x) for x in d_t),
        good=tuple(bool(x) for x in good),
        certified=bool(run.notes["certified"]) if "certified" in run.notes else None,
        kinds=tuple(d.kind for d in run.decisions),
        decision_audits=tuple(float(d.audits) for d in run.decisions),
        kept=tuple(bool(x) for x in kept),
        endings=tuple(d.ending for d in run.decisions),
    )
