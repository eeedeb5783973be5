"""Proposers by mutator model name: `offline/catalogue`, or the LLM mutator for any inspect-ai model.

Another package adds a proposer without editing this one: register a factory (it receives the
loaded contract: the contract and its programme prose) with `@register_proposer("offline/name")`
and make it discoverable through the `sil.proposers` entry point group (the entry point names
the module to import, or the factory itself; quote the name, it contains a slash):

    [project.entry-points."sil.proposers"]
    "offline/mine" = "mypackage.proposer"

    proposer = make_proposer(loaded_contract)
    mutation = proposer.propose(ProposalRequest(...))
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

from sil.base.registry import Registry
from sil.contract.schema import LoadedContract, catalogue_path
from sil.search.proposers.base import (
    MutatorCall,
    Proposal,
    ProposalRequest,
    Proposer,
    ProposerBase,
    ProposerError,
    conforming,
)
from sil.search.proposers.catalogue import OFFLINE_CATALOGUE, CatalogueProposer, load_catalogue
from sil.search.proposers.llm import LLMProposer

__all__ = [
    "ENTRY_POINT_GROUP",
    "PROPOSERS",
    "LLMProposer",
    "MutatorCall",
    "Proposal",
    "ProposalRequest",
    "Proposer",
    "ProposerBase",
    "ProposerError",
    "available",
    "make_proposer",
    "register_proposer",
]

ENTRY_POINT_GROUP = "sil.proposers"
Factory = Callable[[LoadedContract], Proposer]


def _catalogue(loaded: LoadedContract) -> Proposer:
    # The catalogue reads the programme's machine-readable part (the target dimensions).
    c = loaded.contract
    path = catalogue_path(c, Path(loaded.path))
    catalogue = load_catalogue(path) if path is not None else None
    return CatalogueProposer(c.search_space.surfaces, c.promotion.target_dimensions, catalogue)


# Mutator model name -> factory(loaded contract).
PROPOSERS: Registry[Factory] = Registry("proposer", ENTRY_POINT_GROUP, {OFFLINE_CATALOGUE: _catalogue})
register_proposer = PROPOSERS.register


def available() -> list[str]:
    """Every proposer name registered or offered by an entry point (the LLM mutator takes any other)."""
    return PROPOSERS.names()


def make_proposer(loaded: LoadedContract) -> Proposer:
    """The proposer the contract's mutator model names."""
    if not isinstance(loaded, LoadedContract):
        raise ProposerError(
            f"make_proposer needs a LoadedContract (contract and programme), not {type(loaded).__name__}"
        )
    model = loaded.contract.models.mutator.model
    try:
        factory = PROPOSERS.get(model)
    except ImportError as ex:
        raise ProposerError(str(ex)) from None
    if factory is not None:
        return conforming(factory(loaded), model)
    if model.startswith("offline/"):
        raise ProposerError(
            f"unknown offline proposer {model!r}; available: {', '.join(available())}, or an "
            "inspect-ai model name (e.g. scripted/mutator offline, anthropic/<model>) for the LLM mutator"
        )
    return LLMProposer(loaded)  # any inspect-ai model name: scripted/mutator offline, or a real one
