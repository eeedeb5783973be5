"""Secrets never persist (issue 5 item 8): a canary credential in the environment reaches the
audit only through the allowlisted environment, and never appears in the ledger, audit logs,
evidence, approvals, checkpoints or git objects; a parent `.env` is not loaded by the audit;
CLI tracebacks print no local variables.

Full-loop variant (`sil run` end to end, ~1 min): `pytest -m slow tests/test_secrets.py`.
"""

from __future__ import annotations

import os
import secrets
import subprocess
import sys
from pathlib import Path

import pytest

from sil.contract.approval import approve
from sil.contract.schema import load_contract
from sil.exec import measure
from sil.exec.backends import make_backend
from sil.exec.measure import AuditRequest, MeasureContext, run_audits
from sil.integrity.checkpoint import write_checkpoint
from sil.integrity.ledger import Ledger
from sil_policy import SURFACES, content_hash
from tests.conftest import edit_contract

REPO = Path(__file__).resolve().parents[2]
CREDENTIAL = "ANTHROPIC_API_KEY"  # named by the contract: the audit may receive it
STRAY = "SIL_TEST_UNLISTED_TOKEN"  # named nowhere: the audit must never receive it


@pytest.fixture
def canaries(monkeypatch) -> dict[str, str]:
    values = {CREDENTIAL: f"sk-ant-CANARY-{secrets.token_hex(8)}", STRAY: f"sk-CANARY-{secrets.token_hex(8)}"}
    for name, value in values.items():
        monkeypatch.setenv(name, value)
    return values


def grep_tree(root: Path, needles: list[str]) -> list[str]:
    """Every file under `root` (and every object of a git repo there) containing a needle."""
    hits = []
    raw = [n.encode() for n in needles]
    for path in root.rglob("*"):
        if path.is_file() and not path.is_symlink():
            data = path.read_bytes()
            hits += [f"{path}: {n.decode()}" for n in raw if n in data]
    for git_dir in [p for p in root.rglob("*") if p.name in (".git", "anchors.git")]:
        repo = git_dir.parent if git_dir.name == ".git" else git_dir
        objects = subprocess.run(
            ["git", "-C", str(repo), "cat-file", "--batch-all-objects", "--batch"], capture_output=True, check=True
        ).stdout
        hits += [f"{repo} (git objects): {n.decode()}" for n in raw if n in objects]
    return hits


def _requests(root: Path, n: int) -> list[AuditRequest]:
    policies = root / "state" / "policies"
    hashes = {name: content_hash((policies / s.filename).read_bytes()) for name, s in SURFACES.items()}
    return [
        AuditRequest(
            audit_id=f"a{i}",
            audit_dir=root / "state" / "runs" / "r1" / "audits" / f"a{i}",
            policy_dir=policies,
            policy_hashes=hashes,
            tick=i,
        )
        for i in range(n)
    ]


def test_canary_never_persists(workspace: Path, canaries: dict[str, str]) -> None:
    edit_contract(
        workspace / "program.md",
        "auditor: {model: sim/auditor}",
        f"auditor: {{model: sim/auditor, credential_env: {CREDENTIAL}}}",
    )
    contract = load_contract(workspace / "program.md").contract
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    ctx = MeasureContext.from_contract(contract, workspace)

    results = run_audits(_requests(workspace, 3), ctx, make_backend(ctx.contract.backend))
    assert [r.status for r in results] == ["ok", "ok", "ok"], [r.gap_reason for r in results]
    led = Ledger(workspace / "state" / "runs" / "r1" / "ledger.jsonl", offline=True, simulated=True)
    led.append("contract", contract.model_dump(mode="json"), run_id="r1")
    for result in results:
        led.append("audit", result, run_id="r1")
    write_checkpoint(led.path, workspace, None)
    paid = contract.model_copy(update={"backend": "petri", "backend_settings": None})
    approve(paid, workspace, "alice@example.org", 1)

    # The named credential did reach the audit (so the grep below is not vacuous) ...
    req = _requests(workspace, 1)[0]
    env = measure.audit_env(req, ctx, {})
    assert env[CREDENTIAL] == canaries[CREDENTIAL]
    assert STRAY not in env
    # ... and no canary is written anywhere: audit dirs, evidence, logs, ledger, approval, git.
    assert grep_tree(workspace, list(canaries.values())) == []


