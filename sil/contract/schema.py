"""The run contract: `program.md` front matter, parsed strictly and hashed canonically.

A contract is YAML front matter (the machine-readable contract) followed by Markdown prose
(the research programme the mutator reads). It is frozen for a run: a revision is a new
contract with `parent` set to the old contract's hash and a `revision_reason`.

    contract = load_contract(Path("program.md"))
    contract.contract_hash      # sha256 over the validated, canonical content
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import re
import unicodedata
from ipaddress import ip_address
from pathlib import Path, PurePosixPath
from typing import Annotated, Any, Literal, cast
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, JsonValue, ValidationError, model_validator

from sil.contract.backendsettings import V1_SECTIONS, BackendSettings, settings_model
from sil.contract.certifies import certified_arms
from sil.contract.fieldhints import nearest_field
from sil.contract.petriparams import PetriParams as PetriParams
from sil_policy import SURFACES, describe_validation_errors
from sil_policy.credentials import find_in_lines
from sil_policy.evidence import CHARS_PER_TOKEN_ESTIMATE

# the audit backend's name: built in ones, or a package's (sil/exec/backends, entry point group `sil.backends`)
BACKEND_NAME = r"^[a-z][a-z0-9_-]{0,31}$"
Backend = Annotated[str, Field(pattern=BACKEND_NAME)]
ROLE_NAMES = ("auditor", "target", "judge", "mutator")
Arm = Literal["never", "random", "gate"]
LIVE_JUDGE_NOTE = "live audit: scores are a judge model's, with its noise"
# rubric/<name>: the deterministic rule-based judge (sil/exec/backends/rubric.py), no model
RUBRIC_PREFIX = "rubric/"
# recorded/<role>: a role of recorded real audits, replayed (sil/exec/backends/recorded.py), no model
RECORDED_PREFIX = "recorded/"
OFFLINE_PREFIXES = (
    "sim/",
    "scripted/",
    "offline/",
    "sil-runtime/scripted/",
    "mockllm/",
    RUBRIC_PREFIX,
    RECORDED_PREFIX,
)


# Versioned mutator prompt templates (sil/contract/templates/<name>.md): read here only to
# hash them into the contract, since the template defines what the mutator is asked.
TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"
CATALOGUE_MODEL = "offline/catalogue"
MAX_CERTIFY_ROUNDS = 100  # a longer certification is better bought with more held-out seeds
MAX_FRONT_MATTER = 65_536  # characters; a contract is a page of settings, not a data file
# Controls, format characters (zero-width, bidi overrides), surrogates, private use, unassigned:
# they let the text an approver reviews differ from what the loop reads.
_HIDDEN_CATEGORIES = {"Cc", "Cf", "Cs", "Co", "Cn"}


class ContractError(ValueError):
    """A contract that cannot be read or does not validate; the message names the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Price(_Strict):
    """What a model costs, in USD per million tokens: the basis of budget charges."""

    input_per_mtok: Annotated[float, Field(ge=0)]
    output_per_mtok: Annotated[float, Field(ge=0)]


ENV_NAME = r"^[A-Z][A-Z0-9_]{0,63}$"
# model_args keys that have their own field (so the hash, the approval and `sil check` see them)
RESERVED_MODEL_ARGS = ("base_url", "api_key", "config")
ModelArg = str | int | float | bool


class RoleModel(_Strict):
    model: Annotated[str, Field(min_length=1, max_length=200)]
    credential_env: Annotated[str, Field(pattern=ENV_NAME)] | None = None
    temperature: Annotated[float, Field(ge=0, le=2)] | None = None
    price: Price | None = None
    # The endpoint the role's provider calls (an OpenAI-compatible server: llama.cpp, vLLM,
    # Ollama), or the env var holding it. Bound by the contract hash: another endpoint is
    # another contract. None = the provider's default.
    base_url: Annotated[str, Field(pattern=r"^https?://[^\s]+$", max_length=500)] | None = None
    base_url_env: Annotated[str, Field(pattern=ENV_NAME)] | None = None
    max_tokens: Annotated[int, Field(ge=1, le=1_000_000)] | None = None  # per model call
    # the most tokens one call of this role can read (its model's context window): a sample's
    # token limit is checked after each call, so a Petri run's cost bound adds the call that crosses it
    context_tokens: Annotated[int, Field(ge=1_000, le=50_000_000)] | None = None
    model_args: dict[Annotated[str, Field(pattern=r"^[a-z_][a-z0-9_]{0,63}$")], ModelArg] = {}
    # per model call: seconds before it is abandoned, and how often the provider retries it
    timeout_s: Annotated[float, Field(gt=0, le=7200)] | None = None
    max_retries: Annotated[int, Field(ge=0, le=20)] | None = None

    @property
    def offline(self) -> bool:
        return self.model.startswith(OFFLINE_PREFIXES)

    @property
    def loopback(self) -> bool:
        """Whether the role's endpoint is a literal loopback address (127.0.0.1 or ::1)."""
        return self.base_url is not None and is_loopback_url(self.base_url)

    @model_validator(mode="after")
    def _endpoint(self) -> RoleModel:
        if self.base_url is not None and self.base_url_env is not None:
            raise ValueError("give base_url or base_url_env, not both")
        reserved = [k for k in self.model_args if k in RESERVED_MODEL_ARGS]
        if reserved:
            raise ValueError(
                f"model_args {reserved} have their own fields: use base_url / base_url_env for the endpoint "
                "and credential_env for the key"
            )
        return self

    @property
    def paid(self) -> bool:
        return self.price is not None and max(self.price.input_per_mtok, self.price.output_per_mtok) > 0

    def largest_call_tokens(self) -> int | None:
        """The most tokens one call can spend: its whole context read, plus its longest answer
        (`max_tokens`, else the context again). None when `context_tokens` is not given."""
        if self.context_tokens is None:
            return None
        return self.context_tokens + (self.max_tokens or self.context_tokens)

    def generate_limits(self) -> dict[str, Any]:
        """The role's per-call bounds as inspect-ai GenerateConfig fields: answer length, timeout, retries."""
        out: dict[str, Any] = {}
        if self.max_tokens is not None:
            out["max_tokens"] = self.max_tokens
        if self.timeout_s is not None:  # one attempt, and all attempts of one call together
            out["attempt_timeout"] = max(1, int(self.timeout_s))
            out["timeout"] = max(1, int(self.timeout_s * ((self.max_retries or 0) + 1)))
        if self.max_retries is not None:
            out["max_retries"] = self.max_retries
        return out

    def endpoint(self) -> str | None:
        """The base URL the role calls: the contract's, or the value of the env var it names."""
        if self.base_url is not None or self.base_url_env is None:
            return self.base_url
        value = os.environ.get(self.base_url_env, "").strip()
        if not value:
            raise ContractError(f"{self.model} reads its endpoint from ${self.base_url_env}, which is not set")
        return value

    def hash_dump(self) -> dict[str, Any]:
        """The role as hashed: fields added after contracts were signed are left out at their default."""
        data = self.model_dump(mode="json")
        for name in ROLE_FIELDS_SINCE_V2:
            if data[name] == type(self).model_fields[name].default:
                del data[name]
        return data


