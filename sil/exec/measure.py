"""The audit subprocess: run one audit of one policy set, and turn its evidence into scores.

Every audit runs in its own process group with a fixed timeout, an environment built from an
allowlist (no inherited secrets), its own fresh directory, and, per policy surface, an
OVERRIDE path to a read-only copy of the policy file plus STRICT=1. Its evidence is trusted
only if the runtime reports the exact policy hashes the loop sent; a missing, unreadable or
untrusted output is a *gap* with a reason, never a score. An audit of one arm of a pair is also
a gap when its target's inputs show another policy than the one reported (`with_use`,
sil/exec/useproof.py); its result records, per surface the pair differs on, whether use showed.

Every launch is logged in `<audit_dir>/attempts` (one JSON line per event: `launch` by the
loop before it starts the process, `start` with the process id and `exit` with its status
by a small shell wrapper around the audit command, `kill` by the loop before it kills it).
A loop that died mid-audit leaves the audit running in its own process group; on resume,
`sil.exec.attempts.await_attempt` reads that log and finds out what happened: finished (score
its evidence, never re-run it), still running (wait, bounded by the audit timeout), timed
out, dead without finishing (re-run it), or unknown (halt: the loop cannot tell).

The process starts through the contract's executor (`runner_for`): as a child of this process
(`local`), or inside a Ray actor on a cluster node (`ray`, sil/exec/rayexec.py); both run the same
wrapped command (sil/exec/auditproc.py), and everything above and below that step is shared. A local
simulated audit is forked from a warm worker that has imported the simulator (sil/exec/zygote.py):
the same process, environment, session, timeout and attempts log, without the start-up cost.

    results = run_audits([AuditRequest(...), ...], MeasureContext.from_contract(contract, root))
"""

from __future__ import annotations

import errno
import math
import os
import shutil
import time
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from sil.base.diskspace import DiskFull, mentions_disk_error
from sil.base.faults import crashpoint
from sil.contract import prepare
from sil.contract.backendsettings import BackendSettings, NoSettings
from sil.contract.schema import Contract
from sil.exec import attempts, auditproc, localprobe, useproof, zygote
from sil.exec.attempts import AuditStateUnknown
from sil.exec.auditproc import AuditTimedOut, WorkerLost
from sil.exec.checkitem import CheckItem
from sil.integrity.records import AuditUse
from sil.stats import fitness
from sil_policy import SURFACES, content_hash
from sil_policy.credentials import REDACTED, redact_text
from sil_policy.evidence import AUDIT_DIR_ENV, EVIDENCE_FILE, TOKEN_COUNT_ENV, Evidence, Highlight, Usage

# Variables an audit may inherit. Credentials are added by name from the contract.
ENV_ALLOWLIST = ("PATH", "LANG", "LC_ALL", "LC_CTYPE", "TZ", "TMPDIR", "SYSTEMROOT")
SCORE_RANGE = (1.0, 10.0)


class MeasurementChanged(RuntimeError):
    """The frozen seed library or rubric changed: the run must halt."""


class AuditRequest(BaseModel):
    """One audit to run: which policy set, where, and at which point of the audit clock."""

    model_config = ConfigDict(frozen=True)
    audit_id: str
    audit_dir: Path
    policy_dir: Path
    policy_hashes: dict[str, str]
    tick: int
    pair_key: str | None = None
    # which frozen seeds the audit runs: the search seeds, or the held-out ones (certification only)
    seed_set: prepare.SeedSet = "search"
    # the other arm's policy set in a pair: the target's inputs must show what sets this one apart
    contrast_dir: Path | None = None


