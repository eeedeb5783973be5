"""The warm worker (sil/exec/zygote.py): a forked audit is the same audit as the subprocess one.

Its own session, exactly its environment, its files; the same exit statuses, evidence and
scores byte for byte; the same timeout kill; an attempts log that lets a resumed loop await it
after the loop and its worker died; and the plain subprocess whenever the worker cannot serve.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest

from sil.contract.schema import load_contract
from sil.contract.simparams import SimParams
from sil.exec import attempts, auditproc, measure, zygote
from sil.exec.auditproc import AuditTimedOut
from sil.exec.backends.sim import SimBackend
from sil.exec.measure import AuditRequest, LocalRunner, MeasureContext, run_audit
from sil.policies.store import PolicyStore
from sil_policy import SURFACES
from tests.conftest import REPO

pytestmark = pytest.mark.skipif(not zygote.supported(), reason="needs fork() and /proc")
PROBE = "tests.warm_probe"


@pytest.fixture(scope="module")
def probe_worker() -> Iterator[zygote.Zygote]:
    worker = zygote.Zygote((PROBE,), {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO)})
    yield worker
    worker.close()


@pytest.fixture
def ctx(workspace: Path) -> MeasureContext:
    return MeasureContext.from_contract(load_contract(workspace / "program.md").contract, workspace)


def request(workspace: Path, audit_id: str, tick: int = 0, run: str = "run", **kw) -> AuditRequest:
    store = PolicyStore(workspace / run)
    ps = store.snapshot_dir(workspace / "state" / "policies")
    return AuditRequest(
        audit_id=audit_id,
        audit_dir=workspace / run / "audits" / audit_id,
        policy_dir=store.set_dir(ps),
        policy_hashes=ps.hashes,
        tick=tick,
        **kw,
    )


def with_sim(ctx: MeasureContext, **updates) -> MeasureContext:
    contract = ctx.contract.with_settings(ctx.contract.settings(SimParams).model_copy(update=updates))
    return replace(ctx, contract=contract)


def spawn_probe(worker: zygote.Zygote, audit_dir: Path, *args: str, env: dict | None = None) -> zygote.ForkedAudit:
    audit_dir.mkdir(parents=True, exist_ok=True)
    attempts.log_launch(audit_dir, 1)
    env = env or {"PATH": "/usr/bin:/bin", "SIL_AUDIT_DIR": str(audit_dir)}
    return worker.spawn([sys.executable, "-m", PROBE, *args], audit_dir, env, 1)


def events(audit_dir: Path) -> list[tuple]:
    return [(e["event"], e["attempt"], e.get("rc")) for e in attempts.read_events(audit_dir)]


def test_a_forked_audit_has_exactly_its_environment_session_and_files(probe_worker, tmp_path) -> None:
    env = {"PATH": "/usr/bin:/bin", "SIL_AUDIT_DIR": str(tmp_path / "a"), "ONLY_THIS": "1"}
    proc = spawn_probe(probe_worker, tmp_path / "a", "report", "x y", env=env)
    assert auditproc.finish(proc, tmp_path / "a", 1, 30) == 0
    seen = json.loads((tmp_path / "a" / "stdout.log").read_text())
    assert seen["env"] == env  # nothing of the worker's (PYTHONPATH) or the loop's environment
    assert seen["argv"] == ["report", "x y"] and seen["cwd"] == str(tmp_path / "a") and seen["stdin"] == ""
    assert seen["pid"] == seen["pgid"] == seen["sid"] == proc.pid != probe_worker.proc.pid
    assert seen["warmed_in"] == probe_worker.proc.pid  # the module's warm() ran once, before the fork
    assert (tmp_path / "a" / "stderr.log").read_text() == "to stderr\n"
    assert events(tmp_path / "a") == [("launch", 1, None), ("start", 1, None), ("exit", 1, 0)]
    start = attempts.read_events(tmp_path / "a")[1]
    assert start["pid"] == proc.pid and start["ticks"] == proc.ticks


@pytest.mark.parametrize(("args", "rc", "stderr"), [(("exit", "3"), 3, ""), (("raise",), 1, "ValueError")])
def test_exit_status_is_what_python_m_reports(probe_worker, tmp_path, args, rc, stderr) -> None:
    proc = spawn_probe(probe_worker, tmp_path / "a", *args)
    assert auditproc.finish(proc, tmp_path / "a", 1, 30) == rc
    assert events(tmp_path / "a")[-1] == ("exit", 1, rc)
    assert stderr in (tmp_path / "a" / "stderr.log").read_text()
    assert attempts.read_status(tmp_path / "a").state == "finished"


def test_past_its_timeout_the_forked_group_is_logged_and_killed(probe_worker, tmp_path) -> None:
    proc = spawn_probe(probe_worker, tmp_path / "a", "sleep", "60")
    with pytest.raises(AuditTimedOut):
        auditproc.finish(proc, tmp_path / "a", 1, 0.5)
    assert attempts.read_status(tmp_path / "a").state == "timed_out"
    assert attempts.attempt_alive(tmp_path / "a", proc.pid, proc.ticks) is False


def test_a_forked_audit_outlives_its_dead_worker_and_reports_through_the_log(tmp_path) -> None:
    worker = zygote.Zygote((PROBE,), {"PATH": os.environ["PATH"], "PYTHONPATH": str(REPO)})
    proc = spawn_probe(worker, tmp_path / "a", "sleep", "0.5")
    worker.kill()  # as when the loop and its worker are killed mid-audit
    assert attempts.read_status(tmp_path / "a").state == "running"
    assert proc.wait(timeout=30) == 0  # from the exit the audit logged itself
    assert events(tmp_path / "a")[-1] == ("exit", 1, 0)
    with pytest.raises(zygote.ZygoteUnavailable):
        spawn_probe(worker, tmp_path / "b", "exit", "0")
    assert not (tmp_path / "b" / "stdout.log").exists()


def test_an_audit_whose_start_cannot_be_logged_never_runs(probe_worker, tmp_path) -> None:
    audit_dir = tmp_path / "a"
    (audit_dir / attempts.ATTEMPTS_FILE).mkdir(parents=True)  # the worker cannot append its start
    env = {"PATH": "/usr/bin:/bin", "SIL_AUDIT_DIR": str(audit_dir)}
    with pytest.raises(zygote.ZygoteUnavailable, match="did not start"):
        probe_worker.spawn([sys.executable, "-m", PROBE, "report"], audit_dir, env, 1)
    time.sleep(0.2)
    assert not (audit_dir / "stdout.log").exists()


def test_a_reused_pid_is_not_the_audit() -> None:
    ticks = attempts.proc_stat(os.getpid())
    assert ticks is not None
    assert attempts.attempt_alive(Path("/nonexistent"), os.getpid(), ticks[2] + 1) is False


def audit_outputs(req: AuditRequest, result: measure.AuditResult) -> dict:
    names = ("evidence.json", "stdout.log", "stderr.log")
    files = {n: (req.audit_dir / n).read_bytes() for n in names if (req.audit_dir / n).exists()}
    return {"files": files, "result": result.model_dump(exclude={"wall_s"}), "events": events(req.audit_dir)}


def test_results_are_byte_identical_to_the_subprocess_path(workspace, ctx) -> None:
    worker = zygote.shared((SimBackend.warm_module,), measure.base_env())
    assert worker is not None
    crashing = with_sim(ctx, p_crash=1.0)
    cases = [("a1", ctx, {}), ("a2", ctx, {"tick": 7, "pair_key": "p"}), ("c1", crashing, {})]
    if ctx.heldout_ids:
        cases.append(("h1", ctx, {"seed_set": "heldout"}))
    seen = {}
    for audit_id, c, kw in cases:
        warm_req, cold_req = (request(workspace, audit_id, run=run, **kw) for run in ("warm", "cold"))
        warm = audit_outputs(warm_req, run_audit(warm_req, c, SimBackend(), LocalRunner(worker)))
        cold = audit_outputs(cold_req, run_audit(cold_req, c, SimBackend(), LocalRunner()))
        assert warm == cold, audit_id
        seen[audit_id] = warm
    assert seen["a1"]["result"]["status"] == "ok" and seen["a1"]["files"]["evidence.json"]
    assert "simulated runtime crash" in seen["c1"]["result"]["gap_reason"]
    assert seen["c1"]["events"][-1] == ("exit", 1, 3)


# The worker's preload, then one audit in the same process, as a forked audit runs it.
FIRST_USE_CHECK = """
import json, sys
from sil.exec import zygote
module, out = sys.argv[1], sys.argv[2]
zygote.preload([module])
before = set(sys.modules)
sys.argv = [sys.executable, *sys.argv[3:]]
rc = zygote.run_module(module)
with open(out, "w") as f:
    json.dump({"rc": rc, "imported": sorted(set(sys.modules) - before)}, f)
