"""Many-to-one rounds (bench, L5): several candidates audited with one shared champion audit.

A round audits the champion once and each of up to `slots` open candidates once, all at the
same tick with one shared pair key (so common random numbers reach every arm). Each
candidate's paired statistic is its own audit minus the shared champion audit, so a
comparison costs (m + 1) / m audits instead of 2. Each candidate is judged by the loop's own
gate (`gate.make_gate`: screen, then group-sequential confirmation at a level from the run's
`ErrorBudget`). Comparisons that share a champion audit are correlated (Dunnett's setting);
the run-level bound is Bonferroni over confirmations, valid under any dependence, and each
confirmation's alpha is charged when it starts, so concurrent confirmations cannot overspend.
A KEEP changes the champion: the other open candidates start again with a fresh screen
against the new one (their spent alpha stays spent).

    run_many_to_one(run, ManyToOneSettings(promotion, slots=3))
"""

from __future__ import annotations

from dataclasses import dataclass, field

from bench.simrun import Candidate, SimRun
from sil.contract.schema import Promotion
from sil.stats.fitness import NoisePool, RoundStat, paired_round_for
from sil.stats.gate import ErrorBudget, Gate, expected_confirmations, make_gate


@dataclass(frozen=True)
class ManyToOneSettings:
    promotion: Promotion
    slots: int = 3


@dataclass(eq=False)  # identity: open candidates are removed by object
class _Open:
    """One open candidate: its gate (frozen at the screen) and its rounds so far."""

    cand: Candidate
    gate: Gate | None = None
    screen: RoundStat | None = None
    confirm: list[RoundStat] = field(default_factory=list)
    audits: float = 0.0


class _Run:
    """The procedure's state: noise pool, error budget and the open candidates."""

    def __init__(self, run: SimRun, settings: ManyToOneSettings) -> None:
        if settings.promotion.error_control != "fwer":
            raise ValueError("many-to-one rounds charge alpha at the start: use error_control fwer")
        if settings.slots < 1:
            raise ValueError(f"slots must be >= 1, got {settings.slots}")
        self.run, self.promo, self.slots = run, settings.promotion, settings.slots
        self.pool = NoisePool()
        self.budget = ErrorBudget.from_promotion(self.promo)
        self.stream = iter(run.candidates)
        self.open: list[_Open] = []
        self.calibration = 0
        self.starting = True  # False once the stream, the alpha or the audit budget is out

    def calibrate(self) -> None:
        dims = self.run.world.dims
        for _ in range(self.promo.calibration_pairs):
            a, b = self.run.audit_pair(self.run.theta, self.run.theta)
            self.pool.add_aa(paired_round_for(a, b, dims, self.promo))
        self.calibration = self.run.used

    def fill(self) -> None:
        while self.starting and len(self.open) < self.slots:
            cand = next(self.stream, None)
            if cand is None or self.budget.next_alpha() is None:
                self.starting = False
                return
            self.open.append(_Open(cand))
        if len(self.open) + 1 > self.run.left():  # shed candidates not yet audited, then stop
            self.open = [o for o in self.open if o.audits > 0] or self.open[: max(self.run.left() - 1, 0)]
            self.starting = False

    def round(self) -> None:
        """One many-to-one round over the open candidates; decide those that finished."""
        run = self.run
        ys = run.audit_group([run.theta] + [run.theta + o.cand.field for o in self.open])
        share = len(ys) / (len(ys) - 1)
        rounds_left = run.left() // len(ys)
        kept = None
        for o, y in zip(list(self.open), ys[1:], strict=True):
            o.audits += share
            stat = paired_round_for(y, ys[0], run.world.dims, self.promo)
            verdict = self._judge(o, stat, rounds_left)
            if verdict != "continue" and kept is None:
                self._finish(o, verdict == "keep")
                kept = o if verdict == "keep" else None
            elif verdict != "continue":
                self._finish(o, False)  # compared against a champion just replaced
        if kept is not None:
            for o in self.open:  # the champion changed: the others start again
                o.gate, o.screen, o.confirm = None, None, []

    def _judge(self, o: _Open, stat: RoundStat, rounds_left: int) -> str:
        if o.gate is None:
            spent = self.run.used - self.calibration
            forecast = expected_confirmations(self.run.left(), spent, self.budget.confirmations)
            alpha = self.budget.next_alpha(forecast)
            if alpha is None:
                return "revert"
            gate = make_gate(self.promo, self.pool.estimate(), alpha)
            o.screen = stat
            if gate.screen(stat).verdict != "continue" or rounds_left < 1:
                return "revert"
            self.budget = self.budget.record(alpha, False)  # charged now: confirmations overlap
            o.gate = gate
            return "continue"
        o.confirm.append(stat)
        horizon = min(self.promo.replicate_k, len(o.confirm) + rounds_left)
        return o.gate.confirm(o.confirm, horizon=horizon).verdict

    def _finish(self, o: _Open, kept: bool) -> None:
        self.open.remove(o)
        self.pool.add_candidate([r for r in (o.screen, *o.confirm) if r is not None])
        self.run.decide(o.cand, kept, o.audits)

    def close(self) -> None:
        for o in list(self.open):  # out of audits mid-confirmation: REVERT, as the loop does
            if o.audits > 0:
                self._finish(o, False)
        self.run.notes["alpha_spent"] = self.budget.spent
        self.run.notes["calibration_audits"] = self.calibration


def run_many_to_one(run: SimRun, settings: ManyToOneSettings) -> None:
    """Calibrate, then many-to-one rounds until the audit budget, the alpha or the stream ends."""
    state = _Run(run, settings)
    state.calibrate()
    while True:
        state.fill()
        if not state.open or run.left() < len(state.open) + 1:
            break
        state.round()
    state.close()


def slots_of(method: str) -> int:
    """`loop_gate_m2o3` -> 3."""
    return int(method.removeprefix("loop_gate_m2o"))
