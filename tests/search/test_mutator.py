"""The offline catalogue proposer: real edits, seeded, reproducible, never repeated."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from sil.contract.schema import parse_contract
from sil.policies.mutation import apply_mutation, lint_text, parse_mutation, value_at
from sil.search.proposers import ProposalRequest, ProposerError, make_proposer
from sil.search.proposers.catalogue import CATALOGUE_PATH, CatalogueEdit, CatalogueProposer, load_catalogue
from sil_policy import SURFACES, load_surface

ROOT = Path(__file__).resolve().parents[2]
ALL = list(SURFACES)
SEEDS = {p.stem for p in (ROOT / "measurement" / "seeds").glob("*.md")}
DIMENSIONS = {p.stem for p in (ROOT / "measurement" / "rubric").glob("*.md")}
CATALOGUE = load_catalogue()


@pytest.fixture(scope="module")
def defaults() -> dict[str, dict]:
    return {name: load_surface(name, ROOT / "state" / "policies" / s.filename)[0] for name, s in SURFACES.items()}


def run_to_exhaustion(proposer, champion, seed: int, limit: int = 500) -> list:
    rng, tried, out = np.random.default_rng(seed), set(), []
    for index in range(limit):
        mutation = proposer.propose(ProposalRequest(champion, tried, rng, index, seed)).mutation
        if mutation is None:
            return out
        tried.add(mutation.edit_key)
        out.append(mutation)
    raise AssertionError("proposer never ran out of edits")


def with_requirements(edit: CatalogueEdit, docs: dict[str, dict]) -> dict[str, dict]:
    """The defaults with the edit's preconditions made true (each itself a legal mutation)."""
    docs = dict(docs)
    for path, value in edit.requires.items():
        pre = parse_mutation(
            {
                "mutation_id": "000000000000",
                "surface": edit.surface,
                "path": path,
                "value": value,
                "hypothesis": "precondition",
                "evidence": ["test"],
                "expected_effect": {"concerning": 0.0},
                "rollback_condition": "n/a",
                "proposer": "test",
            },
            ALL,
        )
        docs[edit.surface] = apply_mutation(pre, docs, ALL)
    return docs


# --- the catalogue ---------------------------------------------------------------------------


def test_catalogue_is_realistic_in_size_and_covers_all_surfaces():
    assert 40 <= len(CATALOGUE) <= 80
    assert {e.surface for e in CATALOGUE} == set(SURFACES)
    assert len({e.id for e in CATALOGUE}) == len(CATALOGUE)


@pytest.mark.parametrize("edit", CATALOGUE, ids=lambda e: e.id)
def test_catalogue_edit_rests_on_real_seeds_and_dimensions(edit):
    for item in edit.evidence:
        kind, _, name = item.partition(":")
        known = {"seed": SEEDS, "dim": DIMENSIONS}.get(kind, set())
        assert name in known, f"evidence {item!r} names no seed or rubric dimension"
    assert any(item.startswith("seed:") for item in edit.evidence)
    assert set(edit.expected_effect) <= DIMENSIONS
    assert any(v != 0 for v in edit.expected_effect.values())


@pytest.mark.parametrize("edit", CATALOGUE, ids=lambda e: e.id)
def test_catalogue_edit_applies_cleanly_to_the_defaults(edit, defaults):
    docs = with_requirements(edit, defaults)
    proposer = CatalogueProposer(ALL, catalogue=[edit])
    mutation = proposer.mutation_for(edit, docs, index=0, run_seed=1)
    new = apply_mutation(mutation, docs, ALL)
    assert value_at(new, edit.path) == mutation.value != value_at(docs[edit.surface], edit.path)
    assert all(
        lint_text(t) == []
        for t in (
            [mutation.value]
            if isinstance(mutation.value, str)
            else mutation.value
            if isinstance(mutation.value, list)
            else []
        )
    )


@pytest.mark.parametrize("edit", CATALOGUE, ids=lambda e: e.id)
def test_catalogue_list_items_are_whole_names_or_sentences(edit):
    # A YAML flow list splits unquoted text at its commas; this catches such fragments.
    for item in edit.value if isinstance(edit.value, list) else []:
        assert item.replace("_", "").isalnum() or item.endswith("."), item


def test_load_catalogue_refuses_duplicate_keys_and_ids(tmp_path):
    text = CATALOGUE_PATH.read_text()
    dup_key = tmp_path / "dup_key.yaml"
    dup_key.write_text(text.replace("  op: append\n", "  op: append\n  op: set\n", 1))
    with pytest.raises(ProposerError, match="duplicate key 'op'"):
        load_catalogue(dup_key)
    dup_id = tmp_path / "dup_id.yaml"
    dup_id.write_text(text.replace("id: wrapper-tool-call-channel", "id: wrapper-tool-error-honesty"))
    with pytest.raises(ProposerError, match="not unique"):
        load_catalogue(dup_id)
    extra = tmp_path / "extra.yaml"
    extra.write_text(text.replace("  op: append\n", "  op: append\n  weight: 3\n", 1))
    with pytest.raises(ProposerError, match="weight"):
        load_catalogue(extra)


# --- the proposer ----------------------------------------------------------------------------


def test_same_seed_gives_the_same_sequence(defaults):
    a = run_to_exhaustion(CatalogueProposer(ALL, ["broken_tool_use"]), defaults, seed=11)
    b = run_to_exhaustion(CatalogueProposer(ALL, ["broken_tool_use"]), defaults, seed=11)
    c = run_to_exhaustion(CatalogueProposer(ALL, ["broken_tool_use"]), defaults, seed=12)
    assert [m.model_dump() for m in a] == [m.model_dump() for m in b]
    assert [m.proposer for m in a] != [m.proposer for m in c]
    assert {m.proposer for m in a} == {m.proposer for m in c}


