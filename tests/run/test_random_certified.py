"""`budget.certify_random`: the random arm's champion faces the gate's certification (the small
contract of tests/run/test_train.py leaves it off: its full-run test checks the other way)."""

from __future__ import annotations

from pathlib import Path

import pytest
from rich.console import Console

from sil.review.summary import CERTIFIED_RANDOM_ARM_LINE, RANDOM_ARM_LINE, build_summary, render
from sil.store.champion import champion_status
from tests.conftest import edit_contract
from tests.run.test_train import records, run_loop, shrink


def summary_text(rc) -> str:  # type: ignore[no-untyped-def]
    console = Console(record=True, width=400)
    render(build_summary(rc.state, records(rc), rc.contract, note=""), console)
    return console.export_text()


@pytest.mark.slow  # a whole run: .ci/run runs it after make test, keeping the default suite under 6 min
def test_a_certified_random_arm_has_its_own_certification_and_reads_so(workspace: Path) -> None:
    root = shrink(workspace)
    edit_contract(root / "program.md", "certify_random: false", "certify_random: true")
    edit_contract(
        root / "program.md",
        "arm_audits: {never: 6, random: 6, gate: 24}",
        "arm_audits: {never: 6, random: 12, gate: 24}",
    )
    edit_contract(root / "program.md", "max_audits: 44", "max_audits: 60")
    rc = run_loop(root)
    assert rc.state.phase == "done", rc.state.halt_reason
    recs = records(rc)
    random_keeps = [
        r for r in recs if r.type == "verdict" and r.payload["arm"] == "random" and r.payload["verdict"] == "keep"
    ]
    assert random_keeps, "the coin kept nothing: pick another run seed for this test"
    certs = [r.payload for r in recs if r.type == "certify" and r.payload["arm"] == "random"]
    assert len(certs) == 1 and certs[0]["seed_set"] == "heldout"
    status = champion_status(rc.state, recs, "random")
    assert status.standing == ("certified" if certs[0]["certified"] else "rolled_back")
    # certified on held-out seeds, it was also re-measured on the search seeds, as the gate's is
    assert rc.state.arms["random"].search_rounds or not certs[0]["certified"]
    text = summary_text(rc)
    assert CERTIFIED_RANDOM_ARM_LINE in text and RANDOM_ARM_LINE not in text
