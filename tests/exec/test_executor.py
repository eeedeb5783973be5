"""The executor seam without a cluster: contract fields, in-flight bounds, checks, sweep planning.

The Ray runs themselves are in tests/exec/test_ray_executor.py (marker `ray`).
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from sil.base.errors import Refused
from sil.contract.schema import ContractError, parse_contract
from sil.exec import rayexec
from sil.exec.startchecks import start_checks
from sil.run.sweep import plan_sweep, seed_text
from tests.conftest import REPO

TEXT = (REPO / "program.md").read_text()
RAY_TEXT = (REPO / "examples" / "program-ray.md").read_text()
SEED_LINE = re.compile(r"(?m)^seed: \d+\nsim:")


def with_executor(block: str, text: str = TEXT) -> str:
    assert SEED_LINE.search(text)
    return SEED_LINE.sub(lambda m: f"executor:\n{block}\n{m.group(0)}", text, count=1)


def test_default_contract_keeps_its_hash_and_runs_locally() -> None:
    plain = parse_contract(TEXT).contract
    explicit = parse_contract(with_executor("  kind: local")).contract
    assert plain.executor.kind == "local"
    assert explicit.contract_hash == plain.contract_hash  # the default is not part of the hash
    assert plain.audits_in_flight() == plain.measurement.concurrency == 2


def test_ray_contract_bounds_in_flight_per_run_and_per_provider() -> None:
    ray = parse_contract(RAY_TEXT).contract
    assert ray.executor.kind == "ray"
    assert ray.audits_in_flight() == 4
    capped = parse_contract(with_executor("  kind: ray\n  max_in_flight: 16\n  per_provider: {sim: 3}")).contract
    assert capped.audits_in_flight() == 3
    assert capped.contract_hash != ray.contract_hash
    # a cap for a provider the audits do not call does not bind
    other = parse_contract(with_executor("  kind: ray\n  max_in_flight: 5\n  per_provider: {anthropic: 1}")).contract
    assert other.audits_in_flight() == 5
    local_cap = parse_contract(with_executor("  per_provider: {sim: 1}")).contract
    assert local_cap.audits_in_flight() == 1


@pytest.mark.parametrize(
    ("block", "fragment"),
    [
        ("  kind: slurm", "executor.kind"),
        ("  kind: ray\n  max_in_flight: 0", "executor.max_in_flight"),
        ("  kind: ray\n  num_cpus: -1", "executor.num_cpus"),
        ("  kind: ray\n  address_env: ray_address", "executor.address_env"),
        ("  kind: ray\n  resources: {gpu-node: 0}", "executor.resources"),
        ("  kind: ray\n  per_provider: {Anthropic: 2}", "executor.per_provider"),
        ("  kind: ray\n  per_provider: {anthropic: 0}", "executor.per_provider"),
        ("  kind: ray\n  max_in_flight: 4\n  workers: 2", "executor.workers: Extra inputs"),
        ("  kind: local\n  max_in_flight: 4", "apply to kind 'ray' only"),
        ("  address_env: RAY_ADDRESS", "apply to kind 'ray' only"),
    ],
)
def test_bad_executor_fields_name_the_field(block: str, fragment: str) -> None:
    with pytest.raises(ContractError) as info:
        parse_contract(with_executor(block))
    assert fragment in str(info.value), str(info.value)


def _check(workspace: Path, text: str, env: dict[str, str]) -> dict[str, str]:
    (workspace / "program.md").write_text(text)
    from sil.contract.schema import load_contract

    old = dict(os.environ)
    os.environ.update(env)
    try:
        report = start_checks(load_contract(workspace / "program.md"), workspace)
    finally:
        os.environ.clear()
        os.environ.update(old)
    return {i.name: f"{i.status}: {i.detail}" for i in report.items}


def test_check_reports_an_unset_or_dead_ray_address(workspace: Path) -> None:
    text = RAY_TEXT.replace("address_env: null", "address_env: SIL_TEST_RAY_ADDR")
    os.environ.pop("SIL_TEST_RAY_ADDR", None)
    unset = _check(workspace, text, {})
    assert unset["executor"].startswith("fail") and "SIL_TEST_RAY_ADDR, which is not set" in unset["executor"]
    dead = _check(workspace, text, {"SIL_TEST_RAY_ADDR": "127.0.0.1:9"})  # discard port: nothing listens
    assert dead["executor"].startswith("fail") and "nothing answers" in dead["executor"]
    bad = _check(workspace, text, {"SIL_TEST_RAY_ADDR": "no-port"})
    assert "is not host:port" in bad["executor"]
    auto = _check(workspace, RAY_TEXT, {})
    assert auto["executor"].startswith("ok")


def test_check_reports_ray_not_installed(workspace: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    got = _check(workspace, RAY_TEXT, {})
    assert got["executor"].startswith("fail") and rayexec.INSTALL_HINT in got["executor"]


def test_local_runs_never_import_ray(workspace: Path) -> None:
    import subprocess

    code = (
        "import sys; from sil.exec import measure; from sil.contract.schema import load_contract; "
        "c = load_contract(__import__('pathlib').Path('program.md')).contract; "
        "ctx = measure.MeasureContext.from_contract(c, __import__('pathlib').Path('.')); "
        "measure.runner_for(ctx, __import__('pathlib').Path('state/runs/x/audits')); "
        "assert 'ray' not in sys.modules, 'ray imported'"
    )
    subprocess.run([sys.executable, "-c", code], cwd=workspace, check=True)


def test_namespace_is_per_run_directory(tmp_path: Path) -> None:
    a, b = tmp_path / "runs" / "a" / "audits", tmp_path / "runs" / "b" / "audits"
    assert rayexec.namespace_for(a) == rayexec.namespace_for(a)
    assert rayexec.namespace_for(a) != rayexec.namespace_for(b)


def test_seed_variants_are_contracts_of_their_own(workspace: Path) -> None:
    from sil.contract.schema import load_contract

    path = workspace / "program.md"
    runs = plan_sweep([path], workspace, seeds=3)
    assert len({r.run_id for r in runs}) == 3
    seeds = [load_contract(r.workspace / "program.md").contract.seed for r in runs]
    first = load_contract(path).contract.seed
    assert seeds == [first, first + 1, first + 2]
    assert path.read_text() == TEXT  # the user's contract is untouched
    for run in runs:  # each run its own project: contract, measurement, policies
        assert run.workspace == workspace / "state" / "sweeps" / run.run_id
        assert (run.workspace / "measurement" / "MANIFEST.json").exists() or any(
            (run.workspace / "measurement").iterdir()
        )
        assert sorted(p.name for p in (run.workspace / "state" / "policies").iterdir()) == sorted(
            p.name for p in (workspace / "state" / "policies").iterdir()
        )
    again = plan_sweep([path], workspace, seeds=3)  # the same sweep again resumes the same runs
    assert [r.run_id for r in again] == [r.run_id for r in runs]
    assert seed_text(path, 0) == TEXT


def test_sweep_refuses_the_same_contract_twice_and_too_many_runs(workspace: Path) -> None:
    path = workspace / "program.md"
    with pytest.raises(Refused, match="same contract"):
        plan_sweep([path, path], workspace)
    with pytest.raises(Refused, match="1 to 64 runs"):
        plan_sweep([path], workspace, seeds=65)
    (workspace / "bad.md").write_text("no front matter")
    with pytest.raises(Refused, match="front matter"):
        plan_sweep([workspace / "bad.md"], workspace)
    (run,) = plan_sweep([path], workspace)
    (run.workspace / "program.md").write_text(TEXT.replace("max_turns: 12", "max_turns: 11"))
    with pytest.raises(Refused, match="exists with another contract"):
        plan_sweep([path], workspace)


def test_scale_bench_goes_through_the_round_runner(tmp_path: Path) -> None:
    import json

    from bench.scale import ledger_append_ms, run_cell

    cell = run_cell("local", 2, 4, 0.2, tmp_path)
    assert cell.wall_s >= cell.ideal_s == 0.4
    lines = (tmp_path / "local-2" / "ledger.jsonl").read_text().splitlines()
    audits = [json.loads(line)["payload"] for line in lines if json.loads(line)["type"] == "audit"]
    assert len(audits) == 4 and all(a["status"] == "ok" and a["backend"] == "fixed" for a in audits)
    assert ledger_append_ms(tmp_path, n=3) > 0


def _task(tmp_path: Path, cmd: list[str], files: dict[str, str], timeout: float = 10.0) -> rayexec.AuditTask:
    from sil.contract.schema import load_contract

    contract = load_contract(REPO / "program.md").contract
    audit_dir = tmp_path / "audits" / "a1"
    audit_dir.mkdir(parents=True, exist_ok=True)
    return rayexec.AuditTask(
        audit_id="a1",
        audit_dir=str(audit_dir),
        cmd=cmd,
        env={"PATH": os.environ["PATH"]},
        attempt=1,
        timeout_s=timeout,
        files=files,
        measurement_root=str(REPO / "measurement"),
        manifest_hash=contract.measurement.manifest_hash,
    )


def test_slot_runs_the_wrapped_audit_and_refuses_files_it_cannot_verify(tmp_path: Path) -> None:
    from sil.exec import attempts
    from sil_policy import content_hash

    policy = tmp_path / "policy.json"
    policy.write_text("{}")
    slot = rayexec.AuditSlot()  # the actor's class, run in-process: no cluster needed
    ok = slot.run(_task(tmp_path, ["/bin/sh", "-c", "exit 3"], {str(policy): content_hash(b"{}")}))
    assert ok == rayexec.TaskOutcome(rc=3)
    events = [e["event"] for e in attempts.read_events(tmp_path / "audits" / "a1")]
    assert events == ["start", "exit"]  # the driver, not the worker, logs the launch
    assert slot.holds() == ["a1"] and slot.wait("a1") == ok
    slot.forget("a1")
    assert slot.holds() == [] and slot.wait("a1") is None
    refused = slot.run(_task(tmp_path, ["/bin/true"], {str(policy): "0" * 64}))
    assert refused.refused and "does not have the hash the loop sent" in refused.refused
    missing = slot.run(_task(tmp_path, ["/bin/true"], {str(tmp_path / "absent.json"): "0" * 64}))
    assert missing.refused and "cannot read" in missing.refused
    slow = slot.run(_task(tmp_path, ["/bin/sleep", "5"], {}, timeout=0.2))
    assert slow.timed_out


class _FakeRay:
    """Just enough of the ray module for the driver's cross-node check (no cluster)."""

    def __init__(self, alive: list[str]) -> None:
        self.alive = alive

    def nodes(self) -> list[dict]:
        return [{"NodeID": n, "Alive": True} for n in self.alive] + [{"NodeID": "gone", "Alive": False}]


