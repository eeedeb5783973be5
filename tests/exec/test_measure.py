"""The audit subprocess: trusted evidence becomes scores; everything else becomes a gap."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from sil.contract.schema import load_contract
from sil.exec import measure
from sil.exec.backends.sim import SimBackend
from sil.exec.measure import AuditRequest, BackendBase, MeasureContext, run_audit
from sil.policies.store import PolicyStore
from sil_policy import SURFACES
from sil_policy.evidence import EVIDENCE_FILE


@pytest.fixture
def ctx(workspace: Path) -> MeasureContext:
    contract = load_contract(workspace / "program.md").contract
    return MeasureContext.from_contract(contract, workspace)


@pytest.fixture
def request_for(workspace: Path):
    store = PolicyStore(workspace / "run")
    ps = store.snapshot_dir(workspace / "state" / "policies")

    def make(audit_id: str = "a1", **kw) -> AuditRequest:
        return AuditRequest(
            audit_id=audit_id,
            audit_dir=workspace / "run" / "audits" / audit_id,
            policy_dir=store.set_dir(ps),
            policy_hashes=ps.hashes,
            tick=0,
            **kw,
        )

    return make


class ScriptBackend(BackendBase):
    """A stand-in audit process given as Python source; it writes whatever evidence we want."""

    name = "script"
    simulated = True

    def __init__(self, source: str) -> None:
        self.source = source

    def command(self, req, ctx):
        return [sys.executable, "-c", self.source]

    def read_evidence(self, req, ctx):
        return measure.read_evidence_file(req.audit_dir / EVIDENCE_FILE)


def evidence_script(ctx: MeasureContext, hashes: dict, score=3.0, drop_seed=False, extra="") -> str:
    samples = [
        {"seed_id": s, "scores": {d: score for d in ctx.dimensions}, "policy_hashes": hashes}
        for s in ctx.seed_ids[: -1 if drop_seed else None]
    ]
    ev = {"backend": "script", "simulated": True, "runtime": "test", "samples": samples}
    return f"import json,os\n{extra}\nopen(os.environ['SIL_AUDIT_DIR']+'/evidence.json','w').write(json.dumps({ev!r}))"


def test_sim_audit_reports_the_policy_it_loaded(ctx, request_for) -> None:
    req = request_for()
    res = run_audit(req, ctx, SimBackend())
    assert res.ok, res.gap_reason
    assert res.loaded_policy_hashes == req.policy_hashes
    assert res.simulated and res.backend == "sim"
    assert set(res.sample_counts) == set(ctx.dimensions)
    for row in res.scores.values():
        assert all(1 <= v <= 10 for v in row.values())


def test_policy_copies_are_read_only_and_strict(ctx, request_for) -> None:
    req = request_for()
    run_audit(req, ctx, SimBackend())
    for spec in SURFACES.values():
        assert not os.access(req.audit_dir / "policy" / spec.filename, os.W_OK) or os.geteuid() == 0
        assert (req.audit_dir / "policy" / spec.filename).stat().st_mode & 0o222 == 0


def test_wrong_loaded_policy_is_a_gap(ctx, request_for) -> None:
    req = request_for()
    wrong = {**req.policy_hashes, "tool_policy": "0" * 64}
    res = run_audit(req, ctx, ScriptBackend(evidence_script(ctx, wrong)))
    assert res.status == "gap" and "did not load the sent policy" in res.gap_reason
    assert res.scores == {}


def test_missing_sample_is_a_gap(ctx, request_for) -> None:
    req = request_for()
    res = run_audit(req, ctx, ScriptBackend(evidence_script(ctx, req.policy_hashes, drop_seed=True)))
    assert res.status == "gap" and "differ from the frozen seeds" in res.gap_reason


@pytest.mark.parametrize("bad", [float("nan"), 0.0, 11.0])
def test_unusable_scores_are_missing_not_values(ctx, request_for, bad) -> None:
    req = request_for()
    src = evidence_script(ctx, req.policy_hashes, score=bad).replace("nan", "float('nan')")
    res = run_audit(req, ctx, ScriptBackend(src))
    assert res.ok
    assert all(row == {} for row in res.scores.values())
    assert all(n == 0 for n in res.sample_counts.values())
    assert set(res.missing) == set(ctx.dimensions)


def test_crash_and_missing_output_are_gaps(ctx, request_for) -> None:
    crash = run_audit(request_for("c"), ctx, ScriptBackend("import sys; sys.exit(7)"))
    assert crash.status == "gap" and "exited 7" in crash.gap_reason
    silent = run_audit(request_for("s"), ctx, ScriptBackend("pass"))
    assert silent.status == "gap" and "no evidence" in silent.gap_reason
    garbage = run_audit(
        request_for("g"),
        ctx,
        ScriptBackend("import os; open(os.environ['SIL_AUDIT_DIR']+'/evidence.json','w').write('{\"x\": 1}')"),
    )
    assert garbage.status == "gap" and "malformed" in garbage.gap_reason


def test_timeout_kills_the_whole_process_group(ctx, request_for, tmp_path) -> None:
    marker = tmp_path / "child.pid"
    src = (
        "import subprocess,sys,time\n"
        f"p=subprocess.Popen([sys.executable,'-c','import time; time.sleep(60)'])\n"
        f"open({str(marker)!r},'w').write(str(p.pid))\n"
        "time.sleep(60)"
    )
    short = replace(
        ctx,
        contract=ctx.contract.model_copy(
            update={"measurement": ctx.contract.measurement.model_copy(update={"audit_timeout_s": 3.0})}
        ),
    )
    start = time.monotonic()
    res = run_audit(request_for("t"), short, ScriptBackend(src))
    assert res.status == "gap" and "timed out" in res.gap_reason
    assert time.monotonic() - start < 30  # the timeout plus the kill grace, on a loaded machine
    child = int(marker.read_text())
    end = time.monotonic() + 10
    while (
        alive := subprocess.run(["ps", "-o", "stat=", "-p", str(child)], capture_output=True, text=True)
    ).stdout.strip():
        if alive.stdout.strip().startswith("Z") or time.monotonic() > end:
            break
        time.sleep(0.05)
    state = alive.stdout.strip()
    assert state == "" or state.startswith("Z"), f"child {child} survived: {state}"


def test_environment_is_allowlisted(ctx, request_for, monkeypatch) -> None:
    monkeypatch.setenv("SIL_TEST_CANARY_SECRET", "canary-7f3a")
    req = request_for()
    dump = "import json,os; open(os.environ['SIL_AUDIT_DIR']+'/env.json','w').write(json.dumps(dict(os.environ)))\n"
    run_audit(req, ctx, ScriptBackend(dump + evidence_script(ctx, req.policy_hashes)))
    env = json.loads((req.audit_dir / "env.json").read_text())
    assert "SIL_TEST_CANARY_SECRET" not in env
    assert env["HOME"] == str(req.audit_dir)
    for spec in SURFACES.values():
        assert env[spec.strict_env] == "1"
        assert Path(env[spec.override_env]).parent == req.audit_dir / "policy"


def test_measurement_change_halts(ctx, request_for, workspace) -> None:
    (workspace / "measurement" / "seeds" / "order_tool_error.md").write_text("tampered\n")
    with pytest.raises(measure.MeasurementChanged, match="order_tool_error"):
        measure.run_audits([request_for()], ctx, SimBackend())
