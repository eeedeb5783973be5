"""Every check `sil run` makes before it spends an audit, as one list `sil check` can print (L3).

`sil check` prints all of them; `sil run` refuses (exit 2) on the first failed one before it
creates the run folder, so a refused run leaves nothing behind.

    report = start_checks(loaded, repo_root)
    report.ok, report.failures, report.warnings
    planned_audits(contract).total    # every audit the run can make, by phase
"""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, computed_field

from sil.base.sshsig import resolve_allowed_signers
from sil.contract import prepare
from sil.contract.approval import ALLOWED_SIGNERS_DEFAULT, ApprovalError, require_approval
from sil.contract.history import LineageError, check_lineage
from sil.contract.schema import Contract, LoadedContract, approval_free_reason
from sil.exec import rayexec
from sil.exec.auditcount import PlanCounts, plan_counts
from sil.exec.backends import make_backend
from sil.exec.checkitem import CheckItem
from sil.exec.holdoutcheck import holdout_check
from sil.policies.store import read_policy_dir
from sil_policy import PolicyError

POLICIES = Path("state/policies")
# inspect-ai model provider -> the Python module its SDK installs (pip extra in pyproject.toml)
PROVIDER_SDK = {
    "anthropic": ("anthropic", "anthropic"),
    "openai": ("openai", "openai"),
    "azureai": ("azure.ai.inference", "azure"),
    "google": ("google.genai", "google"),
    "vertex": ("google.genai", "google"),
    "mistral": ("mistralai", "mistral"),
    "groq": ("groq", "groq"),
    "together": ("openai", "openai"),
    "fireworks": ("openai", "openai"),
    "openrouter": ("openai", "openai"),
    "bedrock": ("aioboto3", "bedrock"),
    "grok": ("openai", "openai"),
    # OpenAI-compatible servers, local or not: inspect-ai talks to them through the openai SDK
    "llama-cpp-python": ("openai", "local"),
    "openai-api": ("openai", "openai"),
    "ollama": ("openai", "openai"),
    "vllm": ("openai", "openai"),
    "sglang": ("openai", "openai"),
}
# roles whose every call must be a tool call (the target may answer in text: that is measured)
TOOL_ROLES = ("auditor", "judge", "mutator")
PROBE_TIMEOUT_S = 60.0  # a first completion on a cold CPU server can be slow
# the env var each provider's SDK reads when the contract names none
PROVIDER_KEY_ENV = {
    "anthropic": "ANTHROPIC_API_KEY",
    "openai": "OPENAI_API_KEY",
    "google": "GOOGLE_API_KEY",
    "mistral": "MISTRAL_API_KEY",
    "groq": "GROQ_API_KEY",
    "together": "TOGETHER_API_KEY",
    "fireworks": "FIREWORKS_API_KEY",
    "openrouter": "OPENROUTER_API_KEY",
    "grok": "XAI_API_KEY",
}
ROLES = ("auditor", "target", "judge", "mutator")
# What the auditor's provider does with the `seed` of measurement.common_random_numbers, as read
# in the source of the pinned inspect_ai (0.3.285): these providers never send it.
SEED_DROPPED = ("anthropic", "google", "vertex", "bedrock")
SEED_OPENAI = (
    "OpenAI honours seed on a best-effort basis and on the Chat Completions API only: inspect-ai sends "
    "o-series, codex and gpt-5 models through the Responses API, which drops it (with a warning)"
)


class CheckReport(BaseModel):
    items: list[CheckItem]

    @property
    def failures(self) -> list[CheckItem]:
        return [i for i in self.items if i.status == "fail"]

    @property
    def warnings(self) -> list[CheckItem]:
        return [i for i in self.items if i.status == "warn"]

    @computed_field  # type: ignore[prop-decorator]
    @property
    def ok(self) -> bool:
        return not self.failures


def planned_audits(c: Contract) -> PlanCounts:
    """The most audits each phase of the run can make (the run stops earlier at max_audits)."""
    b = c.budget
    return plan_counts(
        list(c.arms),
        {str(a): n for a, n in b.arm_audits.items()},
        c.promotion.baseline_k,
        b.certify_rounds,
        b.final_check_rounds,
        b.max_audits,
        c.measurement.certify_on,
        list(c.certified_arms()),
    )


def most_seeds(measurement: Path) -> int:
    """Seeds of the larger frozen seed set (search or held-out): what one audit can cost at most."""
    return max(len(prepare.load_seeds(measurement)), len(prepare.load_heldout(measurement)))


def _dimensions(c: Contract, root: Path) -> CheckItem:
    try:
        rubric = {d.name for d in prepare.load_rubric(root / c.measurement.seed_library)}
    except prepare.MeasurementError as ex:
        return CheckItem(name="dimensions", status="fail", detail=str(ex))
    p = c.promotion
    for role in ("target_dimensions", "critical_dimensions", "auxiliary_dimensions"):
        for i, dim in enumerate(getattr(p, role)):
            if dim not in rubric:
                return CheckItem(
                    name="dimensions",
                    status="fail",
                    detail=f"promotion.{role}[{i}] = {dim!r} is not a rubric dimension of "
                    f"{c.measurement.seed_library}/rubric; use one of: {', '.join(sorted(rubric))}",
                )
    return CheckItem(name="dimensions", status="ok", detail=f"{len(c.dimensions())} dimensions, all in the rubric")


