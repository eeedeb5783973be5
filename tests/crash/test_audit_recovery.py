"""Resuming an audit whose loop died: score a finished one, wait for a running one, re-run a
dead one, halt on unknown; and the test-only fault injection that makes those crashes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from sil.base import faults
from sil.contract.schema import load_contract
from sil.exec import attempts, measure
from sil.exec.attempts import AuditStateUnknown
from sil.exec.measure import AuditRequest, MeasureContext, run_audit
from sil.policies.store import PolicyStore
from tests.exec.test_measure import ScriptBackend, evidence_script


@pytest.fixture
def ctx(workspace: Path) -> MeasureContext:
    return MeasureContext.from_contract(load_contract(workspace / "program.md").contract, workspace)


@pytest.fixture
def req(workspace: Path) -> AuditRequest:
    store = PolicyStore(workspace / "run")
    ps = store.snapshot_dir(workspace / "state" / "policies")
    return AuditRequest(
        audit_id="a1",
        audit_dir=workspace / "run" / "audits" / "a1",
        policy_dir=store.set_dir(ps),
        policy_hashes=ps.hashes,
        tick=0,
    )


def with_timeout(ctx: MeasureContext, seconds: float) -> MeasureContext:
    m = ctx.contract.measurement.model_copy(update={"audit_timeout_s": seconds})
    return replace(ctx, contract=ctx.contract.model_copy(update={"measurement": m}))


def orphan(req: AuditRequest, ctx: MeasureContext, source: str, launched_ago: float = 0.0) -> subprocess.Popen:
    """Start an audit the way the loop does, as if the loop then died: nobody waits for it."""
    req.audit_dir.mkdir(parents=True, exist_ok=True)
    launch = {"event": "launch", "attempt": 1, "t": round(time.time() - launched_ago, 3)}
    (req.audit_dir / attempts.ATTEMPTS_FILE).write_text(json.dumps(launch) + "\n")
    return subprocess.Popen(
        attempts.wrap(ScriptBackend(source).command(req, ctx), 1),
        cwd=req.audit_dir,
        env=measure.audit_env(req, ctx, {}),
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )


def wait_for(condition, seconds: float = 60.0) -> None:
    """Wait until `condition()` holds (a loaded machine may be slow, never this slow)."""
    end = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < end, "condition not reached"
        time.sleep(0.02)


def counts(audit_dir: Path) -> tuple[int, int]:
    status = attempts.read_status(audit_dir)
    return status.launches, status.executions


def test_finished_audit_is_scored_not_rerun(ctx, req) -> None:
    backend = ScriptBackend(evidence_script(ctx, req.policy_hashes))
    first = run_audit(req, ctx, backend)
    assert first.ok and counts(req.audit_dir) == (1, 1)
    again = run_audit(req, ctx, backend)  # as a resumed loop would, with no result.json
    assert counts(req.audit_dir) == (1, 1)
    assert again.scores == first.scores and again.ok


def test_failed_attempt_stays_a_gap_and_is_not_rerun(ctx, req) -> None:
    backend = ScriptBackend("import sys; sys.exit(7)")
    assert "exited 7" in run_audit(req, ctx, backend).gap_reason
    assert "exited 7" in run_audit(req, ctx, backend).gap_reason
    assert counts(req.audit_dir) == (1, 1)


def test_running_audit_is_awaited_then_scored(ctx, req) -> None:
    proc = orphan(req, ctx, "import time; time.sleep(1.0)\n" + evidence_script(ctx, req.policy_hashes))
    assert attempts.read_status(req.audit_dir).state == "running"
    start = time.monotonic()
    res = run_audit(req, ctx, ScriptBackend("raise SystemExit('must not be launched')"))
    assert res.ok, res.gap_reason
    assert time.monotonic() - start >= 0.5
    assert counts(req.audit_dir) == (1, 1)
    proc.wait()


def test_an_audit_that_exits_during_the_process_scan_is_finished_not_died(ctx, req, monkeypatch) -> None:
    # The cause of a flaky failure under load: the log was read (no exit yet), then the audit
    # logged its exit and ended before the process scan reached it, so it was judged "died",
    # set aside, and launched again (a paid audit would run twice).
    proc = orphan(req, ctx, "import time; time.sleep(0.3)\n" + evidence_script(ctx, req.policy_hashes))
    scan = attempts._live_pids

    def slow_scan(*args):
        proc.wait()  # the audit finishes while the loop is still scanning the process table
        return scan(*args)

    monkeypatch.setattr(attempts, "_live_pids", slow_scan)
    status = attempts.read_status(req.audit_dir)
    assert status.state == "finished" and status.rc == 0, status.detail
    monkeypatch.undo()
    assert run_audit(req, ctx, ScriptBackend("raise SystemExit('must not be launched')")).ok
    assert counts(req.audit_dir) == (1, 1)


def test_overdue_running_audit_is_killed_as_a_timeout(ctx, req) -> None:
    short = with_timeout(ctx, 1.0)
    proc = orphan(req, short, "import time; time.sleep(60)", launched_ago=0.5)
    res = run_audit(req, short, ScriptBackend("raise SystemExit('must not be launched')"))
    assert res.status == "gap" and "timed out" in res.gap_reason
    assert proc.wait(timeout=5) != 0
    assert attempts.read_status(req.audit_dir).state == "timed_out"
    assert counts(req.audit_dir) == (1, 0)


def test_dead_unfinished_audit_is_set_aside_and_rerun(ctx, req) -> None:
    proc = orphan(
        req,
        ctx,
        "import os, time\nopen(os.environ['SIL_AUDIT_DIR'] + '/evidence.json', 'w').write('{\"torn')\ntime.sleep(60)",
    )
    torn = req.audit_dir / "evidence.json"
    # open() creates the file before the write lands: wait for the bytes, not the name
    wait_for(lambda: torn.exists() and torn.read_text() == '{"torn')
    os.killpg(proc.pid, 9)  # the machine lost it: no exit status was logged
    proc.wait()
    status = attempts.await_attempt(req.audit_dir, 30)  # until the killed group is gone
    assert status.state == "died" and "without an exit status" in status.detail
    res = run_audit(req, ctx, ScriptBackend(evidence_script(ctx, req.policy_hashes)))
    assert res.ok, res.gap_reason  # the torn evidence of the dead attempt was not read
    assert counts(req.audit_dir) == (2, 1)
    assert (req.audit_dir / f"{attempts.SET_ASIDE_PREFIX}1" / "evidence.json").read_text() == '{"torn'


def test_an_operator_shell_in_the_audit_dir_is_not_the_audit(ctx, req) -> None:
    req.audit_dir.mkdir(parents=True)
    attempts.log_launch(req.audit_dir, 1)  # the audit died unlogged; someone cd'ed in to look
    shell = subprocess.Popen(["sleep", "30"], cwd=req.audit_dir, start_new_session=True)
    try:
        assert attempts.read_status(req.audit_dir).state == "died"
        assert run_audit(req, ctx, ScriptBackend(evidence_script(ctx, req.policy_hashes))).ok
        assert shell.poll() is None, "the operator's process was killed"
    finally:
        shell.kill()
        shell.wait()


def test_launch_without_a_process_is_rerun(ctx, req, monkeypatch) -> None:
    monkeypatch.setattr(attempts, "START_GRACE_S", 0.2)  # how long a fresh launch is given to show itself
    req.audit_dir.mkdir(parents=True)
    attempts.log_launch(req.audit_dir, 1)  # the loop died before the process started
    assert attempts.read_status(req.audit_dir).state == "died"
    res = run_audit(req, ctx, ScriptBackend(evidence_script(ctx, req.policy_hashes)))
    assert res.ok and counts(req.audit_dir) == (2, 1)


def test_a_wrapper_still_inside_its_exec_is_running_not_died(req, monkeypatch) -> None:
    # The cause of a flaky failure under load: right after the launch the wrapper's environment
    # was not readable yet (mid-exec) and it had not logged its pid, so it was judged "never
    # started", set aside and launched again (a paid audit would run twice).
    req.audit_dir.mkdir(parents=True)
    attempts.log_launch(req.audit_dir, 1)
    scans: list[int] = []

    def mid_exec(audit_dir: Path) -> list[int]:
        scans.append(1)
        return [] if len(scans) == 1 else [4242]  # its environment shows from the second look on

    monkeypatch.setattr(attempts, "_environ_pids", mid_exec)
    status = attempts.read_status(req.audit_dir)
    assert status.state == "running", status.detail
    assert len(scans) >= 2


def test_unreadable_log_is_unknown(ctx, req) -> None:
    req.audit_dir.mkdir(parents=True)
    (req.audit_dir / attempts.ATTEMPTS_FILE).write_text('{"event": "launch", "attempt": 1}\nnot json\n')
    assert attempts.read_status(req.audit_dir).state == "unknown"
    with pytest.raises(AuditStateUnknown, match="line 2"):
        run_audit(req, ctx, ScriptBackend("raise SystemExit('must not be launched')"))
    assert not (req.audit_dir / "stdout.log").exists()


def test_torn_last_line_is_ignored_and_cut_before_the_next_launch(ctx, req) -> None:
    req.audit_dir.mkdir(parents=True)
    (req.audit_dir / attempts.ATTEMPTS_FILE).write_text('{"event": "launch", "attempt": 1, "t": 1}\n{"event": "st')
    assert attempts.read_status(req.audit_dir).state == "died"
    assert run_audit(req, ctx, ScriptBackend(evidence_script(ctx, req.policy_hashes))).ok
    assert counts(req.audit_dir) == (2, 1)


def test_unkillable_overdue_audit_is_unknown(ctx, req, monkeypatch) -> None:
    short = with_timeout(ctx, 0.5)
    proc = orphan(req, short, "import time; time.sleep(60)", launched_ago=1.0)
    monkeypatch.setattr(attempts, "KILL_GRACE_S", 0.2)
    monkeypatch.setattr(os, "killpg", lambda pgid, sig: None)  # a process in D state ignores us
    wait_for(lambda: attempts.read_status(req.audit_dir).pid is not None)  # its wrapper has started
    try:
        res = run_audit(req, short, ScriptBackend("raise SystemExit('must not be launched')"))
    except AuditStateUnknown as ex:
        assert "still alive after SIGKILL" in str(ex)
    else:
        pytest.fail(f"an unkillable audit was read as {res}: {attempts.read_status(req.audit_dir)}")
    monkeypatch.undo()
    os.killpg(proc.pid, 9)
    proc.wait()


# ---------------------------------------------------------------- fault injection


def test_crashpoint_is_a_noop_without_the_variable(monkeypatch) -> None:
    monkeypatch.delenv(faults.CRASH_ENV, raising=False)
    for name in faults.CRASH_POINTS:
        faults.crashpoint(name)


@pytest.mark.parametrize("spec", ["nope:1", "apply.before_write", "apply.before_write:0", "apply.before_write:x"])
def test_bad_fault_spec_is_refused(spec: str) -> None:
    with pytest.raises(faults.FaultSpecError):
        faults.parse_spec(spec)


def test_crashpoint_kills_on_the_kth_visit() -> None:
    code = (
        "import sys\nfrom sil.base.faults import crashpoint\n"
        "for i in range(5):\n    print(i, flush=True)\n    crashpoint('apply.before_write')\n"
    )
    env = {**os.environ, faults.CRASH_ENV: "apply.before_write:3"}
    proc = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        env=env,
        cwd=Path(__file__).resolve().parents[2],
        timeout=60,
    )
    assert proc.returncode == -9
    assert proc.stdout.split() == ["0", "1", "2"]


def test_audit_subprocess_never_inherits_the_fault(ctx, req, monkeypatch) -> None:
    monkeypatch.setenv(faults.CRASH_ENV, "settle.before_save:1")
    env = measure.audit_env(req, ctx, {})
    assert faults.CRASH_ENV not in env


class _Book:
    """The ledger's record-once semantics, in memory."""

    def __init__(self) -> None:
        self.records: dict[str, object] = {}

    def once(self, key: str, record: object) -> object | None:
        if key in self.records:
            return None
        self.records[key] = record
        return record


