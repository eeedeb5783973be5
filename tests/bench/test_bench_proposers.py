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
    assert [r["proposer"] for r in data["rows"]] == ["catalogue", "oracle"] == [r["proposer"] for r in rows]
    assert "oracle - catalogue (paired by world)" in (out / "proposers.md").read_text()
    for run in data["per_run"]:
        # the oracle only proposes edits that truly help: a kept one can never make things worse
        assert run["oracle"]["final_target"] <= 0.0
        assert run["catalogue"]["audits"] <= 80 and run["oracle"]["audits"] <= 80


def test_entries_pick_exact_pairs_and_refuse_a_malformed_one() -> None:
    from bench.proposers import parse_args

    args = parse_args(["--entries", "mutator:gate,oracle:oracle_gate"])
    assert args.entries == (("mutator", "gate"), ("oracle", "oracle_gate"))
    assert len(parse_args(["--proposers", "mutator,oracle", "--rules", "gate,oracle_gate"]).entries) == 4
    for bad in ("mutator", "mutator:nope", "wizard:gate"):
        with pytest.raises(SystemExit):
            parse_args(["--entries", bad])
