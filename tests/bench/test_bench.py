"""bench/: the gate benchmark's harness, procedures, metrics and CLI (tiny budgets, fast)."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from bench import gates, metrics
from bench.gates import Cell, load_setup, simulate_run
from bench.metrics import WaldPoint, aggregate, by_kind, format_by_kind, in_stream_point, wald_bound_rounds
from bench.simrun import RunSummary, SimRun
from bench.validity import null_promotion, one_replicate
from sil.stats.gate import Ending
from sil.stats.judges import Outcome
from sil_runtime.sim.world import World

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def setup():
    # the FWER design: these tests check its run-level alpha budget (two-stage: test_two_stage_*);
    # a 5-round certification, so that the certified methods fit the tiny budgets
    methods = gates.METHODS + gates.VARIANTS
    full = load_setup(REPO / "program.md", methods, with_aux=False, overrides={"error_design": "fwer"})
    return replace(full, certify_audits=10)


@pytest.mark.slow  # whole runs of the product's loop
def test_two_stage_loop_gate_certifies_what_it_keeps_within_budget():
    setup = load_setup(REPO / "program.md", ("loop_gate",), with_aux=False)
    assert setup.promotion.error_design == "two_stage" and setup.certify_audits == 140
    kept = 0
    for run in range(3):
        s = simulate_run(setup, Cell("calibrated", 0.5, 250), run=run)["loop_gate"]
        assert s.used <= 250 and s.keeps <= s.decisions
        assert (s.certified is not None) == (s.keeps > 0)  # every changed champion is certified
        kept += s.keeps
        if s.certified is False:
            assert s.final_target == 0.0  # not certified: rolled back to the start


@pytest.mark.slow  # whole runs of the product's loop
def test_the_certified_oracle_keeps_only_harmless_gains_and_certifies_them():
    setup = load_setup(REPO / "program.md", ("oracle_certified", "oracle"), with_aux=False)
    for run in range(3):
        out = simulate_run(setup, Cell("calibrated", 0.5, 300), run=run)
        s, free = out["oracle_certified"], out["oracle"]
        assert s.used <= 300 and not s.false_keep and s.keeps > 0
        assert s.certified is not None  # its champion faces the loop's certification
        # a paired round per candidate and the reserve: fewer decisions than the 1-audit oracle
        assert s.decisions <= (300 - setup.certify_audits) // 2 < free.decisions
        if s.certified:
            assert s.final_critical <= 1e-9 and s.final_target < 0
        else:
            assert s.final_target == 0.0


def test_setup_uses_target_and_critical_dims_of_the_contract(setup):
    p = setup.promotion
    assert setup.dims == (p.target_dimensions[0], *p.critical_dimensions)
    assert p.auxiliary_dimensions == [] and setup.n_seeds == 10
    assert setup.cell_promotion(Cell("none", 0.0, 150)).max_confirmations == 12
    assert setup.cell_promotion(Cell("none", 0.0, 600), "elond").error_control == "elond"


@pytest.mark.slow  # whole runs of the product's loop
def test_every_procedure_runs_within_budget_on_the_same_stream(setup):
    out = simulate_run(setup, Cell("calibrated", 0.5, 80), run=3)
    assert set(out) == set(setup.methods)
    for name, s in out.items():
        assert s.used <= 80, name
        assert s.keeps <= s.decisions
    assert out["oracle"].null_keeps == 0 and not out["oracle"].false_keep
    assert out["random"].decisions == 80
    assert 0 < out["random"].keeps < 80
    for name in ("loop_gate", "loop_gate_elond", "loop_gate_certified"):
        assert out[name].alpha_spent <= setup.promotion.alpha_run + 1e-12


@pytest.mark.slow  # whole runs of the product's loop
def test_runs_are_reproducible(setup):
    cell = Cell("up trend", 0.0, 60)
    assert simulate_run(setup, cell, run=1) == simulate_run(setup, cell, run=1)


def test_paired_audits_share_a_tick_and_truth_tracks_the_champion(setup):
    world = World(setup.cell_params(Cell("calibrated", 0.0, 10), 0), setup.dims, setup.n_seeds)
    run = SimRun(world, [], budget=10, name="t", critical_idx=[1, 2, 3, 4], tolerance=np.full(4, 0.3))
    run.audit_pair(run.theta, run.theta)
    assert run.used == 2 and run.left() == 8
    change = np.zeros(world.shape)
    change[:, 0] = -1.0
    delta = run.true_delta(change)
    assert delta[0] < 0 and np.allclose(delta[1:], 0)
    run.set_champion(run.theta + change)
    assert run.final_delta()[0] == pytest.approx(delta[0])
    assert np.allclose(run.true_delta(np.zeros(world.shape)), 0)


@pytest.mark.parametrize(
    "alpha,effect,audits",
    [(0.05, 0.3, 59), (0.05, 0.5, 21), (0.05, 0.8, 8.3), (0.1 / 24, 0.5, 43), (0.1 / 24, 0.8, 17)],
)
def test_wald_bound_matches_the_research_note(alpha, effect, audits):
    _, rounds = wald_bound_rounds(alpha, 0.2, effect, 0.836)
    assert 2 * rounds == pytest.approx(audits, rel=0.03)


def _summary(false_keep: bool, final_target: float, final_critical: float) -> RunSummary:
    return RunSummary(
        decisions=10,
        keeps=1,
        audits=20,
        used=20,
        false_keep=false_keep,
        harmful_keep=False,
        bad_share=float(false_keep),
        final_target=final_target,
        final_critical=final_critical,
        null_decisions=5,
        null_keeps=int(false_keep),
        good_decisions=3,
        good_keeps=1,
        good_effect_sum=1.5,
        final_harm=final_critical > 0.3,
        effects=(-0.5, -0.5, -0.5, 0.0, 0.0, 0.2, 0.3, 0.0, 0.0, 0.0),
        good=(True, True, True, False, False, False, False, False, False, False),
    )


def test_aggregate_scores_admissibility_against_the_truth():
    runs = [_summary(i == 0, -0.5, 0.0) for i in range(20)]
    row = aggregate("g", runs, sd_round=0.84)
    point = in_stream_point(runs, 0.5, 16)
    assert point.alpha == pytest.approx(1 / 100) and point.beta == pytest.approx(2 / 3)
    assert row.false_keep_run == pytest.approx(0.05) and row.p_worse == 0
    assert row.admissible(0.1) and not row.admissible(0.01)
    worse = [_summary(False, 0.1 if i < 3 else -0.5, 0.0) for i in range(20)]
    assert aggregate("g", worse, 0.84).p_worse == pytest.approx(0.15)
    assert not aggregate("g", worse, 0.84).admissible(0.1)
    harm = [_summary(False, -0.5, 0.31 if i < 3 else 0.2) for i in range(20)]
    assert aggregate("g", harm, 0.84).p_worse == pytest.approx(0.15)
    assert row.audits_per_decision == 2.0
    per_run = sum(point.audits(e, g, 0.84) for e, g in zip(runs[0].effects, runs[0].good, strict=True))
    assert row.wald_ratio == pytest.approx(20 / per_run)


def test_wald_point_charges_good_candidates_at_their_own_effect():
    point = WaldPoint(alpha=0.1 / 24, beta=0.2, design_effect=0.5, looks=16)
    assert point.audits(-0.8, True, 0.836) == pytest.approx(17, rel=0.03)  # research note value
    assert point.audits(-0.5, True, 0.836) == pytest.approx(32)  # 43 audits, capped at 2K
    assert point.audits(-0.8, True, 0.836) < point.audits(-0.5, True, 0.836)
    assert point.audits(0.5, False, 0.836) < point.audits(0.0, False, 0.836)  # harm is quick to refute


def test_validity_replicate_tests_both_levels_on_a_null(setup):
    promo = null_promotion(setup.dims[0], calibration_pairs=12)
    params = setup.cell_params(Cell("calibrated", 0.0, 300), 7)
    kept = one_replicate(params, setup.dims, setup.n_seeds, promo, np.random.default_rng(0))
    assert set(kept) == {0.05, 0.01}
    assert kept[0.01] <= kept[0.05]  # the 0.01 boundaries lie outside the 0.05 ones


@pytest.mark.slow  # whole runs of the product's loop
def test_cli_prints_tables_and_acceptance(capsys, tmp_path):
    gates.main(
        [
            "--runs",
            "2",
            "--budgets",
            "60",
            "--worlds",
            "calibrated",
            "--rhos",
            "0",
            "--validity-reps",
            "2",
            "--jobs",
            "1",
            "--certify-rounds",
            "5",
            "--out",
            str(tmp_path),
        ]
    )
    text = capsys.readouterr().out
    assert "SIMULATED" in text and "| loop_gate |" in text and "| geode |" in text
    assert "Type-I of the confirmation test" in text and "Acceptance checks" in text
    assert (tmp_path / "gates.md").exists() and (tmp_path / "gates.json").exists()
    assert "Where the candidate audits went" not in text  # only with --by-kind


@pytest.mark.slow  # whole runs of the product's loop
def test_by_kind_accounts_every_candidate_audit_to_its_type(setup):
    runs = [simulate_run(setup, Cell("calibrated", 0.0, 120), run=r)["loop_gate"] for r in range(3)]
    rows = by_kind("loop_gate", runs)
    assert sum(r.share for r in rows) == pytest.approx(1.0)
    assert sum(r.audits for r in rows) * 3 == pytest.approx(sum(r.audits for r in runs))
    assert sum(r.decisions for r in rows) * 3 == pytest.approx(sum(r.decisions for r in runs))
    for row in rows:
        ended = dict(row.endings)
        assert sum(ended.values()) == pytest.approx(1.0), row
        assert ended.get("keep", 0.0) == pytest.approx(row.keep_rate)
        assert "other" not in ended  # every loop-gate reason has a name
        assert set(ended) <= {e.value for e in Ending}  # the judge's kind of ending, never a reading of a reason
    assert "| loop_gate | null |" in format_by_kind(rows)


def test_previous_says_how_far_each_row_moved_from_an_earlier_file(setup, tmp_path):
    cell = Cell("calibrated", 0.0, 300)
    runs = [simulate_run(replace(setup, methods=("oracle",)), cell, run=r)["oracle"] for r in range(2)]
    row = aggregate("oracle", runs, 0.8)
    earlier = {**row.__dict__, "final_target": row.final_target + 0.5}
    path = tmp_path / "gates.json"
    path.write_text(json.dumps({"cells": [{"world": "calibrated", "rho": 0.0, "budget": 300, "rows": [earlier]}]}))
    table = metrics.moved_table(gates.previous_cells(path), gates.moved_rows({cell: [row]}))
    assert (
        f"| calibrated, rho 0, budget 300 oracle | {row.final_target + 0.5:+.3f} → {row.final_target:+.3f} (-0.500"
        in table
    )
    with pytest.raises(SystemExit, match="not a bench.gates results file"):
        gates.previous_cells(tmp_path / "missing.json")


def test_the_moves_say_the_reason_given_and_the_earlier_files_commit(tmp_path):
    from bench.metrics import moved_intro

    (tmp_path / "arms.md").write_text("# x\n\n- command: `python -m bench.proposers`\n- commit: 51447c2\n")
    intro = moved_intro(tmp_path / "arms.json", "the horizon is sized by the search now")
    assert intro.startswith("Why the figures moved: the horizon is sized by the search now")
    assert "measured at commit 51447c2" in intro and "git log 51447c2.." in intro
    bare = moved_intro(tmp_path / "other.json", None)
    assert "Why" not in bare and "an unrecorded commit" in bare


@pytest.mark.parametrize("bench", ["gates", "proposers"])
def test_why_without_previous_is_refused(bench, capsys):
    from bench import proposers

    main = gates.main if bench == "gates" else proposers.main
    with pytest.raises(SystemExit) as ex:
        main(["--why", "something changed"])
    err = capsys.readouterr().err
    assert ex.value.code == 2 and "--why" in err and "give that file with --previous" in err


def test_a_results_files_command_can_be_pasted_back_into_a_shell():
    import shlex

    from bench.metrics import provenance

    argv = ["bench.proposers", "--why", "the horizon's rule changed", "--runs", "2"]
    line = next(x for x in provenance(argv, "2").splitlines() if x.startswith("- command: "))
    assert shlex.split(line.removeprefix("- command: `python -m ").removesuffix("`")) == argv


def test_a_budget_that_cannot_pay_the_loops_certification_is_refused_before_any_run():
    setup = load_setup(REPO / "program.md", ("loop_gate",), with_aux=False)
    with pytest.raises(SystemExit, match="--budgets 150 cannot pay loop_gate's calibration"):
        gates.refuse_unpayable(setup, [Cell("calibrated", 0.0, 150)])
    gates.refuse_unpayable(setup, [Cell("calibrated", 0.0, 300)])  # 24 + 140 leave the gate arm 136


def test_an_outcome_cannot_keep_with_a_reverting_rule():
    with pytest.raises(ValueError, match="cannot end as"):
        Outcome(verdict="keep", reason="x", kind="confirm", ending=Ending.FUTILITY)


@pytest.mark.slow  # whole runs of the product's loop
def test_cli_by_kind_table_is_printed_and_written(capsys, tmp_path):
    args = "--runs 2 --budgets 60 --worlds calibrated --rhos 0 --validity-reps 1 --jobs 1 --methods loop_gate --certify-rounds 5"
    gates.main([*args.split(), "--by-kind", "--out", str(tmp_path)])
    assert "Where the candidate audits went" in capsys.readouterr().out
    cells = json.loads((tmp_path / "gates.json").read_text())["cells"]
    assert cells[0]["by_kind"] and {"kind", "share", "endings"} <= set(cells[0]["by_kind"][0])


def test_worlds_apply_their_knobs_and_validate(setup):
    mnar = setup.cell_params(Cell("mnar", 0.5, 300), 1)
    assert mnar.missing_mode == "mnar" and mnar.pair_correlation == 0.5
    trade = setup.cell_params(Cell("trade-offs", 0.0, 300), 1)
    assert trade.effect_mixture.tradeoff_harm == (0.3, 0.8)
    assert trade.effect_mixture.harm_target == setup.params.effect_mixture.harm_target
    with pytest.raises(SystemExit, match="unknown world"):
        setup.cell_params(Cell("mars", 0.0, 300), 1)


def test_harm_is_scored_with_the_contract_tolerance(setup):
    world = World(setup.cell_params(Cell("calibrated", 0.0, 10), 0), setup.dims, setup.n_seeds)
    run = SimRun(world, [], 10, "t", [1, 2], tolerance=np.array([0.3, 0.6]))
    assert run.harms(np.array([0.0, 0.31, 0.0]))
    assert not run.harms(np.array([0.0, 0.29, 0.59]))
    assert run.harms(np.array([-1.0, 0.0, 0.61]))
    with pytest.raises(ValueError, match="tolerances"):
        SimRun(world, [], 10, "t", [1, 2])


@pytest.mark.slow  # whole runs of the product's loop
def test_every_grid_world_runs(setup):
    for world in gates.GRID_WORLDS:
        out = simulate_run(setup, Cell(world, 0.0, 40), run=2)
        assert out["loop_gate"].used <= 40, world


def test_many_to_one_rounds_share_the_champion_audit_and_stay_in_budget(setup):
    from bench.manytoone import ManyToOneSettings, run_many_to_one

    cell = Cell("calibrated", 0.0, 120)
    world = World(setup.cell_params(cell, 4), setup.dims, setup.n_seeds)
    promo = setup.cell_promotion(cell)
    rng = np.random.default_rng(4)
    cands = gates.candidate_stream(world, rng, 200, setup.dims[0], promo.critical_dimensions)
    crit, tol = [1, 2, 3, 4], np.full(4, 0.3)
    runs = {}
    for slots in (1, 3):
        run = SimRun(world, cands, 120, f"m{slots}", crit, tol)
        run_many_to_one(run, ManyToOneSettings(promo, slots))
        assert run.used <= 120 and run.notes["alpha_spent"] <= promo.alpha_run + 1e-12
        runs[slots] = run
    one, three = runs[1].decisions, runs[3].decisions
    assert all(d.audits % 2 == 0 for d in one)  # one candidate per round: 2 audits a round
    assert any(d.audits % 2 != 0 for d in three)  # shared champion: 4/3 audits a round
    spent = sum(d.audits for d in three) + runs[3].notes["calibration_audits"]
    assert spent == pytest.approx(runs[3].used)
    assert len(three) > len(one)  # cheaper comparisons decide more candidates
    with pytest.raises(ValueError, match="fwer"):
        run_many_to_one(
            SimRun(world, cands, 120, "e", crit, tol),
            ManyToOneSettings(promo.model_copy(update={"error_control": "elond"})),
        )


@pytest.mark.slow  # whole runs of the product's loop
def test_the_two_stage_gate_is_held_to_its_own_guarantee_and_the_fwer_gate_to_its_own():
    setup = load_setup(REPO / "program.md", ("loop_gate", "loop_gate_fwer", "oracle"), with_aux=False)
    cell = Cell("calibrated", 0.0, 300)
    assert gates.delivered_alpha(setup, cell, "loop_gate") == setup.promotion.alpha_certify
    assert gates.delivered_alpha(setup, cell, "loop_gate_fwer") is None
    assert gates.delivered_alpha(setup, cell, "oracle") is None
    runs = [simulate_run(setup, cell, run=r)["loop_gate"] for r in range(2)]
    row = aggregate("loop_gate", runs, 0.8, delivered_alpha=0.05)
    many_false_keeps = type(row)(**{**row.__dict__, "false_keep_run": 0.9, "p_worse": 0.0})
    assert many_false_keeps.admissible(0.1)  # false KEEPs are search steps under two-stage
    assert not type(row)(**{**row.__dict__, "p_worse": 0.06}).admissible(0.1)
    fwer = type(row)(**{**many_false_keeps.__dict__, "delivered_alpha": None})
    assert not fwer.admissible(0.1)


@pytest.mark.slow  # whole runs of the product's loop
@pytest.mark.parametrize("method", ["posterior_true", "posterior_learned"])
def test_posterior_references_certify_what_they_keep_within_budget(method):
    setup = load_setup(REPO / "program.md", (method,), with_aux=False)
    assert gates.delivered_alpha(setup, Cell("calibrated", 0.0, 300), method) == setup.promotion.alpha_certify
    for run in range(3):
        s = simulate_run(setup, Cell("calibrated", 0.0, 300), run=run)[method]
        assert s.used <= 300 and s.keeps <= s.decisions > 0
        assert (s.certified is not None) == (s.keeps > 0)
        if s.certified is False:
            assert s.final_target == 0.0


def test_learned_prior_concentrates_where_the_first_rounds_lie():
    from bench.posterior import GRID, log_likelihood, npmle_prior, posterior_weights

    rng = np.random.default_rng(0)
    points = np.concatenate([rng.normal(-1.0, 0.3, 200), rng.normal(0.5, 0.3, 200)])
    w = npmle_prior(points, 0.3)
    assert w.sum() == pytest.approx(1.0)
    near = lambda x: w[np.abs(GRID - x) <= 0.2].sum()  # noqa: E731
    assert near(-1.0) > 0.35 and near(0.5) > 0.35 and near(1.5) < 0.02
    # rounds near -1 put the posterior on the negative atoms
    post = posterior_weights(w, log_likelihood(GRID[:, None], np.array([[-0.9], [-1.1]]), np.array([0.3])))
    assert post[GRID < 0].sum() > 0.99


def test_first_run_shifts_the_worlds_and_a_bad_posterior_rule_is_refused(capsys, tmp_path):
    base = ["--runs", "2", "--budgets", "60", "--worlds", "calibrated", "--rhos", "0", "--jobs", "1"]
    args = [*base, "--validity-reps", "1", "--methods", "single_audit", "--out", str(tmp_path)]
    gates.main([*args, "--first-run", "5"])
    assert "2 runs per cell from world 5" in capsys.readouterr().out
    shifted = json.loads((tmp_path / "gates.json").read_text())
    gates.main(args)
    assert json.loads((tmp_path / "gates.json").read_text()) != shifted
    with pytest.raises(SystemExit, match="DROP_P < KEEP_P"):
        gates.main([*base, "--methods", "posterior_true", "--posterior-rule", "0.2", "0.5", "8", "0.3"])
    for rule in (["0.7", "0.1", "8.5", "0.3"], ["0.7", "0.1", "8", "-0.1"]):
        with pytest.raises(SystemExit, match="whole MAX_ROUNDS"):
            gates.main([*base, "--methods", "posterior_true", "--posterior-rule", *rule])
