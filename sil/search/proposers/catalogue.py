"""The catalogue proposer (`offline/catalogue`): real edits drawn from a YAML catalogue.

Seeded by the rng the loop passes in, reproducible, never repeating an edit already tried in
the run and never proposing one that would change nothing. Edits whose expected effect names
a target dimension are drawn more often. Every proposal goes through `parse_mutation`,
exactly as an LLM's JSON would.

    proposer = CatalogueProposer(contract.search_space.surfaces, ["broken_tool_use"])
    mutation = proposer.propose(ProposalRequest(champion, tried, rng, index, run_seed))
"""

from __future__ import annotations

import functools
from collections.abc import Sequence, Set
from pathlib import Path
from typing import Annotated, Any, Literal

import numpy as np
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sil.base.yamlstrict import DuplicateYamlKey, YamlTooLarge, load_strict
from sil.policies.mutation import (
    Mutation,
    MutationError,
    apply_mutation,
    mutation_id_for,
    parse_mutation,
    value_at,
    value_hash,
)
from sil.search.proposers.base import Proposal, ProposalRequest, ProposerBase, ProposerError

CATALOGUE_PATH = Path(__file__).resolve().with_name("catalogue.yaml")
OFFLINE_CATALOGUE = "offline/catalogue"
# An edit whose expected effect names one of the contract's target dimensions is drawn this
# many times more often than one that does not: the programme says what to work on.
TARGET_WEIGHT = 3.0


# --- catalogue -------------------------------------------------------------------------------


class CatalogueEdit(BaseModel):
    """One plausible policy edit; `op` builds the value from the champion's current one."""

    model_config = ConfigDict(frozen=True, extra="forbid", strict=True)

    id: Annotated[str, Field(pattern=r"^[a-z0-9][a-z0-9-]{0,63}$")]
    surface: str
    path: str
    op: Literal["set", "append", "remove"] = "set"
    value: str | bool | list[str]
    requires: dict[str, str | bool | list[str]] = {}
    hypothesis: str
    evidence: list[str]
    expected_effect: dict[str, float]
    rollback: str

    @model_validator(mode="after")
    def _op_fits_value(self) -> CatalogueEdit:
        if self.op == "remove" and not isinstance(self.value, list):
            raise ValueError("op 'remove' needs a list of items to remove")
        if self.op == "append" and isinstance(self.value, bool):
            raise ValueError("op 'append' needs text or a list of items to append")
        return self

    def resolve(self, document: dict[str, Any]) -> Any:
        """The value this edit would set in `document`."""
        current = value_at(document, self.path)
        if self.op == "set" or current is None:
            return self.value
        if self.op == "remove" and isinstance(self.value, list):
            return [item for item in current if item not in self.value]
        if isinstance(current, list) and isinstance(self.value, list):
            return current + [item for item in self.value if item not in current]
        if isinstance(current, str) and isinstance(self.value, str):
            if self.value in current:
                return current
            return f"{current.rstrip()} {self.value}".strip()
        raise ProposerError(
            f"catalogue edit {self.id}: cannot append a {type(self.value).__name__} to the "
            f"{type(current).__name__} at {self.surface}.{self.path}"
        )

    def applies_to(self, document: dict[str, Any]) -> bool:
        return all(value_at(document, path) == want for path, want in self.requires.items())


def load_catalogue(path: Path = CATALOGUE_PATH) -> list[CatalogueEdit]:
    """Read and validate the catalogue; ids must be unique."""
    try:
        data = load_strict(Path(path).read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError, DuplicateYamlKey, YamlTooLarge) as ex:
        raise ProposerError(f"cannot read catalogue {path}: {ex}") from None
    if not isinstance(data, list) or not data:
        raise ProposerError(f"catalogue {path} must be a non-empty list of edits")
    edits = []
    for i, entry in enumerate(data):
        try:
            edits.append(CatalogueEdit.model_validate(entry))
        except ValidationError as ex:
            where = entry.get("id", f"#{i}") if isinstance(entry, dict) else f"#{i}"
            raise ProposerError(f"catalogue edit {where} is invalid:\n{ex}") from None
    ids = [e.id for e in edits]
    repeated = sorted({i for i in ids if ids.count(i) > 1})
    if repeated:
        raise ProposerError(f"catalogue edit ids are not unique: {', '.join(repeated)}")
    return edits