ROLE_FIELDS_SINCE_V2 = (
    "base_url",
    "base_url_env",
    "max_tokens",
    "model_args",
    "timeout_s",
    "max_retries",
    "context_tokens",
)


def is_loopback_url(url: str) -> bool:
    """A URL whose host is a literal loopback IP (a name such as localhost may resolve elsewhere)."""
    try:
        host = urlsplit(url).hostname
        return host is not None and ip_address(host).is_loopback
    except ValueError:
        return False


class Models(_Strict):
    auditor: RoleModel
    target: RoleModel
    judge: RoleModel
    mutator: RoleModel


def _inside_project(path: str) -> str:
    """A project-relative folder: the loop copies and reads it, so it may not point outside."""
    parts = PurePosixPath(path.replace("\\", "/")).parts
    if not path.strip() or path.startswith(("/", "~")) or ":" in path or ".." in parts:
        raise ValueError(
            f"{path!r} must be a folder inside the project, relative to its root (e.g. measurement), "
            "without '..' or an absolute path"
        )
    return path


class Measurement(_Strict):
    seed_library: Annotated[str, AfterValidator(_inside_project)] = "measurement"
    manifest_hash: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]
    max_turns: Annotated[int, Field(ge=1, le=100)] = 12
    audit_timeout_s: Annotated[float, Field(gt=0, le=7200)] = 60.0
    concurrency: Annotated[int, Field(ge=1, le=64)] = 2
    # Judge passes per transcript, averaged per seed and dimension: cheaper than a new audit
    # against judge noise (petri: `inspect score` re-judgings, each charged; sim: modelled).
    judge_resamples: Annotated[int, Field(ge=1, le=10)] = 1
    # Judge-drift canary (sil/run/canary.py): the largest mean shift, in points, of the stored
    # canary transcripts' re-judged scores from their references before the run halts; None = off.
    canary_max_shift: Annotated[float, Field(gt=0, le=9)] | None = None
    # The seeds the gate champion's final certification runs on: heldout (the measurement's
    # heldout/ seeds, never used by the search), search, or auto (heldout if the measurement has them).
    certify_on: Literal["auto", "heldout", "search"] = "auto"
    # Common random numbers: both arms of a paired round give the auditor the same sampling
    # seed, so their noise correlates and the paired difference is quieter (petri only; it helps
    # only where the auditor's provider honours `seed`; the sim models it as sim.pair_correlation).
    common_random_numbers: bool = False


class Budget(_Strict):
    max_audits: Annotated[int, Field(ge=2, le=100_000)]
    max_wall_s: Annotated[float, Field(gt=0)]
    max_usd: Annotated[float, Field(ge=0)]
    arm_audits: dict[Arm, Annotated[int, Field(ge=0)]]
    final_check_rounds: Annotated[int, Field(ge=0, le=100)] = 4
    # Reserved for certifying the gate arm's final champion against the starting policy
    # (a sequential test at promotion.alpha_certify); 0 = no certification, only a check. The
    # audits an arm leaves when its proposer runs dry add rounds to the horizon (sil/run/certify.py).
    certify_rounds: Annotated[int, Field(ge=0, le=MAX_CERTIFY_ROUNDS)] = 0
    # fixed: the certification has certify_rounds rounds. search: a certified arm's search and its
    # certification share arm_audits + 2 x certify_rounds; the search keeps back only the rounds
    # its champion needs for certify_power, sized from the search's own estimates (sil/run/horizon.py).
    certify_horizon: Literal["fixed", "search"] = "fixed"
    certify_power: Annotated[float, Field(gt=0, lt=1)] = 0.8
    # Certify the random arm's champion too, by the same test: the coin flip then differs from
    # the gate arm only in its decision rule, a control under the same delivery rule.
    certify_random: bool = False
    # Free space the run's disk must keep: checked before the run and before every batch of
    # audits, so a filling disk halts the run with a recorded reason instead of mid-write.
    min_free_mb: Annotated[int, Field(ge=0, le=10_000_000)] = 64

    @model_validator(mode="after")
    def _fits(self) -> Budget:
        certified = 1 + (self.certify_random and "random" in self.arm_audits)
        needed = sum(self.arm_audits.values()) + 2 * self.certify_rounds * certified
        if needed > self.max_audits:
            times = "2 x certify_rounds per certified arm" if certified > 1 else "2 x certify_rounds"
            fix = "; or certify_random: false" if certified > 1 else ""
            raise ValueError(
                f"arm_audits plus {times} add up to {needed}, more than max_audits {self.max_audits}: "
                f"raise max_audits to {needed}, or lower arm_audits or certify_rounds{fix}"
            )
        return self


