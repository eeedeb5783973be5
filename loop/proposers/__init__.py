"""Proposers by mutator model name: `offline/catalogue`, or the LLM mutator for any inspect-ai model.

proposer = make_proposer(loaded_contract)       # gets the contract and the programme prose
mutation = proposer.propose(ProposalRequest(...))
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from loop.contract import LoadedContract, catalogue_path
from loop.proposers.base import MutatorCall, Proposal, ProposalRequest, Proposer, ProposerError
from loop.proposers.catalogue import OFFLINE_CATALOGUE, CatalogueProposer, load_catalogue
from loop.proposers.llm import LLMProposer

__all__ = [
    "PROPOSERS",
    "LLMProposer",
    "MutatorCall",
    "Proposal",
    "ProposalRequest",
    "Proposer",
    "ProposerError",
    "make_proposer",
]


def _catalogue(loaded: LoadedContract) -> Proposer:
    # The catalogue reads the programme's machine-readable part (the target dimensions).
    c = loaded.contract
    path = catalogue_path(c, Path(loaded.path))
    catalogue = load_catalogue(path) if path is not None else None
    return CatalogueProposer(c.search_space.surfaces, c.promotion.target_dimensions, catalogue)


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
        raise ProposerError(
            f"unknown offline proposer {model!r}; available: {', '.join(sorted(PROPOSERS))}, or an "
            "inspect-ai model name (e.g. scripted/mutator offline, anthropic/<model>) for the LLM mutator"
        )
    return LLMProposer(loaded)  # any inspect-ai model name: scripted/mutator offline, or a real one
