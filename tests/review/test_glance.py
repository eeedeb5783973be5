"""`sil runs` and `sil status` read a run quickly (glance.py) and say what the full reading says.

Each run below is read both ways: the quick reading must give the same row and the same status,
and where it cannot vouch for a run (a file missing, a field of another type, a ledger that does
not verify) the commands must show the full reading's answer. The commands themselves must not
import pydantic (issue 26 item 13: start in under half a second; bench/startup.py times them).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from sil.integrity.quickcheck import quick_check
from sil.review import glance
from sil.review.runview import load_run
from sil.review.status import overview_row, run_overview, run_status, status_facts
from sil.review.statusfacts import OverviewRow, StatusFacts, status_lines
from tests.review.test_review import RUN, copy_of, done  # noqa: F401 - the shared finished run
from tests.review.test_review_trust import _demote_a_keep


def _full(run_dir: Path) -> tuple[OverviewRow, StatusFacts]:
    view = load_run(run_dir)
    return overview_row(run_overview(view)), status_facts(run_status(view))


def _quick(run_dir: Path) -> tuple[OverviewRow, StatusFacts]:
    """Both views read the quick way only (raises glance.Unsure where it would give up)."""
    found = quick_check(run_dir / "ledger.jsonl", run_dir.parents[2])
    assert found is not None, "the ledger verifies: the quick check must pass it"
    row = glance.overview_of(glance.read_glance(run_dir, found.entries), found.records, found.checkpoints)
    return row, glance.status_of(glance.read_glance(run_dir))


def _state(root: Path, **changes: object) -> None:
    path = root / "state" / "runs" / RUN / "state.json"
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def _pending(root: Path) -> None:
    from sil.policies.mutation import Mutation
    from sil.store.runstate import Pending, RunState

    run_dir = root / "state" / "runs" / RUN
    state = RunState.load(run_dir)
    assert state is not None
    mutation = next(r for r in load_run(run_dir).records if r.type == "mutation").payload["mutation"]
    arm = state.arms["gate"]
    arm.pending = Pending(
        index=0, mutation=Mutation.model_validate(mutation), parent=arm.champion, candidate=arm.champion
    )
    state.phase, state.audits = "gate", 10
    state.save(run_dir)


def _running(root: Path) -> None:
    owner = root / "state" / "runs" / RUN / ".sil-run.lock.owner"
    owner.write_text(json.dumps({"host": socket.gethostname(), "pid": os.getpid()}))
    _state(root, phase="random")


RUNS: dict[str, Callable[[Path], object]] = {
    "finished": lambda root: None,
    "stopped in the gate arm": lambda root: _state(root, phase="gate"),
    "halted": lambda root: _state(root, phase="halted", halt_reason="the judge-drift canary halted"),
    "a candidate under test": _pending,
    "running": _running,
    "a KEEP demoted by a replication": _demote_a_keep,
    "stopped before any audit": lambda root: _state(root, phase="baseline", audits=0),
}


@pytest.mark.parametrize("name", RUNS)
def test_the_quick_reading_of_a_run_is_the_full_reading(copy_of, name: str) -> None:  # noqa: F811
    RUNS[name](copy_of)
    run_dir = copy_of / "state" / "runs" / RUN
    assert _quick(run_dir) == _full(run_dir)
    assert (glance.overview(run_dir), glance.status(run_dir)) == _full(run_dir)


def _edit_json(name: str, key: str, value: object) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        path = root / "state" / "runs" / RUN / name
        data = json.loads(path.read_text())
        data[key] = value
        path.write_text(json.dumps(data))

    return edit


def _remove(name: str) -> Callable[[Path], None]:
    return lambda root: (root / "state" / "runs" / RUN / name).unlink()


def _recode(path: Path) -> None:
    path.write_bytes(path.read_text().encode("utf-16"))


def _ledger(change: Callable[[list[bytes]], list[bytes]]) -> Callable[[Path], None]:
    def edit(root: Path) -> None:
        path = root / "state" / "runs" / RUN / "ledger.jsonl"
        path.write_bytes(b"".join(change(path.read_bytes().splitlines(keepends=True))))

    return edit


DOUBTED: dict[str, Callable[[Path], None]] = {
    "no state.json": _remove("state.json"),
    "state.json not JSON": lambda root: (root / "state" / "runs" / RUN / "state.json").write_text("{"),
    "state.json in UTF-16": lambda root: _recode(root / "state" / "runs" / RUN / "state.json"),
    "audits as text": _edit_json("state.json", "audits", "12"),
    "an unknown phase": _edit_json("state.json", "phase", "lunch"),
    "no contract snapshot": _remove("contract.json"),
    "a contract snapshot of another shape": _edit_json("contract.json", "budget", []),
    "a ledger cut behind its checkpoints": _ledger(lambda ls: ls[: len(ls) // 2]),
    "a ledger record edited": _ledger(lambda ls: [ls[0], ls[1].replace(b'"', b"'", 2), *ls[2:]]),
    "a ledger line that is no record": _ledger(lambda ls: [*ls[:3], b"[]\n", *ls[3:]]),
}


def _doubts(run_dir: Path) -> tuple[bool, bool]:
    """Whether the quick reading gives up on the run's row, and on its status."""
    found = quick_check(run_dir / "ledger.jsonl", run_dir.parents[2])
    try:
        if found is not None:
            glance.overview_of(glance.read_glance(run_dir, found.entries), found.records, found.checkpoints)
        row = found is None
    except glance.DOUBT:
        row = True
    try:
        glance.status_of(glance.read_glance(run_dir))
        return row, False
    except glance.DOUBT:
        return row, True