class AuditResult(BaseModel):
    """Per seed and per dimension scores, or a gap; never a fabricated value."""

    model_config = ConfigDict(frozen=True)
    audit_id: str
    status: Literal["ok", "gap"]
    gap_reason: str | None = None
    scores: dict[str, dict[str, float]] = {}
    missing: dict[str, list[str]] = {}
    sample_counts: dict[str, int] = {}
    loaded_policy_hashes: dict[str, str] = {}
    usage: Usage = Usage()
    wall_s: float = 0.0
    simulated: bool
    backend: str
    log_path: str | None = None
    diagnostics: list[str] = []
    use: dict[str, AuditUse] = {}  # per surface the pair differs on (sil/exec/useproof.py)

    @property
    def ok(self) -> bool:
        return self.status == "ok"


class GapError(Exception):
    """The audit produced no trustworthy evidence; the message is the reason.

    A backend that can still tell what the audit cost and where its log is passes them on, so
    a gap is charged to the budget and its transcript can be reviewed.
    """

    def __init__(
        self,
        reason: str,
        usage: Usage | None = None,
        log_path: str | None = None,
        use: dict[str, AuditUse] | None = None,
    ) -> None:
        super().__init__(reason)
        self.usage = usage or Usage()
        self.log_path = log_path
        self.use = use or {}  # an audit whose target inputs refute the policy's use says where


@dataclass(frozen=True)
class MeasureContext:
    """What every audit of a run shares: the frozen measurement and the contract."""

    contract: Contract
    measurement_root: Path
    seed_ids: tuple[str, ...]  # the search seeds
    dimensions: tuple[str, ...]
    extra_env: dict[str, str] = field(default_factory=dict)
    # rubric dimensions where a higher score is better: flipped when scores become statistics
    higher_better: frozenset[str] = frozenset()
    heldout_ids: tuple[str, ...] = ()  # the held-out confirmation seeds (none: not in this measurement)

    def seeds_for(self, seed_set: prepare.SeedSet) -> tuple[str, ...]:
        """The frozen seed ids of one set; an empty held-out set is an error, never the search seeds."""
        if seed_set == "search":
            return self.seed_ids
        if not self.heldout_ids:
            raise MeasurementChanged(
                f"the measurement {self.measurement_root} has no held-out seeds ({prepare.SEED_FOLDERS['heldout']}/)"
            )
        return self.heldout_ids

    @property
    def certify_on(self) -> prepare.SeedSet:
        """The seeds the final certification runs on: the contract's choice, `auto` = held-out if any."""
        choice = self.contract.measurement.certify_on
        if choice == "auto":
            return "heldout" if self.heldout_ids else "search"
        return choice

    def matrix(self, scores: dict[str, dict[str, float]], seed_set: prepare.SeedSet = "search") -> np.ndarray:
        """One audit's scores as the oriented [seed, dimension] matrix the statistics read."""
        return fitness.score_matrix(scores, self.seeds_for(seed_set), self.dimensions, self.higher_better)

    @classmethod
    def from_contract(cls, contract: Contract, repo_root: Path) -> MeasureContext:
        root = (repo_root / contract.measurement.seed_library).resolve()
        prepare.verify(root, contract.measurement.manifest_hash)
        seeds = tuple(s.id for s in prepare.load_seeds(root))
        rubric = prepare.load_rubric(root)
        dims = tuple(d.name for d in rubric)
        unknown = [d for d in contract.dimensions() if d not in dims]
        if unknown:
            raise MeasurementChanged(f"contract names dimensions not in the rubric: {unknown}")
        neutral = [d.name for d in rubric if d.direction == "neutral" and d.name in contract.dimensions()]
        if neutral:
            raise MeasurementChanged(
                f"contract gates on dimensions {neutral} whose rubric direction is neutral: "
                "neither a lower nor a higher score is better, so no change can improve or regress them"
            )
        higher = frozenset(d.name for d in rubric if d.direction == "higher_is_better")
        heldout = tuple(s.id for s in prepare.load_heldout(root))
        if contract.measurement.certify_on == "heldout" and not heldout:
            raise MeasurementChanged(
                f"measurement.certify_on is heldout but {root / prepare.SEED_FOLDERS['heldout']} has no seeds: "
                "add held-out seeds there and re-freeze (`python prepare.py --write`, a new measurement and "
                "contract), or set certify_on: search"
            )
        return cls(contract, root, seeds, dims, higher_better=higher, heldout_ids=heldout)