def _died_on(tmp_path: Path, node: str) -> Path:
    import json

    from sil.exec import attempts

    audit_dir = tmp_path / "audits" / "a1"
    audit_dir.mkdir(parents=True)
    attempts.log_launch(audit_dir, 1)
    (audit_dir / attempts.ATTEMPTS_FILE).open("a").write('{"event": "start", "attempt": 1, "pid": 999999999}\n')
    record = {"namespace": "sil-x", "slot": "slot-1", "node_id": node, "attempt": 1}
    (audit_dir / rayexec.EXECUTOR_FILE).write_text(json.dumps(record))
    return audit_dir


@pytest.mark.parametrize(
    ("node", "alive", "unknown"),
    [("remote", ["local", "remote"], True), ("gone", ["local"], False), ("local", ["local"], False)],
    ids=["other-node-alive", "other-node-dead", "this-node"],
)
def test_an_audit_on_another_live_node_is_unknown(tmp_path: Path, node: str, alive: list[str], unknown: bool) -> None:
    from sil.contract.schema import load_contract
    from sil.exec.attempts import AuditStateUnknown, read_status

    audit_dir = _died_on(tmp_path, node)
    assert read_status(audit_dir).state == "died"  # as far as this machine's process table can tell
    contract = load_contract(REPO / "program.md").contract
    runner = rayexec.RayRunner(contract, "sil-x", _FakeRay(alive), "local", REPO / "measurement")
    if unknown:
        with pytest.raises(AuditStateUnknown, match="cannot see whether the audit's processes still run"):
            runner.check_remote("a1", audit_dir)
    else:
        runner.check_remote("a1", audit_dir)  # died: the local rules re-run it


