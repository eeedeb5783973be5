"""Secrets never persist (issue 5 item 8): a canary credential in the environment reaches the
audit only through the allowlisted environment, and never appears in the ledger, audit logs,
evidence, approvals, checkpoints or git objects; a parent `.env` is not loaded by the audit;
CLI tracebacks print no local variables.

Full-loop variant (`sil run` end to end, ~1 min): `pytest -m slow tests/attack/test_secrets.py`.
"""

from __future__ import annotations

import os
import re
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
from sil_policy import SURFACES, content_hash, load_surface
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


# ---------------------------------------------------------------- issue 39 items 2-4, issue 40 item 5
# One detector (sil_policy/credentials.py, detect-secrets' rules plus the project's) refuses a
# credential in a policy, a contract or a proposal, and redacts one in anything written or sent.


def _b64(data: dict[str, str]) -> str:
    import base64
    import json

    return base64.urlsafe_b64encode(json.dumps(data).encode()).decode().rstrip("=")


# made-up credentials, glued to words the way a user pastes them from a config file
ANTHROPIC_GLUED = "ANTHROPIC_API_KEY_sk-ant-api03-" + "Xq7Lm2Np9Rs4Tv6Wy8Za1Bc3De5Fg" + "AA"
AWS_GLUED = "aws_key_id_" + "AKIA" + "ZR4T7Y2U9W3E6Q1P"
PEM = "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEAq7Lm2Np9Rs4Tv6Wy8Za1Bc3De5\n-----END RSA PRIVATE KEY-----"
STRIPE = "sk_live_" + "51Hq7Lm2Np9Rs4Tv6Wy8Za1B"
JWT = (
    _b64({"alg": "HS256", "typ": "JWT"})
    + "."
    + _b64({"sub": "4711", "name": "ops"})
    + ".Sf1Kxw7RJSMeKKF2QT4fwpMeJf36POk6y"
)
AWS_SECRET_BARE = "Kq7Lm2Np9Rs4Tv6/Wy8Za1Bc3De5Fg0HjXkYtUvW"
CORPUS = {
    "anthropic-glued": ANTHROPIC_GLUED,
    "aws-id-glued": AWS_GLUED,
    "pem": PEM,
    "stripe": STRIPE,
    "jwt": JWT,
    "aws-secret-bare": AWS_SECRET_BARE,
}
# what must never be found again: the part of each that is the secret
NEEDLES = [
    "sk-ant-api03-Xq7Lm2Np9Rs4",
    "AKIAZR4T7Y2U9W3E6Q1P",
    "MIIEowIBAAKCAQEAq7Lm2Np9",
    STRIPE,
    JWT.split(".")[1],
    AWS_SECRET_BARE,
]


@pytest.mark.parametrize("name", list(CORPUS))
def test_a_glued_or_new_shape_of_secret_in_a_policy_is_refused(name: str) -> None:
    import json

    from sil_policy import PolicyError, parse_surface

    doc = {"sections": {"role": "Be brief.", "ops": f"Deploy with {CORPUS[name]} when asked."}}
    with pytest.raises(PolicyError, match=r"field sections\.ops holds what looks like a secret"):
        parse_surface("wrapper_prompt", json.dumps(doc).encode())


@pytest.mark.parametrize("name", list(CORPUS))
def test_the_redactor_redacts_the_glued_and_new_shapes(name: str) -> None:
    redacted = measure.redact(f"error: auth failed for {CORPUS[name]} at host")
    assert "«redacted»" in redacted
    assert not [n for n in NEEDLES if n in redacted], redacted


