"""What every proposer receives and returns: one request in, one `Proposal` out.

A proposer sees only what the request carries: the champion's policy documents, the edits
already tried in this arm, a seeded generator, the candidate's index and, for proposers that
read evidence, a `context` built by the loop from this run's own ledger and audit logs. It
never reads the audit world, the ledger or the disk on its own. A proposer that calls a
model asks `spend` before every call (the run's USD budget) and reports each call, so the
loop can charge it and record it.
"""

from __future__ import annotations

from collections.abc import Callable, Set
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict

from sil.policies.mutation import Mutation
from sil.search.evidence import MutatorContext


class ProposerError(ValueError):
    """No proposer for the contract's mutator model, or a catalogue that does not load."""


def _no_limit(usd: float) -> str | None:
    return None


@dataclass(frozen=True)
class ProposalRequest:
    """Everything a proposer may use for one candidate."""

    champion: dict[str, dict[str, Any]]  # surface -> the champion's validated document
    tried: Set[tuple[str, str, str]]  # (surface, path, value hash) already proposed in this arm
    rng: np.random.Generator  # seeded by (run seed, arm, index): reproducible
    index: int  # the candidate's number in its arm
    run_seed: int
    arm: str = ""
    context: MutatorContext | None = None  # evidence and history, for proposers that read evidence
    spend: Callable[[float], str | None] = field(default=_no_limit)  # why up to $x may not be spent
    work_dir: Path | None = None  # where a proposer keeps raw model outputs
    attempt: int = 0  # the arm's proposer gaps so far for this candidate: a retry is a new question
    wall_left: Callable[[], float | None] = field(default=lambda: None)  # seconds of the run's wall budget left


class MutatorCall(BaseModel):
    """One model call a proposer made: what was asked, what it cost, what came back."""

    model_config = ConfigDict(frozen=True)
    model: str
    prompt_sha256: str
    input_tokens: int = 0
    output_tokens: int = 0
    usd: float = 0.0
    output_sha256: str | None = None
    output_file: str | None = None  # relative to the run directory
    error: str | None = None  # why the output was not a usable mutation, if it was not


class Proposal(BaseModel):
    """A proposer's answer: a mutation, or nothing left to try, or a gap (it tried and failed)."""

    model_config = ConfigDict(frozen=True)
    mutation: Mutation | None = None
    calls: list[MutatorCall] = []
    gap: str | None = None  # e.g. every retry gave invalid output; the loop records it
    stop: str | None = None  # the proposer may not go on (e.g. its next call could exceed the budget)

    @property
    def exhausted(self) -> bool:
        return self.mutation is None and self.gap is None and self.stop is None


class Proposer(Protocol):
    """What the loop asks of a proposer (docs/reference.md, "Writing a proposer")."""

    name: str
    # True: the loop builds `request.context` (this run's evidence and history) for it; False
    # (the default in `ProposerBase`): the context is None and building it is skipped
    reads_evidence: bool

    def propose(self, request: ProposalRequest) -> Proposal:
        """One candidate (or an exhausted/gap answer) for this request."""
        ...


class ProposerBase:
    """The defaults of `Proposer`'s optional members; a proposer subclasses it."""

    name: str
    reads_evidence: bool = False


def conforming(proposer: Proposer, model: str) -> Proposer:
    """The proposer a plugin's factory built, refused (naming what it lacks) unless it has every member."""
    missing = sorted(m for m in ("name", "reads_evidence", "propose") if not hasattr(proposer, m))
    if missing:
        raise ProposerError(
            f"proposer {model!r} ({type(proposer).__name__}) lacks {', '.join(missing)}: subclass "
            "sil.search.proposers.ProposerBase, which gives every optional member its default"
        )
    return proposer
