"""The one persisted object of a run, written atomically after every change.

Everything the loop needs to resume after a crash is here or derivable from the ledger and
the audit directories; nothing lives only in memory.

    state = RunState.load(run_dir)      # None for a new run
    state.save(run_dir)
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from fitness import RoundStat
from loop.fsutil import atomic_write_bytes
from loop.policystore import PolicySet

STATE_FILE = "state.json"
Phase = Literal["preflight", "baseline", "never", "random", "gate", "final", "done", "halted"]
Stage = Literal["proposed", "applied", "screen", "confirm", "decided", "closed"]


class PlannedRound(BaseModel):
    """A paired round whose audit ids and clock tick were fixed before it ran."""

    label: str
    tick: int
    kind: Literal["baseline", "aa", "screen", "confirm", "random", "final", "replicate"]


class Pending(BaseModel):
    """The candidate an arm is working on; resumable at every stage."""

    index: int
    mutation: dict[str, Any]
    parent: PolicySet
    candidate: PolicySet
    stage: Stage = "proposed"
    alpha: float | None = None
    noise: dict[str, Any] | None = None
    screen: RoundStat | None = None
    confirm: list[RoundStat] = []
    verdict: Literal["keep", "revert"] | None = None
    reason: str | None = None
    decision: dict[str, Any] | None = None
    round_no: int = 0


class ArmState(BaseModel):
    arm: str
    champion: PolicySet
    audits: int = 0
    candidates: int = 0
    keeps: int = 0
    reverts: int = 0
    done: bool = False
    stop_reason: str | None = None
    pending: Pending | None = None
    final_rounds: list[RoundStat] = []
    champion_commit: str | None = None  # git commit of the champion set (loop/policyrefs.py)


class RunState(BaseModel):
    model_config = ConfigDict(validate_assignment=True)
    run_id: str
    contract_hash: str
    measurement_hash: str
    origin: PolicySet
    phase: Phase = "preflight"
    tick: int = 0
    audits: int = 0
    gaps: int = 0
    usd: float = 0.0
    elapsed_s: float = 0.0
    planned: PlannedRound | None = None
    baseline: list[str] = []
    aa_rounds: list[RoundStat] = []
    noise_pool: dict[str, Any] = {}
    error_budget: dict[str, Any] = {}
    arms: dict[str, ArmState] = {}
    consecutive_gaps: dict[str, int] = {}
    halt_reason: str | None = None
    resume_phase: Phase | None = None  # where a halted run picks up when it is run again

    @classmethod
    def load(cls, run_dir: Path) -> RunState | None:
        path = Path(run_dir) / STATE_FILE
        if not path.exists():
            return None
        return cls.model_validate_json(path.read_bytes())

    def save(self, run_dir: Path) -> None:
        atomic_write_bytes(Path(run_dir) / STATE_FILE, self.model_dump_json(indent=1).encode())