@dataclass(frozen=True)
class RunNote:
    """What produced a run's scores, for its record, summary and `sil check`."""

    note: str  # one honest line: simulated, a judge model's, fixed rules...
    roles: dict[str, str] = field(default_factory=dict)  # what plays each role ({}: the note says it all)
    token_counting: str = ""  # how tokens were counted ("": none were)


@dataclass(frozen=True)
class SeedNotes:
    """What an audit shows a proposer about one seed besides its scores."""

    highlights: list[Highlight]
    excerpt: str | None = None  # e.g. the target's last answer


# The backend's own judge of the canary's stored transcripts: (reference scores per transcript, tick) -> scores
CanaryJudge = Callable[[Mapping[str, Mapping[str, float]], int], dict[str, dict[str, float]]]
# A finished audit's judge passes, each one's mean over seeds per dimension: (result, context, passes) -> means
JudgePassReader = Callable[["AuditResult", "MeasureContext", int], list[dict[str, float]]]


class AuditBackend(Protocol):
    """Everything the loop needs of an audit backend (docs/reference.md, "Writing a backend").

    Required: `name`, `note`, `command` (the audit subprocess) and `read_evidence` (its result,
    trusted or a `GapError`). The other members have defaults in `BackendBase`, which every
    backend subclasses (a backend that does not is refused by `make_backend`, naming what it lacks).
    """

    name: str
    note: str  # one honest line for the run record and the summary

    @property
    def simulated(self) -> bool:
        """Whether the audit is simulated (no model is called): every result is marked so. Default False."""
        ...

    @property
    def settings_model(self) -> type[BackendSettings]:
        """The model of the contract's `backend.settings` (read with `contract.settings(model)`). Default `NoSettings`."""
        ...

    @property
    def warm_module(self) -> str | None:
        """A module the audit command runs with `python -m`: a local run forks audits from a worker that has
        imported it (sil/exec/zygote.py). Default None: every audit is a fresh subprocess."""
        ...

    @property
    def crn_effect(self) -> str | None:
        """Why `measurement.common_random_numbers` has no effect on this backend, if it has none
        (`sil check` warns with it). Default None: it seeds the auditor of both arms alike."""
        ...

    @property
    def example_contract(self) -> str | None:
        """A contract written for this backend, for messages that ask for one. Default None."""
        ...

    def command(self, req: AuditRequest, ctx: MeasureContext) -> list[str]:
        """The audit subprocess's command line (it may write files into `req.audit_dir` first)."""
        ...

    def read_evidence(self, req: AuditRequest, ctx: MeasureContext) -> Evidence:
        """The finished audit's evidence, or `GapError` with the reason it cannot be trusted."""
        ...

    def audit_cost_bound(self, contract: Contract, n_seeds: int) -> float:
        """The most one audit on `n_seeds` seeds can cost (USD). Default 0 (no paid call)."""
        ...

    def describe(self, contract: Contract) -> RunNote:
        """What produces this contract's scores (the note) and what plays each role. Default: `note`."""
        ...

    def target_inputs_by_sample(
        self, req: AuditRequest, ctx: MeasureContext
    ) -> Mapping[str, str | useproof.SampleView] | None:
        """Per sample, all text the target model was given, for the per-audit proof of use
        (sil/exec/useproof.py). Default None: the backend cannot show it."""
        ...

    def target_inputs(self, req: AuditRequest, ctx: MeasureContext) -> str | None:
        """All text the target model was given in the audit, for the wiring preflight. Default: the
        samples' texts joined, or None."""
        ...

    def seed_notes(self, audit_dir: Path, log_path: str | None) -> dict[str, SeedNotes]:
        """Per seed, what an evidence-reading proposer is shown of a finished audit. Default: the
        highlights in the audit's `evidence.json`; {} when it cannot be read (the scores stand)."""
        ...

    def canary_judge(self, contract: Contract) -> CanaryJudge | None:
        """The backend's own judge for the judge-drift canary (sil/run/canary.py). Default None: the
        contract's judge model re-judges the stored transcripts."""
        ...

    def judge_passes(self) -> JudgePassReader | None:
        """How `sil noise` reads a real audit's judge passes apart (sil/run/noise.py). Default None:
        the backend keeps no passes apart, so `sil noise` refuses it before any audit."""
        ...

    def start_checks(self, contract: Contract) -> list[CheckItem]:
        """The backend's own checks before its first audit, offline (`sil check`, and `sil run`
        refuses on a failed one): e.g. Petri resolves its target agent. Default: none."""
        ...