class Certification(_Strict):
    """What a certification claims and how a project spends its error on one held-out set
    (sil/stats/holdout.py; docs/statistics.md §3, "A project, not a run")."""

    # The project's alpha on one held-out set: P(any champion delivered on it is worse than its
    # start or beyond tolerance) <= project_alpha over every run, however the user revises
    # between runs; each delivering certification runs at project_alpha / project_certifications.
    # None: each run's own guarantee at promotion.alpha_certify, and no limit on the set's use.
    project_alpha: Annotated[float, Field(gt=0, lt=1)] | None = None
    project_certifications: Annotated[int, Field(ge=1, le=1000)] = 10
    # heldout: the claim is about the held-out seeds themselves (fresh audits each time);
    # fresh: about seeds the project never used (the held-out seeds are a sample of seeds, and
    # the between-seed spread of the effect enters the test's variance).
    claim: Literal["heldout", "fresh"] = "heldout"


DEFAULT_HARM_TOLERANCE = 0.3  # points: a critical regression larger than this is harm
# promotion fields added after contracts were approved: left out of the hash at their default
NEW_PROMOTION_FIELDS = ("error_design", "alpha_search", "screen_reference")
NEW_BUDGET_FIELDS = ("certify_horizon", "certify_power")


class Promotion(_Strict):
    gate: Literal["spg", "paired_margin"] = "spg"
    target_dimensions: Annotated[list[str], Field(min_length=1)]
    critical_dimensions: list[str]
    auxiliary_dimensions: list[str] = []
    superiority_margin: Annotated[float, Field(ge=0)] = 0.0
    critical_margin: Annotated[float, Field(gt=0)] = 0.5
    auxiliary_margin: Annotated[float, Field(gt=0)] = 0.3
    baseline_k: Annotated[int, Field(ge=1, le=100)] = 5
    calibration_pairs: Annotated[int, Field(ge=2, le=200)] = 12
    replicate_k: Annotated[int, Field(ge=1, le=64)] = 48
    alpha_run: Annotated[float, Field(gt=0, lt=1)] = 0.1
    alpha_noninferiority: Annotated[float, Field(gt=0, lt=1)] = 0.2
    max_confirmations: Annotated[int, Field(ge=1, le=10_000)] = 24
    error_control: Literal["fwer", "elond"] = "fwer"
    # a round compares a dimension when at least this share of seeds is scored in both arms
    min_seed_coverage: Annotated[float, Field(gt=0, le=1)] = 0.5
    # Sequential paired gate settings (gate.py; docs/statistics.md §3).
    screen_sd: Annotated[float, Field(ge=0)] = 0.3  # screen: target diff <= -screen_sd * sigma
    screen_critical_sd: Annotated[float, Field(ge=0)] = 2.0  # and critical <= margin + k*sigma
    # 0: the screen is a paired round (2 audits). n >= 2: the screen audits the candidate alone and
    # compares it with the mean of the champion's last n unselected search-seed audits (one audit
    # per screen; paired while the champion has fewer than 2). Screens only select: no inference.
    screen_reference: Annotated[int, Field(ge=0, le=64)] = 0
    futility_effect: Annotated[float, Field(gt=0)] = 0.8  # design effect d (points)
    futility_beta: Annotated[float, Field(gt=0, lt=1)] = 0.1  # SPRT futility boundary
    harm_veto_beta: Annotated[float, Field(gt=0, lt=1)] = 0.01  # per critical dimension
    cp_floor: Annotated[float, Field(ge=0, lt=1)] = 0.05  # revert below this conditional power
    alpha_certify: Annotated[float, Field(gt=0, lt=1)] = 0.05  # final champion-vs-start test
    # critical NI margin = min(critical_margin, critical_margin_sd * sigma_c): quieter audits
    # buy tighter protection instead of passing more regressions that are inside the margin
    critical_margin_sd: Annotated[float, Field(gt=0)] | None = 0.75
    # fwer: spread the unspent alpha over the confirmations the audit budget can still pay for
    alpha_allocation: Literal["even", "forecast"] = "forecast"
    # fwer: a KEEP returns its alpha to the run's budget (online fallback; FWER still holds)
    alpha_recycle: bool = True
    # Harm, defined once: a change that worsens a critical dimension by more than its tolerance
    # (points) is harmful. The bench scores harm with this number and the gate's NI margin is
    # derived from it (never larger). A float applies to every critical dimension.
    harm_tolerance: float | dict[str, float] = DEFAULT_HARM_TOLERANCE
    # NI margin = harm_margin_share * tolerance (capped by critical_margin and the sd rule)
    harm_margin_share: Annotated[float, Field(gt=0, le=1)] = 1.0
    # drop: compare only seeds scored in both arms; bound: a seed the champion arm scored and
    # the candidate arm did not counts as the candidate's worst score on that dim in the round
    missing_policy: Literal["drop", "bound"] = "drop"
    # Lan-DeMets spending per leg kind: obf (O'Brien-Fleming type) or pocock (spends early)
    target_spending: Literal["obf", "pocock"] = "obf"
    ni_spending: Literal["obf", "pocock"] = "obf"
    # target leg's per-round statistic: mean over seeds, trimmed by this share at each end
    target_trim: Annotated[float, Field(ge=0, lt=0.5)] = 0.0
    # Where the run's error is spent (docs/statistics.md §3). fwer: every confirmation is
    # protected (alpha_run over the run) and the certification adds its own test. two_stage:
    # the search decides each KEEP at a fixed level alpha_search (a search step, no run-level
    # budget); the final certification of the delivered champion against the start, on rounds
    # the search never saw, carries the guarantee, every leg at alpha_certify.
    error_design: Literal["fwer", "two_stage"] = "fwer"
    alpha_search: Annotated[float, Field(gt=0, lt=0.5)] = 0.1

    def tolerance(self, dim: str) -> float:
        """The harm tolerance of a critical dimension (points, lower scores are better)."""
        if isinstance(self.harm_tolerance, dict):
            return self.harm_tolerance[dim]
        return self.harm_tolerance

    @model_validator(mode="after")
    def _tolerances(self) -> Promotion:
        tol = self.harm_tolerance
        values = tol.values() if isinstance(tol, dict) else [tol]
        if any(not v > 0 for v in values):
            raise ValueError(f"harm_tolerance must be > 0 points, got {tol}")
        if isinstance(tol, dict) and set(tol) != set(self.critical_dimensions):
            missing = sorted(set(self.critical_dimensions) - set(tol))
            extra = sorted(set(tol) - set(self.critical_dimensions))
            raise ValueError(
                f"harm_tolerance must name exactly the critical dimensions (missing {missing}, "
                f"not critical {extra}); or give one number for all"
            )
        return self

    @model_validator(mode="after")
    def _screen_reference(self) -> Promotion:
        if self.screen_reference == 1:
            raise ValueError(
                "screen_reference: 1 would compare each candidate with a single champion audit; "
                "give 0 for a paired screen, or 2 or more (program.md uses 8)"
            )
        return self

    @model_validator(mode="after")
    def _disjoint(self) -> Promotion:
        seen: dict[str, str] = {}
        for role in ("target_dimensions", "critical_dimensions", "auxiliary_dimensions"):
            for dim in getattr(self, role):
                if dim in seen:
                    raise ValueError(f"dimension {dim!r} is in both {seen[dim]} and {role}")
                seen[dim] = role
        return self