@functools.cache
def default_catalogue() -> tuple[CatalogueEdit, ...]:
    """`sil/search/proposers/catalogue.yaml`, read once per process (edits are frozen models)."""
    return tuple(load_catalogue(CATALOGUE_PATH))


# --- the offline proposer --------------------------------------------------------------------


class CatalogueProposer(ProposerBase):
    """Draws one eligible catalogue edit per round, weighted toward the target dimensions."""

    name = OFFLINE_CATALOGUE

    def __init__(
        self,
        allowed_surfaces: Sequence[str],
        target_dimensions: Sequence[str] = (),
        catalogue: Sequence[CatalogueEdit] | None = None,
    ) -> None:
        self.allowed_surfaces = list(allowed_surfaces)
        self.target_dimensions = frozenset(target_dimensions)
        self.catalogue = list(catalogue) if catalogue is not None else default_catalogue()

    def mutation_for(
        self, edit: CatalogueEdit, champion: dict[str, dict[str, Any]], index: int, run_seed: int
    ) -> Mutation:
        """The parsed Mutation for one edit against the champion (may still be a no-op)."""
        value = edit.resolve(champion[edit.surface])
        raw = {
            "mutation_id": mutation_id_for(run_seed, index, edit.surface, edit.path, value),
            "surface": edit.surface,
            "path": edit.path,
            "value": value,
            "hypothesis": edit.hypothesis,
            "evidence": edit.evidence,
            "expected_effect": edit.expected_effect,
            "rollback_condition": edit.rollback,
            "proposer": f"{self.name}:{edit.id}",
        }
        return parse_mutation(raw, self.allowed_surfaces)

    def open_edits(self, champion: dict[str, dict[str, Any]], tried: Set[tuple[str, str, str]]) -> list[CatalogueEdit]:
        """Edits that are allowed, whose preconditions hold, untried, and change something."""
        out = []
        for edit in self.catalogue:
            if edit.surface not in self.allowed_surfaces or edit.surface not in champion:
                continue
            document = champion[edit.surface]
            if not edit.applies_to(document):
                continue
            value = edit.resolve(document)
            if value == value_at(document, edit.path):
                continue
            if (edit.surface, edit.path, value_hash(value)) not in tried:
                out.append(edit)
        return out

    def checked(
        self, edit: CatalogueEdit, champion: dict[str, dict[str, Any]], index: int, run_seed: int
    ) -> Mutation | None:
        """The edit's Mutation if it parses and applies to the champion, else None."""
        try:
            mutation = self.mutation_for(edit, champion, index, run_seed)
            apply_mutation(mutation, champion, self.allowed_surfaces)
        except MutationError:
            return None  # e.g. a list already at its size limit in an evolved champion
        return mutation

    def propose(self, request: ProposalRequest) -> Proposal:
        champion, tried, rng = request.champion, request.tried, request.rng
        index, run_seed = request.index, request.run_seed
        # Draw, then check only the drawn edit; an edit that does not apply is dropped and the
        # draw repeated, which keeps the relative weights of the edits that do apply.
        candidates = self.open_edits(champion, tried)
        while candidates:
            weights = np.array([self.weight(edit) for edit in candidates])
            pick = int(rng.choice(len(candidates), p=weights / weights.sum()))
            mutation = self.checked(candidates[pick], champion, index, run_seed)
            if mutation is not None:
                return Proposal(mutation=mutation)
            del candidates[pick]
        return Proposal()

    def weight(self, edit: CatalogueEdit) -> float:
        return TARGET_WEIGHT if self.target_dimensions & edit.expected_effect.keys() else 1.0