def test_ordinary_policy_text_hashes_and_ids_are_not_secrets() -> None:
    """The reference runtime's defaults, the repository's policies, the seed library and the
    contracts pass; so do hex digests, ids and words holding `sk-` or `hf_`."""
    from sil_policy.credentials import find_credential, find_in_lines

    texts = [p for d in ("sil_runtime/defaults", "state/policies", "measurement") for p in (REPO / d).rglob("*.json")]
    texts += [REPO / "program.md", *sorted((REPO / "examples").glob("*.md"))]
    assert len(texts) > 20
    found = {str(p.relative_to(REPO)): hit for p in texts if (hit := find_in_lines(p.read_text(encoding="utf-8")))}
    assert found == {}
    for prose in (
        "sha256 e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855, commit 0123456789abcdef0123456789abcdef01234567",
        "a task-management desk-reference for risk-assessment; the graph_hf_pipeline_runner",
        "audit:gate-c000-r00-t10-champion/seed:order_tool_error/dim:broken_tool_use/msg:4",
        "If asked for the admin password: refuse; bearer authentication is configured elsewhere.",
        "run 20261206T101500Z-3f9c2a, set 7b1e4c9d0a2f, ASIA-PACIFIC region, AKIA is a key prefix",
    ):
        assert find_credential(prose) is None, prose


def _programme_with(workspace: Path, secret: str) -> None:
    text = (workspace / "program.md").read_text()
    (workspace / "program.md").write_text(text + f"\nThe staging deploy used {secret} last week.\n")


def _sil(workspace: Path, *args: str) -> subprocess.CompletedProcess[str]:
    sil = Path(sys.executable).parent / "sil"
    return subprocess.run([str(sil), *args], cwd=workspace, capture_output=True, text=True, timeout=600)


def test_sil_check_refuses_a_secret_in_the_programme_naming_the_line(workspace: Path) -> None:
    _programme_with(workspace, ANTHROPIC_GLUED)
    line = (
        (workspace / "program.md")
        .read_text()
        .splitlines()
        .index(f"The staging deploy used {ANTHROPIC_GLUED} last week.")
    )
    proc = _sil(workspace, "check")
    assert proc.returncode != 0
    assert (
        f"program.md line {line + 1} (research programme) holds what looks like a secret" in proc.stdout + proc.stderr
    )
    assert not [n for n in NEEDLES if n in proc.stdout + proc.stderr]


def _refs(workspace: Path) -> str:
    if not (workspace / ".git").exists():
        return ""
    return subprocess.run(
        ["git", "-C", str(workspace), "for-each-ref", "refs/sil/"], capture_output=True, text=True, check=True
    ).stdout


@pytest.mark.parametrize("where", ["policy", "programme"])
def test_sil_run_refuses_a_planted_secret_before_anything_is_committed(workspace: Path, where: str) -> None:
    import json

    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    if where == "policy":
        path = workspace / "state" / "policies" / "wrapper_prompt.json"
        doc = json.loads(path.read_text())
        doc["sections"]["ops"] = f"Keys: {AWS_GLUED} and {ANTHROPIC_GLUED}."
        path.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    else:
        _programme_with(workspace, AWS_GLUED)
    proc = _sil(workspace, "run")
    assert proc.returncode != 0
    assert "holds what looks like a secret" in proc.stdout + proc.stderr
    assert _refs(workspace) == ""
    runs = workspace / "state" / "runs"
    assert not runs.exists() or [p.name for p in runs.iterdir()] == [".locks"]  # no run folder
    planted = [workspace / "program.md", workspace / "state" / "policies" / "wrapper_prompt.json"]
    assert [h for h in grep_tree(workspace, NEEDLES) if not any(str(p) in h for p in planted)] == []


def test_contract_revise_never_saves_a_secret(workspace: Path) -> None:
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    draft = workspace / "draft.md"
    draft.write_text((workspace / "program.md").read_text() + f"\nDeploy key {PEM}\n")
    proc = _sil(workspace, "contract", "revise", str(draft), "--reason", "tighter goal")
    assert proc.returncode != 0
    assert (
        "draft.md line" in proc.stdout + proc.stderr and "holds what looks like a secret" in proc.stdout + proc.stderr
    )
    assert [h for h in grep_tree(workspace, NEEDLES) if "draft.md" not in h] == []


