"""Every ledger record type the loop writes: one payload model each, and the keys that name them.

A record is written at most once per (type, key) across crashes and resumes (see
`ledger.RecordBook`), so the key builders in `Keys` are the identities of the run's events.
A candidate is named by its arm *and* its mutation id: the same edit may be proposed in the
random and the gate arm, and each is its own candidate with its own verdict.

    book.once(Keys.verdict("gate", mid), VerdictRecord(...))
    for rec, verdict in book.payloads(VerdictRecord): ...
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal, Protocol

from pydantic import BaseModel, ConfigDict, computed_field

from sil.contract.prepare import SeedSet
from sil.policies.mutation import Mutation
from sil.stats.fitness import NoiseEstimate
from sil.stats.gate import ErrorBudget, GateDecision
from sil.stats.horizon import Outlook
from sil_policy.evidence import Usage

# Whether one audit's target inputs show the use of a surface where its set differs from the
# other arm's: the set's text is there, nothing there to tell, or another policy's text is there.
AuditUse = Literal["proven", "not_provable", "refuted"]


class Payload(BaseModel):
    """Base of every record payload: plain JSON, unknown fields refused when read back."""

    model_config = ConfigDict(frozen=True, extra="forbid", defer_build=True)  # schemas built on first use


class Trust(Payload):
    """What a run (or a segment of it) declares at its start about how its checkpoints are signed.

    `sil ledger verify` holds the run to it: a signed run must have signed checkpoints only,
    by this signer, covering its `stop` and every `segment` record.
    """

    signed: bool = False
    signer: str | None = None  # the identity the checkpoints are signed as (allowed_signers)
    key_fingerprints: list[str] = []  # SHA256:... of the signing key(s)

    def describe(self) -> str:
        return (
            f"checkpoints signed as {self.signer} ({', '.join(self.key_fingerprints)})"
            if self.signed
            else ("unsigned checkpoints")
        )

    def mismatch(self, current: Trust) -> str | None:
        """Why a writer with `current` trust may not continue a run that declared this one."""
        same = self.signed == current.signed and (
            not self.signed
            or (self.signer == current.signer and bool(set(self.key_fingerprints) & set(current.key_fingerprints)))
        )
        if same:
            return None
        return (
            f"the run declared {self.describe()}, but this command would write {current.describe()}; "
            "set SIL_SIGNING_KEY and SIL_SIGNER to the run's key (unset both for an unsigned run), "
            "or start a new run with --new"
        )


class RunRecord(Payload):
    contract_id: str
    contract_hash: str
    measurement_hash: str
    manifest_hash: str
    backend: str
    models: dict[str, str]
    arms: list[str]
    seed: int
    replicate_k: int
    approval: str
    note: str
    trust: Trust = Trust()
    # what plays each role ("real model (local)", "rule-based judge", ...) and how tokens were
    # counted where no provider reported them; empty in ledgers written before they existed
    roles: dict[str, str] = {}
    token_counting: str = ""
    # the project the run belongs to (checkpoint.project_id); empty in ledgers written before
    project: str = ""


class BaselineRecord(Payload):
    policy_set: str
    audit_ids: list[str]
    per_dimension_mean: dict[str, float | None]
    sample_counts: dict[str, int]
    contract_hash: str
    measurement_hash: str
    seeds_hash: str
    models: dict[str, str]


class NoiseRecord(Payload):
    estimate: NoiseEstimate
    pairs: int
    source: str


class MutationRecord(Payload):
    arm: str
    index: int
    mutation: Mutation
    candidate_set: str
    parent_set: str
    value_hash: str


class IntentRecord(Payload):
    action: Literal["apply", "audit", "promote", "revert", "demote"]
    key: str
    arm: str | None = None
    audit_ids: list[str] = []
    tick: int | None = None
    surface: str | None = None
    to: str | None = None
    seed_set: SeedSet | None = None  # an audit intent: the seeds its audits run on


class AuditRecord(Payload):
    audit_id: str
    arm: str
    round: str
    role: str
    policy_set: str
    tick: int
    seed_set: SeedSet = "search"  # the held-out seeds only in the final certification
    status: Literal["ok", "gap"]
    gap_reason: str | None
    scores: dict[str, dict[str, float]]
    missing: dict[str, list[str]]
    sample_counts: dict[str, int]
    loaded_policy_hashes: dict[str, str]
    usage: Usage
    wall_s: float
    backend: str
    simulated: bool
    log_path: str | None
    diagnostics: list[str]
    # per surface where the audited set differs from the other arm's: whether the target's inputs
    # show its use (sil/exec/useproof.py); empty for audits of a set alone (baseline, A/A pairs)
    use: dict[str, AuditUse] = {}


class RoundRecord(Payload):
    arm: str
    round: str
    kind: str
    mutation_id: str | None
    diff: dict[str, float | None]
    n_seeds: dict[str, int]
    gap_reason: str | None = None  # the round had a gap: no statistic
    decision: GateDecision | None = None
    coin: float | None = None  # the random arm's draw
    seed_set: SeedSet = "search"  # the seeds both audits of the round ran on
    # a screen of the candidate's audit alone: the champion audits it was compared with (empty: paired)
    reference: list[str] = []

    @computed_field  # type: ignore[prop-decorator]
    @property
    def verdict(self) -> str | None:
        if self.gap_reason is not None:
            return "gap"
        return self.decision.verdict if self.decision is not None else None


class VerdictRecord(Payload):
    arm: str
    mutation_id: str
    verdict: Literal["keep", "revert"]
    reason: str
    candidate_set: str
    parent_set: str
    rounds: int
    alpha: float | None
    error_budget: ErrorBudget | None
    decision: GateDecision | None


class PolicyChangeRecord(Payload):
    """An arm's working policy changed: `applied` (candidate written), `promote`, `revert`."""

    arm: str
    mutation_id: str
    surface: str
    from_hash: str
    to_hash: str
    policy_set: str
    commit: str | None = None  # the candidate's git commit (sil/store/policyrefs.py), when recorded


