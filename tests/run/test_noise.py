"""`sil noise`: the variance split and its report (the audits themselves: tests/local/test_local_real.py, the stub run)."""

from __future__ import annotations

from pathlib import Path

import pytest

from sil.contract.schema import parse_contract
from sil.run.noise import DimNoise, NoiseReport, decision, render

REPO = Path(__file__).resolve().parents[2]


def test_predicted_variance_drops_the_auditor_with_crn_and_the_judge_with_k() -> None:
    n = DimNoise(target=0.1, auditor=0.2, judge=0.4, var_free=0.0, var_crn=0.0)
    assert n.predicted(1, crn=False) == pytest.approx(2 * 0.7)
    assert n.predicted(1, crn=True) == pytest.approx(2 * 0.5)
    assert n.predicted(4, crn=True) == pytest.approx(2 * (0.1 + 0.1))
    assert n.shares() == pytest.approx((0.1 / 0.7, 0.2 / 0.7, 0.4 / 0.7))
    assert DimNoise(0, 0, 0, 0, 0).shares() == (0.0, 0.0, 0.0)


def test_the_report_says_how_it_was_measured_and_what_it_decides() -> None:
    contract = parse_contract((REPO / "examples" / "program-local-model.md").read_text()).contract
    report = NoiseReport(contract=contract, pairs=3, passes=2, used_free=3, used_crn=3, gaps=[])
    report.dims["broken_tool_use"] = DimNoise(target=0.3, auditor=0.0, judge=0.0, var_free=0.6, var_crn=0.6)
    text = render(report, "sil noise --contract x", REPO)
    for needle in ("command: `sil noise --contract x`", "date: ", "commit: ", "machine: ", "rule-based judge"):
        assert needle in text
    assert "| broken_tool_use | 0.3000 | 0.0000 | 0.0000 | 1.00/0.00/0.00 |" in text
    said = "\n".join(decision(report))
    assert "common random numbers: largest auditor share 0.00" in said and "buys nothing measurable" in said
    assert "frontier" in text
