"""One runner at a time: a second process gets a clear "locked" error and changes nothing."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from sil.base import locks
from sil.base.locks import LockedError, UnsafeFilesystemError, policy_lock, run_lock

HOLDER = """
import sys, time
from pathlib import Path
from sil.base.locks import run_lock, policy_lock
with run_lock(Path(sys.argv[1])), policy_lock(Path(sys.argv[2]), Path(sys.argv[1]).parent / "locks"):
    print("held", flush=True)
    time.sleep(60)
"""


@pytest.fixture
def holder(tmp_path: Path):
    state, policies = tmp_path / "state", tmp_path / "runtime" / "policies"
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(state), str(policies)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout.readline().strip() == "held"
    yield state, policies, proc
    if proc.poll() is None:
        proc.kill()
        proc.wait()


def _snapshot(folder: Path) -> dict[str, bytes]:
    return {str(p): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_second_runner_is_refused_with_holder_pid(holder) -> None:
    state, policies, proc = holder
    before = _snapshot(state.parent)
    with pytest.raises(LockedError, match=rf"another sil run holds .*pid {proc.pid} on"):
        with run_lock(state):
            pass
    with pytest.raises(LockedError, match="runtime policies .* are in use"):
        with policy_lock(policies, state.parent / "locks"):
            pass
    assert _snapshot(state.parent) == before


def test_same_policies_through_another_path_are_locked(holder, tmp_path: Path) -> None:
    _, policies, _ = holder
    alias = tmp_path / "alias"
    alias.symlink_to(policies.parent)
    with pytest.raises(LockedError):
        with policy_lock(alias / "policies", tmp_path / "locks"):
            pass


def test_lock_is_released_when_the_holder_is_killed(holder) -> None:
    state, policies, proc = holder
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    with run_lock(state), policy_lock(policies, state.parent / "locks"):  # no stale lock survives a crash
        pass


def test_lock_is_released_on_exit_and_exceptions(tmp_path: Path) -> None:
    with pytest.raises(ValueError):
        with run_lock(tmp_path):
            assert (tmp_path / (locks.RUN_LOCK + locks.OWNER_SUFFIX)).exists()
            raise ValueError("boom")
    assert not (tmp_path / (locks.RUN_LOCK + locks.OWNER_SUFFIX)).exists()
    with run_lock(tmp_path):
        pass


def test_locked_in_the_same_process_too(tmp_path: Path) -> None:
    with run_lock(tmp_path):
        with pytest.raises(LockedError):
            with run_lock(tmp_path):
                pass


def test_network_filesystem_is_refused(tmp_path: Path, monkeypatch) -> None:
    mounts = tmp_path / "mounts"
    mounts.write_text(f"/dev/vda1 / ext4 rw 0 0\nserver:/x {tmp_path / 'nfs'} nfs4 rw 0 0\n")
    monkeypatch.setattr(locks, "MOUNTS_FILE", mounts)
    assert locks.filesystem_type(tmp_path / "nfs" / "state") == "nfs4"
    assert locks.filesystem_type(tmp_path / "local") == "ext4"
    with pytest.raises(UnsafeFilesystemError, match="nfs4 filesystem"):
        with run_lock(tmp_path / "nfs" / "state"):
            pass
    assert not (tmp_path / "nfs").exists()
    with run_lock(tmp_path / "local"):
        pass


def test_policy_lock_leaves_nothing_in_the_policy_folder(tmp_path: Path) -> None:
    policies = tmp_path / "policies"
    policies.mkdir()
    (policies / "a.json").write_text("{}")
    with policy_lock(policies, tmp_path / "state" / "locks") as path:
        assert path.parent == tmp_path / "state" / "locks"
        assert sorted(p.name for p in policies.iterdir()) == ["a.json"]
    assert sorted(p.name for p in policies.iterdir()) == ["a.json"]