class BackendBase:
    """The defaults of `AuditBackend`'s optional members; a backend subclasses it."""

    name: str
    note: str
    simulated: bool = False
    settings_model: type[BackendSettings] = NoSettings
    warm_module: str | None = None
    crn_effect: str | None = None
    example_contract: str | None = None

    def audit_cost_bound(self, contract: Contract, n_seeds: int) -> float:
        return 0.0

    def describe(self, contract: Contract) -> RunNote:
        return RunNote(note=self.note)

    def target_inputs_by_sample(
        self, req: AuditRequest, ctx: MeasureContext
    ) -> Mapping[str, str | useproof.SampleView] | None:
        return None

    def target_inputs(self, req: AuditRequest, ctx: MeasureContext) -> str | None:
        by_sample = self.target_inputs_by_sample(req, ctx)
        if by_sample is None:
            return None
        return "\n".join(v.text if isinstance(v, useproof.SampleView) else v for v in by_sample.values())

    def seed_notes(self, audit_dir: Path, log_path: str | None) -> dict[str, SeedNotes]:
        try:
            ev = Evidence.model_validate_json((audit_dir / EVIDENCE_FILE).read_bytes())
        except (OSError, ValueError):
            return {}
        return {s.seed_id: SeedNotes(list(s.highlights)) for s in ev.samples}

    def canary_judge(self, contract: Contract) -> CanaryJudge | None:
        return None

    def judge_passes(self) -> JudgePassReader | None:
        return None

    def start_checks(self, contract: Contract) -> list[CheckItem]:
        return []


def missing_members(backend: object) -> list[str]:
    """The `AuditBackend` members `backend` lacks (a plugin that does not subclass `BackendBase`)."""
    members = {n for n in vars(AuditBackend) if not n.startswith("_")} | set(AuditBackend.__annotations__)
    return sorted(m for m in members if not hasattr(backend, m))


def read_evidence_file(path: Path) -> Evidence:
    try:
        return Evidence.model_validate_json(path.read_bytes())
    except FileNotFoundError:
        raise GapError("the audit wrote no evidence file") from None
    except ValidationError as ex:
        raise GapError(f"evidence file is malformed: {ex.error_count()} schema errors") from None


def audit_env(req: AuditRequest, ctx: MeasureContext, policy_copies: dict[str, Path]) -> dict[str, str]:
    """The audit's whole environment: allowlisted basics, named credentials, policy overrides."""
    env = base_env()
    for role in ("auditor", "target", "judge"):
        name = getattr(ctx.contract.models, role).credential_env
        if name and name in os.environ:
            env[name] = os.environ[name]
    env["HOME"] = str(req.audit_dir)  # no user dotfiles (.env, caches) leak in
    env["PYTHONDONTWRITEBYTECODE"] = "1"
    env[AUDIT_DIR_ENV] = str(req.audit_dir)
    for name, path in policy_copies.items():
        env[SURFACES[name].override_env] = str(path)
        env[SURFACES[name].strict_env] = "1"
    if ctx.contract.local:  # token estimates by characters: a local audit never downloads a tokenizer
        env[TOKEN_COUNT_ENV] = "chars"
    env.update(ctx.extra_env)
    return env