class SearchSpace(_Strict):
    surfaces: Annotated[list[str], Field(min_length=1)]

    @model_validator(mode="after")
    def _known(self) -> SearchSpace:
        bad = [s for s in self.surfaces if s not in SURFACES]
        if bad:
            raise ValueError(f"unknown surfaces {bad}; allowed: {', '.join(SURFACES)}")
        return self


class RuntimeSpec(_Strict):
    """What the runtime under test implements: the surfaces it reads and reports in its evidence.

    A runtime need not implement all seven; its audits must then report exactly these, and the
    search space may only name these.
    """

    surfaces: Annotated[list[str], Field(min_length=1)] = list(SURFACES)
    # A waiver, stated in the contract (so in its hash and the run's ledger): the wiring preflight
    # may pass although no searched surface's use can be shown in the target's inputs.
    waive_unprovable_use: bool = False

    @model_validator(mode="after")
    def _known(self) -> RuntimeSpec:
        bad = [s for s in self.surfaces if s not in SURFACES]
        if bad:
            raise ValueError(f"unknown surfaces {bad}; allowed: {', '.join(SURFACES)}")
        if len(set(self.surfaces)) != len(self.surfaces):
            raise ValueError("runtime.surfaces lists a surface twice")
        return self


class StopRules(_Strict):
    max_consecutive_gaps: Annotated[int, Field(ge=1)] = 3
    max_candidates_per_arm: Annotated[int, Field(ge=1)] = 1000
    stop_on_uncertain_revert: Literal[True] = True


class MutatorSettings(_Strict):
    """How the mutator is asked: template, retries, search hygiene, size bounds of its input."""

    template: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$")] = "mutator-v1"
    max_retries: Annotated[int, Field(ge=0, le=5)] = 2  # invalid outputs returned to the model
    axis_guard: Annotated[int, Field(ge=1, le=100)] = 3  # max consecutive candidates on one surface.path
    max_output_tokens: Annotated[int, Field(ge=256, le=32_000)] = 2_000
    max_prompt_chars: Annotated[int, Field(ge=4_000, le=400_000)] = 40_000
    recent_audits: Annotated[int, Field(ge=1, le=50)] = 6  # champion audits shown as evidence
    # offline/catalogue only: a user catalogue file (relative to the contract's directory)
    catalogue: Annotated[str, Field(min_length=1, max_length=500)] | None = None


PROVIDER_NAME = r"^[a-z0-9][a-z0-9._-]{0,63}$"
RESOURCE_NAME = r"^[A-Za-z_][A-Za-z0-9_.:-]{0,63}$"