"""


def test_a_forked_sim_audit_finds_all_it_imports_loaded_by_the_worker(workspace, ctx, tmp_path) -> None:
    """Whatever a sim audit imports that its worker has not is paid again by every audit (~0.3 s
    each for detect-secrets' rules, before the sim's warm())."""
    req = request(workspace, "a1")
    assert run_audit(req, ctx, SimBackend(), LocalRunner()).status == "ok"  # leaves its policy copies
    copies = {name: req.audit_dir / "policy" / spec.filename for name, spec in SURFACES.items()}
    cmd = SimBackend().command(req, ctx)
    out = tmp_path / "seen.json"
    env = measure.audit_env(req, ctx, copies)
    args = [sys.executable, "-c", FIRST_USE_CHECK, cmd[2], str(out), *cmd[3:]]
    proc = subprocess.run(args, env=env, cwd=req.audit_dir, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    seen = json.loads(out.read_text())
    assert seen["rc"] == 0, (req.audit_dir / "stderr.log").read_text()
    assert seen["imported"] == []


def test_a_running_forked_audit_is_awaited_on_resume_not_run_twice(workspace, ctx) -> None:
    slow = with_sim(ctx, seconds_per_audit=1.0)
    worker = zygote.Zygote((SimBackend.warm_module,), measure.base_env())
    req = request(workspace, "a1")
    measure.prepare_audit_dir(req)
    copies = measure._copy_policies(req)
    attempts.log_launch(req.audit_dir, 1)
    worker.spawn(SimBackend().command(req, slow), req.audit_dir, measure.audit_env(req, slow, copies), 1)
    worker.kill()  # the loop died with its worker; the audit runs on
    assert attempts.read_status(req.audit_dir).state == "running"
    res = run_audit(req, slow, SimBackend(), LocalRunner())  # the resumed loop: no worker yet
    assert res.ok, res.gap_reason
    status = attempts.read_status(req.audit_dir)
    assert (status.launches, status.executions) == (1, 1)


def test_a_forked_audit_lost_with_the_machine_is_rerun_once(workspace, ctx) -> None:
    slow = with_sim(ctx, seconds_per_audit=30.0)
    worker = zygote.Zygote((SimBackend.warm_module,), measure.base_env())
    req = request(workspace, "a1")
    measure.prepare_audit_dir(req)
    copies = measure._copy_policies(req)
    attempts.log_launch(req.audit_dir, 1)
    proc = worker.spawn(SimBackend().command(req, slow), req.audit_dir, measure.audit_env(req, slow, copies), 1)
    worker.kill()
    os.killpg(proc.pid, 9)  # the machine lost the audit too: no exit status
    end = time.monotonic() + 30
    while attempts.read_status(req.audit_dir).state == "running":
        assert time.monotonic() < end
        time.sleep(0.05)
    assert attempts.read_status(req.audit_dir).state == "died"
    assert run_audit(req, ctx, SimBackend(), LocalRunner()).ok  # resumed, at the normal speed
    status = attempts.read_status(req.audit_dir)
    assert (status.launches, status.executions) == (2, 1)


def test_without_a_worker_audits_run_as_plain_subprocesses(workspace, ctx, monkeypatch) -> None:
    with pytest.raises(zygote.ZygoteUnavailable, match="ModuleNotFoundError"):
        zygote.Zygote(("no_such_module_for_sil",), measure.base_env())
    monkeypatch.setenv(zygote.DISABLE_ENV, "0")
    assert zygote.shared((SimBackend.warm_module,), measure.base_env()) is None
    monkeypatch.delenv(zygote.DISABLE_ENV)
    dead = zygote.Zygote((SimBackend.warm_module,), measure.base_env())
    dead.kill()
    req = request(workspace, "a1")
    assert run_audit(req, ctx, SimBackend(), LocalRunner(dead)).ok
    start = attempts.read_events(req.audit_dir)[1]
    assert start["event"] == "start" and "ticks" not in start  # the wrapper's start: a subprocess


def test_the_worker_exits_when_its_loop_is_gone(tmp_path) -> None:
    code = (
        "import os, sys; from sil.exec import zygote\n"
        "w = zygote.Zygote(('tests.warm_probe',), {'PATH': os.environ['PATH'], 'PYTHONPATH': sys.argv[1]})\n"
        "print(w.proc.pid, flush=True); os._exit(0)\n"
    )
    out = subprocess.run([sys.executable, "-c", code, str(REPO)], capture_output=True, text=True, timeout=60, cwd=REPO)
    pid = int(out.stdout)
    end = time.monotonic() + 30
    while (stat := attempts.proc_stat(pid)) is not None and stat[0] != "Z":
        assert time.monotonic() < end, "the worker outlived its loop"
        time.sleep(0.05)


def test_a_forked_copy_of_the_loop_starts_its_own_worker() -> None:
    import multiprocessing

    parent = zygote.shared((SimBackend.warm_module,), measure.base_env())
    assert parent is not None

    def child() -> None:  # the parent's worker answers the parent's reader, never this process
        mine = zygote.shared((SimBackend.warm_module,), measure.base_env())
        os._exit(0 if mine is not None and mine is not parent else 5)

    proc = multiprocessing.get_context("fork").Process(target=child)
    proc.start()
    proc.join(120)
    assert proc.exitcode == 0