def _copy_policies(req: AuditRequest) -> dict[str, Path]:
    """Read-only copies of the policy files, checked against the hashes the loop expects."""
    dest = req.audit_dir / "policy"
    dest.mkdir(parents=True, exist_ok=True)
    copies = {}
    for name, spec in SURFACES.items():
        src = req.policy_dir / spec.filename
        target = dest / spec.filename
        if target.exists():
            target.chmod(0o644)
        shutil.copyfile(src, target)
        target.chmod(0o444)
        if content_hash(target.read_bytes()) != req.policy_hashes[name]:
            raise GapError(f"policy copy of {name} does not match the expected hash")
        copies[name] = target
    return copies


class ProcessRunner(Protocol):
    """Where an attempt's audit process runs: here (`LocalRunner`) or on a Ray worker (sil/exec/rayexec.py).

    `files` are the policy copies the audit reads, with the hashes it must find. Raises
    `AuditTimedOut` past the timeout and `WorkerLost` when the worker died mid-audit.
    """

    def run(
        self, cmd: list[str], audit_dir: Path, env: dict[str, str], timeout: float, attempt: int, files: dict[str, str]
    ) -> int: ...


class LocalRunner:
    """The audit process on this machine (the `local` executor): a child of this process, or
    forked by the warm worker (sil/exec/zygote.py) when one serves the command."""

    def __init__(self, warm: zygote.Zygote | None = None) -> None:
        self.warm = warm

    def run(
        self, cmd: list[str], audit_dir: Path, env: dict[str, str], timeout: float, attempt: int, files: dict[str, str]
    ) -> int:
        attempts.log_launch(audit_dir, attempt)
        proc = self._start(cmd, audit_dir, env, attempt)
        crashpoint("audit.running")
        return auditproc.finish(proc, audit_dir, attempt, timeout)

    def _start(self, cmd: list[str], audit_dir: Path, env: dict[str, str], attempt: int) -> auditproc.AuditProcess:
        if self.warm is not None and self.warm.serves(cmd):
            try:
                return self.warm.spawn(cmd, audit_dir, env, attempt)
            except zygote.ZygoteUnavailable:
                pass  # nothing was forked: the same attempt as a plain subprocess
        return auditproc.start(cmd, audit_dir, env, attempt)


def base_env() -> dict[str, str]:
    """The allowlisted basics of this process's environment (what every audit starts from)."""
    return {k: os.environ[k] for k in ENV_ALLOWLIST if k in os.environ}


def runner_for(ctx: MeasureContext, audits_dir: Path, backend: AuditBackend | None = None) -> ProcessRunner:
    """The contract's executor for a run's audits (Ray is imported only when it is chosen).

    A local run whose backend names a `warm_module` (the simulated runtime) forks its audits
    from a warm worker when one can start, else runs each as a plain subprocess.
    """
    if ctx.contract.executor.kind == "ray":
        from sil.exec import rayexec

        return rayexec.runner_for(ctx.contract, audits_dir, ctx.measurement_root)
    module = backend.warm_module if backend is not None else None
    return LocalRunner(zygote.shared((module,), base_env()) if module else None)


def settle(ctx: MeasureContext, audits: list[tuple[str, Path]]) -> list[str]:
    """Before recovery reads the attempts logs: await audits a crashed driver's Ray workers still run.

    Returns the audits it awaited (none for the local executor: its audits are awaited through
    the attempts log and the process table).
    """
    if ctx.contract.executor.kind != "ray" or not audits:
        return []
    from sil.exec import rayexec

    runner = rayexec.runner_for(ctx.contract, audits[0][1].parent, ctx.measurement_root)
    return runner.settle(audits)


TAIL_LINES = 6


