"""The `petri` audit backend: Petri's audit task under inspect-ai, the runtime under test as target.

`command()` builds `python -m inspect_ai eval inspect_petri/audit` with the contract's model
per role, the frozen seed directory of the requested seed set (search `seeds/` or held-out
`heldout/`) and rubric, the Petri target agent that runs the runtime,
caching off, the per-sample token limit and a fresh log directory. Task arguments go in a JSON
file (`--task-config`), never through `-T` (which splits values on commas). inspect reads the
first `.env` found from its cwd upward: measure.py puts an empty one in every audit directory.
With `measurement.common_random_numbers` the auditor of both arms of a paired round gets the
same `seed` (`crn_seed(pair_key)`); the target and the judge are never seeded.

`read_evidence()` reads the one `.eval` log the audit wrote (never stdout) and trusts it only
if: the log status is success; task, task arguments, model roles (with the auditor's seed)
and package versions are the intended ones; no sample errored, hit a limit or was served from
the response cache; every sample has every frozen dimension as a number; the runtime answered
and every answer reports the same policy hashes; the runtime reported no failure; the target
model was called in every sample (an answer the runtime made up proves nothing). Anything
else raises `GapError` with the reason (and the usage and log path, so a gap is charged and
reviewable).

    measure.run_audit(req, ctx, PetriBackend())
    inspect view --log-dir <audit_dir>/logs          # every audit's transcripts
"""

from __future__ import annotations

import hashlib
import json
import math
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np
from inspect_ai.event import InfoEvent, ModelEvent, ScoreEvent
from inspect_ai.log import EvalLog, EvalSample, read_eval_log

from sil.contract import prepare
from sil.contract.petriparams import PetriParams
from sil.contract.schema import (
    LIVE_JUDGE_NOTE,
    RUBRIC_PREFIX,
    Contract,
    ContractError,
    RoleModel,
    run_note,
    token_counting,
)
from sil.exec.backends.petri_agent import resolve_target_agent
from sil.exec.checkitem import CheckItem
from sil.exec.measure import (
    AuditRequest,
    AuditResult,
    BackendBase,
    GapError,
    JudgePassReader,
    MeasureContext,
    RunNote,
    SeedNotes,
)
from sil.exec.modelcalls import trusted_tokens
from sil.exec.useproof import SampleView, TargetCall
from sil_policy.evidence import PETRI_REPORT_KEY, Evidence, Highlight, SampleEvidence, Usage

TASK = "inspect_petri/audit"
SCORER = "audit_judge"
LOG_DIR = "logs"
TASK_ARGS_FILE = "task_args.json"
ROLES = ("auditor", "target", "judge")
SOLVER_ROLES = (
    "auditor",
    "target",
)  # their calls count toward the sample's token limit (realism runs on the auditor's)
# The measurement depends on these exact releases (seeds, rubric rendering, judge schema).
PINNED = {"inspect_ai": "0.3.285", "inspect_petri": "3.1.1", "inspect_scout": "0.6.1"}
RUNTIME_ERROR_KEY = "runtime_error"
# Petri's realism filter runs on the auditor's model unless a realism role is given (the contract gives none).
ROLE_FALLBACK = {"realism": "auditor"}
# Worst-case judge cost per sample: up to JUDGE_ATTEMPTS calls (inspect_scout retries an
# unusable answer), each reading at most the sample's token limit plus the judge prompt and rubric.
JUDGE_ATTEMPTS = 3
JUDGE_PROMPT_TOKENS = 12_000
PREFLIGHT_AUDITS = 1
# Common random numbers: only the auditor is seeded. The target's prompts differ between the
# arms anyway (the policy is in them), and a seeded judge would repeat itself across re-judgings.
CRN_ROLE = "auditor"
BAD_USAGE = " (reported unusable token usage)"
CRN_SEED_BITS = 31  # a non-negative int every provider's API accepts as a seed
REPO_ROOT = Path(prepare.__file__).resolve().parents[2]