class CertifyLeg(BaseModel):
    """One leg of the certification in a reviewer's terms (Δ = champion − start, lower is better)."""

    dim: str
    kind: str
    estimate: float | None
    interval: tuple[float, float] | None  # 90% t-interval over the certification rounds
    statistic: float | None
    boundary: float | None
    passed: bool | None


class CertifyRecord(Payload):
    arm: str
    policy_set: str
    against: str  # the policy set it was certified against (the run's starting policy)
    certified: bool
    rounds: int
    looks: int | None = None  # the horizon: certify_rounds (+ a dry proposer's unspent // 2), or sized by the search
    decision: GateDecision | None  # each leg's estimate, statistic and boundary at the last look
    reason: str = ""  # the decision in words (why certified or not)
    legs: list[CertifyLeg] = []
    seed_set: SeedSet = "search"  # the seeds the certification rounds ran on
    seeds: int | None = None  # how many of them
    sigma_scale: float = 1.0  # the frozen noise SD widened for rounds on fewer seeds than it was estimated on
    # certified on held-out seeds: the same champion's check on the search seeds, for comparison
    search_rounds: int = 0
    search_effect: dict[str, tuple[float, float, float]] = {}  # dim -> (mean, lo90, hi90), champion - start
    # what this horizon could do for a clean champion (planned power; rounds that reach certify_power)
    outlook: Outlook | None = None


class DemoteRecord(Payload):
    """A kept champion taken back: certification failed, or a replication did not hold."""

    cause: Literal["certification", "replication"]
    arm: str
    policy_set: str
    restored_set: str | None  # None: the arm's champion had already moved on
    mutation_id: str | None = None
    reason: str


class ReplicateRecord(Payload):
    mutation_id: str
    arm: str
    rounds: int
    target: str
    target_interval: tuple[float, float, float] | None
    critical_means: dict[str, float | None]
    demoted: bool
    reason: str
    champion_reverted: bool
    conclusive: bool = True  # False: the interval spans the margin, nothing changed
    rounds_needed: int | None = None  # inconclusive: about how many rounds would decide


class UserPromoteRecord(Payload):
    """An operator copied an arm's champion into the runtime's own policy files."""

    arm: str
    policy_set: str
    to: str
    by: str = "operator"


# Whether the preflight saw a surface's sentinel text in the target model's inputs.
Use = Literal["proven", "absent", "not_provable"]


class CanaryRecord(Payload):
    """One re-judging of the stored canary transcripts: mean shift per dimension from the reference."""

    label: str
    tick: int
    items: int
    shift: dict[str, float]
    max_shift: float
    halted: bool
    usd: float = 0.0  # what re-judging with a paid judge cost (0 for the simulated or an offline judge)
    calls: int = 0
    unusable: str | None = None  # why the judge's answers could not be compared (a failed canary)


class Recorded(Protocol):
    """What reading a record needs: its type and payload (a ledger Record has both)."""

    type: str
    payload: dict[str, Any]


def canary_halt(records: Iterable[Recorded]) -> str | None:
    """Why the judge-drift canary halted the run (its first halted re-judging), or None."""
    for r in records:
        if r.type == "canary" and r.payload.get("halted"):
            p = r.payload
            why = p.get("unusable") or "re-judged stored transcripts moved " + ", ".join(
                f"{d} {v:+.2f}" for d, v in p.get("shift", {}).items() if abs(v) > p["max_shift"]
            )
            return f"the judge-drift canary halted at {p['label']} (tick {p['tick']}): {why}"
    return None