@pytest.mark.parametrize("name", DOUBTED)
def test_a_run_the_quick_reading_doubts_shows_the_full_readings_answer(copy_of, name: str) -> None:  # noqa: F811
    DOUBTED[name](copy_of)
    run_dir = copy_of / "state" / "runs" / RUN
    # a chain cut at a record boundary still reads: only its check against the checkpoints fails
    assert _doubts(run_dir) == (True, name != "a ledger cut behind its checkpoints")
    assert (glance.overview(run_dir), glance.status(run_dir)) == _full(run_dir)


def _sil(root: Path, *args: str) -> tuple[str, list[str]]:
    """`sil ARGS` in a fresh interpreter: its output and the heavy modules it imported."""
    code = (
        "import json, sys\n"
        f"sys.argv = ['sil', *{list(args)!r}]\n"
        "from sil.cli.app import app\n"
        "try:\n    app()\nexcept SystemExit:\n    pass\n"
        "heavy = {'pydantic', 'pydantic_core', 'numpy', 'yaml', 'scipy'}\n"
        "print(json.dumps(sorted({m.split('.')[0] for m in sys.modules} & heavy)), file=sys.stderr)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], cwd=root, capture_output=True, text=True, check=True)
    return proc.stdout, json.loads(proc.stderr.strip().splitlines()[-1])


@pytest.mark.parametrize("args", [("runs",), ("runs", "--json"), ("status",), ("status", RUN)])
def test_runs_and_status_start_without_pydantic_and_print_the_full_readings_answer(done, args) -> None:  # noqa: F811
    text, heavy = _sil(done, *args)
    assert heavy == []
    row, facts = _full(done / "state" / "runs" / RUN)
    if args == ("runs", "--json"):
        assert json.loads(text) == [run_overview(load_run(done / "state" / "runs" / RUN)).model_dump(mode="json")]
    elif args[0] == "runs":
        assert f"│ {RUN} " in text and "│ ok " in text and row.champion in text and row.verified
    else:
        assert text.splitlines() == status_lines(facts)


def test_runs_shows_a_ledger_that_fails_with_the_full_readings_errors(copy_of) -> None:  # noqa: F811
    DOUBTED["a ledger cut behind its checkpoints"](copy_of)
    text, _ = _sil(copy_of, "runs")
    row, _ = _full(copy_of / "state" / "runs" / RUN)
    assert "FAILS" in text and not row.verified and row.verify_note.split(";")[0][:40] in text


def test_status_of_a_two_stage_run_names_its_design_not_an_alpha_budget_it_has_none_of(copy_of) -> None:  # noqa: F811
    run_dir = copy_of / "state" / "runs" / RUN
    _, facts = _full(run_dir)
    lines = status_lines(facts)
    assert facts.two_stage and facts.confirmations > 0
    assert any(line.startswith(f"error design two-stage: {facts.confirmations} search confirmations") for line in lines)
    assert not any("α spent" in line for line in lines)
    assert status_lines(glance.status(run_dir)) == lines
    path = run_dir / "state.json"
    data = json.loads(path.read_text())
    data["shared"]["budget"]["mode"] = "fwer"  # the same run as if searched under the fwer design
    path.write_text(json.dumps(data))
    fwer = status_lines(_full(run_dir)[1])
    assert (
        any(line.startswith("error budget α spent") for line in fwer) and status_lines(glance.status(run_dir)) == fwer
    )
