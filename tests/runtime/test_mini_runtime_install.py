"""The documented path for a runtime of one's own, taken as a user takes it (slow: a real pip
install and an offline Petri run to `done`).

`pip install -e examples/mini_runtime` into a fresh environment; with the agent name written
with its package prefix (`@agent(name="mini_runtime/mini_target")`, which inspect-ai registers
as `mini_runtime/mini_runtime/mini_target`), `sil check` fails with the fix and `sil run`
refuses before creating anything; once fixed, `sil check` passes and the same `sil run` command
reaches `done`, with use proven on the prompt-visible surface.

The fresh environment is a new venv that sees this one's packages (a .pth adds its
site-packages), so pip needs no network: --no-index --no-deps --no-build-isolation.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from tests.conftest import REPO

EXAMPLE = REPO / "examples" / "mini_runtime"
CONTRACT = "program-mini-runtime.md"
FIXED = '@agent(name="mini_target")'
BROKEN = '@agent(name="mini_runtime/mini_target")'


def fresh_venv(dest: Path) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(dest)], check=True)
    (site,) = (dest / "lib").glob("python3*/site-packages")
    parent = sysconfig.get_paths()["purelib"]
    (site / "_sil_parent_venv.pth").write_text(f"import site; site.addsitedir({parent!r})\n")
    return dest / "bin" / "python"


def pip_install_editable(python: Path, source: Path) -> None:
    cmd = [str(python), "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-build-isolation", "-e"]
    proc = subprocess.run([*cmd, str(source)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr


def project(root: Path) -> Path:
    shutil.copytree(REPO / "measurement", root / "measurement")
    shutil.copytree(REPO / "state" / "policies", root / "state" / "policies")
    shutil.copy(REPO / "examples" / CONTRACT, root / CONTRACT)
    return root


def runs(root: Path) -> list[Path]:
    folder = root / "state" / "runs"
    return [p for p in folder.iterdir() if not p.name.startswith(".")] if folder.exists() else []


def sil(python: Path, cwd: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH")} | {"COLUMNS": "200"}
    cmd = [str(python), "-c", "from sil.cli.app import app; app()", *args, "--contract", CONTRACT]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=3600)


@pytest.mark.slow
def test_the_documented_runtime_path_fails_at_check_with_the_fix_then_runs_to_done(tmp_path: Path) -> None:
    runtime = tmp_path / "mini_runtime"
    shutil.copytree(EXAMPLE, runtime, ignore=shutil.ignore_patterns("*.egg-info", "build", "__pycache__"))
    agent = runtime / "mini_runtime" / "agent.py"
    assert FIXED in agent.read_text()
    agent.write_text(agent.read_text().replace(FIXED, BROKEN))
    python = fresh_venv(tmp_path / "venv")
    pip_install_editable(python, runtime)
    root = project(tmp_path / "project")

    check = sil(python, root, "check")
    said = " ".join((check.stdout + check.stderr).split())  # unwrapped
    assert check.returncode != 0, said
    assert "fail target_agent: mini_runtime/mini_target" in said, said
    assert "registered it as mini_runtime/mini_runtime/mini_target" in said and FIXED in said, said
    refused = sil(python, root, "run", "--backend", "petri")
    assert refused.returncode == 2, refused.stdout + refused.stderr
    assert runs(root) == []

    agent.write_text(agent.read_text().replace(BROKEN, FIXED))  # an editable install: the fix is live
    assert sil(python, root, "check").returncode == 0
    run = sil(python, root, "run", "--backend", "petri")
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    assert "Traceback" not in run.stdout + run.stderr
    (run_dir,) = runs(root)
    records = [json.loads(line) for line in (run_dir / "ledger.jsonl").read_text().splitlines()]
    assert records[-1]["type"] == "stop" and records[-1]["payload"]["reason"] == "completed"
    (probe,) = [r["payload"] for r in records if r["type"] == "probe"]
    assert probe["passed"] and {p["surface"]: p["use"] for p in probe["probes"]}["wrapper_prompt"] == "proven"
    assert sum(r["type"] == "audit" for r in records) > 0
