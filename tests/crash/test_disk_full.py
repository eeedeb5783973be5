"""A full or failing disk is a recorded, resumable halt (issue 11): exit 3, a `halt` record if the
disk still takes it, no temp file left, a free-space pre-flight, and an audit that died of the
disk re-run on resume instead of scored as a gap. ENOSPC is injected (sil/base/faults.py,
monkeypatch): no special mounts or root needed."""

from __future__ import annotations

import errno
import json
import os
import subprocess
from collections import Counter
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sil.base import faults
from sil.base.diskspace import DiskFull, is_disk_error, mentions_disk_error
from sil.cli.app import app
from sil.exec import attempts
from sil.exec.measure import run_audit
from sil.integrity import ledger
from tests.cli.test_cli import make_workspace
from tests.conftest import edit_contract
from tests.crash.test_audit_recovery import counts, ctx, req  # noqa: F401 - fixtures
from tests.exec.test_measure import ScriptBackend, evidence_script

runner = CliRunner()
DISK_SCRIPT = "import sys; sys.stderr.write('OSError: [Errno 28] No space left on device\\n'); sys.exit(1)"


def sil_run(run_id: str = "d1"):
    return runner.invoke(app, ["run", "--run-id", run_id], catch_exceptions=False)


def temp_files(root: Path) -> list[Path]:
    return [p for p in (root / "state").rglob("*.tmp")]


def records(root: Path, run_id: str = "d1") -> list[ledger.Record]:
    return list(ledger.read_records(root / "state" / "runs" / run_id / "ledger.jsonl"))


@pytest.fixture
def tiny(tmp_path: Path, monkeypatch) -> Path:
    root = make_workspace(tmp_path)
    monkeypatch.chdir(root)
    monkeypatch.setattr(faults, "_filled", Counter())
    return root


def test_disk_full_mid_run_is_a_recorded_halt_without_temp_files(tiny: Path, monkeypatch) -> None:
    monkeypatch.setenv(faults.DISK_FULL_ENV, "state.before_save:3")
    result = sil_run()
    assert result.exit_code == 3, result.output
    assert "HALT: disk: No space left on device" in result.output
    last = records(tiny)[-1]
    assert last.type == "halt" and last.payload["reason"].startswith("disk:")
    assert temp_files(tiny) == []
    assert ledger.verify_file(tiny / "state" / "runs" / "d1" / "ledger.jsonl").ok


def test_a_disk_that_refuses_the_halt_too_exits_3_with_state_intact(tiny: Path, monkeypatch) -> None:
    real_write = ledger._write_line
    writes = Counter()

    def failing(fd: int, line: bytes) -> None:
        writes["n"] += 1
        if writes["n"] > 3:  # from the 4th record on, the disk is full for good
            raise ledger.LedgerError("ledger write failed") from OSError(errno.ENOSPC, "No space left on device")
        real_write(fd, line)

    monkeypatch.setattr(ledger, "_write_line", failing)
    result = sil_run()
    assert result.exit_code == 3, result.output
    assert "could not be recorded either" in result.output
    rdir = tiny / "state" / "runs" / "d1"
    assert len(records(tiny)) == 3 and ledger.verify_file(rdir / "ledger.jsonl").ok
    json.loads((rdir / "state.json").read_text())  # whole, not half-written
    assert temp_files(tiny) == []  # resuming once there is room: the slow test below


def test_free_space_preflight_refuses_to_start(tiny: Path) -> None:
    edit_contract(tiny / "program.md", "max_wall_s:", "min_free_mb: 9999999\n  max_wall_s:")
    result = sil_run()
    assert result.exit_code == 3 and "budget.min_free_mb" in result.output
    assert not (tiny / "state" / "runs" / "d1" / "ledger.jsonl").exists()


def test_disk_errors_are_recognised_through_the_cause_chain() -> None:
    try:
        try:
            raise OSError(errno.ENOSPC, "No space left on device")
        except OSError as inner:
            raise ledger.LedgerError("ledger write failed") from inner
    except ledger.LedgerError as ex:
        assert is_disk_error(ex)
    assert is_disk_error(OSError(errno.EIO, "Input/output error"))
    assert not is_disk_error(OSError(errno.ENOENT, "No such file"))
    assert not is_disk_error(ledger.LedgerError("bad record"))
    assert mentions_disk_error("OSError: [Errno 28] No space left on device")
    assert not mentions_disk_error("audit process exited 1: KeyError 'x'")


def test_audit_that_died_of_the_disk_is_rerun_not_a_gap(ctx, req) -> None:  # noqa: F811
    with pytest.raises(DiskFull, match="full or failing disk"):
        run_audit(req, ctx, ScriptBackend(DISK_SCRIPT))
    assert attempts.read_status(req.audit_dir).state == "died"
    again = run_audit(req, ctx, ScriptBackend(evidence_script(ctx, req.policy_hashes)))
    assert again.ok and counts(req.audit_dir) == (2, 2)


def test_disk_death_is_recognised_on_resume_without_the_kill_note(ctx, req, monkeypatch) -> None:  # noqa: F811
    def refused(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(attempts, "log_kill", refused)
    with pytest.raises(DiskFull):
        run_audit(req, ctx, ScriptBackend(DISK_SCRIPT))
    assert attempts.read_status(req.audit_dir).state == "finished"  # only its stderr says why
    monkeypatch.undo()
    again = run_audit(req, ctx, ScriptBackend(evidence_script(ctx, req.policy_hashes)))
    assert again.ok and counts(req.audit_dir) == (2, 2)


@pytest.mark.slow
@pytest.mark.parametrize("point", ["audit.before_result:2", "verdict.before_anchor:1", "state.before_save:40"])
def test_resume_after_a_full_disk_gives_the_same_result(tmp_path: Path, point: str) -> None:
    from tests.crash.test_crash_matrix import SIL, outcome, run_sil
    from tests.crash.test_crash_matrix import make_workspace as crash_workspace

    ref_root, root = crash_workspace(tmp_path / "ref"), crash_workspace(tmp_path / "full")
    assert run_sil(ref_root).returncode == 0
    env = {**os.environ, faults.DISK_FULL_ENV: point}
    first = subprocess.run([str(SIL), "run"], cwd=root, env=env, capture_output=True, text=True, timeout=240)
    assert first.returncode == 3, first.stderr[-800:]
    assert temp_files(root) == []
    assert run_sil(root).returncode == 0
    assert outcome(root) == outcome(ref_root)
