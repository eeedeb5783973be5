"""The recorded world's proposer (`offline/recorded`): it proposes exactly the recorded sets.

The recorded backend (sil/exec/backends/recorded.py) can answer only the policy sets its data
file holds: the start and one edit of it per set (data/recorded/sets.yaml, in the offline
catalogue's format). This proposer is the catalogue proposer over those edits, restricted to
the ones that turn the current champion into a recorded set with at least one usable recording
(so from a champion that took one edit, only edits of the same path remain). When none is left
untried it says so, and the arm ends as any exhausted arm does.

    mutator: {model: offline/recorded}     # with backend: {kind: recorded, settings: {...}}
"""

from __future__ import annotations

from collections.abc import Sequence, Set
from pathlib import Path
from typing import Any

from sil.contract.backendsettings import settings_model
from sil.contract.schema import LoadedContract
from sil.exec.backends.recorded import RecordedSettings
from sil.exec.backends.recordedpool import load_pool
from sil.policies.mutation import MutationError, apply_mutation
from sil.policies.store import read_policy_dir
from sil.search.proposers.base import ProposerError
from sil.search.proposers.catalogue import CatalogueEdit, CatalogueProposer, load_catalogue

RECORDED = "offline/recorded"


class RecordedProposer(CatalogueProposer):
    """Catalogue edits whose result, from the champion, is a set with recordings."""

    name = RECORDED

    def __init__(
        self,
        allowed_surfaces: Sequence[str],
        target_dimensions: Sequence[str],
        edits: Sequence[CatalogueEdit],
        recorded: Sequence[dict[str, dict[str, Any]]],
    ) -> None:
        super().__init__(allowed_surfaces, target_dimensions, edits)
        self.recorded_docs = list(recorded)  # each recorded set's documents

    def open_edits(self, champion: dict[str, dict[str, Any]], tried: Set[tuple[str, str, str]]) -> list[CatalogueEdit]:
        return [e for e in super().open_edits(champion, tried) if self.reaches_recorded(e, champion)]

    def reaches_recorded(self, edit: CatalogueEdit, champion: dict[str, dict[str, Any]]) -> bool:
        try:
            new = apply_mutation(self.mutation_for(edit, champion, 0, 0), champion, self.allowed_surfaces)
        except MutationError:
            return False
        return {**champion, edit.surface: new} in self.recorded_docs


def recorded_sets(
    start: dict[str, dict[str, Any]], edits: Sequence[CatalogueEdit], names: Set[str], surfaces: Sequence[str]
) -> list[dict[str, dict[str, Any]]]:
    """The documents of every recorded set (`names`: the sets with a usable recording)."""
    maker = CatalogueProposer(surfaces, (), edits)
    out = [start] if "start" in names else []
    for edit in edits:
        if edit.id in names:
            out.append({**start, edit.surface: apply_mutation(maker.mutation_for(edit, start, 0, 0), start, surfaces)})
    return out


def recorded_proposer(loaded: LoadedContract) -> RecordedProposer:
    """The proposer for a contract on the recorded backend (its settings name the data and sets)."""
    c = loaded.contract
    if settings_model(c.backend) is not RecordedSettings:
        raise ProposerError(f"{RECORDED} proposes recorded sets: it needs backend 'recorded', not {c.backend!r}")
    s = c.settings(RecordedSettings)
    edits = load_catalogue(Path(s.sets))
    _, start = read_policy_dir(Path(s.start))
    pool = load_pool(Path(s.data))
    with_audits = {pool.names[i] for i in pool.set_ids() if pool.of(i, "search")}
    surfaces = c.search_space.surfaces
    return RecordedProposer(
        surfaces, c.promotion.target_dimensions, edits, recorded_sets(start, edits, with_audits, surfaces)
    )
