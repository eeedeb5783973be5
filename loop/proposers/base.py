"""What every proposer receives and returns: one request in, one typed Mutation (or None) out.

A proposer sees only what the request carries: the champion's policy documents, the edits
already tried in this arm, a seeded generator and the candidate's index. It never reads the
audit world, the ledger or the disk on its own.
"""

from __future__ import annotations

from collections.abc import Set
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from loop.mutation import Mutation


class ProposerError(ValueError):
    """No proposer for the contract's mutator model, or a catalogue that does not load."""


@dataclass(frozen=True)
class ProposalRequest:
    """Everything a proposer may use for one candidate."""

    champion: dict[str, dict]  # surface -> the champion's validated document
    tried: Set[tuple[str, str, str]]  # (surface, path, value hash) already proposed in this arm
    rng: np.random.Generator  # seeded by (run seed, arm, index): reproducible
    index: int  # the candidate's number in its arm
    run_seed: int


class Proposer(Protocol):
    name: str

    def propose(self, request: ProposalRequest) -> Mutation | None:
        """One candidate mutation, or None when the proposer has nothing left to try."""
        ...