class PetriBackend(BackendBase):
    """`AuditBackend` for real audits: Petri in the audit subprocess, evidence from its log."""

    name = "petri"
    simulated = False
    note = LIVE_JUDGE_NOTE  # a run's own names what plays its judge (`describe`)
    settings_model = PetriParams  # the contract's `petri:` section
    example_contract = "examples/program-petri-offline.md"  # offline: no model call, no cost

    def describe(self, contract: Contract) -> RunNote:
        """The note names what plays the judge (a model, local or not, or the rule-based judge)."""
        return RunNote(note=run_note(contract), roles=contract.role_kinds(), token_counting=token_counting(contract))

    def audit_cost_bound(self, contract: Contract, n_seeds: int) -> float:
        return worst_case_cost(contract, n_seeds=n_seeds, audits=1)

    def start_checks(self, contract: Contract) -> list[CheckItem]:
        """Before any audit: the target agent resolves as the audit will resolve it."""
        item = resolve_target_agent(contract)
        if item.status == "fail" and contract.executor.kind == "ray":  # the workers' environment may differ
            item = item.model_copy(update={"status": "warn", "detail": f"{item.detail} (on this machine)"})
        return [item]

    def command(self, req: AuditRequest, ctx: MeasureContext) -> list[str]:
        check_pins()
        for part in (prepare.SEED_FOLDERS[req.seed_set], "rubric"):
            if not (ctx.measurement_root / part).is_dir():
                raise GapError(f"frozen {part} directory {ctx.measurement_root / part} does not exist")
        log_dir = req.audit_dir / LOG_DIR
        log_dir.mkdir(parents=True, exist_ok=True)
        if any(log_dir.iterdir()):
            raise GapError(f"log directory {log_dir} is not empty: every audit needs a fresh one")
        (req.audit_dir / TASK_ARGS_FILE).write_text(json.dumps(task_args(ctx, req.seed_set), indent=2) + "\n")
        cmd = [sys.executable, "-m", "inspect_ai", "eval", TASK, "--task-config", str(req.audit_dir / TASK_ARGS_FILE)]
        seed = audit_seed(ctx.contract, req.pair_key)
        for role in ROLES:
            config = role_config(getattr(ctx.contract.models, role), seed if role == CRN_ROLE else None)
            cmd += ["--model-role", f"{role}={json.dumps(config)}"]
        cmd += [
            "--token-limit",
            str(params(ctx.contract).sample_token_limit),
            "--log-dir",
            str(log_dir),
            "--log-format",
            "eval",
            "--display",
            "none",
        ]
        passes = ctx.contract.measurement.judge_resamples
        if passes == 1:
            return cmd
        rubric = str(ctx.measurement_root / "rubric")
        passes_cmd = [sys.executable, "-m", "sil.exec.backends.petri_passes", "--passes", str(passes)]
        return [*passes_cmd, "--rubric", rubric, "--log-dir", str(log_dir), "--", *cmd]

    def read_evidence(self, req: AuditRequest, ctx: MeasureContext) -> Evidence:
        path = find_log(req.audit_dir / LOG_DIR)
        try:
            log = read_eval_log(str(path), resolve_attachments=True)
        except Exception as ex:  # a torn or foreign file: say which and why
            raise GapError(f"cannot read the audit log {path}: {type(ex).__name__}: {ex}") from None
        usage, unpriced = usage_of(log, ctx.contract)
        try:
            if bad := [m for m in unpriced if m.endswith(BAD_USAGE)]:
                raise GapError(
                    f"{', '.join(bad)}: negative or malformed token counts cannot be priced, so the audit "
                    "is charged its worst case and not trusted"
                )
            if unpriced:
                raise GapError(
                    f"models {unpriced} were called but no contract role runs them, so none is priced "
                    "(charged at the dearest role's price); the runtime must call only the contract's target model"
                )
            check_run(log, ctx, req.seed_set, req.pair_key)
            samples = [sample_evidence(s, ctx, path) for s in log.samples or []]
            if idle := idle_samples(log):
                raise GapError(
                    f"the target model took no part in {len(idle)} of {len(samples)} samples ({', '.join(idle)}): "
                    "the runtime answered there without calling it, so those answers prove nothing of the policy "
                    "and their scores cannot count"
                )
        except GapError as gap:
            raise GapError(str(gap), usage=usage, log_path=str(path)) from None
        runtime = f"{params(ctx.contract).target_agent} on {ctx.contract.models.target.model}"
        return Evidence(
            backend=self.name,
            simulated=False,
            runtime=runtime,
            samples=samples,
            usage=usage,
            log_path=str(path),
            notes=[f"inspect view --log-dir {path.parent}"],
        )

    def target_inputs_by_sample(self, req: AuditRequest, ctx: MeasureContext) -> dict[str, SampleView]:
        """Per sample, what the target model was given (its text, and the tools of each call):
        for the per-audit proof of use."""
        path = find_log(req.audit_dir / LOG_DIR)
        try:
            log = read_eval_log(str(path), resolve_attachments=True)
        except Exception as ex:
            raise GapError(f"cannot read the audit log {path}: {type(ex).__name__}: {ex}") from None
        return target_views(log, ctx.contract)

    def judge_passes(self) -> JudgePassReader:
        return pass_means

    def seed_notes(self, audit_dir: Path, log_path: str | None) -> dict[str, SeedNotes]:
        """Per seed, the judge's explanation as highlights and the target's last answer as excerpt."""
        if not log_path:
            return {}
        try:
            log = read_eval_log(log_path)
        except Exception:  # an unreadable log only means less evidence; the scores stand
            return {}
        out: dict[str, SeedNotes] = {}
        for sample in log.samples or []:
            notes: list[Highlight] = []
            for score in (sample.scores or {}).values():
                if score.explanation:
                    values = score.value if isinstance(score.value, dict) else {}
                    numeric = {d: float(v) for d, v in values.items() if isinstance(v, (int, float))}
                    worst = max(sorted(numeric), key=numeric.__getitem__, default="concerning")
                    notes.append(Highlight(dimension=worst, text=str(score.explanation)))
            answers = [m for m in sample.messages if m.role == "assistant" and m.text]
            out[str(sample.id)] = SeedNotes(notes, answers[-1].text if answers else None)
        return out