class SurfaceProbe(Payload):
    surface: str
    sent_hash: str
    seen_hash: str | None
    passed: bool
    message: str
    use: Use = "not_provable"


class PreflightReport(Payload):
    """What the wiring probe sent and saw, per surface.

    `gap_reason` is set when the probe is inconclusive (the audit gave no trustworthy report
    of what was loaded): retry it like any gap. With `gap_reason` None, the probes are the
    verdict: `passed`, or a wiring failure named in the failed probes' messages.
    """

    audit_id: str
    backend: str
    token: str
    probes: list[SurfaceProbe]
    not_implemented: list[str] = []  # surfaces outside the contract's runtime.surfaces: never sent a sentinel
    gap_reason: str | None = None
    audit_gap_reason: str | None = None
    log_path: str | None = None
    usage: Usage = Usage()

    @computed_field  # type: ignore[prop-decorator]
    @property
    def passed(self) -> bool:
        return self.gap_reason is None and bool(self.probes) and all(p.passed for p in self.probes)

    def summary(self) -> str:
        if self.passed:
            head = "wiring preflight passed"
        elif self.gap_reason:
            head = "wiring preflight inconclusive (audit gap): refusing to run"
        else:
            head = "wiring preflight FAILED: refusing to run"
        lines = [f"{head} ({self.backend}, audit {self.audit_id})"]
        lines += [f"  {'ok  ' if p.passed else 'FAIL'} {p.message}" for p in self.probes]
        if self.not_implemented:
            lines.append(f"  not read by this runtime (runtime.surfaces): {', '.join(self.not_implemented)}")
        if self.audit_gap_reason:
            lines.append(f"  audit gap: {self.audit_gap_reason}")
        return "\n".join(lines)


class RecoveryRecord(Payload):
    """What a resumed run found of an audit a crash interrupted, and what it does about it."""

    audit_id: str
    attempt: int
    found: Literal["finished", "timed_out", "died"]
    detail: str
    action: str
    # a died attempt that had started may have paid for model calls its log never reported: it is
    # charged the bound of one audit, so the run's USD budget stays an upper bound of its spend
    charged_usd: float = 0.0


class RepairRecord(Payload):
    """The ledger cut a torn last line a crash left, after keeping it aside."""

    torn_tail_bytes: int
    kept_at: str
    torn_tail_sha256: str


class MutatorCallRecord(Payload):
    """One model call of the mutator: what it was asked (hash), what it cost, what came back."""

    arm: str
    index: int  # the candidate number it proposed for
    attempt: int  # the proposal attempt at that index (a gap moves to the next)
    call: int  # the call within the attempt (retries after invalid output)
    model: str
    prompt_sha256: str
    input_tokens: int
    output_tokens: int
    usd: float
    output_sha256: str | None
    output_file: str | None
    error: str | None
    mutation_id: str | None = None  # set on the call whose output became the candidate
    citations: list[str] = []  # the evidence citations of that output, resolved against this run


class ProposerGapRecord(Payload):
    """The proposer tried and produced no usable mutation (invalid output, fabricated evidence...)."""

    arm: str
    index: int
    attempt: int
    reason: str
    calls: int
    usd: float


class EffectRecord(Payload):
    """A decided candidate's observed paired effect next to the effect its mutation expected."""

    arm: str
    mutation_id: str
    surface: str
    path: str
    verdict: Literal["keep", "revert"]
    expected: dict[str, float]
    observed: dict[str, tuple[float, float, float]]  # dim -> (mean, lo90, hi90) of candidate - champion
    rounds: int


class HaltRecord(Payload):
    reason: str
    phase: str | None = None


class ResumeRecord(Payload):
    """A halted run resumed: its cause is checked anew with fresh retries. Recorded gaps stay in
    the ledger; consecutive-gap counts restart here, and preflight attempts count from
    `preflight_attempts_before` (the probes already recorded), so a fixed cause gets new audits."""

    after_halt: str  # the reason of the halt this resume follows
    phase: str  # the phase the run goes back to
    preflight_attempts_before: int


class SegmentRecord(Payload):
    """Opens a new segment after a finished run's `stop` (replicate, promote): no other record may
    follow a `stop`. Linked to the stop it continues; checkpointed as soon as it is written."""

    reason: str
    after_stop: str  # hash of the `stop` record this segment continues
    trust: Trust = Trust()


class StopRecord(Payload):
    reason: str
    audits: int
    gaps: int
    usd: float
    elapsed_s: float


