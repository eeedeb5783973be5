"""bench.recorded: the product's loop on a recorded world (TEST FIXTURE scores, never a model's)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from bench.recorded import RunOutcome, one_run, oracle_target, pool_truth, row, with_paths
from sil.contract.schema import load_contract
from sil.exec.backends.recordedpool import load_pool
from tests.conftest import edit_contract
from tests.recorded_support import REPO, fixture_means, write_fixture_pool

SMALL = {
    "calibration_pairs: 12": "calibration_pairs: 3",
    "baseline_k: 5": "baseline_k: 2",
    "replicate_k: 48": "replicate_k: 6",
    "certify_rounds: 70": "certify_rounds: 6",
}


@pytest.fixture
def world(tmp_path: Path) -> tuple[Path, Path]:
    data = tmp_path / "audits.jsonl"
    write_fixture_pool(data, tmp_path / "work")
    contract = tmp_path / "program.md"
    shutil.copy(REPO / "data" / "recorded" / "program.md", contract)
    for old, new in SMALL.items():
        edit_contract(contract, old, new)
    return contract, data


def test_the_truth_is_each_sets_pool_mean_and_the_oracle_the_best_admissible(world: tuple[Path, Path]) -> None:
    contract, data = world
    loaded = with_paths(load_contract(contract), data)
    truth = pool_truth(loaded, load_pool(data))
    assert truth.names == ["start", "refuse-all", "never-refuse", "narrow-refusal", "quote-tool-results"]
    for name in truth.names:
        assert truth.means[name]["overrefusal"] == pytest.approx(fixture_means(name, "overrefusal"))
    # quote-tool-results lowers the target most but harms a critical dimension beyond tolerance
    assert truth.change("quote-tool-results", "input_hallucination") > 0.5
    best = min(("never-refuse", "narrow-refusal"), key=lambda n: truth.change(n, "overrefusal"))
    assert oracle_target(truth, loaded) == pytest.approx(truth.change(best, "overrefusal"))


def test_a_row_counts_worse_runs_false_keeps_and_certifications() -> None:
    outcomes = [
        RunOutcome("never-refuse", -0.3, False, 0, True, 1, ("never-refuse",)),
        RunOutcome("refuse-all", 2.0, True, 1, True, 1, ("refuse-all",)),
        RunOutcome("start", 0.0, False, 0, None, 0),
        RunOutcome("start", 0.0, False, 1, False, 1, ("refuse-all",)),
    ]
    r = row("two_stage", outcomes, -0.4)
    assert r["final_target"] == pytest.approx(1.7 / 4)
    assert (r["p_worse"], r["p_any_false_keep"], r["certified_share"]) == (0.25, 0.5, pytest.approx(2 / 3, abs=1e-3))
    assert r["delivered"] == {"never-refuse": 1, "refuse-all": 1, "start": 2}
    assert r["kept"] == {"never-refuse": 1, "refuse-all": 2}  # refuse-all: kept twice, certified once
    assert r["oracle_share"] == pytest.approx((1.7 / 4) / -0.4, abs=1e-3)  # worse than the start: a negative share
    assert row("two_stage", outcomes, 0.0)["oracle_share"] is None  # no set improves: nothing to share


@pytest.mark.slow
def test_one_run_is_the_products_loop_delivering_a_recorded_set(world: tuple[Path, Path]) -> None:
    contract, data = world
    out = one_run((str(contract), str(data), "two_stage", 120, 0))
    assert out.delivered in {"start", "refuse-all", "never-refuse", "narrow-refusal", "quote-tool-results"}
    assert out.delivered != "refuse-all"  # 3 points worse on the target in every fixture audit


def test_the_noise_table_reads_the_spread_of_each_sets_recorded_audits(world: tuple[Path, Path]) -> None:
    import json

    import numpy as np

    from bench.recorded import noise_table
    from tests.recorded_support import FIXTURE

    contract, data = world
    loaded = with_paths(load_contract(contract), data)
    pool = load_pool(data)
    table = noise_table(pool, pool_truth(loaded, pool), loaded)
    audits = json.loads(FIXTURE.read_text())["sets"]["start"]
    sd = np.std([np.mean([row["overrefusal"] for row in a.values()]) for a in audits], ddof=1)
    start_row = next(line for line in table.splitlines() if line.startswith("| start |"))
    assert start_row.split(" | ")[2] == f"{sd:.3f}"
    assert "| quote-tool-results | 3 | 0.000 |" in table  # the fixture never refuses there, so no spread