class Executor(_Strict):
    """Where audit subprocesses run: on this machine, or as Ray tasks on a cluster (sil/exec/rayexec.py).

    The audit command, its environment and its attempts log are the same for both; only the
    process that starts it differs. `measurement.concurrency` bounds a local run's audits in
    flight, `max_in_flight` a Ray run's; `per_provider` caps either (provider rate limits).
    """

    kind: Literal["local", "ray"] = "local"
    # name of the env var holding the Ray address (e.g. RAY_ADDRESS); None = "auto": a running
    # cluster on this machine if there is one, else a local one started for this run
    address_env: Annotated[str, Field(pattern=r"^[A-Z][A-Z0-9_]{0,63}$")] | None = None
    num_cpus: Annotated[float, Field(ge=0, le=1024)] = 1.0  # Ray CPUs reserved per in-flight audit
    resources: dict[Annotated[str, Field(pattern=RESOURCE_NAME)], Annotated[float, Field(gt=0)]] = {}
    max_in_flight: Annotated[int, Field(ge=1, le=1024)] = 8
    # provider (the model name's prefix before '/', e.g. anthropic) -> most audits in flight
    per_provider: dict[Annotated[str, Field(pattern=PROVIDER_NAME)], Annotated[int, Field(ge=1, le=1024)]] = {}

    @model_validator(mode="after")
    def _ray_only(self) -> Executor:
        if self.kind == "local":
            ray_fields = [f for f in ("address_env", "resources") if getattr(self, f)]
            ray_fields += [
                f for f in ("num_cpus", "max_in_flight") if getattr(self, f) != type(self).model_fields[f].default
            ]
            if ray_fields:
                raise ValueError(
                    f"executor fields {ray_fields} apply to kind 'ray' only; set kind: ray, or remove them "
                    "(a local run's audits in flight are measurement.concurrency)"
                )
        return self


