"""What the loop tells the terminal while it runs: one typed event per kind of step.

The loop emits events through its journal (`Journal.emit`), which hands each one to the display
with a snapshot of where the run stands (`Update`), so the display needs neither to parse the
line nor to re-read state.json. Each event formats its own line (`text()`), numbers rounded
where they are made.

    journal.emit(VerdictReached(arm="gate", mutation_id=m, verdict="keep", reason=r))
"""

from __future__ import annotations

from dataclasses import dataclass


def _round(sigma: dict[str, float]) -> str:
    return ", ".join(f"{d}={v:.2f}" for d, v in sigma.items())


@dataclass(frozen=True)
class BaselineStarted:
    audits: int
    set_id: str

    def text(self) -> str:
        return f"baseline: {self.audits} audits of the starting policy {self.set_id}"


@dataclass(frozen=True)
class CanaryPassed:
    label: str
    items: int
    limit: float

    def text(self) -> str:
        return f"canary ({self.label}): {self.items} stored transcripts re-judged, largest shift within {self.limit:g}"


@dataclass(frozen=True)
class NoiseCalibrated:
    pairs: int
    sigma: dict[str, float]

    def text(self) -> str:
        return f"never: {self.pairs} A/A pairs; noise sigma of the A/A pairs {_round(self.sigma)}"


@dataclass(frozen=True)
class CertificationOutlook:
    """Once the noise is known: what the gate's certification can do for a clean champion."""

    words: str  # what Outlook.words() says (sil/stats/horizon.py)
    seeds: str  # the seeds it runs on, e.g. "6 held-out"
    short: bool  # below the contract's certify_power
    fresh_claim: bool = False  # claims seeds never used: the seeds' spread, unknown yet, lowers the power
    rounds_cap: int | None = None  # set when even the longest certification a contract allows falls short

    def text(self) -> str:
        line = f"certification outlook ({self.seeds} seeds): {self.words}"
        if self.fresh_claim:
            line += " (round noise only: the claim about seeds never used adds the seeds' spread, so less)"
        if not self.short:
            return line
        if self.rounds_cap is not None:
            return (
                f"{line}. WARNING: a find will likely be rolled back, and no certification a contract allows "
                f"(at most {self.rounds_cap} rounds) would do; add held-out seeds, or loosen "
                "promotion.harm_tolerance (a new contract)"
            )
        return (
            f"{line}. WARNING: a find will likely be rolled back; raise budget.certify_rounds, add held-out "
            "seeds, or loosen promotion.harm_tolerance (a new contract)"
        )


@dataclass(frozen=True)
class CandidateProposed:
    arm: str
    index: int
    mutation_id: str
    where: str  # surface.path

    def text(self) -> str:
        return f"{self.arm}: candidate {self.index} {self.mutation_id} {self.where}"


@dataclass(frozen=True)
class LookTaken:
    """One look of a candidate's sequential test (shown only with --verbose)."""

    label: str
    verdict: str
    reason: str

    def text(self) -> str:
        return f"  {self.label}: {self.verdict} ({self.reason})"


@dataclass(frozen=True)
class VerdictReached:
    arm: str
    mutation_id: str
    verdict: str
    reason: str

    def text(self) -> str:
        return f"  {self.arm} {self.mutation_id}: {self.verdict.upper()} — {self.reason}"


@dataclass(frozen=True)
class ArmFinished:
    arm: str
    candidates: int
    keeps: int
    audits: int
    stop_reason: str | None

    def text(self) -> str:
        return f"{self.arm}: {self.candidates} candidates, {self.keeps} kept, {self.audits} audits ({self.stop_reason})"


@dataclass(frozen=True)
class AuditGap:
    audit_id: str
    reason: str

    def text(self) -> str:
        return f"  gap in {self.audit_id}: {' '.join(self.reason.split())}"


@dataclass(frozen=True)
class Recovered:
    """An audit a lost worker or a crash left behind, and what the loop did about it."""

    detail: str

    def text(self) -> str:
        return f"  recovery: {self.detail}"


@dataclass(frozen=True)
class ProposerGap:
    arm: str
    reason: str

    def text(self) -> str:
        return f"  {self.arm}: proposer gap: {self.reason}"


@dataclass(frozen=True)
class PreflightPassed:
    surfaces: int
    unproven: tuple[str, ...] = ()
    not_read: tuple[str, ...] = ()

    def text(self) -> str:
        lines = [f"preflight: all {self.surfaces} surfaces of the search space reach the target"]
        if self.unproven:
            lines.append(f"  loaded, use not provable: {', '.join(self.unproven)}")
        if self.not_read:
            lines.append(f"  not read by this runtime (runtime.surfaces): {', '.join(self.not_read)}")
        return "\n".join(lines)


@dataclass(frozen=True)
class PreflightGap:
    reason: str

    def text(self) -> str:
        return f"  preflight audit gap: {self.reason}"


@dataclass(frozen=True)
class CertificationStopped:
    arm: str
    seeds: str
    why: str

    def text(self) -> str:
        return f"final check of {self.arm} on the {self.seeds} seeds stopped: {self.why}"


@dataclass(frozen=True)
class RolledBack:
    arm: str
    set_id: str

    def text(self) -> str:
        return f"{self.arm}: champion {self.set_id} failed certification; rolled back to the starting policy"


@dataclass(frozen=True)
class AnchorFailed:
    """After a halt, the ledger head could not be anchored either."""

    detail: str

    def text(self) -> str:
        return f"also: {self.detail}"


@dataclass(frozen=True)
class Resuming:
    halt_reason: str | None

    def text(self) -> str:
        return f"resuming after a halt: {self.halt_reason}; retries start afresh"


@dataclass(frozen=True)
class Halted:
    reason: str
    next_step: str
    also: str | None = None  # a second failure while halting (the anchor, or recording the halt)

    def text(self) -> str:
        return f"HALT: {self.reason}\n{self.next_step}" + (f"\nalso: {self.also}" if self.also else "")


Event = (
    BaselineStarted
    | CanaryPassed
    | NoiseCalibrated
    | CertificationOutlook
    | CandidateProposed
    | LookTaken
    | VerdictReached
    | ArmFinished
    | AuditGap
    | Recovered
    | ProposerGap
    | PreflightPassed
    | PreflightGap
    | CertificationStopped
    | RolledBack
    | Resuming
    | Halted
    | AnchorFailed
)


@dataclass(frozen=True)
class Update:
    """An event and where the run stood when it happened (from the journal's in-memory state)."""

    event: Event
    phase: str
    audits: int
    elapsed_s: float
    candidate: str = ""  # the pending candidate: "<mutation> <surface> look <k>", or ""