def test_a_died_attempt_that_started_is_charged_one_audits_bound_once(ctx, req) -> None:
    from types import SimpleNamespace

    from sil.run.rounds import Guards, RoundRunner

    proc = orphan(req, ctx, "import time\ntime.sleep(60)")
    wait_for(lambda: attempts.read_status(req.audit_dir).pid is not None)
    os.killpg(proc.pid, 9)  # it may have paid for model calls before it died
    proc.wait()
    state = SimpleNamespace(usd=1.0)
    journal = SimpleNamespace(state=state, book=_Book(), emit=lambda line: None)
    backend = SimpleNamespace(audit_cost_bound=lambda contract, n: 0.25 * n / len(ctx.seed_ids))
    rounds = RoundRunner(journal, ctx, backend, None, Guards())  # type: ignore[arg-type]
    rounds.recover([("a1", req.audit_dir)])
    (record,) = journal.book.records.values()
    assert record.found == "died" and record.charged_usd == pytest.approx(0.25)
    assert state.usd == pytest.approx(1.25)
    rounds.recover([("a1", req.audit_dir)])  # a second resume finds the record: no second charge
    assert state.usd == pytest.approx(1.25)


def test_an_attempt_that_never_started_is_not_charged(ctx, req, monkeypatch) -> None:
    from types import SimpleNamespace

    from sil.run.rounds import Guards, RoundRunner

    monkeypatch.setattr(attempts, "START_GRACE_S", 0.2)
    req.audit_dir.mkdir(parents=True)
    attempts.log_launch(req.audit_dir, 1)  # the loop died before the process started
    state = SimpleNamespace(usd=0.0)
    journal = SimpleNamespace(state=state, book=_Book(), emit=lambda line: None)
    backend = SimpleNamespace(audit_cost_bound=lambda contract, n: 0.25)
    RoundRunner(journal, ctx, backend, None, Guards()).recover([("a1", req.audit_dir)])  # type: ignore[arg-type]
    (record,) = journal.book.records.values()
    assert record.found == "died" and record.charged_usd == 0.0 and state.usd == 0.0