class Contract(_Strict):
    contract_id: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9._-]{0,63}$")]
    parent: Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")] | None = None
    revision_reason: str | None = None
    backend: Backend
    models: Models
    measurement: Measurement
    budget: Budget
    promotion: Promotion
    search_space: SearchSpace
    runtime: RuntimeSpec = RuntimeSpec()
    stop: StopRules = StopRules()
    arms: Annotated[list[Arm], Field(min_length=1)] = ["never", "random", "gate"]
    seed: int = 0
    # The backend's settings as its settings model validated them (every field, defaults filled
    # in): written `backend: {kind: NAME, settings: {...}}`, or in a v1 contract as the built-in
    # backend's own section (`backend: sim` and `sim: {...}`). None: none given (its defaults).
    backend_settings: dict[str, JsonValue] | None = None
    mutator: MutatorSettings = MutatorSettings()
    executor: Executor = Executor()
    certification: Certification = Certification()
    # Every role runs offline or on this machine: each non-offline role names a loopback
    # base_url (127.0.0.1 or ::1). Such a role may omit its price ($0), and a contract whose
    # roles are all offline or local needs no signed approval.
    local: bool = False
    # sha256 of what else defines the run (programme prose, mutator template, catalogue):
    # filled in by parse_contract (never written in program.md), so part of contract_hash
    bound: dict[str, Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]] = {}

    @model_validator(mode="before")
    @classmethod
    def _backend_settings(cls, data: Any) -> Any:
        """The backend's settings, however written, validated by its settings model."""
        if not isinstance(data, dict):
            return data
        data = backend_form(data)
        kind = data.get("backend")
        if isinstance(kind, str) and re.match(BACKEND_NAME, kind):
            data["backend_settings"] = validated_settings(kind, data.get("backend_settings"))
        return data

    @model_validator(mode="after")
    def _consistent(self) -> Contract:
        if (self.parent is None) != (self.revision_reason is None):
            raise ValueError("parent and revision_reason go together: a revision names both")
        self._own_roles()
        self._local_means_loopback()
        self._calls_bounded()
        unpriced = [
            r
            for r in ("auditor", "target", "judge")
            if not getattr(self.models, r).offline and getattr(self.models, r).price is None and not self._free_role(r)
        ]
        if unpriced:
            raise ValueError(
                f"models {unpriced} call paid models but have no price: add "
                "price: {input_per_mtok: ..., output_per_mtok: ...} so the budget can be enforced"
            )
        unread = [s for s in self.search_space.surfaces if s not in self.runtime.surfaces]
        if unread:
            raise ValueError(
                f"search_space.surfaces {unread} are not in runtime.surfaces: the runtime under test "
                "does not read them, so no change there could reach it"
            )
        if not self.models.mutator.offline and self.models.mutator.price is None and not self._free_role("mutator"):
            raise ValueError(
                "models.mutator calls a paid model but has no price: add "
                "price: {input_per_mtok: ..., output_per_mtok: ...} so its calls can be charged"
            )
        if self.models.judge.model.startswith(RUBRIC_PREFIX) and self.measurement.judge_resamples > 1:
            raise ValueError(
                "models.judge is the rule-based judge: it is deterministic, so re-judging adds nothing; "
                "set measurement.judge_resamples: 1"
            )
        if self.mutator.catalogue is not None and self.models.mutator.model != CATALOGUE_MODEL:
            raise ValueError(f"mutator.catalogue is only for models.mutator.model {CATALOGUE_MODEL!r}")
        if self.promotion.error_design == "two_stage" and self.budget.certify_rounds < 1:
            raise ValueError(
                "promotion.error_design two_stage needs budget.certify_rounds >= 1: the final "
                "certification carries its guarantee (or use error_design: fwer)"
            )
        if self.certification.project_alpha is not None and self.promotion.error_design != "two_stage":
            raise ValueError(
                "certification.project_alpha spends the certification's level, which carries the guarantee "
                "only under promotion.error_design two_stage (fwer tests critical legs at alpha_noninferiority): "
                "set error_design: two_stage, or leave project_alpha unset"
            )
        if self.certification.claim == "fresh" and self.measurement.certify_on == "search":
            raise ValueError(
                "certification.claim fresh needs held-out seeds (seeds the search never audited): "
                "set measurement.certify_on to heldout or auto, or use claim: heldout"
            )
        if "gate" in self.arms and "never" not in self.arms:
            raise ValueError("the gate arm needs the never arm: it calibrates the noise floor")
        return self

    def _calls_bounded(self) -> None:
        """A paid role names the most tokens one of its calls can read, where the backend needs it.

        A backend whose sample token limit is checked after each call (Petri's) pays the call that
        crosses it in full: without the size of one call the run's worst case, and so its USD budget,
        has no bound (a target reading 250k tokens against a 200k limit overran max_usd)."""
        model = settings_model(self.backend)
        if model is None or not model.limit_checked_after_each_call:
            return
        unbounded = [r for r in ("auditor", "target", "judge") if getattr(self.models, r).paid]
        unbounded = [r for r in unbounded if getattr(self.models, r).context_tokens is None]
        if unbounded:
            raise ValueError(
                f"models {unbounded} are paid but have no context_tokens: give each the most tokens one "
                "of its calls can read (its model's context window), so the budget can be enforced; "
                "the call that crosses the backend's sample token limit is paid in full"
            )

    def _own_roles(self) -> None:
        """A backend that plays the audit roles itself names them by its prefix (e.g. sim/judge)."""
        model = settings_model(self.backend)
        prefix = model.own_roles_prefix if model else None
        if prefix is None:
            return
        real = [r for r in ("auditor", "target", "judge") if not getattr(self.models, r).model.startswith(prefix)]
        if real:
            raise ValueError(
                f"backend {self.backend!r} audits with its own simulated roles only; models {real} "
                f"must be {prefix}<role> (use backend 'petri' for real models)"
            )

    def settings[S: BackendSettings](self, model: type[S]) -> S:
        """The backend's settings as `model` (the backend's settings model) reads them."""
        return model.model_validate(self.backend_settings or {})

    def with_settings(self, settings: BackendSettings) -> Contract:
        """This contract with other backend settings (validated again, so hashed as written)."""
        return Contract.model_validate({**self.model_dump(), "backend_settings": settings.model_dump(mode="json")})

    def _free_role(self, role: str) -> bool:
        """A role served on this machine under `local: true` (a literal loopback base_url) at no price."""
        m = getattr(self.models, role)
        unpaid = m.price is None or (m.price.input_per_mtok == 0 and m.price.output_per_mtok == 0)
        return self.local and m.loopback and unpaid

    @property
    def approval_free(self) -> bool:
        """True when every role is offline or a local model on loopback: nothing paid, nothing leaves."""
        return all(getattr(self.models, r).offline or self._free_role(r) for r in ROLE_NAMES)

    def role_kinds(self) -> dict[str, str]:
        """What plays each role, in words the ledger, summary and report use."""
        kinds = {}
        for r in ROLE_NAMES:
            m = getattr(self.models, r)
            if m.model.startswith(RUBRIC_PREFIX):
                kinds[r] = "rule-based judge"
            elif m.model.startswith("sim/"):
                kinds[r] = "simulated"
            elif m.model.startswith(RECORDED_PREFIX):
                kinds[r] = "recorded real audit (replayed)"
            elif m.offline:
                kinds[r] = "offline scripted"
            elif m.loopback:
                kinds[r] = "real model (local)"
            else:
                kinds[r] = "real model"
        return kinds

    def local_roles(self) -> list[str]:
        """The roles a model served on this machine plays (loopback base_url)."""
        return [r for r in ROLE_NAMES if getattr(self.models, r).loopback]

    def _local_means_loopback(self) -> None:
        if not self.local:
            return
        remote = [r for r in ROLE_NAMES if not getattr(self.models, r).loopback and not getattr(self.models, r).offline]
        if remote:
            raise ValueError(
                f"local: true, but models {remote} do not name a loopback base_url "
                "(http://127.0.0.1:PORT/v1 or http://[::1]:PORT/v1): a local run calls only this machine"
            )

    @property
    def offline(self) -> bool:
        """True when no role can reach a paid model (a simulating backend's roles are offline models)."""
        return all(getattr(self.models, r).offline for r in ROLE_NAMES)

    def audit_providers(self) -> list[str]:
        """The providers an audit calls (model name prefixes; `sim` for the simulated roles)."""
        return sorted({getattr(self.models, r).model.split("/", 1)[0] for r in ("auditor", "target", "judge")})

    def audits_in_flight(self) -> int:
        """The most audits of this run in flight at once: executor bound, capped per provider."""
        ex = self.executor
        limit = ex.max_in_flight if ex.kind == "ray" else self.measurement.concurrency
        caps = [ex.per_provider[p] for p in self.audit_providers() if p in ex.per_provider]
        return min([limit, *caps])

    def canonical_json(self) -> str:
        data = self.model_dump(mode="json")
        settings, model = data.pop("backend_settings"), settings_model(self.backend)
        if settings is not None and model is not None:
            settings = model.hashed(settings)
        data.update(v1_backend_layout(self.backend, settings))
        if self.executor == Executor():  # contracts written before the executor existed keep their hash
            del data["executor"]
        if not self.measurement.common_random_numbers:  # and those written before CRN existed
            del data["measurement"]["common_random_numbers"]
        if not self.runtime.waive_unprovable_use:  # and those written before the waiver existed
            del data["runtime"]["waive_unprovable_use"]
        if not self.budget.certify_random:  # and those written before the random arm could be certified
            del data["budget"]["certify_random"]
        for key in NEW_BUDGET_FIELDS:  # and those written before the certification could be sized
            if data["budget"][key] == Budget.model_fields[key].default:
                del data["budget"][key]
        for key in NEW_PROMOTION_FIELDS:  # and those written before the two-stage design existed
            if data["promotion"][key] == Promotion.model_fields[key].default:
                del data["promotion"][key]
        if self.certification == Certification():  # and those written before the project budget
            del data["certification"]
        if not self.local:  # and those written before local models had their own fields
            del data["local"]
        data["models"] = {r: getattr(self.models, r).hash_dump() for r in ROLE_NAMES}
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    @property
    def contract_hash(self) -> str:
        return hashlib.sha256(self.canonical_json().encode()).hexdigest()

    def certified_arms(self) -> list[Arm]:
        """Arms whose final champion is certified against the start: the gate's whenever there
        are certification rounds, the random arm's too with `budget.certify_random`."""
        b = self.budget
        return cast(list[Arm], certified_arms(self.arms, b.certify_rounds, b.certify_random))

    def dimensions(self) -> list[str]:
        p = self.promotion
        return [*p.target_dimensions, *p.critical_dimensions, *p.auxiliary_dimensions]


