"""gate.py: boundaries, the sequential paired gate's rules and the run's error budget."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sil.contract.schema import Promotion
from sil.stats.fitness import NoiseEstimate, NoisePool, RoundStat
from sil.stats.gate import (
    EarlyStops,
    Ending,
    ErrorBudget,
    Leg,
    PairedMarginGate,
    SequentialPairedGate,
    build_legs,
    critical_margin,
    expected_confirmations,
    leg_result,
    make_certify_gate,
    make_gate,
    obf_boundaries,
    should_promote,
    t_boundaries,
)

DIMS = ["t", "c1", "c2", "a1", "a2"]
# harm tolerance 0.5 keeps the legs' margin at the contract's critical_margin in these tests
PROMO = Promotion(
    target_dimensions=["t"],
    critical_dimensions=["c1", "c2"],
    auxiliary_dimensions=["a1", "a2"],
    harm_tolerance=0.5,
    replicate_k=16,
)
NOISE = NoiseEstimate(sigma={d: 0.8 for d in DIMS}, df={d: 40 for d in DIMS}, n_pairs=40)
ALPHA_J = 0.1 / 24


def rs(t: float | None = 0.0, c: float | None = 0.0, a: float | None = 0.0, **over) -> RoundStat:
    diff = {"t": t, "c1": c, "c2": c, "a1": a, "a2": a, **over}
    return RoundStat(diff=diff, n_seeds={d: 10 for d in diff}, se={d: None for d in diff})


# ---------------------------------------------------------------- boundaries


def test_boundaries_match_the_research_note_table():
    c = obf_boundaries(ALPHA_J, 16)
    note = [8.0, 6.5, 5.6, 5.0, 4.5, 4.2, 3.9, 3.7, 3.5, 3.3, 3.2, 3.05, 2.9, 2.8, 2.74]
    assert c[0] > 10  # the note's "infinity": nothing is spent at the first look
    assert np.allclose(c[1:], note, atol=0.06)


def test_boundaries_match_published_lan_demets_obf_values():
    # one-sided alpha 0.025, 5 equally spaced looks (as tabulated by gsDesign's sfLDOF)
    ref = [4.8769, 3.3569, 2.6803, 2.2898, 2.0310]
    assert np.allclose(obf_boundaries(0.025, 5), ref, atol=2e-3)


@pytest.mark.parametrize("alpha,looks", [(0.05, 12), (0.2, 16), (0.01, 8)])
def test_boundaries_spend_exactly_alpha_on_a_gaussian_random_walk(alpha, looks):
    rng = np.random.default_rng(3)
    m = 200_000
    z = np.cumsum(rng.standard_normal((m, looks)), axis=1) / np.sqrt(np.arange(1, looks + 1))
    rate = np.mean(np.any(z <= -np.array(obf_boundaries(alpha, looks)), axis=1))
    assert abs(rate - alpha) < 4 * math.sqrt(alpha * (1 - alpha) / m)


def test_t_adjustment_widens_boundaries_and_vanishes_with_many_df():
    z = np.array(obf_boundaries(0.05, 8))
    assert np.all(np.array(t_boundaries(0.05, 8, 12)) > z)
    assert np.allclose(t_boundaries(0.05, 8, 100_000), z, atol=1e-3)
    assert t_boundaries(0.05, 8, None) == obf_boundaries(0.05, 8)


# ---------------------------------------------------------------- the gate's rules


def test_make_gate_picks_the_contract_gate():
    assert isinstance(make_gate(PROMO, NOISE, ALPHA_J), SequentialPairedGate)
    pm = PROMO.model_copy(update={"gate": "paired_margin"})
    assert isinstance(make_gate(pm, NOISE, ALPHA_J), PairedMarginGate)
    with pytest.raises(ValueError):
        make_gate(PROMO, NOISE, 0.0)


def test_legs_cover_target_each_critical_and_one_aux_composite():
    legs = build_legs(PROMO, NOISE, ALPHA_J)
    assert [(lg.name, lg.kind, lg.null) for lg in legs] == [
        ("t", "target", 0.0),
        ("c1", "critical", 0.5),
        ("c2", "critical", 0.5),
        ("auxiliary_composite", "auxiliary", 0.3),
    ]
    assert legs[0].alpha == ALPHA_J and legs[1].alpha == 0.2


@settings(max_examples=200, deadline=None)
@given(st.lists(st.one_of(st.none(), st.floats(-9, 9)), min_size=5, max_size=5))
def test_screen_never_keeps(values):
    first = RoundStat(diff=dict(zip(DIMS, values, strict=False)), n_seeds={}, se={})
    d = make_gate(PROMO, NOISE, ALPHA_J).screen(first)
    assert d.verdict in ("continue", "revert") and d.stage == "screen" and d.alpha == 0.0


def test_screen_requires_a_known_target_moving_the_right_way():
    gate = make_gate(PROMO, NOISE, ALPHA_J)
    assert gate.screen(rs(t=-0.5)).verdict == "continue"
    assert gate.screen(rs(t=-0.1)).verdict == "revert"  # needs <= -0.3 * 0.8
    assert gate.screen(rs(t=None)).verdict == "revert"
    assert gate.screen(rs(t=-0.5, c=0.5 + 2 * 0.8 + 0.01)).verdict == "revert"


def test_clear_improvement_is_kept_on_fresh_rounds():
    gate = make_gate(PROMO, NOISE, ALPHA_J)
    rounds, d = [], None
    for _ in range(16):
        rounds.append(rs(t=-1.5, c=0.0, a=0.0))
        d = gate.confirm(rounds)
        if d.verdict != "continue":
            break
    assert d.verdict == "keep" and d.alpha == ALPHA_J
    assert all(leg.passed for leg in d.legs)
    assert all(leg.statistic <= leg.boundary for leg in d.legs)
    assert should_promote(d)
    assert not should_promote(d.model_copy(update={"stage": "screen"}))
    assert not should_promote(d.model_copy(update={"legs": []}))
    assert not should_promote(
        d.model_copy(update={"legs": [*d.legs[:-1], d.legs[-1].model_copy(update={"passed": None})]})
    )


def test_missing_dimension_blocks_keep():
    gate = make_gate(PROMO, NOISE, ALPHA_J)
    rounds, d = [], None
    for _ in range(16):
        rounds.append(rs(t=-1.5, c2=None))
        d = gate.confirm(rounds)
        assert d.verdict != "keep"
        c2 = next(leg for leg in d.legs if leg.dim == "c2")
        assert c2.passed is None and c2.n == 0
    assert d.verdict == "revert" and "unknown: c2" in d.reason


def test_missing_noise_estimate_blocks_keep():
    noise = NoiseEstimate(sigma={"t": 0.8}, df={"t": 40}, n_pairs=40)
    gate = make_gate(PROMO, noise, ALPHA_J)
    d = gate.confirm([rs(t=-3.0)] * 16)
    assert d.verdict == "revert"
    assert [leg.passed for leg in d.legs[1:]] == [None, None, None]


def test_harm_veto_and_futility_revert_early():
    gate = make_gate(PROMO, NOISE, ALPHA_J)
    harm = gate.confirm([rs(t=-1.0, c=1.5)] * 5)
    assert harm.verdict == "revert" and harm.reason.startswith("harm veto")
    futile = gate.confirm([rs(t=0.8)] * 3)
    assert futile.verdict == "revert" and futile.reason.startswith("futility")
    # the rule that decided is a kind on the decision, so no reader has to parse the reason
    assert (harm.ending, futile.ending) == (Ending.HARM_VETO, Ending.FUTILITY)
    assert gate.confirm([rs(t=-3.0)] * 16).ending == Ending.KEEP


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.floats(-3, 2), st.floats(-1, 3), st.floats(-1, 2)), min_size=1, max_size=16))
def test_early_stops_only_ever_revert(rows):
    rounds = [rs(t=t, c=c, a=a) for t, c, a in rows]
    legs = tuple(build_legs(PROMO, NOISE, ALPHA_J))
    with_stops = SequentialPairedGate(legs, 16, ALPHA_J).confirm(rounds)
    without = SequentialPairedGate(legs, 16, ALPHA_J, rules=EarlyStops(enabled=False)).confirm(rounds)
    if with_stops.verdict == "keep":
        assert without.verdict == "keep"
    if without.verdict == "keep":
        assert with_stops.verdict == "keep"  # a crossed boundary is never vetoed afterwards
    if with_stops.verdict != without.verdict:
        assert with_stops.verdict == "revert"


def test_confirm_rejects_more_rounds_than_the_design():
    gate = make_gate(PROMO, NOISE, ALPHA_J)
    with pytest.raises(ValueError, match="1..16"):
        gate.confirm([rs()] * 17)


def test_paired_margin_gate_decides_only_after_k_rounds():
    pm = PROMO.model_copy(update={"gate": "paired_margin", "replicate_k": 4})
    gate = make_gate(pm, NOISE, 0.05)
    assert gate.confirm([rs(t=-3)] * 3).verdict == "continue"
    assert gate.confirm([rs(t=-3)] * 4).verdict == "keep"
    assert gate.confirm([rs(t=-3, a=None)] * 4).verdict == "revert"


def test_certify_gate_has_its_own_stage_and_no_early_stops():
    gate = make_certify_gate(PROMO, NOISE, rounds=6)
    d = gate.confirm([rs(t=1.0, c=2.0)] * 2)
    assert d.stage == "certify" and d.verdict == "continue" and d.alpha == PROMO.alpha_certify
    assert gate.confirm([rs(t=1.0)] * 6).verdict == "revert"


def _null_type_one(alpha: float, reps: int, looks: int, seed: int) -> float:
    """Pure null through the gate itself: sigma estimated from 12 A/A pairs, no early stops."""
    rng = np.random.default_rng(seed)
    promo = Promotion(target_dimensions=["t"], critical_dimensions=[], replicate_k=looks)
    keeps = 0
    for _ in range(reps):
        pool = NoisePool()
        for x in rng.standard_t(5, 12) * 0.7:
            pool.add_aa(RoundStat(diff={"t": float(x)}, n_seeds={"t": 10}, se={"t": None}))
        legs = tuple(build_legs(promo, pool.estimate(), alpha))
        gate = SequentialPairedGate(legs, looks, alpha, rules=EarlyStops(enabled=False))
        xs = rng.standard_t(5, looks) * 0.7
        rounds = []
        for x in xs:
            rounds.append(RoundStat(diff={"t": float(x)}, n_seeds={"t": 10}, se={"t": None}))
            d = gate.confirm(rounds)
            if d.verdict != "continue":
                break
        keeps += d.verdict == "keep"
    return keeps / reps


def test_confirm_type_one_is_near_nominal_under_a_pure_null():
    reps = 1500
    rate = _null_type_one(0.05, reps, looks=8, seed=5)
    assert abs(rate - 0.05) < 4 * math.sqrt(0.05 * 0.95 / reps)


# ---------------------------------------------------------------- error budget


def test_fwer_budget_spends_alpha_evenly_then_stops():
    b = ErrorBudget(alpha_run=0.1, max_confirmations=4)
    assert b.next_alpha() == pytest.approx(0.025)
    for kept in (True, False, True, False):
        b = b.record(b.next_alpha(), kept)
    assert b.next_alpha() is None
    assert b.spent == pytest.approx(0.1) and b.remaining == 0.0
    assert sum(b.tested) == pytest.approx(0.1) and b.keeps == 2
    with pytest.raises(ValueError, match="exhausted"):
        b.record(0.025, False)


def test_budget_refuses_alpha_beyond_what_is_left():
    b = ErrorBudget(alpha_run=0.1, max_confirmations=4)
    with pytest.raises(ValueError, match="left"):
        b.record(0.11, True)
    e = ErrorBudget(alpha_run=0.1, max_confirmations=4, mode="elond")
    with pytest.raises(ValueError, match="issued"):
        e.record(0.05, True)


def test_forecast_allocation_spreads_what_is_left_and_never_overspends():
    b = ErrorBudget(alpha_run=0.1, max_confirmations=24)
    assert b.next_alpha() == pytest.approx(0.1 / 24)
    forecast = b.next_alpha(expected_remaining=10)  # 0.1 / 10, rounded down onto a 2% grid
    assert 0.01 / 1.02 <= forecast <= 0.01
    assert b.next_alpha(expected_remaining=100) == pytest.approx(0.1 / 24)  # capped by J
    rng = np.random.default_rng(1)
    while (alpha := b.next_alpha(expected_remaining=float(rng.uniform(0, 30)))) is not None:
        b = b.record(alpha, kept=False)
        assert b.spent <= 0.1 + 1e-12
        if b.remaining < 1e-12:
            break
    assert math.fsum(b.tested) <= 0.1 + 1e-12
    even = ErrorBudget(alpha_run=0.1, max_confirmations=24, allocation="even")
    assert even.next_alpha(expected_remaining=10) == pytest.approx(0.1 / 24)


def test_recycling_returns_a_keeps_alpha_and_only_a_keeps():
    b = ErrorBudget(alpha_run=0.1, max_confirmations=4, recycle=True)
    b = b.record(0.025, kept=True)
    assert b.spent == pytest.approx(0.0) and b.next_alpha() == pytest.approx(0.025)
    b = b.record(0.025, kept=False)
    assert b.spent == pytest.approx(0.025) and b.remaining == pytest.approx(0.075)
    plain = ErrorBudget(alpha_run=0.1, max_confirmations=4).record(0.025, kept=True)
    assert plain.spent == pytest.approx(0.025)
    for _ in range(2):  # the confirmation count still caps the run
        b = b.record(b.next_alpha(), kept=True)
    assert b.next_alpha() is None


def test_recycling_keeps_the_familywise_bound_on_null_confirmations():
    """Levels of the confirmations that end without a KEEP never sum above alpha_run, so the
    null ones (which KEEP only falsely) are bounded until the first false KEEP."""
    rng = np.random.default_rng(7)
    b = ErrorBudget(alpha_run=0.1, max_confirmations=60, recycle=True)
    while (alpha := b.next_alpha(expected_remaining=float(rng.uniform(1, 20)))) is not None:
        b = b.record(alpha, kept=bool(rng.random() < 0.3))
        reverted = math.fsum(a for a, k in zip(b.tested, b.kept, strict=True) if not k)
        assert reverted <= 0.1 + 1e-12
        if b.remaining < 1e-12:
            break
    assert math.fsum(b.tested) > 0.1  # recycled alpha was used again
    assert ErrorBudget.from_promotion(PROMO).recycle is PROMO.alpha_recycle


def test_expected_confirmations_learns_the_cost_per_confirmation():
    assert expected_confirmations(125, 0, 0) == pytest.approx(10)  # prior 12.5 audits each
    assert expected_confirmations(100, 200, 10) == pytest.approx(100 / (225 / 12))
    assert expected_confirmations(-5, 10, 1) == 0


def test_elond_budget_grows_with_discoveries():
    b = ErrorBudget(alpha_run=0.1, max_confirmations=10, mode="elond")
    assert b.next_alpha() == pytest.approx(0.01)
    b = b.record(0.01, kept=False)
    assert b.next_alpha() == pytest.approx(0.01)
    b = b.record(0.01, kept=True)
    assert b.next_alpha() == pytest.approx(0.02)  # alpha * gamma * (R + 1)
    b = b.record(0.02, kept=True)
    assert b.next_alpha() == pytest.approx(0.03)
    assert b.spent == pytest.approx(0.03) and b.remaining == pytest.approx(0.07)


def test_budget_round_trips_and_reads_the_contract():
    b = ErrorBudget.from_promotion(PROMO).record(0.1 / 24, True)
    again = ErrorBudget.model_validate_json(b.model_dump_json())
    assert again == b and again.next_alpha() == pytest.approx(0.1 / 24)


def test_a_crossed_leg_stays_rejected_only_with_latching():
    leg = Leg("t", "target", (("t", 1.0),), null=0.0, alpha=0.2, sigma=1.0, df=1000)
    rounds = [rs(t=-3.0), rs(t=3.0)]
    latched = leg_result(leg, rounds, looks=2, latch=True)
    assert latched.passed and latched.crossed_at == 1
    assert latched.statistic == pytest.approx(0.0) and latched.statistic > latched.boundary
    current = leg_result(leg, rounds, looks=2, latch=False)
    assert current.passed is False and current.crossed_at is None


def test_critical_margin_tightens_with_low_noise_only_when_asked():
    quiet = NoiseEstimate(sigma={d: 0.5 for d in DIMS}, df={d: 40 for d in DIMS}, n_pairs=40)
    fixed = PROMO.model_copy(update={"critical_margin_sd": None})
    assert critical_margin(fixed, quiet, "c1") == 0.5
    scaled = PROMO.model_copy(update={"critical_margin_sd": 0.75})
    assert critical_margin(scaled, quiet, "c1") == pytest.approx(0.375)
    assert critical_margin(scaled, NOISE, "c1") == 0.5  # 0.75 * 0.8 > the contract's 0.5
    legs = build_legs(scaled, quiet, ALPHA_J)
    assert [lg.null for lg in legs if lg.kind == "critical"] == pytest.approx([0.375, 0.375])


def test_paired_margin_gate_judges_only_the_full_sample():
    pm = PROMO.model_copy(update={"gate": "paired_margin", "replicate_k": 4})
    gate = make_gate(pm, NOISE, 0.05)
    rows = [(-5.0, -1.0), (2.0, -1.0), (2.0, -1.0), (1.5, -1.0)]  # target mean +0.125
    early_luck = [rs(t=t, c=c, a=c) for t, c in rows]
    assert gate.confirm(early_luck).verdict == "revert"


def test_ni_margin_is_derived_from_the_harm_tolerance_and_never_larger():
    promo = PROMO.model_copy(update={"critical_margin_sd": None, "harm_tolerance": {"c1": 0.3, "c2": 0.8}})
    assert critical_margin(promo, NOISE, "c1") == pytest.approx(0.3)
    assert critical_margin(promo, NOISE, "c2") == pytest.approx(0.5)  # capped by critical_margin
    half = promo.model_copy(update={"harm_margin_share": 0.5})
    assert critical_margin(half, NOISE, "c1") == pytest.approx(0.15)
    for dim in ("c1", "c2"):
        assert critical_margin(half, NOISE, dim) <= half.tolerance(dim)


def test_harm_tolerance_must_name_the_critical_dims():
    with pytest.raises(ValueError, match="exactly the critical dimensions"):
        Promotion(target_dimensions=["t"], critical_dimensions=["c1", "c2"], harm_tolerance={"c1": 0.3})
    with pytest.raises(ValueError, match="> 0"):
        Promotion(target_dimensions=["t"], critical_dimensions=["c1"], harm_tolerance=0.0)


@pytest.mark.parametrize("alpha,looks", [(0.2, 16), (0.05, 12)])
def test_pocock_boundaries_spend_alpha_and_cross_earlier_than_obf(alpha, looks):
    rng = np.random.default_rng(4)
    m = 200_000
    z = np.cumsum(rng.standard_normal((m, looks)), axis=1) / np.sqrt(np.arange(1, looks + 1))
    pocock = np.array(obf_boundaries(alpha, looks, "pocock"))
    assert abs(np.mean(np.any(z <= -pocock, axis=1)) - alpha) < 4 * math.sqrt(alpha * (1 - alpha) / m)
    obf = np.array(obf_boundaries(alpha, looks))
    assert pocock[0] < obf[0] and pocock[-1] > obf[-1]  # spends early, pays at the last look


def test_legs_take_their_spending_from_the_contract():
    promo = PROMO.model_copy(update={"ni_spending": "pocock"})
    kinds = {lg.kind: lg.spending for lg in build_legs(promo, NOISE, ALPHA_J)}
    assert kinds == {"target": "obf", "critical": "pocock", "auxiliary": "pocock"}


def test_a_look_that_spends_nothing_has_no_boundary_and_the_ledger_can_hold_it() -> None:
    # a long horizon at a small level spends nothing at its first look: c_1 = inf; a run with a
    # dry proposer at budget 1200 crashed writing that -inf into its round record
    leg = Leg("t", "target", (("t", 1.0),), null=0.0, alpha=0.0083, sigma=1.0, df=9)
    assert not math.isfinite(t_boundaries(leg.alpha, 400, leg.df)[0])
    first = leg_result(leg, [rs(t=-50.0)], looks=400)
    assert first.boundary is None and first.passed is False and first.statistic == pytest.approx(-50.0)
    later = leg_result(leg, [rs(t=-50.0)] * 40, looks=400)
    assert later.boundary is not None and math.isfinite(later.boundary)
    json.dumps(first.model_dump(mode="json"), allow_nan=False)  # what the ledger requires of a record