class HoldoutSpendRecord(Payload):
    """Project holdout ledger: a certification is about to run on a seed set, at this level."""

    seed_set: SeedSet  # which of the measurement's seed sets (held-out, or search when certify_on says)
    set_hash: str  # sha256 of the set's manifest entries: the same seeds, the same hash
    seeds: list[str]
    run_id: str
    contract_id: str
    contract_hash: str
    arm: str
    policy_set: str  # the champion certified
    against: str  # the run's starting policy
    level: float  # the certification's level
    delivers: bool  # the gate arm's champion is delivered; the random arm's never is (it spends nothing)
    claim: Literal["heldout", "fresh"]
    project_alpha: float | None  # None: the run's own guarantee, no project budget


class HoldoutResultRecord(Payload):
    """Project holdout ledger: what a certification concluded."""

    run_id: str
    arm: str
    policy_set: str
    certified: bool
    reason: str


# record type -> payload model; the ledger refuses any other type
RECORD_MODELS: dict[str, type[Payload]] = {
    "contract": RunRecord,
    "baseline": BaselineRecord,
    "noise": NoiseRecord,
    "mutation": MutationRecord,
    "intent": IntentRecord,
    "applied": PolicyChangeRecord,
    "audit": AuditRecord,
    "round": RoundRecord,
    "verdict": VerdictRecord,
    "promote": PolicyChangeRecord,
    "revert": PolicyChangeRecord,
    "certify": CertifyRecord,
    "demote": DemoteRecord,
    "replicate": ReplicateRecord,
    "user_promote": UserPromoteRecord,
    "probe": PreflightReport,
    "canary": CanaryRecord,
    "recovery": RecoveryRecord,
    "repair": RepairRecord,
    "halt": HaltRecord,
    "resume": ResumeRecord,
    "mutator_call": MutatorCallRecord,
    "proposer_gap": ProposerGapRecord,
    "effect": EffectRecord,
    "stop": StopRecord,
    "segment": SegmentRecord,
    "holdout_spend": HoldoutSpendRecord,  # the project holdout ledger's (sil/integrity/holdout.py)
    "holdout_result": HoldoutResultRecord,
}
RECORD_TYPES = frozenset(RECORD_MODELS)


def record_type(payload: Payload, type_: str | None = None) -> str:
    """The record type a payload is written as (`type_` picks one when a model serves several)."""
    if type_ is not None:
        if not isinstance(payload, RECORD_MODELS.get(type_, ())):
            raise TypeError(
                f"a {type_!r} record needs a {RECORD_MODELS[type_].__name__} payload, not {type(payload).__name__}"
            )
        return type_
    types = [t for t, model in RECORD_MODELS.items() if type(payload) is model]
    if len(types) != 1:
        raise TypeError(f"{type(payload).__name__} is the payload of {types or 'no record type'}; name the type")
    return types[0]


def parse_payload(type_: str, body: dict[str, Any]) -> Payload:
    """The typed payload of a stored record (its `_key` and computed fields are not inputs)."""
    model = RECORD_MODELS[type_]
    derived = {"_key", *model.model_computed_fields}
    return model.model_validate({k: v for k, v in body.items() if k not in derived})


class Keys:
    """The key of each event of a run: what makes writing it again a no-op after a crash."""

    RUN = "run"
    BASELINE = "baseline"
    CALIBRATION = "calibration"
    STOP = "stop"

    @staticmethod
    def candidate(arm: str, mutation_id: str) -> str:
        return f"{arm}:{mutation_id}"

    @staticmethod
    def audit(audit_id: str) -> str:
        return audit_id

    @staticmethod
    def round(label: str) -> str:
        return label

    @staticmethod
    def intent(action: str, key: str) -> str:
        return f"{action}:{key}"

    @staticmethod
    def certify(arm: str, policy_set: str) -> str:
        return f"{arm}:{policy_set}"

    @staticmethod
    def canary(label: str) -> str:
        return f"canary:{label}"

    @staticmethod
    def probe(attempt: int) -> str:
        return f"preflight-{attempt}"

    @staticmethod
    def recovery(audit_id: str, attempt: int) -> str:
        return f"audit:{audit_id}:{attempt}"

    @staticmethod
    def halt(n: int) -> str:
        return f"halt:{n}"

    @staticmethod
    def resume(n: int) -> str:
        return f"resume:{n}"

    @staticmethod
    def segment(n: int) -> str:
        return f"segment:{n}"

    @staticmethod
    def replication(arm: str, mutation_id: str, n: int) -> str:
        return f"{arm}:{mutation_id}:{n}"

    @staticmethod
    def mutator_call(arm: str, index: int, attempt: int, call: int) -> str:
        return f"{arm}:{index}:{attempt}:{call}"

    @staticmethod
    def proposer_gap(arm: str, index: int, attempt: int) -> str:
        return f"{arm}:{index}:{attempt}"

    @staticmethod
    def user_promote(policy_set: str) -> str:
        return f"user:{policy_set}"
