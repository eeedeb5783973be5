"""A halt whose cause is gone resumes into new audits: the recorded gaps stay in the ledger, the
retry count restarts at the resume, and a `resume` record says so."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from sil.exec.backends.sim import SimBackend
from sil.integrity import ledger
from tests.run.test_train import records, run_loop, shrink

BROKEN = [sys.executable, "-c", "raise SystemExit('LookupError: mypackage/my_target was not found in the registry')"]


@pytest.fixture
def small(workspace: Path) -> Path:
    return shrink(workspace)


@pytest.fixture
def wiring(monkeypatch: pytest.MonkeyPatch) -> dict[str, bool]:
    """Every audit fails (as when the target agent cannot be found) while `broken` is set."""
    state = {"broken": True}
    real = SimBackend.command

    def command(self: SimBackend, req, ctx) -> list[str]:  # type: ignore[no-untyped-def]
        return BROKEN if state["broken"] else real(self, req, ctx)

    monkeypatch.setattr(SimBackend, "command", command)
    monkeypatch.setattr(SimBackend, "warm_module", None)  # every audit a plain subprocess of `command`
    return state


@pytest.mark.slow  # two runs to the end: in .ci/run's slow step
def test_a_preflight_halt_whose_cause_is_fixed_resumes_and_finishes(small: Path, wiring: dict[str, bool]) -> None:
    halted = run_loop(small)
    assert halted.state.phase == "halted" and "wiring preflight could not run" in (halted.state.halt_reason or "")
    gapped = [r.payload for r in records(halted) if r.type == "probe"]
    assert gapped and all(p["audit_gap_reason"] for p in gapped)

    wiring["broken"] = False  # the user fixed the cause, then runs the same command again
    resumed = run_loop(small)
    assert resumed.state.phase == "done", resumed.state.halt_reason
    recs = records(resumed)
    probes = [r.payload for r in recs if r.type == "probe"]
    assert probes[: len(gapped)] == gapped  # the recorded gaps stay
    assert len(probes) == len(gapped) + 1 and probes[-1]["passed"]  # then one new, passing attempt
    (resume,) = [r.payload for r in recs if r.type == "resume"]
    assert resume["phase"] == "preflight" and resume["preflight_attempts_before"] == len(gapped)
    assert "wiring preflight could not run" in resume["after_halt"]
    assert [r.type for r in recs].index("resume") > [r.type for r in recs].index("halt")
    assert sum(r.type == "halt" for r in recs) == 1
    assert ledger.verify_file(resumed.run_dir / "ledger.jsonl").ok


def test_a_run_that_halts_again_after_a_resume_gets_fresh_retries_each_time(
    small: Path, wiring: dict[str, bool]
) -> None:
    first = run_loop(small)
    n = sum(r.type == "probe" for r in records(first))
    again = run_loop(small)  # not fixed: the new attempts gap too, and the run halts again
    recs = records(again)
    assert again.state.phase == "halted"
    assert sum(r.type == "probe" for r in recs) == 2 * n  # a full set of new attempts, none replayed
    assert [r.payload["preflight_attempts_before"] for r in recs if r.type == "resume"] == [n]
    assert sum(r.type == "halt" for r in recs) == 2
