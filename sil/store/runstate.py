"""The one persisted object of a run, written atomically after every change.

Everything the loop needs to resume after a crash is here or derivable from the ledger and
the audit directories; nothing lives only in memory. Every field is typed: the pending
mutation is a `Mutation`, a decision a `GateDecision`, the noise pool and the error budget
their own models.

    state = RunState.load(run_dir)      # None for a new run
    state.save(run_dir)
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from sil.base.errors import Halt
from sil.base.fsutil import atomic_write_bytes
from sil.contract.prepare import SeedSet
from sil.policies.mutation import Mutation
from sil.policies.store import PolicySet
from sil.stats.fitness import RoundStat
from sil.stats.gate import GateDecision
from sil.stats.judges import JudgeState, Trial

STATE_FILE = "state.json"
PHASES = ("preflight", "baseline", "never", "random", "gate", "final", "done")
Phase = Literal["preflight", "baseline", "never", "random", "gate", "final", "done", "halted"]
CandidateStage = Literal["proposed", "applied", "decided"]
RoundKind = Literal["baseline", "aa", "screen", "confirm", "random", "final", "certify", "replicate"]


class PlannedRound(BaseModel):
    """A round whose audit ids and clock tick were fixed before it ran."""

    label: str
    tick: int
    kind: RoundKind
    seed_set: SeedSet = "search"
    reference: list[str] = []  # a screen against the champion's audits: their ids (empty: paired)


class Pending(BaseModel):
    """The candidate an arm is working on; resumable at every stage."""

    index: int
    mutation: Mutation
    parent: PolicySet
    candidate: PolicySet
    stage: CandidateStage = "proposed"
    trial: Trial = Trial()
    verdict: Literal["keep", "revert"] | None = None
    reason: str | None = None
    decision: GateDecision | None = None
    round_no: int = 0  # paired rounds started for this candidate (gaps included): label numbers


class ArmState(BaseModel):
    arm: str
    champion: PolicySet
    audits: int = 0
    candidates: int = 0
    keeps: int = 0
    reverts: int = 0
    proposer_gaps: int = 0
    done: bool = False
    stop_reason: str | None = None
    pending: Pending | None = None
    final_rounds: list[RoundStat] = []  # the final check or certification rounds, champion vs start
    # gate champion certified on the held-out seeds: its final check on the search seeds, for the summary
    search_rounds: list[RoundStat] = []
    champion_commit: str | None = None  # git commit of the champion set (sil/store/policyrefs.py)
    # the champion's change from the start as its search estimated it (sum over its KEEPs of each
    # KEEP's mean paired difference): what sizes its certification (sil/stats/horizon.py)
    champion_effect: dict[str, float] = {}


class RunState(BaseModel):
    model_config = ConfigDict(validate_assignment=True)
    run_id: str
    contract_hash: str
    measurement_hash: str
    origin: PolicySet
    replicate_k: int  # confirmation rounds per candidate: fixed for the run's life
    shared: JudgeState  # the noise pool and the run's error budget
    phase: Phase = "preflight"
    tick: int = 0
    audits: int = 0
    gaps: int = 0
    usd: float = 0.0
    mutator_usd: float = 0.0  # the part of usd the mutator's model calls cost
    elapsed_s: float = 0.0
    planned: PlannedRound | None = None
    baseline: list[str] = []
    aa_rounds: list[RoundStat] = []
    arms: dict[str, ArmState] = {}
    consecutive_gaps: dict[str, int] = {}
    # per policy set, its last `promotion.screen_reference` audits no selection looked at (A/A rounds
    # and the champion side of paired search-seed rounds): what a single-audit screen compares with
    references: dict[str, list[str]] = {}
    halt_reason: str | None = None
    resume_phase: Phase | None = None  # where a halted run picks up when it is run again

    @classmethod
    def load(cls, run_dir: Path) -> RunState | None:
        path = Path(run_dir) / STATE_FILE
        if not path.exists():
            return None
        try:
            return cls.model_validate_json(path.read_bytes())
        except ValidationError as ex:
            raise Halt(
                f"{path} does not hold a run state this version can read "
                f"({ex.error_count()} errors); start a new run with --new"
            ) from None

    def save(self, run_dir: Path) -> None:
        atomic_write_bytes(Path(run_dir) / STATE_FILE, self.model_dump_json(indent=1).encode())

    def phase_done(self, phase: str) -> bool:
        """Whether `phase` lies behind the run (a finished or halted run has no phase left)."""
        if self.phase in ("done", "halted"):
            return True
        return PHASES.index(phase) < PHASES.index(self.phase)