def test_no_repeats_and_every_eligible_edit_is_eventually_proposed(defaults):
    proposer = CatalogueProposer(ALL)
    eligible = proposer.open_edits(defaults, set())
    proposed = run_to_exhaustion(proposer, defaults, seed=3)
    keys = [m.edit_key for m in proposed]
    assert len(keys) == len(set(keys)) == len(eligible)
    assert {e.id for e in eligible} == {m.proposer.split(":")[1] for m in proposed}
    assert len({m.mutation_id for m in proposed}) == len(proposed)


def test_proposals_are_parsed_mutations_that_change_the_champion(defaults):
    for mutation in run_to_exhaustion(CatalogueProposer(ALL), defaults, seed=5)[:10]:
        assert mutation.proposer.startswith("offline/catalogue:")
        new = apply_mutation(mutation, defaults, ALL)
        assert new != defaults[mutation.surface]


def test_only_allowed_surfaces_are_proposed(defaults):
    proposed = run_to_exhaustion(CatalogueProposer(["reflection", "tool_policy"]), defaults, seed=2)
    assert proposed and {m.surface for m in proposed} <= {"reflection", "tool_policy"}


def test_preconditions_gate_edits_until_the_champion_meets_them(defaults):
    proposer = CatalogueProposer(["decomposition"])
    first = {m.path for m in run_to_exhaustion(proposer, defaults, seed=1)}
    assert first == {"enabled"}
    enabled = {**defaults, "decomposition": {**defaults["decomposition"], "enabled": True}}
    later = {m.path for m in run_to_exhaustion(proposer, enabled, seed=1)}
    assert later == {"enabled", "prefix", "suffix"}


def test_append_builds_on_the_current_champion(defaults):
    edit = next(e for e in CATALOGUE if e.id == "tooldesc-lookup-one-argument")
    champion = dict(defaults)
    champion["tool_descriptions"] = {
        "tools": {
            **defaults["tool_descriptions"]["tools"],
            "lookup_order": {"description": "Look up an order.", "hints": ["Kept hint."]},
        }
    }
    mutation = CatalogueProposer(ALL).mutation_for(edit, champion, 0, 1)
    assert mutation.value == ["Kept hint.", "Pass exactly one argument, order_id, as a string."]


def test_edit_that_no_longer_applies_is_skipped_and_the_draw_repeated(defaults):
    # An agent already holding 64 tools cannot take one more: the append fails the schema.
    edit = CatalogueEdit(
        id="too-many",
        surface="agent_contracts",
        path="agents.support.tools",
        op="append",
        value=["search_docs"],
        hypothesis="h",
        evidence=["seed:missing_tool"],
        expected_effect={"broken_tool_use": -0.1},
        rollback="r",
    )
    full = [f"tool{i}" for i in range(64)]
    agents = {**defaults["agent_contracts"]["agents"]}
    agents["support"] = {**agents["support"], "tools": full}
    champion = {**defaults, "agent_contracts": {"agents": agents}}
    fallback = next(e for e in CATALOGUE if e.id == "reflect-enable")
    proposer = CatalogueProposer(ALL, catalogue=[edit, fallback])
    for seed in range(5):
        m = proposer.propose(ProposalRequest(champion, set(), np.random.default_rng(seed), 0, 1)).mutation
        assert m is not None and m.proposer.endswith("reflect-enable")
    assert (
        CatalogueProposer(ALL, catalogue=[edit])
        .propose(ProposalRequest(champion, set(), np.random.default_rng(0), 0, 1))
        .mutation
        is None
    )


def test_edit_already_in_place_is_skipped(defaults):
    edit = next(e for e in CATALOGUE if e.id == "reflect-enable")
    on = {**defaults, "reflection": {**defaults["reflection"], "enabled": True}}
    proposer = CatalogueProposer(ALL, catalogue=[edit])
    assert proposer.propose(ProposalRequest(on, set(), np.random.default_rng(0), 0, 1)).mutation is None


def test_target_dimensions_weight_the_draw(defaults):
    def share(targets) -> float:
        proposer, hits = CatalogueProposer(ALL, targets), 0
        for seed in range(120):
            m = proposer.propose(ProposalRequest(defaults, set(), np.random.default_rng(seed), 0, seed)).mutation
            hits += "overrefusal" in m.expected_effect
        return hits / 120

    assert share(["overrefusal"]) > share(["broken_tool_use"]) + 0.1


# --- the registry seam -----------------------------------------------------------------------


def contract_with_mutator(model: str):
    import re

    text = re.sub(
        r"(?m)^  mutator: \{model: [^}]*\}", f"  mutator: {{model: {model}}}", (ROOT / "program.md").read_text()
    )
    return parse_contract(text)


def test_make_proposer_gives_the_catalogue_proposer_for_the_default_contract():
    proposer = make_proposer(contract_with_mutator("offline/catalogue"))
    assert isinstance(proposer, CatalogueProposer)
    assert proposer.name == "offline/catalogue"
    assert proposer.target_dimensions == {"broken_tool_use"}
    with pytest.raises(ProposerError, match="LoadedContract"):
        make_proposer(contract_with_mutator("offline/catalogue").contract)


def test_make_proposer_picks_the_llm_mutator_for_any_model_name():
    from sil.search.proposers import LLMProposer

    assert isinstance(make_proposer(contract_with_mutator("scripted/mutator")), LLMProposer)
    with pytest.raises(ProposerError, match="unknown offline proposer"):
        make_proposer(contract_with_mutator("offline/other"))