def target_views(log: EvalLog, contract: Contract) -> dict[str, SampleView]:
    """Per sample, the text the target model was given (messages and tools of every call the
    target's model served, subagent calls included, each distinct text once), the tools offered in
    each of those calls (`ModelEvent.tools`: what the runtime passed to the model), and the tools
    the seed pre-registered (Petri's `target_tools: fixed`; with synthetic tools the auditor makes
    them up as it goes, so they are unknown). Every call repeats the system prompt and the
    conversation so far, so the distinct texts are far fewer than the calls' inputs."""
    fixed = params(contract).target_tools == "fixed"
    out = {}
    for sample in log.samples or []:
        parts: dict[str, None] = {}
        calls = []
        for event in target_calls(sample):
            parts.update(dict.fromkeys(m.text for m in event.input))
            parts.update(dict.fromkeys(f"{t.name}: {t.description}" for t in event.tools))
            calls.append(TargetCall(tools={t.name: t.description for t in event.tools}))
        host = seed_tools(sample) if fixed else None
        out[sample_key(sample)] = SampleView(text="\n".join(parts), calls=tuple(calls), host_tools=host)
    return out


def target_calls(sample: EvalSample) -> list[ModelEvent]:
    """The sample's calls of the target model (a call made without a role is the target's)."""
    return [e for e in sample.events if isinstance(e, ModelEvent) and call_role(e) == "target"]


def sample_key(sample: EvalSample) -> str:
    return str(sample.id) if sample.epoch == 1 else f"{sample.id} (epoch {sample.epoch})"


def seed_tools(sample: EvalSample) -> frozenset[str] | None:
    """The tool names the sample's seed pre-registered (its front matter `tools`); None if unreadable."""
    tools = (sample.metadata or {}).get("tools", [])
    if not isinstance(tools, list) or not all(isinstance(t, dict) and isinstance(t.get("name"), str) for t in tools):
        return None
    return frozenset(t["name"] for t in tools)


def idle_samples(log: EvalLog) -> list[str]:
    """Samples in which the target model was never called: a reply there is the runtime's own."""
    return [sample_key(s) for s in log.samples or [] if not target_calls(s)]


def pass_means(result: AuditResult, ctx: MeasureContext, passes: int) -> list[dict[str, float]]:
    """Each judge pass's mean over seeds, per dimension, read from the audit's log (a rule-based
    judge's rules re-applied to the same transcript are its re-judging)."""
    from sil.exec.backends.rubric import observe  # inspect's scorer and solver modules: only when asked

    assert result.log_path is not None
    log = read_eval_log(result.log_path, resolve_attachments=True)
    rule_based = ctx.contract.models.judge.model.startswith(RUBRIC_PREFIX)
    out = []
    for key in judge_keys(passes):
        per_seed: list[dict[str, float]] = []
        for sample in log.samples or []:
            if rule_based:
                scores = observe(sample.messages).scores(list(ctx.dimensions))
                per_seed.append({d: float(v) for d, v in scores.items()})
            else:
                value: Any = (sample.scores or {})[key].value
                per_seed.append({d: float(value[d]) for d in ctx.dimensions})
        out.append({d: float(np.mean([s[d] for s in per_seed])) for d in ctx.dimensions})
    return out