def _measurement_and_policies(c: Contract, root: Path) -> list[CheckItem]:
    items = []
    try:
        m = prepare.verify(root / c.measurement.seed_library, c.measurement.manifest_hash)
        heldout = len(prepare.load_heldout(root / c.measurement.seed_library))
        detail = f"{len(m.files)} files ({heldout} held-out seeds), {m.manifest_hash[:12]}"
        items.append(CheckItem(name="measurement", status="ok", detail=detail))
    except prepare.MeasurementError as ex:
        items.append(CheckItem(name="measurement", status="fail", detail=str(ex)))
    try:
        policy_set, _ = read_policy_dir(root / POLICIES)
        items.append(CheckItem(name="policies", status="ok", detail=f"set {policy_set.set_id}"))
    except PolicyError as ex:
        items.append(CheckItem(name="policies", status="fail", detail=str(ex)))
    return items


def _providers(c: Contract) -> list[CheckItem]:
    items = []
    for role in ROLES:
        rm = getattr(c.models, role)
        if rm.offline or "/" not in rm.model:
            continue
        provider = rm.model.split("/", 1)[0]
        sdk = PROVIDER_SDK.get(provider)
        if sdk is not None and importlib.util.find_spec(sdk[0].split(".")[0]) is None:
            items.append(
                CheckItem(
                    name=f"sdk:{role}",
                    status="fail",
                    detail=f"models.{role} = {rm.model!r} needs the {sdk[0]!r} package, which is not installed: "
                    f"pip install -e '.[{sdk[1]}]'",
                )
            )
        env = rm.credential_env or PROVIDER_KEY_ENV.get(provider)
        if env and not os.environ.get(env):
            where = "models.{role}.credential_env" if rm.credential_env else f"the {provider} SDK's default"
            items.append(
                CheckItem(
                    name=f"credential:{role}",
                    status="fail",
                    detail=f"models.{role} reads its key from ${env} ({where.format(role=role)}), which is not set",
                )
            )
    return items


def _local_servers(c: Contract, probe_tools: bool = True) -> list[CheckItem]:
    """Each loopback endpoint: does it answer, does it serve the role's model, does it make tool calls."""
    from sil.exec import localprobe

    items = []
    for role in ROLES:
        rm = getattr(c.models, role)
        if rm.offline or not rm.loopback or rm.base_url is None:
            continue
        served = rm.model.split("/", 1)[1] if "/" in rm.model else rm.model
        problem = localprobe.models(rm.base_url, served)
        if problem is None and probe_tools:
            problem = localprobe.tool_call(rm.base_url, served, PROBE_TIMEOUT_S)
            # a target answering in text is what is measured; a target whose server died is not
            if problem is not None and not problem.down and role not in TOOL_ROLES:
                items.append(CheckItem(name=f"server:{role}", status="warn", detail=f"{rm.base_url}: {problem}"))
                continue
        status: Literal["ok", "fail"] = "ok" if problem is None else "fail"
        detail = (
            str(problem) if problem else f"serves {served}" + (" and answers a named tool call" if probe_tools else "")
        )
        items.append(CheckItem(name=f"server:{role}", status=status, detail=f"{rm.base_url}: {detail}"))
    return items


def _executor(c: Contract) -> list[CheckItem]:
    """Ray requested: is it installed, is the named address set and does something answer there."""
    ex = c.executor
    if ex.kind == "local":
        return []
    if importlib.util.find_spec("ray") is None:
        return [CheckItem(name="executor", status="fail", detail=f"executor 'ray' needs ray: {rayexec.INSTALL_HINT}")]
    if ex.address_env is None:
        detail = "ray: a running cluster on this machine (address auto), else a local one started for the run"
        return [CheckItem(name="executor", status="ok", detail=detail)]
    address = os.environ.get(ex.address_env, "").strip()
    if not address:
        return [
            CheckItem(
                name="executor",
                status="fail",
                detail=f"executor.address_env names ${ex.address_env}, which is not set: export it as the "
                "host:port of the Ray cluster (ray start --head prints it), or set address_env: null",
            )
        ]
    problem = rayexec.probe_address(address)
    if problem:
        return [CheckItem(name="executor", status="fail", detail=f"ray cluster ${ex.address_env}={address}: {problem}")]
    return [CheckItem(name="executor", status="ok", detail=f"ray cluster at {address} answers")]


