"""`offline/recorded` proposes exactly the recorded sets reachable by one edit (TEST FIXTURE scores)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sil.contract.schema import load_contract
from sil.exec.backends.recorded import RecordedSettings
from sil.policies.mutation import apply_mutation
from sil.policies.store import PolicyStore
from sil.search.proposers import make_proposer
from sil.search.proposers.base import ProposalRequest, ProposerError
from sil.search.proposers.recorded import RecordedProposer
from tests.recorded_support import REPO, write_fixture_pool


@pytest.fixture
def proposer(tmp_path: Path) -> tuple[RecordedProposer, dict]:
    data = tmp_path / "audits.jsonl"
    sets = write_fixture_pool(data, tmp_path / "work")
    loaded = load_contract(REPO / "data" / "recorded" / "program.md")
    settings = RecordedSettings(
        data=str(data), sets=str(REPO / "data/recorded/sets.yaml"), start=str(REPO / "state/policies")
    )
    loaded = loaded.model_copy(update={"contract": loaded.contract.with_settings(settings)})
    made = make_proposer(loaded)
    assert isinstance(made, RecordedProposer)
    return made, sets


def proposals(p: RecordedProposer, champion: dict) -> set[str]:
    """Every edit the proposer offers from `champion`, drawn until it has none left."""
    tried: set = set()
    names = set()
    for i in range(20):
        got = p.propose(ProposalRequest(champion, tried, np.random.default_rng(i), i, 1))
        if got.mutation is None:
            assert got.exhausted
            return names
        names.add(got.mutation.proposer.split(":", 1)[1])
        tried.add(got.mutation.edit_key)
    raise AssertionError("the proposer never ran out")


def test_from_the_start_it_proposes_every_set_with_recordings_and_nothing_else(proposer: tuple) -> None:
    p, sets = proposer
    start = PolicyStore(sets["start"].directory.parent.parent).documents(sets["start"].policy_set)
    assert proposals(p, start) == {"refuse-all", "never-refuse", "narrow-refusal", "quote-tool-results"}


def test_from_a_kept_edit_only_edits_of_the_same_path_reach_a_recorded_set(proposer: tuple) -> None:
    p, sets = proposer
    store = PolicyStore(sets["start"].directory.parent.parent)
    champion = store.documents(sets["never-refuse"].policy_set)
    offered = proposals(p, champion)
    assert offered == {"refuse-all", "narrow-refusal"}  # quote-tool-results on top of it was never recorded
    for name in offered:
        edit = next(e for e in p.catalogue if e.id == name)
        new = apply_mutation(p.mutation_for(edit, champion, 0, 0), champion, p.allowed_surfaces)
        assert {**champion, edit.surface: new} == store.documents(sets[name].policy_set)
        # stored as the loop stores a candidate, it is the very set the recorder audited (its hashes)
        stored = store.store_documents({**champion, edit.surface: new}, base=sets["never-refuse"].policy_set)
        assert stored.set_id == sets[name].policy_set.set_id


def test_it_refuses_a_contract_on_another_backend() -> None:
    from sil.search.proposers.recorded import recorded_proposer

    with pytest.raises(ProposerError, match="needs backend 'recorded'"):
        recorded_proposer(load_contract(REPO / "program.md"))