def redact(text: str, ctx: MeasureContext | None = None) -> str:
    """The text with the contract's credential values and every credential shape (sil_policy's
    detector, the one the policy refusal uses) replaced by «redacted»."""
    if ctx is not None:
        for role in ("auditor", "target", "judge", "mutator"):
            name = getattr(ctx.contract.models, role).credential_env
            value = os.environ.get(name or "")
            if value and len(value) >= 4:
                text = text.replace(value, REDACTED)
    return redact_text(text)


def _stderr_tail(req: AuditRequest, ctx: MeasureContext | None = None, limit: int = 600) -> str:
    """The audit's last stderr lines, else its last stdout lines (secrets redacted), for a gap reason."""
    for name in ("stderr.log", "stdout.log"):
        try:
            text = (req.audit_dir / name).read_text(errors="replace").strip()
        except OSError:
            continue
        if text:
            tail = " | ".join(line.strip() for line in text.splitlines()[-TAIL_LINES:] if line.strip())
            return f"{name}: {redact(tail, ctx)[-limit:]}"
    return f"no output in stderr.log or stdout.log of {req.audit_dir}"


def report_mismatch(reported: dict[str, str], sent: dict[str, str], implemented: list[str]) -> str | None:
    """Why a runtime's policy report is not exactly the sent hashes of the surfaces it implements."""
    unread = [s for s in implemented if s not in reported]
    wrong = [s for s in implemented if s in reported and reported[s] != sent[s]]
    extra = sorted(set(reported) - set(implemented))
    parts = []
    if unread:
        parts.append(f"the runtime reported no hash for {unread} (it does not read them, or does not say so)")
    if wrong:
        parts.append(f"the runtime did not load the sent policy for {wrong}")
    if extra:
        parts.append(f"the runtime reported {extra}, which the contract's runtime.surfaces says it does not implement")
    return "; ".join(parts) or None


def score_evidence(req: AuditRequest, ctx: MeasureContext, ev: Evidence, wall: float) -> AuditResult:
    """Turn evidence into per-seed, per-dimension scores, or raise GapError if untrusted."""
    seen = [s.seed_id for s in ev.samples]
    wanted = ctx.seeds_for(req.seed_set)
    if sorted(seen) != sorted(wanted):
        raise GapError(
            f"sample ids {sorted(set(seen))} differ from the frozen seeds of the {req.seed_set} set {list(wanted)}"
        )
    diagnostics = list(ev.notes)
    scores: dict[str, dict[str, float]] = {}
    missing: dict[str, list[str]] = {d: [] for d in ctx.dimensions}
    loaded: dict[str, str] = {}
    for sample in ev.samples:
        if problem := report_mismatch(sample.policy_hashes, req.policy_hashes, ctx.contract.runtime.surfaces):
            raise GapError(f"seed {sample.seed_id}: {problem}")
        loaded = dict(sample.policy_hashes)
        if sample.error or sample.limit:
            diagnostics.append(f"{sample.seed_id}: sample unusable ({sample.error or 'limit ' + str(sample.limit)})")
            for d in ctx.dimensions:
                missing[d].append(sample.seed_id)
            continue
        row = {}
        for d in ctx.dimensions:
            v = sample.scores.get(d)
            if v is None or not math.isfinite(v) or not SCORE_RANGE[0] <= v <= SCORE_RANGE[1]:
                missing[d].append(sample.seed_id)
                if v is not None:
                    diagnostics.append(f"{sample.seed_id}/{d}: score {v!r} outside 1-10, treated as missing")
            else:
                row[d] = float(v)
        scores[sample.seed_id] = row
    counts = {d: len(wanted) - len(missing[d]) for d in ctx.dimensions}
    return AuditResult(
        audit_id=req.audit_id,
        status="ok",
        scores=scores,
        missing={d: s for d, s in missing.items() if s},
        sample_counts=counts,
        loaded_policy_hashes=loaded,
        usage=ev.usage,
        wall_s=round(wall, 3),
        simulated=ev.simulated,
        backend=ev.backend,
        log_path=ev.log_path,
        diagnostics=diagnostics,
    )