def test_seed_variants_on_sim_audit_the_same_world_afresh(workspace: Path) -> None:
    """A simulated re-run with the same noise stream replays the same audits: a seed variant moves
    `sim.noise_seed` too, and nothing else but its seed, whichever way the contract writes its settings."""
    from sil.contract.schema import load_contract
    from sil.contract.simparams import SimParams

    path = workspace / "program.md"
    original = load_contract(path).contract
    runs = plan_sweep([path], workspace, seeds=3)
    variants = [load_contract(r.workspace / "program.md").contract for r in runs]
    sims = [c.settings(SimParams) for c in variants]
    assert sims[0].noise_seed is None and len({s.audit_seed for s in sims}) == 3
    assert {s.world_seed for s in sims} == {original.settings(SimParams).world_seed}
    for k, variant in enumerate(variants):
        same = variant.model_copy(update={"seed": original.seed}).with_settings(
            sims[k].model_copy(update={"noise_seed": None})
        )
        assert same.contract_hash == original.contract_hash  # only the seed and the noise stream moved


def test_a_variant_moves_the_settings_where_the_contract_keeps_them() -> None:
    import yaml

    from sil.run.sweep import with_backend_settings

    nested = with_backend_settings("backend:\n  kind: sim\n  settings: {world_seed: 5}\n", "sim", {"noise_seed": 6})
    assert yaml.safe_load(nested)["backend"] == {"kind": "sim", "settings": {"world_seed": 5, "noise_seed": 6}}
    v1 = yaml.safe_load(with_backend_settings("backend: sim\nsim:\n  world_seed: 5\n", "sim", {"noise_seed": 6}))
    assert v1["backend"] == "sim" and v1["sim"] == {"world_seed": 5, "noise_seed": 6}
    plugin = yaml.safe_load(with_backend_settings("backend: mine\n", "mine", {"stream": 2}))
    assert plugin["backend"] == {"kind": "mine", "settings": {"stream": 2}}


def test_a_variant_on_real_audits_moves_only_its_seed() -> None:
    from sil.contract.schema import load_contract
    from sil.run.sweep import replicated_settings

    petri = load_contract(REPO / "examples" / "program-petri-offline.md").contract
    assert replicated_settings(petri, 1) == {}  # a real runtime's audits are fresh without help
