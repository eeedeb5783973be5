"""One finished tiny run per test session, copied to every module that reads one.

Several modules (review, CLI, hostile input) each need a project with one finished tiny run
(tests/cli/test_cli.py `make_workspace`, then `sil run --run-id t1`). A run is relocatable (its
checkpoints live in the project's `state/anchors.git`), so it is made once per session, under a
file lock shared by the xdist workers, and each module gets its own copy to read or change.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from filelock import FileLock


def _shared_dir(factory: pytest.TempPathFactory) -> Path:
    base = factory.getbasetemp()
    # xdist workers' base folders are siblings under one folder of this session only
    return (base.parent if os.environ.get("PYTEST_XDIST_WORKER") else base) / "shared-finished-runs"


def _build(template: Path, run_id: str) -> None:
    from tests.cli.test_cli import invoke, make_workspace

    template.mkdir(parents=True)
    make_workspace(template)
    cwd = Path.cwd()
    os.chdir(template)
    try:
        result = invoke("run", "--run-id", run_id)
        assert result.exit_code == 0, result.output
    finally:
        os.chdir(cwd)


def finished_tiny_run(factory: pytest.TempPathFactory, name: str, run_id: str = "t1") -> Path:
    """A fresh copy (under `factory`, folder `name`) of the session's finished tiny run `run_id`."""
    shared = _shared_dir(factory)
    shared.mkdir(parents=True, exist_ok=True)
    template, made = shared / run_id, shared / f"{run_id}.made"
    with FileLock(str(shared / f"{run_id}.lock")):
        if not made.exists():
            shutil.rmtree(template, ignore_errors=True)  # a build that died half way
            _build(template, run_id)
            made.touch()
    dest = factory.mktemp(name)
    shutil.copytree(template, dest, symlinks=True, dirs_exist_ok=True)
    return dest