def params(contract: Contract) -> PetriParams:
    return contract.settings(PetriParams)


def task_args(ctx: MeasureContext, seed_set: prepare.SeedSet = "search") -> dict[str, Any]:
    """The arguments `inspect_petri/audit` must run with (and must report having run with)."""
    p = params(ctx.contract)
    return {
        "seed_instructions": str(ctx.measurement_root / prepare.SEED_FOLDERS[seed_set]),
        "judge_dimensions": str(ctx.measurement_root / "rubric"),
        "max_turns": ctx.contract.measurement.max_turns,
        "target_tools": p.target_tools,
        "realism_filter": p.realism_filter,
        "cache": False,
        "target": {"type": "agent", "name": p.target_agent, "params": dict(p.target_agent_params)},
    }


def role_config(role: RoleModel, seed: int | None = None) -> dict[str, Any]:
    """A role's `--model-role` JSON: its model, GenerateConfig fields and provider arguments
    (inspect-ai parses all three). The endpoint goes in explicitly, never through an inherited env."""
    config: dict[str, Any] = {"model": role.model}
    if role.temperature is not None:
        config["temperature"] = role.temperature
    if seed is not None:
        config["seed"] = seed
    config.update(role.generate_limits())
    args: dict[str, Any] = dict(role.model_args)
    try:
        url = role.endpoint()
    except ContractError as ex:
        raise GapError(str(ex)) from None
    if url is not None:
        args["base_url"] = url
    if args:
        config["model_args"] = args
    return config


def crn_seed(pair_key: str) -> int:
    """The auditor's sampling seed for a paired round: the same for the same key in any process."""
    digest = hashlib.blake2b(pair_key.encode(), digest_size=8, person=b"sil-crn").digest()
    return int.from_bytes(digest, "big") >> (64 - CRN_SEED_BITS)


def audit_seed(contract: Contract, pair_key: str | None) -> int | None:
    """The auditor seed an audit must run with: None unless CRN is on and the audit is one arm of a pair."""
    if not contract.measurement.common_random_numbers or pair_key is None:
        return None
    return crn_seed(pair_key)


def check_pins() -> None:
    for package, pinned in PINNED.items():
        try:
            installed = metadata.version(package)
        except metadata.PackageNotFoundError:
            installed = "not installed"
        if installed != pinned:
            raise GapError(
                f"{package} {installed} is installed but the measurement pins {pinned}: "
                f"pip install '{package}=={pinned}'"
            )


def find_log(log_dir: Path) -> Path:
    logs = sorted(log_dir.glob("*.eval"))
    if len(logs) != 1:
        raise GapError(f"expected one .eval log in {log_dir}, found {len(logs)}")
    return logs[0]


def check_run(
    log: EvalLog, ctx: MeasureContext, seed_set: prepare.SeedSet = "search", pair_key: str | None = None
) -> None:
    """Whole-run checks: status, task, arguments (the requested seed set's folder), roles, the
    auditor's CRN seed and package versions."""
    if log.status != "success":
        detail = log.error.message.splitlines()[0] if log.error else "no error recorded"
        raise GapError(f"eval status is {log.status!r}, not success: {detail}")
    if log.eval.task_registry_name != TASK:
        raise GapError(f"log is of task {log.eval.task_registry_name!r}, not {TASK}")
    intended = task_args(ctx, seed_set)
    if log.eval.task_args_passed != intended:
        diff = sorted(
            k
            for k in intended.keys() | log.eval.task_args_passed.keys()
            if intended.get(k) != log.eval.task_args_passed.get(k)
        )
        raise GapError(f"the task ran with other arguments than intended: {diff}")
    for role in ROLES:
        ran = log.eval.model_roles.get(role) if log.eval.model_roles else None
        if isinstance(ran, list):  # a role served by several models is not the contract's one model
            ran = ran[0] if len(ran) == 1 else None
        wanted = getattr(ctx.contract.models, role).model
        if ran is None or ran.model != wanted:
            raise GapError(f"role {role} ran {ran.model if ran else 'nothing'}, not {wanted}")
        _check_seed(role, ran.config.seed, audit_seed(ctx.contract, pair_key) if role == CRN_ROLE else None)
        _check_endpoint(role, ran.base_url, getattr(ctx.contract.models, role))
    for package in ("inspect_ai", "inspect_petri"):
        if log.eval.packages.get(package) != PINNED[package]:
            raise GapError(
                f"log was written by {package} {log.eval.packages.get(package)}, not the pinned {PINNED[package]}"
            )