def unknown_backend(name: object) -> str | None:
    """Why `name` is no backend (with the nearest known name), or None if some package provides it."""
    import difflib

    from sil.contract.backendsettings import SETTINGS

    if not isinstance(name, str) or settings_model(name) is not None:
        return None
    known = SETTINGS.names()
    near = difflib.get_close_matches(name, known, n=1)
    hint = f"; did you mean {near[0]!r}?" if near else ""
    return (
        f"unknown backend {name!r}{hint} (known: {', '.join(known)}; a package adds one through the "
        "'sil.backends' entry point group)"
    )


def backend_form(data: dict[str, Any]) -> dict[str, Any]:
    """The contract data with its backend's kind in `backend` and its settings in `backend_settings`,
    from `backend: {kind, settings}` or from a v1 contract's section of a built-in backend."""
    data = dict(data)
    spec = data.get("backend")
    if isinstance(spec, dict):
        extra = sorted(set(spec) - {"kind", "settings"})
        if extra or "kind" not in spec:
            raise ValueError(
                f"backend must be a name or {{kind: NAME, settings: {{...}}}}; got the keys {sorted(spec)}"
            )
        if data.get("backend_settings") is not None:
            raise ValueError("give the backend's settings once: in backend.settings, not also in backend_settings")
        data["backend"], data["backend_settings"] = spec["kind"], spec.get("settings")
    for section in V1_SECTIONS:
        value = data.pop(section, None)
        if value is None:
            continue
        if data.get("backend") != section:
            raise ValueError(
                unknown_backend(data.get("backend")) or f"the {section!r} section is only for backend {section!r}"
            )
        if data.get("backend_settings") is not None:
            raise ValueError(f"give the backend's settings once: in the {section!r} section or in backend.settings")
        data["backend_settings"] = value
    return data


def validated_settings(kind: str, raw: object) -> dict[str, JsonValue] | None:
    """The settings as backend `kind`'s settings model reads them, every field filled in (None: none
    given, and its model needs none)."""
    model = settings_model(kind)
    if model is None:
        if raw is None:
            return None  # a backend not installed here: `sil check` and `sil run` say so
        raise ValueError(
            f"backend {kind!r} is not installed, so its settings cannot be validated: install the package "
            "that provides it (entry point group 'sil.backends')"
        )
    try:
        settings = model.model_validate({} if raw is None else raw)
    except ValidationError as ex:
        where = kind if kind in V1_SECTIONS else "backend.settings"
        detail = "; ".join(
            f"{'.'.join([where, *map(str, e['loc'])])}: {e['msg'].removeprefix('Value error, ')}"
            + (f" ({hint})" if (hint := nearest_field(model, e)) else "")
            for e in ex.errors()
        )
        need = f"needs settings (a {kind!r} section, or backend.settings)" if raw is None else "has invalid settings"
        raise ValueError(f"backend {kind!r} {need}: {detail}") from None
    return None if raw is None else settings.model_dump(mode="json")


def v1_backend_layout(kind: str, settings: dict[str, JsonValue] | None) -> dict[str, Any]:
    """The backend as hashed: the v1 layout, a top-level section per built-in backend (null but the
    contract's own), a plugin's settings (if any) under `backend`; so a v1 contract keeps its hash."""
    out: dict[str, Any] = dict.fromkeys(V1_SECTIONS)
    if kind in V1_SECTIONS:
        out[kind] = settings
    elif settings is not None:
        out["backend"] = {"kind": kind, "settings": settings}
    return out


def approval_free_reason(contract: Contract) -> str:
    """Why a contract needs no signed approval, in words for the ledger and `sil check`."""
    local = contract.local_roles()
    if not local:
        return "every role is offline"
    return f"every role is offline or a local model on loopback ({', '.join(local)})"


def run_note(contract: Contract) -> str:
    """One honest line for the ledger, summary and report: what produced the scores."""
    kinds = contract.role_kinds()
    target, judge = kinds["target"], kinds["judge"]
    if judge == "real model":
        return LIVE_JUDGE_NOTE
    if judge == "real model (local)":
        return f"{target}, local judge model: scores are a small local model's, with its noise"
    if judge == "rule-based judge":
        return f"{target}, rule-based judge: scores are fixed rules over the real transcript, not a judge model's"
    return f"{target} target, {judge} judge: fixed rules, not a judge model"


def token_counting(contract: Contract) -> str:
    """How tokens were counted, for the run record."""
    if contract.local:
        return (
            "usage as each local server reported it; where none is reported (e.g. auditor context "
            f"compaction) a character estimate (chars/{CHARS_PER_TOKEN_ESTIMATE}); no tokenizer is downloaded"
        )
    return "usage as each provider reported it; estimates by inspect-ai's default tokenizer (tiktoken o200k_base)"


class LoadedContract(BaseModel):
    """A validated contract plus the prose programme that came with it."""

    model_config = ConfigDict(frozen=True)
    contract: Contract
    programme: str
    path: str