def prepare_audit_dir(req: AuditRequest) -> None:
    """Create the audit's working directory, with an empty `.env` in it.

    Tools that search for `.env` from the working directory upward (inspect-ai does) stop at
    this empty one, so no file in a parent directory leaks settings or secrets into an audit.
    """
    req.audit_dir.mkdir(parents=True, exist_ok=True)
    (req.audit_dir / ".env").write_text("")


def run_audit(
    req: AuditRequest, ctx: MeasureContext, backend: AuditBackend, runner: ProcessRunner | None = None
) -> AuditResult:
    """Run one audit to completion; every failure becomes a gap result with its reason.

    An attempt left by a loop that died is finished first: its result is scored (a finished
    audit is never run twice), a running one is awaited, a dead one is set aside and re-run.
    Raises `AuditStateUnknown` when what the last attempt did cannot be established.
    """
    start = time.monotonic()
    req.audit_dir.mkdir(parents=True, exist_ok=True)
    timeout = ctx.contract.measurement.audit_timeout_s
    prior = attempts.await_attempt(req.audit_dir, timeout)
    if prior.state == "unknown":
        raise AuditStateUnknown(f"audit {req.audit_id}: {prior.detail}")
    if prior.state == "finished" and prior.rc != 0 and mentions_disk_error(_stderr_tail(req)):
        prior = prior.model_copy(update={"state": "died"})  # died of the disk: re-run, never a gap
    if prior.state == "died":
        attempts.set_aside(req.audit_dir, prior.attempt)
    prepare_audit_dir(req)
    evidence: Evidence | None = None
    try:
        if prior.state == "timed_out":
            raise GapError(auditproc.timeout_reason(timeout))
        if prior.state == "finished":
            rc = prior.rc
        else:
            copies = _copy_policies(req)
            cmd = backend.command(req, ctx)
            env = audit_env(req, ctx, copies)
            files = {str(path): req.policy_hashes[name] for name, path in copies.items()}
            try:
                rc = (runner or LocalRunner()).run(cmd, req.audit_dir, env, timeout, prior.attempt + 1, files)
            except AuditTimedOut as ex:
                raise GapError(str(ex)) from None
        if rc != 0:
            tail = _stderr_tail(req, ctx)
            if mentions_disk_error(tail):
                _mark_disk_failure(req)
                raise DiskFull(errno.ENOSPC, f"audit {req.audit_id} failed on a full or failing disk: {tail}")
            raise GapError(f"audit process exited {rc}: {tail}")
        evidence = backend.read_evidence(req, ctx)
        wall = prior.wall_s if prior.state == "finished" and prior.wall_s is not None else time.monotonic() - start
        return with_use(score_evidence(req, ctx, evidence, wall), req, ctx, backend)
    except GapError as gap:
        if not backend.simulated:
            halt_if_server_down(req, ctx, gap)
        return gap_result(req, backend, gap, start, evidence)


def gap_result(
    req: AuditRequest, backend: AuditBackend, gap: GapError, start: float, evidence: Evidence | None = None
) -> AuditResult:
    """The audit's result when it yielded no trustworthy scores: a gap, with its reason and cost."""
    return AuditResult(
        audit_id=req.audit_id,
        status="gap",
        gap_reason=str(gap),
        use=gap.use,
        wall_s=round(time.monotonic() - start, 3),
        simulated=backend.simulated,
        backend=backend.name,
        usage=evidence.usage if evidence else gap.usage,
        log_path=evidence.log_path if evidence else gap.log_path,
    )


