"""Before a run, `sil check` and `sil run --dry-run` say what the certification can do for a
clean champion, from the noise an earlier run of the project measured on the same measurement,
or else from the newest `sil noise` on it."""

from __future__ import annotations

import errno
import os
import re
import shutil
from datetime import datetime
from pathlib import Path

import pytest

from sil.base import fsutil
from sil.base.errors import ExitCode
from sil.contract.approval import frozen_measurement_hash
from sil.contract.schema import load_contract
from sil.exec.measure import MeasureContext
from sil.run import noise
from sil.run.noise import DimNoise, MeasuredNoise, NoiseReport, keep_measured
from sil.run.outlookcheck import NOISE_DIR, prior_noise
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
    # at a harm tolerance of 0.2 the tiny run's noise (3 A/A pairs) needs more rounds than any
    # certification may have: the check warns, and names only the fixes that can work
    edit_contract(done / "program.md", "harm_tolerance: 0.5", "harm_tolerance: 0.2")
    checked = said(invoke("check"))
    assert "noise from run t1's calibration" in checked, checked
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
    assert found is not None and found.source == "run t1's calibration" and found.estimate.n_pairs > 0
    assert prior_noise(done, "0" * 64, contract.backend) is None
    assert prior_noise(done, measured, "petri") is None


def noise_of(contract, root: Path, sd: float, pairs: int = 6) -> NoiseReport:
    """A `sil noise` report whose A/A difference has SD `sd` on every dimension, free or with CRN."""
    report = NoiseReport(contract=contract, pairs=pairs, passes=1, used_free=pairs, used_crn=pairs, gaps=[])
    for d in MeasureContext.from_contract(contract, root).dimensions:
        report.dims[d] = DimNoise(target=sd**2 / 2, auditor=0.0, judge=0.0, var_free=sd**2, var_crn=sd**2)
    return report


def test_measured_noise_predicts_the_round_sd_for_the_contracts_judge_passes_and_crn() -> None:
    contract = load_contract(Path(__file__).resolve().parents[2] / "program.md").contract
    report = NoiseReport(contract=contract, pairs=5, passes=2, used_free=5, used_crn=3, gaps=[])
    report.dims["a"] = DimNoise(target=0.1, auditor=0.2, judge=0.4, var_free=0.0, var_crn=0.0)
    measured = MeasuredNoise.model_validate_json(
        MeasuredNoise.of(report, "h" * 64, datetime(2026, 12, 7)).model_dump_json()
    )
    free, crn = measured.estimate(1, crn=False), measured.estimate(4, crn=True)
    assert free is not None and free.sigma["a"] == pytest.approx((2 * 0.7) ** 0.5) and free.df["a"] == 4
    assert crn is not None and crn.sigma["a"] == pytest.approx((2 * 0.2) ** 0.5) and crn.n_pairs == 3
    assert measured.model_copy(update={"used_crn": 1}).estimate(1, crn=True) is None  # one pair: no SD


def test_without_an_earlier_run_the_check_reads_the_newest_sil_noise_on_the_same_measurement(
    tmp_path, monkeypatch
) -> None:
    root = make_workspace(tmp_path)
    monkeypatch.chdir(root)
    contract = load_contract(root / "program.md").contract
    older, newer = root / NOISE_DIR / "a-1", root / NOISE_DIR / "b-2"
    for folder in (older, newer):
        folder.mkdir(parents=True)
    keep_measured(noise_of(contract, root, sd=5.0), root, older)
    kept = keep_measured(noise_of(contract, root, sd=0.01), root, newer)
    later = MeasuredNoise.model_validate_json(kept.read_bytes()).model_copy(
        update={"measured_at": "2999-01-01T00:00:00+00:00"}
    )
    kept.write_text(later.model_dump_json())  # the quiet one is the newest
    other = root / NOISE_DIR / "c-3"  # newer still, but of another measurement: not this contract's noise
    other.mkdir()
    other.joinpath("noise.json").write_text(
        later.model_copy(
            update={"measurement_hash": "0" * 64, "measured_at": "3000-01-01T00:00:00+00:00"}
        ).model_dump_json()
    )
    (root / NOISE_DIR / "d-4").mkdir()
    (root / NOISE_DIR / "d-4" / "noise.json").write_text("{not json")  # skipped, not a traceback
    (root / NOISE_DIR / "e-5").mkdir()
    os.mkfifo(root / NOISE_DIR / "e-5" / "noise.json")  # skipped without blocking
    checked = said(invoke("check"))
    assert "noise from `sil noise` of 2999-01-01" in checked and "ok outlook" in checked, checked
    assert power_in(checked) >= contract.budget.certify_power
    kept.write_text(later.model_copy(update={"dims": {}}).model_dump_json())  # nothing usable: the older one
    loud = said(invoke("check"))
    assert "warn outlook" in loud and "noise from `sil noise` of 20" in loud and "2999" not in loud, loud


