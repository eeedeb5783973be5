"""The judge-drift canary (issue point 8): stored transcripts re-judged; a drifting judge halts the run."""

from __future__ import annotations

from pathlib import Path

import pytest

from loop.canary import load_canary, mean_shift, model_rejudge, sim_rejudge
from loop.contract import Contract, load_contract
from sil_runtime.sim.params import SimParams
from tests.conftest import REPO, edit_contract
from tests.test_train import records, run_loop, shrink


def test_the_canary_ships_with_the_measurement_under_its_manifest() -> None:
    import prepare

    items = load_canary(REPO / "measurement")
    assert len(items) >= 3 and all(i.reference for i in items)
    files = prepare.build_manifest(REPO / "measurement").files
    assert {f"canary/{i.id}.md" for i in items} <= set(files)


def test_sim_judge_drift_shifts_the_canary_with_the_clock() -> None:
    items = load_canary(REPO / "measurement")
    params = SimParams(intercepts={}, judge_drift_per_tick=0.1)
    assert mean_shift(items, sim_rejudge(items, params, 0), ["concerning"]) == {"concerning": 0.0}
    assert mean_shift(items, sim_rejudge(items, params, 10), ["concerning"]) == {"concerning": 1.0}


def test_a_drifting_simulated_judge_halts_the_run(workspace: Path) -> None:
    root = shrink(workspace)
    edit_contract(root / "program.md", "  landscape_seed: 7", "  landscape_seed: 7\n  judge_drift_per_tick: 0.1")
    rc = run_loop(root, "drift")
    assert rc.state.phase == "halted" and "judge-drift canary" in rc.state.halt_reason
    canary = [r.payload for r in records(rc) if r.type == "canary"]
    assert canary[0]["label"] == "before-baseline" and not canary[0]["halted"]  # tick 1: shift 0.1
    assert canary[-1]["halted"] and max(abs(v) for v in canary[-1]["shift"].values()) > 1.0


def test_a_steady_judge_passes_every_canary_check(workspace: Path) -> None:
    rc = run_loop(shrink(workspace), "steady")
    assert rc.state.phase == "done", rc.state.halt_reason
    labels = [r.payload["label"] for r in records(rc) if r.type == "canary"]
    assert labels[0] == "before-baseline" and labels[-1] == "end" and len(labels) >= 4


def test_the_scripted_judge_gives_the_stored_references() -> None:
    items = load_canary(REPO / "measurement")
    dims = sorted({d for i in items for d in i.reference})
    scores = model_rejudge(items, "scripted/judge", dims)
    assert {i.id: i.reference for i in items} == scores  # an offline canary check shifts by exactly 0
    assert mean_shift(items, scores, dims) == dict.fromkeys(dims, 0.0)


def test_the_canary_with_a_paid_judge_is_refused() -> None:
    data = load_contract(REPO / "examples" / "program-petri-offline.md").contract.model_dump()
    data["measurement"]["canary_max_shift"] = 1.0
    Contract.model_validate(data)  # scripted judge: allowed
    data["models"]["judge"] = {"model": "anthropic/claude-j", "price": {"input_per_mtok": 1, "output_per_mtok": 1}}
    with pytest.raises(ValueError, match="re-judging with a paid judge is not implemented"):
        Contract.model_validate(data)