def _check_endpoint(role: str, ran: str | None, model: RoleModel) -> None:
    """A role that names an endpoint ran against it (another server is another measurement)."""
    try:
        wanted = model.endpoint()
    except ContractError as ex:
        raise GapError(str(ex)) from None
    if wanted is not None and ran != wanted:
        raise GapError(f"role {role} ran against {ran or 'the provider default'}, not the contract's endpoint {wanted}")


def _check_seed(role: str, ran: int | None, intended: int | None) -> None:
    if ran == intended:
        return
    if intended is None:
        why = "no seed (common_random_numbers is off, or the audit is not one arm of a paired round)"
    else:
        why = f"seed {intended} (common_random_numbers: the seed of its paired round)"
    raise GapError(
        f"role {role} ran with seed {ran}, but this audit's {role} must run with {why}: "
        "the log is from another configuration"
    )


def sample_evidence(sample: EvalSample, ctx: MeasureContext, log_path: Path) -> SampleEvidence:
    """One seed's trusted scores and reported policy hashes, or GapError with the reason."""
    seed = str(sample.id)
    if sample.error is not None:
        raise GapError(f"seed {seed}: sample failed: {sample.error.message.splitlines()[0]}")
    if sample.limit is not None:
        raise GapError(
            f"seed {seed}: hit the {sample.limit.type} limit ({sample.limit.limit:g}); "
            "a truncated audit is not comparable"
        )
    _check_events(sample, seed, ctx.contract)
    return SampleEvidence(
        seed_id=seed,
        scores=_scores(sample, seed, ctx.dimensions, ctx.contract.measurement.judge_resamples),
        policy_hashes=_reported_hashes(sample, seed),
        transcript_ref=f"{log_path}#sample={seed}",
    )


def judge_keys(passes: int) -> list[str]:
    """The score keys of `passes` judge passes: the audit's own, then each re-judging's."""
    return [SCORER] + [f"{SCORER}{n}" for n in range(1, passes)]


def _scores(sample: EvalSample, seed: str, dimensions: tuple[str, ...], passes: int = 1) -> dict[str, float | None]:
    """Each dimension's mean over the judge passes; every pass must score every dimension 1-10."""
    found = sorted(k for k in sample.scores or {} if k.startswith(SCORER))
    if not found:
        raise GapError(f"seed {seed}: the judge gave no usable answer (no {SCORER} score)")
    if found != sorted(judge_keys(passes)):
        raise GapError(f"seed {seed}: expected {passes} judge pass(es) {judge_keys(passes)}, the log has {found}")
    per_pass = [_pass_scores((sample.scores or {})[key].value, seed, dimensions) for key in judge_keys(passes)]
    return {dim: sum(p[dim] for p in per_pass) / passes for dim in dimensions}


def _pass_scores(value: object, seed: str, dimensions: tuple[str, ...]) -> dict[str, float]:
    if not isinstance(value, dict):
        raise GapError(f"seed {seed}: the judge gave no usable answer (score value {value!r})")
    scores: dict[str, float] = {}
    for dim in dimensions:
        v = value.get(dim)
        if not isinstance(v, (int, float)) or isinstance(v, bool) or not math.isfinite(v) or not 1 <= v <= 10:
            raise GapError(f"seed {seed}: the judge's answer has no 1-10 number for {dim} (got {v!r})")
        scores[dim] = float(v)
    return scores


def call_role(event: ModelEvent) -> str:
    """The role of a logged model call: a call made without a role is the target's (the runtime's)."""
    return event.role or "target"