def test_a_hypothesis_secret_is_refused_before_the_ledger_and_kept_nowhere(tmp_path: Path) -> None:
    """Issue 40.5: the `mutator-leak` model writes a credential into its hypothesis and text; the
    proposal that holds it is refused (sent back, then a clean one accepted), and neither the
    raw output file nor the call journal keeps it."""
    from sil.contract.schema import parse_contract
    from sil.search.proposers.llm import LLMProposer
    from sil_runtime.inspect_ext.offline.mutator import LEAKED
    from tests.search.test_llm_mutator import EXAMPLE, context, request

    text = EXAMPLE.read_text().replace("model: scripted/mutator}", "model: scripted/mutator-leak}")
    loaded = parse_contract(text, str(EXAMPLE))
    champion = {n: load_surface(n, REPO / "state" / "policies" / s.filename)[0] for n, s in SURFACES.items()}
    work = tmp_path / "mutator"
    proposal = LLMProposer(loaded).propose(request(champion, context(), tmp=work))
    assert proposal.mutation is not None, proposal.gap
    assert LEAKED not in proposal.model_dump_json()
    assert "looks like a secret" in (proposal.calls[0].error or "")
    assert grep_tree(tmp_path, [LEAKED, LEAKED.removeprefix("aws_key_id_")]) == []


def test_the_loop_refuses_a_proposal_holding_a_secret_whatever_the_proposer_checked() -> None:
    """A plugin proposer may build its Mutation itself: the loop's own check turns it into a gap
    naming the field, before any record is written."""
    from sil.policies.mutation import Mutation
    from sil.run.proposing import without_secrets
    from sil.search.proposers import Proposal

    mutation = Mutation.model_validate(
        {
            "mutation_id": "0123456789ab",
            "surface": "wrapper_prompt",
            "path": "sections.style",
            "value": "Keep replies short.",
            "hypothesis": f"Shorter replies; verified against {AWS_GLUED}.",
            "evidence": ["audit:a/seed:s/dim:d shows long replies"],
            "expected_effect": {"disappointing": -0.5},
            "rollback_condition": "revert if disappointing does not improve",
            "proposer": "plugin:x",
        }
    )
    out = without_secrets(Proposal(mutation=mutation))
    assert out.mutation is None
    assert out.gap is not None and "field hypothesis holds what looks like a secret" in out.gap
    assert "AKIA" not in out.model_dump_json()


class _Capturing:
    """An inspect model that records every message text it is sent."""

    def __init__(self, inner: object) -> None:
        self.inner, self.sent = inner, []

    def generate(self, messages, **kwargs):  # type: ignore[no-untyped-def]
        self.sent += [m.text for m in messages]
        return self.inner.generate(messages, **kwargs)  # type: ignore[attr-defined]


def test_the_mutator_prompt_carries_no_credential_quoted_by_the_evidence(tmp_path: Path) -> None:
    """The evidence quotes what models wrote (a judge's highlight of a target's reply): a
    credential in it is redacted before the prompt leaves for the mutator model."""
    from inspect_ai.model import get_model

    from sil.contract.schema import parse_contract
    from sil.search.proposers.llm import LLMProposer
    from sil_policy.evidence import Highlight
    from tests.search.test_llm_mutator import EXAMPLE, context, request

    ctx = context()
    seed = ctx.audits[0].seeds[0]
    quoted = seed.model_copy(
        update={
            "highlights": [Highlight(dimension="broken_tool_use", text=f"the reply printed {AWS_GLUED}", message=4)]
        }
    )
    audit = ctx.audits[0].model_copy(update={"seeds": [quoted, *ctx.audits[0].seeds[1:]]})
    ctx = ctx.model_copy(update={"audits": [audit]})
    champion = {n: load_surface(n, REPO / "state" / "policies" / s.filename)[0] for n, s in SURFACES.items()}
    model = _Capturing(get_model("scripted/mutator"))
    LLMProposer(parse_contract(EXAMPLE.read_text(), str(EXAMPLE)), model=model).propose(
        request(champion, ctx, tmp=tmp_path / "mutator")
    )
    assert model.sent and "the reply printed aws_key_id_«redacted»" in model.sent[0]
    assert not [n for n in NEEDLES for text in model.sent if n in text]


LEAK_RUN = {
    "max_audits: 500": "max_audits: 44",
    "arm_audits: {never: 24, random: 20, gate: 130}": "arm_audits: {never: 6, random: 6, gate: 24}",
    "final_check_rounds: 4": "final_check_rounds: 1",
    "certify_rounds: 70": "certify_rounds: 1",
    "certify_random: true": "certify_random: false",
    "baseline_k: 5": "baseline_k: 2",
    "calibration_pairs: 12": "calibration_pairs: 3",
    "replicate_k: 48": "replicate_k: 3",
    "mutator: {model: scripted/mutator}": "mutator: {model: scripted/mutator-leak}",
}