def test_an_earlier_runs_calibration_comes_before_a_sil_noise(done, monkeypatch) -> None:
    monkeypatch.chdir(done)
    contract = load_contract(done / "program.md").contract
    folder = done / NOISE_DIR / "z-9"
    folder.mkdir(parents=True)
    try:
        keep_measured(noise_of(contract, done, sd=0.01), done, folder)
        checked = said(invoke("check"))
    finally:
        shutil.rmtree(done / NOISE_DIR)
    assert "noise from run t1's calibration" in checked and "sil noise" not in checked, checked


@pytest.mark.slow  # eight real offline Petri audits: .ci/run runs it after make test
def test_sil_noise_on_real_audits_is_read_by_the_next_check(workspace, monkeypatch) -> None:
    monkeypatch.chdir(workspace)
    shutil.copy(Path(__file__).resolve().parents[2] / "examples" / "program-petri-offline.md", workspace / "petri.md")
    edit_contract(workspace / "petri.md", "max_audits: 24", "max_audits: 30")  # room for a certification
    edit_contract(workspace / "petri.md", "final_check_rounds: 1", "final_check_rounds: 1\n  certify_rounds: 4")
    edit_contract(workspace / "petri.md", "error_design: fwer", "error_design: two_stage  #")
    measured = invoke("noise", "--contract", "petri.md", "--pairs", "2", "--passes", "1", "--out", "noise.md")
    assert measured.exit_code == 0, measured.output
    (kept,) = (workspace / NOISE_DIR).glob("*/noise.json")
    noise = MeasuredNoise.model_validate_json(kept.read_bytes())
    contract = load_contract(workspace / "petri.md").contract
    assert noise.measurement_hash == frozen_measurement_hash(contract, workspace) and noise.used_free == 2
    checked = said(invoke("check", "--contract", "petri.md"))
    # the offline models are deterministic: no A/A pair varies, so the check says the noise from
    # that `sil noise` cannot size the certification, rather than claiming any power
    assert f"noise from `sil noise` of {noise.measured_at}" in checked and "never varied" in checked, checked


@pytest.mark.parametrize("full_at", ["audits", "report"])
def test_sil_noise_on_a_full_disk_stops_with_the_reason_and_shows_what_it_measured(
    workspace, monkeypatch, full_at
) -> None:
    monkeypatch.chdir(workspace)
    shutil.copy(Path(__file__).resolve().parents[2] / "examples" / "program-petri-offline.md", workspace / "petri.md")
    contract = load_contract(workspace / "petri.md").contract
    full = OSError(errno.ENOSPC, "No space left on device")

    def measured(*args, **kwargs) -> NoiseReport:
        if full_at == "audits":
            raise full
        return noise_of(contract, workspace, sd=0.5)

    def refused(*args, **kwargs) -> None:
        raise full

    monkeypatch.setattr(noise, "measure_noise", measured)
    monkeypatch.setattr(fsutil, "_write_new_file", refused)
    result = invoke("noise", "--contract", "petri.md", "--out", "noise.md")
    assert result.exit_code == ExitCode.HALTED, result.output
    output = said(result)
    assert "No space left on device" in output and "Traceback" not in output, output
    assert not (workspace / "noise.md").exists() and not list(workspace.rglob("*.tmp"))
    if full_at == "report":  # the figures the audits paid for are on the screen
        assert "A/A noise of" in output and "the report above was not saved" in output, output
    else:
        assert "no report was written (free space" in output, output
