"""The proposer benchmark runs the loop's proposers and gate judge on the mechanisms world."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import proposers


@pytest.mark.slow  # about 10 s on an idle 2-core box
def test_bench_writes_rows_and_the_oracle_never_ends_worse(tmp_path: Path) -> None:
    out = tmp_path / "out"
    rows = proposers.main(
        ["--runs", "2", "--budget", "80", "--jobs", "1", "--proposers", "catalogue,oracle", "--out", str(out)],
        progress=lambda text: None,
    )
    data = json.loads((out / "proposers.json").read_text())
    (table,) = data["tolerances"].values()  # the contract's own tolerance only
    assert [r["proposer"] for r in table["rows"]] == ["catalogue", "oracle"] == [r["proposer"] for r in rows]
    assert "oracle - catalogue (paired by world)" in (out / "proposers.md").read_text()
    for run in table["per_run"]:
        # the oracle only proposes edits that truly help: a kept one can never make things worse
        assert run["oracle"]["final_target"] <= 0.0
        assert run["catalogue"]["audits"] <= 80 and run["oracle"]["audits"] <= 80


def test_the_oracle_search_keeps_only_harmless_gains_and_pays_for_its_certification() -> None:
    from bench.proposers import ROOT, GateRun, load_contract, make_proposer

    contract = load_contract(ROOT / "examples" / "program-mutator-offline.md")
    contract = proposers.with_overrides(contract, {"certify_rounds": 20})
    world, origin = _world_and_origin(contract)
    search = GateRun(contract, world, origin, 120, "oracle_search")
    result = search.run(make_proposer("mutator", contract, world), 1000)
    gate = GateRun(contract, world, origin, 120, "oracle_gate")
    ceiling = gate.run(make_proposer("mutator", contract, world), 1000)
    # the same truth-knowing decisions, but the search stops at the certification's reserve and
    # the champion is then certified on fresh rounds; the ceiling pays for no certification
    assert (search.reserve, gate.reserve) == (40, 0)
    assert result.certified is not None and ceiling.certified is None
    assert search.uncertified is not None and search.uncertified.final_critical <= 1e-9
    assert result.audits > search.uncertified.audits


def test_entries_pick_exact_pairs_and_refuse_a_malformed_one() -> None:
    from bench.proposers import parse_args

    args = parse_args(["--entries", "mutator:gate,oracle:oracle_gate"])
    assert args.entries == (("mutator", "gate"), ("oracle", "oracle_gate"))
    assert len(parse_args(["--proposers", "mutator,oracle", "--rules", "gate,oracle_gate"]).entries) == 4
    for bad in ("mutator", "mutator:nope", "wizard:gate"):
        with pytest.raises(SystemExit):
            parse_args(["--entries", bad])


def test_the_mutator_reads_the_scores_a_citation_may_quote_as_in_the_loop() -> None:
    from bench.proposers import ROOT, GateRun, load_contract

    contract = load_contract(ROOT / "examples" / "program-mutator-offline.md")
    world, origin = _world_and_origin(contract)
    gate = GateRun(contract, world, origin, budget=80)
    gate.round("aa000", origin, origin)
    ctx = gate.context(origin, [])
    assert ctx.audits, "the champion's audits are shown"
    for audit in ctx.audits:
        for seed in audit.seeds:
            assert ctx.scores[audit.audit_id][seed.seed] == seed.scores


def _world_and_origin(loaded):  # type: ignore[no-untyped-def]
    """The world and starting policies as a bench run builds them."""
    load_surface, surfaces = proposers.load_surface, proposers.SURFACES
    root = proposers.ROOT / loaded.contract.measurement.seed_library
    seeds = [s.id for s in proposers.prepare.load_seeds(root)]
    rubric = {d.name: d.tier for d in proposers.prepare.load_rubric(root)}
    origin = {n: load_surface(n, proposers.ROOT / "state" / "policies" / s.filename)[0] for n, s in surfaces.items()}
    return proposers.BenchWorld(loaded, 0, seeds, rubric), origin


def _random_arm_both_ways(out: dict[str, proposers.RunResult], certified_name: str, raw_name: str) -> None:
    raw, certified = out[raw_name], out[certified_name]
    assert (raw.keeps, raw.decisions, raw.certified) == (certified.keeps, certified.decisions, None)
    assert certified.audits > raw.audits  # the certification's rounds come on top of the arm's audits
    if raw.keeps:
        assert certified.certified is not None
        assert certified.final_target == (raw.final_target if certified.certified else 0.0)


def test_the_random_arm_is_delivered_certified_as_program_md_asks_with_its_raw_champion_beside() -> None:
    path = proposers.ROOT / "program.md"
    assert proposers.arm_rows(path, {}) == proposers.CERTIFIED_ARMS
    out = proposers.arms_run((str(path), 0, {}))
    _random_arm_both_ways(out, "random", proposers.RANDOM_UNCERTIFIED)


def test_an_uncertified_random_arm_is_delivered_raw_with_its_certified_counterfactual_beside(tmp_path: Path) -> None:
    path = tmp_path / "program.md"
    path.write_text(
        (proposers.ROOT / "program.md").read_text().replace("certify_random: true", "certify_random: false")
    )
    assert proposers.arm_rows(path, {}) == proposers.ARMS
    out = proposers.arms_run((str(path), 0, {}))
    _random_arm_both_ways(out, proposers.RANDOM_CERTIFIED, "random")