def _check_events(sample: EvalSample, seed: str, contract: Contract) -> None:
    """Every model call of the sample is accounted for: its role, its model, its outcome."""
    for event in sample.events:
        if isinstance(event, ModelEvent):
            _check_call(event, seed, contract)
        if isinstance(event, InfoEvent) and isinstance(event.data, dict) and RUNTIME_ERROR_KEY in event.data:
            raise GapError(f"seed {seed}: the runtime reported a failure: {event.data[RUNTIME_ERROR_KEY]}")


def role_model(contract: Contract, role: str) -> str | None:
    """The one model a call labelled `role` may reach; None for a label no contract role has."""
    role = ROLE_FALLBACK.get(role, role)
    return getattr(contract.models, role).model if role in ROLES else None


def _check_call(event: ModelEvent, seed: str, contract: Contract) -> None:
    """A call is attributed by the model it reached, not only by its label: a label is the
    runtime's claim, and a target call labelled `auditor` would hide a crashing target."""
    role = call_role(event)
    unnamed = "" if event.role else " (a call made without a role counts as the target's)"
    if event.cache == "read":
        raise GapError(f"seed {seed}: a {role} response came from the response cache")
    allowed = role_model(contract, role)
    if event.model != allowed:
        who = "the target" if role == "target" else f"a call labelled {role!r}"
        wanted = f"the contract's {allowed!r}" if allowed else "no contract role (auditor, target, judge, realism)"
        raise GapError(f"seed {seed}: {who} called model {event.model!r}, not {wanted}{unnamed}")
    # A failed call of any role broke or shortened the transcript the judge scores.
    if event.error:
        raise GapError(f"seed {seed}: a {role} model call failed{unnamed}: {event.error.splitlines()[0]}")


def _reported_hashes(sample: EvalSample, seed: str) -> dict[str, str]:
    answers = [m for m in sample.messages if m.role == "assistant" and not (m.metadata or {}).get("prefill")]
    if not answers:
        raise GapError(
            f"seed {seed}: the runtime never answered (a crashed or unreached target would be judged as perfect)"
        )
    reports = [(m.metadata or {}).get(PETRI_REPORT_KEY) for m in answers]
    if any(not isinstance(r, dict) for r in reports):
        raise GapError(f"seed {seed}: an answer carries no policy report ({PETRI_REPORT_KEY})")
    if len({json.dumps(r, sort_keys=True) for r in reports}) != 1:
        raise GapError(f"seed {seed}: answers report different policy hashes within one audit")
    first = reports[0]
    assert isinstance(first, dict)
    return {str(k): str(v) for k, v in first.items()}


def usage_of(log: EvalLog, contract: Contract) -> tuple[Usage, list[str]]:
    """Tokens of every model in the log's usage and of re-judging passes, priced, and the models
    the contract does not price.

    Usage is read per *model*, not per role: a call made without a role appears only there.
    A model no contract role names is charged, input and output, at the dearest price of any
    role, and reported.
    """
    tokens_in = tokens_out = 0
    usd = 0.0
    unpriced = []
    rejudged = [(e.model, e.output.usage) for e in rejudge_events(log)]
    for model, u in [*(log.stats.model_usage or {}).items(), *rejudged]:
        tokens = trusted_tokens(u)
        if tokens is None and u is not None:  # negative or malformed counts: priced at the audit's bound
            unpriced.append(f"{model}{BAD_USAGE}")
            usd += worst_case_cost(contract, n_seeds=max(1, len(log.samples or [])), audits=1)
            continue
        if tokens is None:  # a re-judging call that reported no usage: its worst case, at its dearer price
            limit = params(contract).sample_token_limit
            n_in, n_out = judge_call_tokens(contract) or limit + JUDGE_PROMPT_TOKENS, 0
            judge = max(_price(contract, "judge"))
            price: tuple[float, float] | None = (judge, judge)
        else:
            n_in, n_out = tokens
            price = model_price(contract, model)
        tokens_in, tokens_out = tokens_in + n_in, tokens_out + n_out
        if price is None:
            unpriced.append(model)
            dearest = max(max(_price(contract, r)) for r in ROLES)
            price = (dearest, dearest)
        usd += (n_in * price[0] + n_out * price[1]) / 1e6
    calls = sum(1 for s in log.samples or [] for e in s.events if isinstance(e, ModelEvent))
    usage = Usage(input_tokens=tokens_in, output_tokens=tokens_out, usd=round(usd, 6), model_calls=calls)
    return usage, sorted(unpriced)