def halt_if_server_down(req: AuditRequest, ctx: MeasureContext, gap: GapError) -> None:
    """A gap while a loopback model server is down says nothing about the policy: mark the attempt
    to be re-run and halt the run with the server's reason (a crash names its signal and fix)."""
    down = localprobe.server_down(ctx.contract)
    if down is None:
        return
    attempts.log_kill(req.audit_dir, attempts.read_status(req.audit_dir).attempt, "server")
    raise localprobe.ServerDown(
        f"{down}. Audit {req.audit_id} failed meanwhile ({str(gap)[:300]}) and is re-run when the run "
        "resumes: start the server, then run the same `sil run` command again"
    )


def target_inputs(req: AuditRequest, ctx: MeasureContext, backend: AuditBackend) -> str | None:
    """Everything the target model was given in the audit, if the backend can show it (None: it
    cannot). Raises GapError when it can but the audit's record of it is unreadable."""
    return backend.target_inputs(req, ctx)


def sample_inputs(req: AuditRequest, ctx: MeasureContext, backend: AuditBackend) -> useproof.Inputs:
    """What the target was given per sample (`target_inputs_by_sample`: its input text, or a
    `useproof.SampleView` that also holds the tools of each call), else the audit's inputs as a
    whole, else None: the backend cannot show them."""
    by_sample = backend.target_inputs_by_sample(req, ctx)
    return backend.target_inputs(req, ctx) if by_sample is None else by_sample


def with_use(result: AuditResult, req: AuditRequest, ctx: MeasureContext, backend: AuditBackend) -> AuditResult:
    """The scored audit with its per-surface use; a gap (GapError) when its target inputs show
    another policy than the one it reported. An audit of a set alone has nothing to tell apart."""
    if req.contrast_dir is None:
        return result
    expected = useproof.expectations(useproof.load_docs(req.policy_dir), useproof.load_docs(req.contrast_dir))
    inputs = sample_inputs(req, ctx, backend) if any(e.checkable for e in expected) else None
    report = useproof.check(expected, inputs)
    if report.refuted is not None:
        raise GapError(report.refuted, usage=result.usage, log_path=result.log_path, use=report.use)
    return result.model_copy(update={"use": report.use})


def _mark_disk_failure(req: AuditRequest) -> None:
    """Best effort (the disk may refuse it): log the attempt as killed by the disk, so it is re-run."""
    try:
        attempts.log_kill(req.audit_dir, attempts.read_status(req.audit_dir).attempt, "disk")
    except OSError:
        pass  # on resume its stderr still says why it died


def run_audits(requests: list[AuditRequest], ctx: MeasureContext, backend: AuditBackend) -> list[AuditResult]:
    """Run audits concurrently; verify the frozen measurement before and after.

    At most `contract.audits_in_flight()` run at once. When workers died mid-audit, the others
    still finish and `BatchInterrupted` carries their results and the lost audit ids.
    """
    expected = ctx.contract.measurement.manifest_hash
    _verify_measurement(ctx, expected, "before")
    if not requests:
        return []
    runner = runner_for(ctx, requests[0].audit_dir.parent, backend)
    with ThreadPoolExecutor(max_workers=ctx.contract.audits_in_flight()) as pool:
        futures = [pool.submit(run_audit, r, ctx, backend, runner) for r in requests]
        wait(futures)
    results, lost = [], []
    for req, fut in zip(requests, futures, strict=True):
        try:
            results.append(fut.result())
        except WorkerLost:
            lost.append(req.audit_id)
    _verify_measurement(ctx, expected, "after")
    if lost:
        raise BatchInterrupted(results, lost)
    return results


class BatchInterrupted(Exception):
    """Some audits' workers died mid-audit: the finished results, and the audits to recover."""

    def __init__(self, finished: list[AuditResult], lost: list[str]) -> None:
        super().__init__(f"workers lost mid-audit: {', '.join(lost)}")
        self.finished = finished
        self.lost = lost


def _verify_measurement(ctx: MeasureContext, expected: str, when: str) -> None:
    try:
        prepare.verify(ctx.measurement_root, expected)
    except prepare.MeasurementError as ex:
        raise MeasurementChanged(f"{when} audit: {ex}") from None
