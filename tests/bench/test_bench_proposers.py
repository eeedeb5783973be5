"""The proposer benchmark runs the product's loop with each proposer and rule on the mechanisms world."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench import proposers


@pytest.mark.slow  # about 10 s on an idle 2-core box
def test_bench_writes_rows_and_the_oracle_never_ends_worse(tmp_path: Path) -> None:
    out = tmp_path / "out"
    rows = proposers.main(
        ["--runs", "2", "--budget", "80", "--jobs", "1", "--proposers", "catalogue,oracle", "--out", str(out)]
        + ["--set", "certify_rounds=5"],
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


@pytest.mark.slow  # two small runs of the loop
def test_the_oracle_search_is_certified_by_the_loop_and_the_oracle_gate_is_not() -> None:
    contract = proposers.load_contract(proposers.ROOT / "examples" / "program-mutator-offline.md")
    contract = proposers.with_overrides(contract, {"certify_rounds": 20})
    search = proposers.grid_entry(proposers.grid_contract(contract, 120, "oracle_search"), "oracle", "oracle_search")
    ceiling = proposers.grid_entry(proposers.grid_contract(contract, 120, "oracle_gate"), "oracle", "oracle_gate")
    # the same truth-knowing decisions; the search's KEEPs harm nothing and its champion is then
    # certified on fresh rounds by the loop's final phase; the ceiling pays for no certification
    assert search.keeps and ceiling.keeps
    assert search.certified is not None and ceiling.certified is None
    assert search.final_critical <= 1e-9 or not search.certified
    assert search.false_keeps == ceiling.false_keeps == 0
    assert ceiling.final_target < 0


def test_the_grid_gives_the_gate_arm_the_budget_left_after_calibration_and_certification() -> None:
    contract = proposers.load_contract(proposers.ROOT / "examples" / "program-mutator-offline.md")
    pairs, rounds = contract.contract.promotion.calibration_pairs, contract.contract.budget.certify_rounds
    certified = proposers.grid_contract(contract, 300, "gate").contract.budget
    ceiling = proposers.grid_contract(contract, 300, "oracle_gate").contract.budget
    assert certified.arm_audits == {"never": 2 * pairs, "gate": 300 - 2 * pairs - 2 * rounds}
    assert (ceiling.arm_audits["gate"], ceiling.certify_rounds) == (300 - 2 * pairs, 0)


def test_a_budget_the_certification_would_eat_is_refused_with_the_way_out() -> None:
    contract = proposers.load_contract(proposers.ROOT / "examples" / "program-mutator-offline.md")
    with pytest.raises(SystemExit, match="certify_rounds=N"):
        proposers.grid_contract(contract, 80, "gate")


def test_entries_pick_exact_pairs_and_refuse_a_malformed_one() -> None:
    from bench.proposers import parse_args

    args = parse_args(["--entries", "mutator:gate,oracle:oracle_gate"])
    assert args.entries == (("mutator", "gate"), ("oracle", "oracle_gate"))
    assert len(parse_args(["--proposers", "mutator,oracle", "--rules", "gate,oracle_gate"]).entries) == 4
    for bad in ("mutator", "mutator:nope", "wizard:gate"):
        with pytest.raises(SystemExit):
            parse_args(["--entries", bad])


def _random_arm_both_ways(out: dict[str, proposers.RunResult], certified_name: str, raw_name: str) -> None:
    raw, certified = out[raw_name], out[certified_name]
    assert (raw.keeps, raw.decisions, raw.certified) == (certified.keeps, certified.decisions, None)
    assert certified.audits > raw.audits  # the certification's rounds come on top of the arm's audits
    if raw.keeps:
        assert certified.certified is not None
        assert certified.final_target == (raw.final_target if certified.certified else 0.0)


@pytest.mark.slow  # one whole run of the default contract
def test_the_random_arm_is_delivered_certified_as_program_md_asks_with_its_raw_champion_beside() -> None:
    path = proposers.ROOT / "program.md"
    assert proposers.arm_rows(path, {}) == proposers.CERTIFIED_ARMS
    out = proposers.arms_run((str(path), 0, {}))
    _random_arm_both_ways(out, "random", proposers.RANDOM_UNCERTIFIED)


@pytest.mark.slow  # two whole runs of the default contract
def test_an_uncertified_random_arm_is_delivered_raw_with_its_certified_counterfactual_beside(tmp_path: Path) -> None:
    path = tmp_path / "program.md"
    path.write_text(
        (proposers.ROOT / "program.md").read_text().replace("certify_random: true", "certify_random: false")
    )
    assert proposers.arm_rows(path, {}) == proposers.ARMS
    out = proposers.arms_run((str(path), 0, {}))
    _random_arm_both_ways(out, proposers.RANDOM_CERTIFIED, "random")


def test_a_certification_the_contracts_own_budget_cannot_pay_for_is_fine_for_the_grid_not_for_the_arms() -> None:
    """The grid re-budgets each run (`grid_contract`), so `--set certify_rounds=90` must not be refused
    against the example's own max_audits; `--arms` runs the contract's own budget, where it must be."""
    contract = proposers.load_contract(proposers.ROOT / "examples" / "program-mutator-offline.md")
    grid = proposers.grid_contract(proposers.with_overrides(contract, {"certify_rounds": 90}, regrid=True), 300, "gate")
    assert grid.contract.budget.certify_rounds == 90
    assert grid.contract.budget.arm_audits["gate"] == 300 - 2 * contract.contract.promotion.calibration_pairs - 180
    with pytest.raises(ValueError, match="max_audits"):
        proposers.with_overrides(contract, {"certify_rounds": 90})


def test_the_worlds_are_numbered_from_one_fixed_world_and_program_md_is_one_of_them(tmp_path: Path) -> None:
    from sil.contract.schema import load_contract
    from sil.contract.simparams import SimParams

    def seeds(loaded) -> tuple[int, int, int]:
        sim = loaded.contract.settings(SimParams)
        return sim.world_seed, sim.landscape_seed, loaded.contract.seed

    default = load_contract(proposers.ROOT / "program.md")
    other = load_contract(proposers.CONTRACT)
    own = proposers.own_world(default)
    assert own is not None and proposers.own_world(other) == 0
    # whatever seeds a contract names, world r is the same world
    assert seeds(proposers.world_contract(default, 5)) == seeds(proposers.world_contract(other, 5))
    # and `sil run` on program.md simulates the bench's world `own`
    assert seeds(proposers.world_contract(default, own)) == seeds(default)
    moved = tmp_path / "program.md"
    moved.write_text((proposers.ROOT / "program.md").read_text().replace("landscape_seed: 9", "landscape_seed: 99"))
    assert proposers.own_world(load_contract(moved)) is None