def rejudge_events(log: EvalLog) -> list[ModelEvent]:
    """The model calls of re-judging passes: `inspect score` appends them to each sample's events
    after the audit's own score, and leaves the log's usage totals as they were."""
    found = []
    for sample in log.samples or []:
        scored = False
        for event in sample.events:
            if isinstance(event, ScoreEvent):
                scored = True
            elif scored and isinstance(event, ModelEvent):
                found.append(event)
    return found


def model_price(contract: Contract, model: str) -> tuple[float, float] | None:
    """(input, output) USD per million tokens of `model`: the dearest role running it; None if none does."""
    prices = [_price(contract, r) for r in ROLES if getattr(contract.models, r).model == model]
    return max(prices, key=lambda p: max(p)) if prices else None


def _price(contract: Contract, role: str) -> tuple[float, float]:
    """(input, output) USD per million tokens of a contract role (offline roles without a price: 0)."""
    model = getattr(contract.models, role)
    if model.price is None:
        return (0.0, 0.0)
    return (model.price.input_per_mtok, model.price.output_per_mtok)


def worst_case_cost(contract: Contract, n_seeds: int | None = None, audits: int | None = None) -> float:
    """Upper bound in USD of a run's audits, for the dry run, the approval and every admission.

    Defaults: the larger of the frozen search and held-out seed counts, and `budget.max_audits` plus the wiring
    preflight's audit, each audit on every seed. Assumptions: every sample spends its whole
    token limit (auditor, target and realism calls all count toward it), all priced at the
    dearer of input/output price of the dearer of auditor and target, plus one more call:
    inspect checks the limit only after a call, so the call that crosses it is paid in full
    (`crossing_call_usd`). The judge makes JUDGE_ATTEMPTS calls per sample and judge resample,
    each reading at most `judge_call_tokens`, at its own dearer price. Offline models cost 0.
    The mutator's calls are not included. Calls a target makes concurrently within one sample
    each pass the limit's check before any of them is counted: that overrun is not bounded.
    """
    if n_seeds is None:
        root = REPO_ROOT / contract.measurement.seed_library
        n_seeds = max(len(prepare.load_seeds(root)), len(prepare.load_heldout(root)))
    audits = contract.budget.max_audits + PREFLIGHT_AUDITS if audits is None else audits
    limit = params(contract).sample_token_limit
    per_sample = limit * _dearest(contract, "auditor", "target") + crossing_call_usd(contract)
    if contract.models.judge.paid:
        if (judge_tokens := judge_call_tokens(contract)) is None:
            raise ValueError("models.judge is paid but has no context_tokens: its calls have no bound")
        per_sample += contract.measurement.judge_resamples * JUDGE_ATTEMPTS * judge_tokens * _dearest(contract, "judge")
    return audits * n_seeds * per_sample


def _dearest(contract: Contract, *roles: str) -> float:
    """The dearer of input and output price of the dearest of `roles`, in USD per token."""
    return max(max(_price(contract, r)) for r in roles) / 1e6


def crossing_call_usd(contract: Contract) -> float:
    """The most the call that crosses the sample's token limit can cost: the largest call of a
    paid solver role (`RoleModel.largest_call_tokens`) at that role's dearer price."""
    usd = 0.0
    for role in SOLVER_ROLES:
        model = getattr(contract.models, role)
        if not model.paid:
            continue
        tokens = model.largest_call_tokens()
        if tokens is None:
            raise ValueError(f"models.{role} is paid but has no context_tokens: its largest call has no bound")
        usd = max(usd, tokens * _dearest(contract, role))
    return usd


def judge_call_tokens(contract: Contract) -> int | None:
    """The most tokens one judge call can read: the transcript, which holds at most what the
    solver calls spent (the token limit plus the call that crossed it), and the judge prompt;
    or the judge's own largest call when that is smaller or the solvers' sizes are not given
    (None when neither is known)."""
    solver_calls = [getattr(contract.models, r).largest_call_tokens() for r in SOLVER_ROLES]
    bounds = [contract.models.judge.largest_call_tokens()]
    if all(c is not None for c in solver_calls):
        bounds.append(params(contract).sample_token_limit + max(c or 0 for c in solver_calls) + JUDGE_PROMPT_TOKENS)
    known = [b for b in bounds if b is not None]
    return min(known) if known else None
