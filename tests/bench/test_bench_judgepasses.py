"""bench/judgepasses.py: the judge-resampling lever's SD, variance ratio, break-even and CLI (tiny sizes)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bench import judgepasses as jp
from bench.gates import load_setup

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def setup():
    return load_setup(REPO / "program.md", (), with_aux=False)


def _rows(setup, share: float, passes: list[int], worlds: int = 4, pairs: int = 40) -> list[jp.PassRow]:
    x = jp.aa_statistics(setup, share, passes, worlds, pairs)
    return jp.share_rows(x, share, passes, 0.2)


def test_break_even_and_information_ratio_on_a_hand_case() -> None:
    # (sd_1 / sd_3)^2 = 1.5: three passes stop paying at c = 0.5 / 2 = 0.25, where info = 1.5 / 1.5 = 1
    assert jp.break_even(1.5, 3) == pytest.approx(0.25)
    assert jp.info_ratio(1.5, 3, 0.25) == pytest.approx(1.0)
    assert jp.info_ratio(1.5, 3, 0.1) == pytest.approx(1.5 / 1.2)
    assert jp.info_ratio(0.9, 2, 0.0) == pytest.approx(0.9) and jp.break_even(0.9, 2) < 0
    assert jp.break_even(1.7, 1) is None


def test_no_gain_without_judge_noise(setup) -> None:
    rows = _rows(setup, 0.0, [1, 3])
    one, three = rows
    assert three.var_ratio == pytest.approx(1.0, abs=2 * three.var_ratio_se + 1e-9)
    assert three.sd == pytest.approx(one.sd, abs=1e-12)  # same rollouts, and no judge draw to average
    assert three.info == pytest.approx(1.0 / 1.4)


def test_three_passes_clearly_lower_the_sd_at_a_large_judge_share(setup) -> None:
    one, three = _rows(setup, 0.75, [1, 3])
    assert three.sd < one.sd
    assert three.var_ratio - 3 * three.var_ratio_se > 1.0
    assert three.break_even == pytest.approx((three.var_ratio - 1) / 2)
    # missing dimensions drop a few rounds (target not covered); the judge draws shift which ones
    assert 140 <= min(one.rounds, three.rounds) and max(one.rounds, three.rounds) <= 160


def test_the_statistic_is_the_products_paired_round(setup) -> None:
    # k = 1 through SimRun.audit_pair + paired_round_for is an A/A round: centred on 0
    x = jp.aa_statistics(setup, 0.5, [1], 3, 30)
    assert x.shape == (1, 3, 30) and abs(np.nanmean(x)) < 4 * np.nanstd(x) / np.sqrt(90)


def test_reading_names_the_first_share_from_which_it_pays() -> None:
    def row(share: float, k: int, info: float) -> jp.PassRow:
        return jp.PassRow(share, k, 1.0, 0.0, 1.0, 0.0, 0.0, info, 0.01, 10)

    rows = [row(0.0, 2, 0.8), row(0.5, 2, 1.1), row(0.75, 2, 1.2), row(0.0, 3, 0.7), row(0.5, 3, 0.9)]
    text = jp.reading(rows, jp.Cost(0.2, "test"))
    assert "k = 2 pays from j = 0.5 on" in text and "k = 3 pays at no judge share" in text


def test_cost_defaults_to_a_stated_assumption_and_checks_input() -> None:
    cost = jp.resolve_cost(None)
    assert cost.c == jp.ASSUMED_COST and "ASSUMED" in cost.note
    assert jp.resolve_cost("0.5").c == 0.5
    for bad in ("-1", "nan", "cheap"):
        with pytest.raises(SystemExit):
            jp.resolve_cost(bad)


def test_bound_cost_is_the_petri_backends_worst_case_ratio() -> None:
    from sil.exec.backends.petri import JUDGE_ATTEMPTS, JUDGE_PROMPT_TOKENS

    limit = 200_000  # examples/program-petri-offline.md
    judge = JUDGE_ATTEMPTS * (limit + JUDGE_PROMPT_TOKENS)
    assert jp.bound_cost().c == pytest.approx(judge / (limit + judge), rel=1e-4)


def test_cli_tiny_run_writes_markdown_and_json(tmp_path, capsys) -> None:
    jp.main(["--shares", "0", "0.5", "--passes", "2", "--worlds", "2", "--pairs", "4", "--out", str(tmp_path)])
    out = capsys.readouterr().out
    assert "SIMULATED" in out and "ASSUMED" in out and "| 0.5 | 2 |" in out
    assert (tmp_path / "judgepasses.md").read_text().startswith("# Judge resampling")
    data = json.loads((tmp_path / "judgepasses.json").read_text())
    assert data["simulated"] and [(r["share"], r["passes"]) for r in data["rows"]] == [
        (0, 1),
        (0, 2),
        (0.5, 1),
        (0.5, 2),
    ]
    assert data["rows"][0]["break_even"] is None


def test_cli_rejects_a_judge_share_of_one() -> None:
    with pytest.raises(SystemExit):
        jp.main(["--shares", "1.0", "--worlds", "2", "--pairs", "2"])