def test_audit_environment_is_an_allowlist(workspace: Path, canaries: dict[str, str]) -> None:
    contract = load_contract(workspace / "program.md").contract
    ctx = MeasureContext.from_contract(contract, workspace)
    env = measure.audit_env(_requests(workspace, 1)[0], ctx, {})
    assert not set(canaries) & set(env)  # the contract names no credential
    allowed = set(measure.ENV_ALLOWLIST) | {"HOME", "PYTHONDONTWRITEBYTECODE", "SIL_AUDIT_DIR"}
    assert set(env) <= allowed, set(env) - allowed
    assert env["HOME"] == str(_requests(workspace, 1)[0].audit_dir)


DOTENV_PROBE = """
import os, dotenv
found = dotenv.find_dotenv(usecwd=True)
dotenv.load_dotenv(found)
print(repr(found), os.environ.get("SIL_DOTENV_CANARY"))
"""


def test_parent_dotenv_is_not_loaded_by_the_audit(workspace: Path) -> None:
    """Inspect loads the first `.env` found walking up from the audit's cwd (python-dotenv's
    find_dotenv(usecwd=True)); measure puts an empty one in every audit dir."""
    petri_backend = pytest.importorskip("sil.exec.backends.petri")
    canary = f"sk-CANARY-{secrets.token_hex(8)}"
    (workspace / ".env").write_text(f"SIL_DOTENV_CANARY={canary}\n")
    contract = load_contract(workspace / "program.md").contract
    contract = contract.model_copy(update={"backend": "petri", "backend_settings": None})  # Petri's defaults
    ctx = MeasureContext.from_contract(contract, workspace)
    req = _requests(workspace, 1)[0]
    measure.prepare_audit_dir(req)  # what run_audit does before any backend starts
    petri_backend.PetriBackend().command(req, ctx)
    env = measure.audit_env(req, ctx, {})

    def probe() -> str:
        return subprocess.run(
            [sys.executable, "-c", DOTENV_PROBE], cwd=req.audit_dir, env=env, capture_output=True, text=True, check=True
        ).stdout

    assert canary not in probe()
    (req.audit_dir / ".env").unlink()  # without the guard the parent's file is found and loaded
    assert canary in probe()


CRASHING_CLI = """
import os, sys
from sil.cli.app import app

@app.command("crash-for-test")
def crash_for_test() -> None:
    token = os.environ["SIL_TEST_UNLISTED_TOKEN"]
    raise RuntimeError("boom: " + str(len(token)))

app(["crash-for-test"])
"""


def test_cli_tracebacks_show_no_locals(canaries: dict[str, str]) -> None:
    env = {**os.environ, "COLUMNS": "200"}
    env.pop("_TYPER_STANDARD_TRACEBACK", None)
    proc = subprocess.run(
        [sys.executable, "-c", CRASHING_CLI], capture_output=True, text=True, env=env, cwd=REPO, timeout=60
    )
    assert proc.returncode != 0
    assert "boom: " in proc.stderr  # the traceback was printed ...
    assert canaries[STRAY] not in proc.stderr + proc.stdout  # ... without the local holding it


SMALL_RUN = {
    "max_audits: 500": "max_audits: 60",
    "arm_audits: {never: 24, random: 20, gate: 130}": "arm_audits: {never: 6, random: 6, gate: 30}",
    "final_check_rounds: 4": "final_check_rounds: 1",
    "certify_rounds: 70": "certify_rounds: 1",
    "certify_random: true": "certify_random: false",  # tests of the random arm certify it themselves
    "baseline_k: 5": "baseline_k: 2",
    "calibration_pairs: 12": "calibration_pairs: 3",
    "replicate_k: 48": "replicate_k: 2",
    "auditor: {model: sim/auditor}": f"auditor: {{model: sim/auditor, credential_env: {CREDENTIAL}}}",
}


@pytest.mark.slow
def test_canary_never_persists_through_a_whole_run(workspace: Path, canaries: dict[str, str]) -> None:
    for old, new in SMALL_RUN.items():
        edit_contract(workspace / "program.md", old, new)
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    sil = Path(sys.executable).parent / "sil"
    proc = subprocess.run(
        [str(sil), "run"], cwd=workspace, capture_output=True, text=True, env={**os.environ}, timeout=900
    )
    assert proc.returncode in (0, 3), proc.stderr[-2000:]
    assert (workspace / "state" / "runs").is_dir()
    for value in canaries.values():
        assert value not in proc.stdout + proc.stderr
    assert grep_tree(workspace, list(canaries.values())) == []
