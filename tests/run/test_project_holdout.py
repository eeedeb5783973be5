"""Two runs on one measurement in one project: the held-out set shows what it served and the
error spent (`sil runs`, `sil status`), `sil check` refuses a third run past the project budget
with the fix, and a refused `sil run` starts nothing. Whole runs: slow (CI's slow step)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from sil.base.errors import ExitCode
from sil.integrity.gitrefs import anchor_repo
from sil.integrity.holdout import HOLDOUT_REF, holdout_records, holdout_uses, verify_holdout
from tests.cli.test_cli import invoke, make_workspace
from tests.conftest import edit_contract

pytestmark = pytest.mark.slow
BUDGET = "certification: {project_alpha: 0.05, project_certifications: 2}"


def budgeted(root: Path) -> Path:
    """The small contract with the random arm certified too, a gate arm that finds something, and
    a project budget of two delivering certifications."""
    path = root / "program.md"
    edit_contract(path, "certify_random: false", "certify_random: true")
    edit_contract(path, "arm_audits: {never: 6, random: 6, gate: 24}", "arm_audits: {never: 6, random: 12, gate: 60}")
    edit_contract(path, "max_audits: 44", "max_audits: 200")
    edit_contract(path, "arms: [never, random, gate]", f"arms: [never, random, gate]\n{BUDGET}")
    # the paired screen: in this small world the gate's one find passes only a paired screen
    edit_contract(path, "screen_reference: 8", "screen_reference: 0")
    return root


def test_a_held_out_set_counts_its_certifications_and_refuses_past_its_budget(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    root = budgeted(make_workspace(tmp_path))
    monkeypatch.chdir(root)
    check = invoke("check")
    assert (
        check.exit_code == 0
        and "0 certification(s) served" in check.output
        and "2 certification(s) remain" in check.output
    )
    for run in ("p1", "p2"):
        result = invoke("run", "--run-id", run)
        assert result.exit_code == 0, result.output
    # the summary line says whose error the certification spent and what it claims
    summary = " ".join(result.output.split())  # the console wraps long lines
    assert "at 0.025 of the project's α=0.05 on this seed set" in summary, summary
    assert "a claim about the held-out seeds themselves (fresh audits)" in summary, summary
    uses = list(holdout_uses(holdout_records(root)).values())
    assert len(uses) == 1 and uses[0].runs == ["p1", "p2"]
    assert (uses[0].certifications, uses[0].delivering) == (4, 2), "both arms' champions must have changed"
    assert uses[0].spent == pytest.approx(0.05)
    assert verify_holdout(root).ok
    listing = " ".join(invoke("runs").output.split())
    assert "4 certification(s) (2 delivering" in listing and "error spent 0.05 of project alpha 0.05" in listing
    assert "4 certification(s)" in invoke("status", "p2").output
    assert invoke("project", "holdout").exit_code == 0
    as_json = json.loads(invoke("project", "holdout", "--json").output)
    assert as_json["ok"] and [(u["certifications"], u["delivering"], u["runs"]) for u in as_json["sets"]] == [
        (4, 2, ["p1", "p2"])
    ]
    assert as_json["sets"][0]["spent"] == pytest.approx(0.05) and as_json["sets"][0]["budget"] == 0.05
    refused = invoke("check")
    assert refused.exit_code == ExitCode.REFUSED
    text = " ".join(refused.output.split())
    assert "no certification remains" in text and "fresh held-out set" in text and "new contract" in text, text
    started = invoke("run", "--run-id", "p3")
    assert started.exit_code == ExitCode.REFUSED and not (root / "state" / "runs" / "p3").exists()


def test_a_certification_the_holdout_ledger_lacks_is_warned_about(tmp_path: Path, monkeypatch) -> None:  # type: ignore[no-untyped-def]
    """A run that certified before the project holdout ledger existed (here: its ref deleted, as an
    older version never wrote it) spent error the budget cannot see: `sil check` names it."""
    root = budgeted(make_workspace(tmp_path))
    monkeypatch.chdir(root)
    assert invoke("run", "--run-id", "old").exit_code == 0
    counted = " ".join(invoke("check").output.split())
    assert "2 certification(s) served" in counted and "without a record" not in counted, counted
    repo = anchor_repo(root, create=False)
    assert repo is not None
    subprocess.run(["git", "update-ref", "-d", HOLDOUT_REF], cwd=repo, check=True)
    check = invoke("check")
    text = " ".join(check.output.split())
    assert check.exit_code == 0, text  # a warning: the run may go on, on a guarantee the user now knows is short
    assert "1 earlier run(s) (old) certified on this seed set without a record" in text, text
    assert "0 certification(s) served" in text and "fresh held-out set" in text, text
