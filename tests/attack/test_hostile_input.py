"""Hostile input is refused fast and cleanly (issue 11): bad run ids, YAML bombs, FIFOs, deep
JSON, symlinked promote targets, aliased ledgers, lock debris and lock contention."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sil.base.locks import LOCKED_EXIT_CODE, run_lock
from sil.cli.app import app
from sil.contract.schema import ContractError, parse_contract
from sil.integrity.ledger import Ledger, verify_file
from sil.policies.store import read_policy_dir
from sil_policy import SURFACES, PolicyError, parse_surface
from tests.cli.test_cli import make_workspace
from tests.conftest import REPO
from tests.finished import finished_tiny_run

runner = CliRunner()
FAST_S = 30.0  # a hang never ends; a loaded machine may take seconds where an idle one takes less than one


def invoke(*args: str):
    start = time.monotonic()
    result = runner.invoke(app, list(args), catch_exceptions=False)
    assert time.monotonic() - start < FAST_S, f"sil {' '.join(args)} took too long"
    return result


def make_workspace_at(root: Path) -> Path:
    root.mkdir(parents=True)
    return make_workspace(root)


def files_under(root: Path) -> set[str]:
    return {str(p.relative_to(root)) for p in root.rglob("*") if ".git" not in p.parts}


@pytest.fixture(scope="module")
def done(tmp_path_factory) -> Path:
    """A workspace with one finished tiny run."""
    return finished_tiny_run(tmp_path_factory, "hostile")


@pytest.mark.parametrize("run_id", ["../../../x", "a/../../x", "bad.lock", "..", "x/y", ".hidden"])
def test_hostile_run_ids_are_refused_before_anything_is_written(tmp_path, monkeypatch, run_id: str) -> None:
    # two folders above the project, inside tmp_path: where an escaping id would write
    monkeypatch.chdir(make_workspace_at(tmp_path / "up" / "above" / "ws"))
    before = files_under(tmp_path)
    result = invoke("run", "--run-id", run_id)
    assert result.exit_code == 2 and "run id" in result.output
    assert files_under(tmp_path) == before


def test_yaml_alias_bomb_is_refused_fast() -> None:
    lines = ['a0: &a0 ["lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol", "lol"]']
    lines += [f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]" for i in range(1, 10)]
    text = "---\n" + "\n".join(lines) + "\n---\nbody\n"
    assert len(text) < 1500
    start = time.process_time()  # CPU-bound: not the machine's load
    with pytest.raises(ContractError, match="expands to more than"):
        parse_contract(text)
    assert time.process_time() - start < 1.0


def test_yaml_self_reference_is_refused() -> None:
    with pytest.raises(ContractError, match="refers to the node that contains it"):
        parse_contract("---\na: &x [1, *x]\n---\n")


def test_fifo_policy_file_is_refused_without_hanging(workspace, monkeypatch) -> None:
    monkeypatch.chdir(workspace)
    target = workspace / "state" / "policies" / SURFACES["tool_policy"].filename
    target.unlink()
    os.mkfifo(target)
    with pytest.raises(PolicyError, match="not a regular file"):
        read_policy_dir(workspace / "state" / "policies")
    result = invoke("check")
    assert result.exit_code == 1 and "not a regular file" in result.output
    result = invoke("run", "--run-id", "fifo")
    assert result.exit_code == 2 and "not a regular file" in result.output
    locks = list((workspace / "state" / "runs").rglob("*.lock"))
    with run_lock(workspace / "state" / "runs" / "fifo"):  # both locks were released
        pass
    assert all(p.parent.name in ("fifo", ".locks") for p in locks)


def test_directory_as_policy_file_is_refused(workspace) -> None:
    target = workspace / "state" / "policies" / SURFACES["tool_policy"].filename
    target.unlink()
    target.mkdir()
    with pytest.raises(PolicyError, match="not a regular file"):
        read_policy_dir(workspace / "state" / "policies")


def test_deeply_nested_policy_json_is_a_policy_error() -> None:
    data = b"[" * 200_000 + b"]" * 200_000
    start = time.process_time()  # CPU-bound: not the machine's load
    with pytest.raises(PolicyError, match="nests arrays/objects"):
        parse_surface("tool_policy", data)
    assert time.process_time() - start < 1.0
    with pytest.raises(PolicyError, match="not valid JSON"):  # brackets inside strings do not count
        parse_surface("tool_policy", b'{"x": "' + b"[" * 1000 + b'"')


def test_promote_refuses_a_symlinked_policy_folder(done, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.chdir(done)
    policies = done / "state" / "policies"
    outside = tmp_path / "outside"
    shutil.copytree(policies, outside)
    before = {p.name: p.read_bytes() for p in outside.iterdir()}
    saved = done / "state" / "policies.real"
    policies.rename(saved)
    try:
        policies.symlink_to(outside)
        result = invoke(
            "promote", "t1", "--arm", "random", "--force"
        )  # the gate champion of the tiny run may be rolled back
        assert result.exit_code == 2 and "symlink" in result.output
        assert {p.name: p.read_bytes() for p in outside.iterdir()} == before
    finally:
        policies.unlink()
        saved.rename(policies)


def test_promote_refuses_a_directory_where_a_policy_file_goes(done, monkeypatch) -> None:
    monkeypatch.chdir(done)
    target = done / "state" / "policies" / SURFACES["tool_policy"].filename
    saved = target.read_bytes()
    target.unlink()
    target.mkdir()
    try:
        result = invoke(
            "promote", "t1", "--arm", "random", "--force"
        )  # the gate champion of the tiny run may be rolled back
        assert result.exit_code == 2 and "not a regular file" in result.output
    finally:
        target.rmdir()
        target.write_bytes(saved)


def test_run_leaves_no_lock_files_in_the_user_tree(done) -> None:
    policies = done / "state" / "policies"
    assert sorted(p.name for p in policies.iterdir()) == sorted(s.filename for s in SURFACES.values())


@pytest.mark.parametrize("command", ["promote", "replicate"])
def test_lock_contention_is_exit_75(done, monkeypatch, command: str) -> None:
    monkeypatch.chdir(done)
    before = (done / "state" / "runs" / "t1" / "ledger.jsonl").read_bytes()
    args = ["promote", "t1"] if command == "promote" else ["replicate", "t1", "m-none", "--k", "1"]
    with run_lock(done / "state" / "runs" / "t1"):
        result = invoke(*args)
    assert result.exit_code == LOCKED_EXIT_CODE, result.output
    assert "locked" in result.output.lower()
    assert (done / "state" / "runs" / "t1" / "ledger.jsonl").read_bytes() == before


WRITER = """
import sys
from sil.integrity.ledger import Ledger
led = Ledger(sys.argv[1], offline=True, simulated=True)
for i in range(int(sys.argv[2])):
    led.append("halt", {"reason": f"w{i}", "phase": None}, run_id="r1")
"""


def test_two_paths_to_one_ledger_share_one_chain(tmp_path: Path) -> None:
    real = tmp_path / "runs" / "r1"
    real.mkdir(parents=True)
    alias = tmp_path / "alias"
    alias.symlink_to(real)
    Ledger(real / "ledger.jsonl", offline=True, simulated=True).append(
        "halt", {"reason": "start", "phase": None}, run_id="r1"
    )
    procs = [
        subprocess.Popen([sys.executable, "-c", WRITER, str(path / "ledger.jsonl"), "40"], cwd=REPO)
        for path in (real, alias, real, alias)
    ]
    assert [p.wait(timeout=60) for p in procs] == [0, 0, 0, 0]
    report = verify_file(real / "ledger.jsonl")
    assert report.ok, report.errors[:3]
    assert report.records == 1 + 4 * 40
