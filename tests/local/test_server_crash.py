"""A local model server that crashes is named as crashed: its exit signal, its log's last lines and
the fix, by `LocalServer`, by `sil check` and by the loop, which halts (never a gap) and re-runs the
audit once the server is back. The server is a stub on 127.0.0.1 (tests/local_stub.py) that kills
itself with SIGSEGV on its first completion, as a llama.cpp build for another CPU does.
"""

from __future__ import annotations

import json
import re
import shutil
import socket
import sys
import time
import urllib.request
from pathlib import Path

import pytest

pytest.importorskip("openai", reason="the local-model path needs the openai SDK: pip install -e '.[local]'")

from local_stub import MODEL, SEGV_LINE  # noqa: E402

from sil.contract.schema import parse_contract  # noqa: E402
from sil.exec import attempts, localprobe, serverstate  # noqa: E402
from sil_runtime.inspect_ext.local import LocalServer  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
LOCAL = REPO / "examples" / "program-local-model.md"
STUB = REPO / "tests" / "local_stub.py"
CRASH = r"crashed at .*: killed by SIGSEGV \(exit 139\)"


@pytest.fixture(autouse=True)
def records(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Server records of this test only (the supervisors inherit the variable)."""
    folder = tmp_path / "servers"
    monkeypatch.setenv(serverstate.STATE_DIR_ENV, str(folder))
    return folder


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def stub(port: int, mode: str) -> LocalServer:
    """The stub server on `port`, run as its own process under the same supervision as SmolLM2."""
    cmd = [sys.executable, str(STUB), "serve", "--port", str(port), "--mode", mode]
    return LocalServer(port=port, command=cmd, wait_s=60)


def complete(base_url: str) -> None:
    body = json.dumps({"model": MODEL, "messages": [{"role": "user", "content": "hi"}]}).encode()
    req = urllib.request.Request(base_url + "/chat/completions", body, {"Content-Type": "application/json"})
    urllib.request.build_opener(urllib.request.ProxyHandler({})).open(req, timeout=30).read()


def ended(server: LocalServer) -> str:
    deadline = time.monotonic() + 30
    while (why := server.failure()) is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert why is not None, "the supervisor did not notice its server died"
    return why


def assert_names_the_crash(text: str) -> None:
    assert re.search(CRASH, text), text
    assert SEGV_LINE in text  # the last lines of the server's log
    assert "make local" in text  # the fix: the portable build


def test_local_server_names_the_crash_of_its_server() -> None:
    with stub(free_port(), "segv") as server:
        assert server.failure() is None
        with pytest.raises(OSError):
            complete(server.base_url)
        assert_names_the_crash(ended(server))


def test_a_server_that_crashes_while_starting_is_named_so(tmp_path: Path) -> None:
    cmd = [sys.executable, "-c", "import os, signal; print('loading model', flush=True); os.kill(os.getpid(), 11)"]
    with pytest.raises(RuntimeError, match=r"did not start: .*SIGSEGV \(exit 139\).*loading model.*make local"):
        with LocalServer(port=free_port(), command=cmd, wait_s=60, log=tmp_path / "server.log"):
            pass


def test_a_server_stopped_on_request_is_not_called_crashed() -> None:
    port = free_port()
    with stub(port, "ok") as server:
        url = server.base_url
    record = serverstate.read(port)
    assert record is not None and record.state == "stopped"
    problem = localprobe.models(url, MODEL)
    assert problem is not None and problem.down
    assert "stopped on request" in str(problem) and "crashed" not in str(problem)


def test_a_server_too_busy_to_stop_is_killed_and_recorded_stopped() -> None:
    port = free_port()
    deaf = "import runpy, signal, sys; signal.signal(signal.SIGTERM, signal.SIG_IGN); sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
    cmd = [sys.executable, "-c", deaf, str(STUB), "serve", "--port", str(port), "--mode", "ok"]
    with LocalServer(port=port, command=cmd, wait_s=60, stop_s=2):
        pass
    record = serverstate.read(port)
    assert record is not None and record.state == "stopped" and record.returncode == -9
    assert "stopped on request" in str(localprobe.models(f"http://127.0.0.1:{port}/v1", MODEL))


def contract_on(url: str):
    text = LOCAL.read_text().replace("http://127.0.0.1:8765/v1", url)
    return parse_contract(text.replace("llama-cpp-python/smollm2-135m", f"llama-cpp-python/{MODEL}"), str(LOCAL))


def target_check(url: str) -> tuple[str, str]:
    from sil.exec.startchecks import start_checks

    (item,) = [i for i in start_checks(contract_on(url), REPO).items if i.name == "server:target"]
    return item.status, item.detail


def test_sil_check_tells_a_crashed_server_from_an_unreachable_one() -> None:
    with stub(free_port(), "segv") as server:
        status, detail = target_check(server.base_url)  # /models answers; the tool-call probe kills it
    assert status == "fail", detail  # not a warning: nothing can be audited on a dead server
    assert_names_the_crash(detail)
    status, detail = target_check(server.base_url)  # later, the record still says how it ended
    assert status == "fail" and "SIGSEGV" in detail
    status, detail = target_check(f"http://127.0.0.1:{free_port()}/v1")  # never started: no record
    assert status == "fail" and "server unreachable" in detail and "SIGSEGV" not in detail


def one_request(root: Path, url: str):
    from sil.exec.measure import AuditRequest, MeasureContext
    from sil_policy import SURFACES, content_hash

    shutil.copytree(REPO / "measurement", root / "measurement", dirs_exist_ok=True)
    ctx = MeasureContext.from_contract(contract_on(url).contract, root)
    policies = REPO / "state" / "policies"
    hashes = {n: content_hash((policies / s.filename).read_bytes()) for n, s in SURFACES.items()}
    req = AuditRequest(audit_id="a1", audit_dir=root / "a1", policy_dir=policies, policy_hashes=hashes, tick=0)
    return req, ctx


@pytest.mark.slow  # two Petri audits (~1 min): .ci/run runs it after the default suite
def test_an_audit_on_a_crashed_server_halts_and_is_re_run_once_the_server_is_back(tmp_path: Path) -> None:
    from sil.base.errors import Halt
    from sil.exec.backends.petri import PetriBackend
    from sil.exec.measure import run_audit

    port = free_port()
    req, ctx = one_request(tmp_path, f"http://127.0.0.1:{port}/v1")
    with stub(port, "segv"):
        with pytest.raises(Halt) as halted:
            run_audit(req, ctx, PetriBackend())
    assert_names_the_crash(str(halted.value))
    assert "sil run" in str(halted.value)  # how to resume
    status = attempts.read_status(req.audit_dir)
    assert status.state == "died" and "server was down" in status.detail  # never scored as a gap
    with stub(port, "ok"):
        result = run_audit(req, ctx, PetriBackend())
    assert result.ok, result.gap_reason
    assert attempts.read_status(req.audit_dir).attempt == 2  # the failed attempt was re-run, not re-read


def local_workspace(root: Path, url: str) -> Path:
    """A project tree whose program.md is the local example with its target on `url`, made small."""
    shutil.copytree(REPO / "measurement", root / "measurement")
    shutil.copytree(REPO / "state" / "policies", root / "state" / "policies")
    text = LOCAL.read_text().replace("http://127.0.0.1:8765/v1", url)
    text = text.replace("llama-cpp-python/smollm2-135m", f"llama-cpp-python/{MODEL}")
    text = text.replace("arm_audits: {never: 4, gate: 4}", "arm_audits: {never: 2, gate: 2}")
    (root / "program.md").write_text(text)
    return root


@pytest.mark.slow  # a few Petri audits (minutes on a busy machine): .ci/run runs it after the default suite
def test_a_run_whose_server_crashes_halts_with_the_crash_and_resumes_once_it_is_back(tmp_path: Path) -> None:
    from sil.integrity import ledger
    from sil.run.train import run_phases
    from sil.store.events import Resuming, Update
    from tests.run.test_train import open_loop

    port = free_port()
    root = local_workspace(tmp_path / "project", f"http://127.0.0.1:{port}/v1")
    events: list[Update] = []
    with stub(port, "segv"):
        rc = open_loop(root, "r1", events.append)
        run_phases(rc)
    assert rc.state.phase == "halted"
    assert_names_the_crash(rc.state.halt_reason or "")
    assert rc.state.gaps == 0  # the failed audit is not a gap: it says nothing about the policy
    with stub(port, "ok"):
        rc = open_loop(root, "r1", events.append)
        run_phases(rc)
    assert rc.state.phase == "done", rc.state.halt_reason
    resumed = [e.event for e in events if isinstance(e.event, Resuming)]
    assert resumed and (resumed[0].halt_reason or "").startswith("the target's model server"), resumed
    kinds = [r.type for r in ledger.read_records(rc.run_dir / "ledger.jsonl")]
    assert kinds.count("halt") == 1 and "stop" in kinds
    assert ledger.verify_file(rc.run_dir / "ledger.jsonl").ok


def test_a_server_seen_dropping_a_connection_while_it_dies_is_named_crashed() -> None:
    """Its socket closes before its pid turns zombie: the record is read as it is written, not
    before (a probe that read "running, pid alive" at once called a crashing server unreachable)."""
    import subprocess
    import threading

    port = free_port()
    dying = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(0.4)"])
    record = serverstate.ServerRecord(port=port, pid=dying.pid, supervisor_pid=0, log="", started_at=time.time())
    serverstate.write(record)

    def supervisor() -> None:
        serverstate.write(record.ended(returncode=-11, requested=False))
        dying.wait()

    timer = threading.Timer(0.3, supervisor)
    timer.start()
    try:
        why = serverstate.explain_down(f"http://127.0.0.1:{port}/v1")
    finally:
        timer.join()
        dying.wait()
    assert why is not None and re.search(CRASH, why), why


def test_a_server_alive_but_silent_is_not_called_down() -> None:
    import subprocess

    port = free_port()
    with subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"]) as silent:
        record = serverstate.ServerRecord(port=port, pid=silent.pid, supervisor_pid=0, log="", started_at=time.time())
        serverstate.write(record)
        try:
            assert serverstate.explain_down(f"http://127.0.0.1:{port}/v1") is None
        finally:
            silent.kill()
