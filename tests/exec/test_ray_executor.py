"""The Ray executor end to end on a real local Ray cluster (markers `ray` and `slow`: not in
`make test`, which stays under 6 minutes; `.ci/run` runs them after it).

One cluster per session: `ray start --head --block` on 127.0.0.1 in its own process group and a
short temp dir, killed (the whole group) at the end. Each test runs `sil run` as a subprocess
on a tiny copy of `examples/program-ray.md` pointed at that cluster, and checks:

- the sim backend through Ray gives byte-identical verdict, round and audit records to the
  local executor on the same seeds (only each audit's wall time differs);
- a Ray worker killed mid-audit together with its audit (a lost node) is recovered: a
  `recovery` record says it died, it is re-run once, and no audit is paid (executed) twice;
- a worker killed while its audit survives: the audit is scored, not re-run;
- the driver SIGKILLed mid-audit and resumed: the resumed driver finds the detached slots,
  awaits their audits, scores them (not re-run) and completes with the same verdicts.

    pytest -m ray -o addopts="" tests/exec/test_ray_executor.py      # only these (~3 min)
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sil.base.faults import CRASH_ENV
from sil.exec import attempts
from tests.conftest import REPO, edit_contract
from tests.crash.test_crash_matrix import TINY, git

pytestmark = [pytest.mark.ray, pytest.mark.slow]

SIL = Path(sys.executable).parent / "sil"
RAY = Path(sys.executable).parent / "ray"
RUN_TIMEOUT_S = 300
START_TIMEOUT_S = 300
STARTED = "Ray runtime started"
# loopback only, and no dependence on a token some earlier local `ray.init()` left in ~/.ray
RAY_TEST_ENV = {"RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}
COMPARED = ("verdict", "round", "audit", "mutation", "effect", "stop")
RAY_CONTRACT = REPO / "examples" / "program-ray.md"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _procs_under(marker: str) -> list[int]:
    """Pids whose command line names `marker` (our cluster's temp dir)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if marker.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


@pytest.fixture(scope="session")
def ray_cluster() -> Iterator[str]:
    """The address of a one-node Ray cluster on loopback, for this test session only."""
    if importlib.util.find_spec("ray") is None:  # CI must run these, so a missing ray fails, never skips
        pytest.fail("ray is not installed: pip install -e '.[test]' (pins ray==2.60.0)")
    temp = tempfile.mkdtemp(prefix="sil-ray-", dir="/tmp")  # short: Ray's socket paths are length-limited
    port = _free_port()
    env = {**os.environ, **RAY_TEST_ENV}
    cmd = [str(RAY), "start", "--head", "--block", "--num-cpus", "4", "--node-ip-address", "127.0.0.1"]
    cmd += ["--port", str(port), "--temp-dir", temp, "--disable-usage-stats", "--include-dashboard=false"]
    log = open(Path(temp) / "ray-start.log", "wb")
    head = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    address = f"127.0.0.1:{port}"
    try:
        _await_cluster(address, head, Path(temp))
        yield address
    finally:
        for pid in {head.pid, *_procs_under(temp)}:
            try:
                os.killpg(os.getpgid(pid), signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        head.wait(timeout=30)
        log.close()
        shutil.rmtree(temp, ignore_errors=True)


def _await_cluster(address: str, head: subprocess.Popen, temp: Path) -> None:
    """Wait until `ray start` says the runtime is up and its port answers (slow on a loaded box)."""
    end = time.monotonic() + START_TIMEOUT_S
    log = temp / "ray-start.log"
    host, port = address.split(":")
    while time.monotonic() < end:
        if head.poll() is not None:
            pytest.fail(f"ray start exited {head.returncode}: {log.read_text()[-2000:]}")
        if STARTED in log.read_text(errors="replace"):
            try:
                socket.create_connection((host, int(port)), timeout=2).close()
                return
            except OSError:
                pass
        time.sleep(0.5)
    pytest.fail(f"Ray cluster at {address} not up after {START_TIMEOUT_S}s: {log.read_text()[-2000:]}")


def workspace(root: Path, contract: Path) -> Path:
    """A user's project (git repo) whose program.md is a tiny copy of `contract`."""
    root.mkdir(parents=True)
    shutil.copy(contract, root / "program.md")
    shutil.copytree(REPO / "measurement", root / "measurement")
    shutil.copytree(REPO / "state" / "policies", root / "state" / "policies")
    for old, new in TINY.items():
        edit_contract(root / "program.md", old, new)
    if contract == RAY_CONTRACT:
        edit_contract(root / "program.md", "address_env: null", "address_env: RAY_ADDRESS")
    git(root, "init", "-q", "-b", "main")
    git(root, "add", "-A")
    git(root, "commit", "-q", "-m", "user's project")
    return root


def start_sil(root: Path, address: str, crash: str | None = None) -> subprocess.Popen[str]:
    env = {k: v for k, v in os.environ.items() if k != CRASH_ENV and not k.startswith("SIL_SIGN")}
    env.update(RAY_TEST_ENV, RAY_ADDRESS=address)
    if crash:
        env[CRASH_ENV] = crash
    return subprocess.Popen(
        [str(SIL), "run"], cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def finish(proc: subprocess.Popen[str]) -> tuple[int, str]:
    out, _ = proc.communicate(timeout=RUN_TIMEOUT_S)
    return proc.returncode, out


def run_dir(root: Path) -> Path:
    (found,) = [d for d in (root / "state" / "runs").iterdir() if (d / "ledger.jsonl").exists()]
    return found


def run_id(root: Path) -> str:
    """The run id `sil run` gives the workspace's contract (known before the run exists)."""
    from sil.contract.schema import load_contract

    contract = load_contract(root / "program.md").contract
    return f"{contract.contract_id}-{contract.contract_hash[:8]}"


def ledger(root: Path) -> list[dict]:
    return [json.loads(line) for line in (run_dir(root) / "ledger.jsonl").read_text().splitlines()]


def compared(root: Path) -> dict[str, list[dict]]:
    """The records that must not depend on the executor (wall times do)."""
    out: dict[str, list[dict]] = {t: [] for t in COMPARED}
    for rec in ledger(root):
        if rec["type"] in out:
            payload = dict(rec["payload"])
            payload.pop("wall_s", None)
            payload.pop("elapsed_s", None)
            out[rec["type"]].append(payload)
    return out


def executions(root: Path) -> dict[str, int]:
    """Per audit: how many attempts ran to an exit status (a paid audit is an executed one)."""
    out = {}
    for audit_dir in sorted((run_dir(root) / "audits").iterdir()):
        out[audit_dir.name] = sum(1 for e in attempts.read_events(audit_dir) if e["event"] == "exit")
    return out


def assert_each_audit_once(root: Path) -> None:
    recs = [r["payload"]["audit_id"] for r in ledger(root) if r["type"] == "audit"]
    assert len(recs) == len(set(recs)), "an audit was recorded twice"
    counts = executions(root)
    assert set(counts) == set(recs)
    assert all(n == 1 for n in counts.values()), f"an audit was executed (paid) twice: {counts}"


@pytest.fixture(scope="session")
def local_reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, list[dict]]:
    """The same experiment on the local executor: what every Ray run must reproduce."""
    root = workspace(tmp_path_factory.mktemp("local") / "ws", REPO / "program.md")
    code, out = finish(start_sil(root, "unused"))
    assert code == 0, out[-3000:]
    return compared(root)


def test_ray_verdicts_identical_to_local(ray_cluster: str, local_reference: dict, tmp_path: Path) -> None:
    root = workspace(tmp_path / "ws", RAY_CONTRACT)
    code, out = finish(start_sil(root, ray_cluster))
    assert code == 0, out[-3000:]
    got = compared(root)
    for kind in COMPARED:
        assert json.dumps(got[kind], sort_keys=True) == json.dumps(local_reference[kind], sort_keys=True), kind
    assert got["verdict"], "the tiny run decided nothing: the comparison would be empty"
    assert_each_audit_once(root)
    records = [json.loads(p.read_text()) for p in (run_dir(root) / "audits").glob("*/executor.json")]
    assert records and all(r["namespace"].startswith("sil-") for r in records)


def _first_started_audit(root: Path, timeout: float = 120) -> tuple[Path, int]:
    """An audit directory whose wrapper has logged its pid (the audit is mid-flight)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        runs = root / "state" / "runs"
        audits = runs / run_id(root) / "audits" if runs.is_dir() else None
        for audit_dir in sorted(audits.iterdir()) if audits and audits.is_dir() else []:
            try:
                started = [e for e in attempts.read_events(audit_dir) if e["event"] == "start"]
            except attempts.AuditStateUnknown:
                continue
            if started and not (audit_dir / "result.json").exists():
                return audit_dir, started[-1]["pid"]
        time.sleep(0.02)
    pytest.fail("no audit started")


def _parent(pid: int) -> int:
    return int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])


@pytest.mark.parametrize("audit_survives", [False, True], ids=["node-lost", "worker-only"])
def test_worker_killed_mid_audit(ray_cluster: str, local_reference: dict, tmp_path: Path, audit_survives: bool) -> None:
    root = workspace(tmp_path / "ws", RAY_CONTRACT)
    proc = start_sil(root, ray_cluster)
    audit_dir, wrapper_pid = _first_started_audit(root)
    worker = _parent(wrapper_pid)  # the slot actor's worker process started the wrapper
    assert b"ray" in (Path("/proc") / str(worker) / "cmdline").read_bytes()
    os.kill(worker, signal.SIGKILL)
    if not audit_survives:
        os.killpg(wrapper_pid, signal.SIGKILL)  # the audit goes with its node
    code, out = finish(proc)
    assert code == 0, out[-3000:]
    recoveries = [r["payload"] for r in ledger(root) if r["type"] == "recovery"]
    mine = [r for r in recoveries if r["audit_id"] == audit_dir.name]
    assert len(mine) == 1, recoveries
    assert mine[0]["found"] == ("finished" if audit_survives else "died")
    launches = [e for e in attempts.read_events(audit_dir) if e["event"] == "launch"]
    assert len(launches) == (1 if audit_survives else 2), "re-run exactly when it had not finished"
    assert_each_audit_once(root)
    got = compared(root)
    assert got["verdict"] == local_reference["verdict"]
    assert got["audit"] == local_reference["audit"]


def test_driver_killed_right_after_submitting_resumes(ray_cluster: str, local_reference: dict, tmp_path: Path) -> None:
    """SIGKILL at the crashpoint just after a task is submitted: it may not have started yet."""
    root = workspace(tmp_path / "ws", RAY_CONTRACT)
    code, out = finish(start_sil(root, ray_cluster, crash="audit.running:3"))
    assert code == -signal.SIGKILL, out[-3000:]
    code, out = finish(start_sil(root, ray_cluster))
    assert code == 0, out[-3000:]
    recoveries = [r["payload"] for r in ledger(root) if r["type"] == "recovery"]
    assert recoveries and {r["found"] for r in recoveries} <= {"finished", "died"}, recoveries
    assert_each_audit_once(root)
    got = compared(root)
    for kind in ("verdict", "audit", "round"):
        assert got[kind] == local_reference[kind], kind


def test_driver_killed_mid_audit_resumes_against_running_slot(
    ray_cluster: str, local_reference: dict, tmp_path: Path
) -> None:
    """SIGKILL the driver while an audit runs: the resumed driver awaits it on its slot, never re-runs it."""
    root = workspace(tmp_path / "ws", RAY_CONTRACT)
    proc = start_sil(root, ray_cluster)
    audit_dir, _ = _first_started_audit(root)
    proc.kill()
    proc.communicate(timeout=60)
    code, out = finish(start_sil(root, ray_cluster))
    assert code == 0, out[-3000:]
    assert "still held by Ray slots" in out, out[-3000:]
    recoveries = [r["payload"] for r in ledger(root) if r["type"] == "recovery"]
    mine = [r for r in recoveries if r["audit_id"] == audit_dir.name]
    assert [r["found"] for r in mine] == ["finished"], recoveries
    launches = [e for e in attempts.read_events(audit_dir) if e["event"] == "launch"]
    assert len(launches) == 1
    assert_each_audit_once(root)
    got = compared(root)
    for kind in ("verdict", "audit", "round"):
        assert got[kind] == local_reference[kind], kind


def test_sweep_runs_seeds_as_independent_runs_on_the_cluster(ray_cluster: str, tmp_path: Path) -> None:
    root = workspace(tmp_path / "ws", RAY_CONTRACT)
    env = {k: v for k, v in os.environ.items() if k != CRASH_ENV and not k.startswith("SIL_SIGN")}
    env.update(RAY_TEST_ENV, RAY_ADDRESS=ray_cluster)
    proc = subprocess.run(
        [str(SIL), "sweep", "program.md", "--seeds", "2"],
        cwd=root,
        env=env,
        capture_output=True,
        text=True,
        timeout=2 * RUN_TIMEOUT_S,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    workspaces = sorted((root / "state" / "sweeps").iterdir())
    assert len(workspaces) == 2
    hashes = set()
    for ws in workspaces:
        (run,) = [d for d in (ws / "state" / "runs").iterdir() if (d / "ledger.jsonl").exists()]
        assert run.name == ws.name and run.name in proc.stdout  # the combined status names every run
        verify = subprocess.run([str(SIL), "ledger", "verify", run.name], cwd=ws, capture_output=True, text=True)
        assert verify.returncode == 0, verify.stdout + verify.stderr
        first = json.loads((run / "ledger.jsonl").read_text().splitlines()[0])["payload"]
        hashes.add(first["contract_hash"])
    assert len(hashes) == 2, "each seed is a contract of its own"