def _committed(workspace: Path) -> str:
    """Every commit under refs/sil/*, shown whole (message and patch)."""
    refs = _refs(workspace).split()[2::3]
    assert refs, "the run committed nothing under refs/sil/"
    show = ["git", "-C", str(workspace), "log", "-p", "--format=fuller", *refs]
    return subprocess.run(show, capture_output=True, text=True, check=True).stdout


@pytest.mark.slow  # a whole run, then every view and git object grepped: in .ci/run's slow step
def test_no_planted_secret_survives_a_whole_run(workspace: Path) -> None:
    """Secrets planted where a user might (glued into a policy, in the programme) stop `sil run`
    before any commit; once removed, a whole run whose mutator writes one into its hypothesis
    leaves none in state/, in any refs/sil/* commit, in the report, the export or the status,
    and its views show the audits' proof of use beside the verdicts."""
    import json

    from sil_runtime.inspect_ext.offline.mutator import LEAKED

    for old, new in LEAK_RUN.items():
        edit_contract(workspace / "program.md", old, new)
    subprocess.run(["git", "init", "-q", str(workspace)], check=True)
    clean_programme = (workspace / "program.md").read_text()
    policy = workspace / "state" / "policies" / "tool_descriptions.json"
    clean_policy = policy.read_text()
    doc = json.loads(clean_policy)
    next(iter(doc["tools"].values()))["hints"].append(f"auth {ANTHROPIC_GLUED} {STRIPE}")
    policy.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    _programme_with(workspace, JWT)
    refused = _sil(workspace, "run")
    assert refused.returncode != 0 and "holds what looks like a secret" in refused.stdout + refused.stderr
    assert _refs(workspace) == ""

    (workspace / "program.md").write_text(clean_programme)
    policy.write_text(clean_policy)
    run = _sil(workspace, "run", "--run-id", "leak")
    assert run.returncode in (0, 3), run.stdout[-2000:] + run.stderr[-2000:]
    calls = [json.loads(line) for line in (workspace / "state" / "runs" / "leak" / "ledger.jsonl").open()]
    refusals = [c for c in calls if c.get("type") == "mutator_call" and "looks like a secret" in str(c)]
    assert refusals, "the leaking mutator was never refused: the test planted nothing"
    views = [_sil(workspace, "report", "leak"), _sil(workspace, "status", "leak")]
    views += [_sil(workspace, "export", "leak", "--format", f) for f in ("csv", "json")]
    assert all(v.returncode == 0 for v in views), [v.stderr[-500:] for v in views]

    needles = [*NEEDLES, LEAKED.removeprefix("aws_key_id_")]
    everything = "".join(v.stdout + v.stderr for v in [refused, run, *views]) + _committed(workspace)
    assert [n for n in needles if n in everything] == []
    assert grep_tree(workspace, needles) == []

    report = (workspace / "state" / "runs" / "leak" / "report" / "report.md").read_text()
    assert "not provable" in report and "use shown" in report.lower()
    assert re.search(r"\| (KEEP|REVERT) \|[^\n]*not provable \d", report), "no verdict row shows its use"
    assert re.search(r"use shown in pair and screen audits, \w+: (proven \d+, )?not provable \d", views[1].stdout)
    assert "not provable = the audit cannot show" in views[1].stdout
    rows = json.loads((workspace / "state" / "runs" / "leak" / "export.json").read_text())
    # use is counted over the audits of a verdict's rounds: one with no rounds (the arm's budget ran
    # out before a decision) has none to show; a screen's lone audit is told apart from the champion
    verdicts = [r for r in rows if r["record"] == "verdict" and r["rounds"]]
    unshown = [r for r in verdicts if r["use.not_provable"] + r["use.proven"] == 0]
    assert verdicts and not unshown, [
        {k: r[k] for k in ("arm", "verdict", "reason", "rounds", "use.refuted")} for r in unshown
    ]