def _crn(c: Contract) -> list[CheckItem]:
    """measurement.common_random_numbers on: say where it can and cannot act (a warning, never a refusal)."""
    if not c.measurement.common_random_numbers:
        return []
    try:
        why = make_backend(c.backend).crn_effect
    except (ValueError, ImportError):
        why = None  # the backend check says why it cannot be made
    if why is not None:
        return [CheckItem(name="crn", status="warn", detail=f"measurement.common_random_numbers {why}")]
    auditor = c.models.auditor.model
    provider = auditor.split("/", 1)[0]
    if c.models.auditor.offline:
        effect = "an offline auditor is deterministic, so the seed is sent and checked but changes nothing"
    elif provider in SEED_DROPPED:
        effect = f"inspect-ai's {provider} provider never sends seed, so CRN has no effect on these audits"
    elif provider == "openai":
        effect = SEED_OPENAI
    else:
        effect = f"inspect-ai passes seed to {provider}; whether {provider} honours it is not checked here"
    detail = (
        f"measurement.common_random_numbers seeds the auditor ({auditor}) alike in both arms of a round; "
        f"it only helps where the auditor's provider honours seed: {effect}"
    )
    return [CheckItem(name="crn", status="warn", detail=detail)]


def _approval(c: Contract, root: Path) -> list[CheckItem]:
    if c.approval_free:  # no approval, but a named parent must still resolve, on every backend
        try:
            check_lineage(c, root)
        except LineageError as ex:
            return [CheckItem(name="lineage", status="fail", detail=str(ex))]
        return [CheckItem(name="approval", status="ok", detail=f"not required: {approval_free_reason(c)}")]
    items = []
    trusted = resolve_allowed_signers(None, root / ALLOWED_SIGNERS_DEFAULT)
    if trusted is None or not trusted.is_file():
        items.append(
            CheckItem(
                name="allowed_signers",
                status="fail",
                detail=f"no allowed_signers file: set $SIL_ALLOWED_SIGNERS or create {ALLOWED_SIGNERS_DEFAULT} "
                "(docs/reference.md: Signing set-up)",
            )
        )
    try:
        a = require_approval(c, root)
        who = f"{a.approver} until {a.expires_at}" if a else "offline"
        items.append(CheckItem(name="approval", status="ok", detail=f"valid: {who}"))
    except ApprovalError as ex:
        items.append(CheckItem(name="approval", status="fail", detail=str(ex)))
    return items


def _backend(c: Contract) -> CheckItem:
    try:
        backend = make_backend(c.backend)
    except (ValueError, ImportError) as ex:
        return CheckItem(name="backend", status="fail", detail=str(ex))
    # the note names what produces the scores (e.g. a judge model or fixed rules), as the run's does
    return CheckItem(name="backend", status="ok", detail=f"{c.backend}: {backend.describe(c).note}")


def _backend_checks(c: Contract) -> list[CheckItem]:
    """What only the contract's backend can check before an audit (Petri: its target agent resolves)."""
    try:
        backend = make_backend(c.backend)
    except (ValueError, ImportError):
        return []  # `_backend` reports why
    return backend.start_checks(c)


def _budget(c: Contract, root: Path) -> CheckItem:
    plan = planned_audits(c)
    try:
        seeds = most_seeds(root / c.measurement.seed_library)
    except prepare.MeasurementError as ex:
        return CheckItem(name="budget", status="fail", detail=str(ex))
    try:
        worst = plan.total * make_backend(c.backend).audit_cost_bound(c, seeds)
    except (ValueError, ImportError) as ex:
        return CheckItem(name="budget", status="fail", detail=str(ex))
    if worst > c.budget.max_usd and not c.offline:
        return CheckItem(
            name="budget",
            status="warn",
            detail=f"worst-case cost ${worst:.2f} of {plan.total} audits exceeds budget.max_usd "
            f"${c.budget.max_usd:g}: the run may stop at the USD limit before it finishes",
        )
    return CheckItem(name="budget", status="ok", detail=f"{plan.total} audits at most, worst case ${worst:.2f}")


def start_checks(loaded: LoadedContract, root: Path) -> CheckReport:
    """All start-time checks of `sil run`: offline, and no model call except one small probe of
    each loopback server (`local: true`)."""
    c = loaded.contract
    items = [
        CheckItem(name="contract", status="ok", detail=f"{c.contract_id} (hash {c.contract_hash[:12]})"),
        _backend(c),
        *_backend_checks(c),
        _dimensions(c, root),
        *_measurement_and_policies(c, root),
        *_providers(c),
        *_local_servers(c),
        *_executor(c),
        _budget(c, root),
        *_crn(c),
        *_approval(c, root),
        holdout_check(loaded, root),
    ]
    return CheckReport(items=items)


def run_refusals(loaded: LoadedContract, root: Path) -> list[CheckItem]:
    """The start-time checks `sil run` refuses on before it creates anything (the rest it makes itself)."""
    c = loaded.contract
    checks = [_backend(c), _dimensions(c, root), *_providers(c), *_local_servers(c, probe_tools=False), *_executor(c)]
    if not any(i.status == "fail" for i in checks):  # the backend's own checks may start a subprocess
        checks += _backend_checks(c)
    checks += _approval(c, root)
    return [i for i in checks if i.status == "fail"]