def split_front_matter(text: str, path: str = "program.md") -> tuple[str, str]:
    lines = text.splitlines(keepends=True)
    if not lines or lines[0].strip() != "---":
        raise ContractError(
            f"{path} must start with a '---' line opening the YAML front matter (a run contract is "
            "Markdown with YAML front matter: see program.md)"
        )
    for i, line in enumerate(lines[1:], start=1):
        if line.strip() == "---":
            return "".join(lines[1:i]), "".join(lines[i + 1 :])
    raise ContractError(f"{path}: the front matter is not closed by a '---' line")


def parse_contract(text: str, path: str = "program.md") -> LoadedContract:
    import yaml  # here, not at import: reading a run's JSON contract snapshot needs no YAML parser

    from sil.base.yamlstrict import DuplicateYamlKey, YamlTooLarge, load_strict

    front, prose = split_front_matter(text, path)
    refuse_secrets(text, front, path)
    if len(front) > MAX_FRONT_MATTER:
        raise ContractError(f"{path}: front matter has {len(front)} characters; at most {MAX_FRONT_MATTER}")
    try:
        data = load_strict("\n" + front)  # line 1 is the opening '---': YAML lines are file lines
    except DuplicateYamlKey as ex:
        raise ContractError(str(ex)) from None
    except YamlTooLarge as ex:
        raise ContractError(f"{path}: front matter refused: {ex}") from None
    except yaml.YAMLError as ex:
        raise ContractError(f"{path}: front matter is not valid YAML: {ex}") from None
    except RecursionError:
        raise ContractError(f"{path}: front matter is nested too deeply") from None
    except ValueError as ex:  # e.g. an integer with thousands of digits
        raise ContractError(f"{path}: front matter has a value that cannot be read: {ex}") from None
    if not isinstance(data, dict):
        raise ContractError(f"{path}: front matter must be a mapping of contract fields")
    if "bound" in data:
        raise ContractError(
            f"{path}: 'bound' is computed when the contract is loaded (hashes of the programme, "
            "mutator template and catalogue); remove it from the front matter"
        )
    hidden = _hidden_character(data)
    if hidden:
        raise ContractError(f"{path}: {hidden}")
    try:
        contract = Contract.model_validate(data)
    except ValidationError as ex:
        hints = functools.partial(nearest_field, Contract)
        raise ContractError(
            f"{path}: invalid contract:\n{describe_validation_errors(ex, '(contract)', hints)}"
        ) from None
    programme = prose.strip()
    contract = contract.model_copy(update={"bound": _bound_hashes(contract, programme, Path(path))})
    return LoadedContract(contract=contract, programme=programme, path=path)


def refuse_secrets(text: str, front: str, path: str) -> None:
    """A credential anywhere in the contract is refused, naming its line: the programme is sent
    to the mutator model (a remote one, for a cloud mutator) and the contract is stored with every
    run and every revision under state/contracts/."""
    hit = find_in_lines(text)
    if hit is None:
        return
    line, rule = hit
    part = "front matter" if line <= front.count("\n") + 2 else "research programme"
    raise ContractError(
        f"{path} line {line} ({part}) holds what looks like a secret ({rule}); remove it: the contract "
        "is sent to the mutator model and stored with every run, and credentials are passed by environment "
        "variable (models.<role>.credential_env names it)"
    )


def _sha256_file(path: Path, what: str) -> str:
    try:
        return hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as ex:
        raise ContractError(f"cannot read the {what} {path}: {ex.strerror}") from None


def template_path(name: str) -> Path:
    return TEMPLATES_DIR / f"{name}.md"


def catalogue_path(contract: Contract, contract_path: Path) -> Path | None:
    if contract.mutator.catalogue is None:
        return None
    return (Path(contract_path).resolve().parent / contract.mutator.catalogue).resolve()


def _bound_hashes(contract: Contract, programme: str, path: Path) -> dict[str, str]:
    """What besides the front matter defines the run, hashed: it enters the contract hash."""
    out = {"programme": hashlib.sha256(programme.encode()).hexdigest()}
    if contract.models.mutator.model != CATALOGUE_MODEL:
        template = template_path(contract.mutator.template)
        if not template.is_file():
            raise ContractError(
                f"{path}: mutator.template {contract.mutator.template!r} does not exist "
                f"(expected {template}); the templates are in {TEMPLATES_DIR}"
            )
        out["mutator_template"] = _sha256_file(template, "mutator template")
    catalogue = catalogue_path(contract, path)
    if catalogue is not None:
        out["catalogue"] = _sha256_file(catalogue, "mutator catalogue")
    return out


def _hidden_character(node: Any, where: str = "(contract)") -> str | None:
    """The first key or text holding a character a reviewer cannot see, described."""
    if isinstance(node, dict):
        for key, value in node.items():
            here = f"{where}.{key}" if where != "(contract)" else str(key)
            found = _hidden_character(key, here) or _hidden_character(value, here)
            if found:
                return found
    elif isinstance(node, list):
        for i, item in enumerate(node):
            found = _hidden_character(item, f"{where}[{i}]")
            if found:
                return found
    elif isinstance(node, str):
        for ch in node:
            if unicodedata.category(ch) in _HIDDEN_CATEGORIES and ch not in "\n\t":
                return (
                    f"{where} contains invisible, control or bidirectional character "
                    f"U+{ord(ch):04X}; remove it so the approver reviews what the loop reads"
                )
    return None


def load_contract(path: Path) -> LoadedContract:
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ContractError(
            f"no contract at {path}: pass --contract FILE, or write one there (the SIL repository's "
            "program.md is the default contract, and its examples/program-*.md are templates)"
        ) from None
    except OSError as ex:
        raise ContractError(f"cannot read contract {path}: {ex.strerror}") from None
    except UnicodeDecodeError:
        raise ContractError(f"contract {path} is not UTF-8 text") from None
    return parse_contract(text, str(path))
