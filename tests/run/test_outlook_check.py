"""Before a run, `sil check` and `sil run --dry-run` say what the certification can do for a
clean champion, from the noise an earlier run of the project measured on the same measurement."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from sil.contract.approval import frozen_measurement_hash
from sil.contract.schema import load_contract
from sil.run.outlookcheck import prior_noise
from tests.cli.test_cli import invoke, make_workspace
from tests.conftest import edit_contract


@pytest.fixture(scope="module")
def done(tmp_path_factory) -> Path:
    from tests.finished import finished_tiny_run

    return finished_tiny_run(tmp_path_factory, "outlook")


def said(result) -> str:
    """The command's output with rich's line wrapping undone."""
    return " ".join(result.output.split())


def needed_in(output: str) -> int:
    found = re.search(r"about (\d+) rounds reach", output)
    assert found, output
    return int(found.group(1))


def power_in(output: str) -> float:
    found = re.search(r"planned power (\d\.\d\d) for a clean champion", output)
    assert found, output
    return float(found.group(1))


def test_without_an_earlier_run_the_check_says_when_the_power_will_be_known(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(make_workspace(tmp_path))
    result = invoke("check")
    assert result.exit_code == 0 and "known once the run's calibration has measured its noise" in result.output


def test_the_check_and_the_dry_run_give_the_outlook_from_the_earlier_runs_noise(done, monkeypatch) -> None:
    monkeypatch.chdir(done)
    checked = said(invoke("check"))
    assert "noise from run t1's calibration" in checked, checked
    # the tiny run's noise (3 A/A pairs) needs more rounds than any certification may have: the
    # check warns, and names only the fixes that can work
    assert "warn outlook" in checked and "at most 100 rounds" in checked and "add held-out seeds" in checked
    assert "raise budget.certify_rounds" not in checked and needed_in(checked) > 100
    planned = said(invoke("run", "--dry-run"))
    assert power_in(planned) == power_in(checked) and needed_in(planned) == needed_in(checked)
    edit_contract(done / "program.md", "certify_rounds: 1", "certify_rounds: 4")
    try:
        longer = said(invoke("check"))
    finally:
        edit_contract(done / "program.md", "certify_rounds: 4", "certify_rounds: 1")
    assert "in 4 rounds" in longer and needed_in(longer) >= needed_in(checked)  # more looks, slightly more rounds


def test_a_quiet_enough_earlier_run_gives_an_outlook_without_a_warning(done, monkeypatch) -> None:
    from sil.run import outlookcheck

    loaded = load_contract(done / "program.md")
    found = prior_noise(done, frozen_measurement_hash(loaded.contract, done), loaded.contract.backend)
    assert found is not None
    quiet = found.estimate.model_copy(update={"sigma": {d: 0.01 for d in found.estimate.sigma}})
    monkeypatch.setattr(outlookcheck, "prior_noise", lambda *a: outlookcheck.PriorNoise("t1", quiet))
    item = outlookcheck.outlook_check(loaded, done)
    assert item is not None and item.status == "ok" and "WARNING" not in item.detail
    assert power_in(item.detail) >= loaded.contract.budget.certify_power


def test_only_a_run_on_the_same_measurement_and_backend_lends_its_noise(done) -> None:
    contract = load_contract(done / "program.md").contract
    measured = frozen_measurement_hash(contract, done)
    found = prior_noise(done, measured, contract.backend)
    assert found is not None and found.run_id == "t1" and found.estimate.n_pairs > 0
    assert prior_noise(done, "0" * 64, contract.backend) is None
    assert prior_noise(done, measured, "petri") is None
