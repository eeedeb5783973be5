"""Proposers by mutator model name: the contract's `models.mutator.model` picks one.

proposer = make_proposer(loaded_contract)       # gets the contract and the programme prose
mutation = proposer.propose(ProposalRequest(...))
"""

from __future__ import annotations

from collections.abc import Callable

from loop.contract import LoadedContract
from loop.proposers.base import MutatorCall, Proposal, ProposalRequest, Proposer, ProposerError
from loop.proposers.catalogue import OFFLINE_CATALOGUE, CatalogueProposer

__all__ = ["PROPOSERS", "MutatorCall", "Proposal", "ProposalRequest", "Proposer", "ProposerError", "make_proposer"]


def _catalogue(loaded: LoadedContract) -> Proposer:
    # The catalogue reads the programme's machine-readable part (the target dimensions).
    c = loaded.contract
    return CatalogueProposer(c.search_space.surfaces, c.promotion.target_dimensions)


# Mutator model name -> factory(loaded contract: the contract and its programme prose).
PROPOSERS: dict[str, Callable[[LoadedContract], Proposer]] = {OFFLINE_CATALOGUE: _catalogue}


def make_proposer(loaded: LoadedContract) -> Proposer:
    """The proposer the contract's mutator model names."""
    if not isinstance(loaded, LoadedContract):
        raise ProposerError(
            f"make_proposer needs a LoadedContract (contract and programme), not {type(loaded).__name__}"
        )
    model = loaded.contract.models.mutator.model
    factory = PROPOSERS.get(model)
    if factory is not None:
        return factory(loaded)
    if model.startswith("offline/"):
        raise ProposerError(f"unknown offline proposer {model!r}; available: {', '.join(sorted(PROPOSERS))}")
    raise ProposerError(
        f"LLM proposer not available yet: the contract's mutator model is {model!r}. Set "
        f"models.mutator.model to {OFFLINE_CATALOGUE!r} to use the offline catalogue proposer."
    )
