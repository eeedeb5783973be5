"""The mechanisms landscape: hidden mechanisms, fixes by content, symptoms in the evidence."""

from __future__ import annotations

import copy
from pathlib import Path

import numpy as np
import pytest

from sil.contract import prepare
from sil.contract.simparams import SimParams
from sil_policy import SURFACES, load_surface
from sil_runtime.sim.mechanisms import MECHANISMS, fixed_share, highlights, mechanism_field, seed_strengths

ROOT = Path(__file__).resolve().parents[2]
SEEDS = [s.id for s in prepare.load_seeds(ROOT / "measurement")]
DIMS = [d.name for d in prepare.load_rubric(ROOT / "measurement")]
PARAMS = SimParams(intercepts={d: 1.0 for d in DIMS}, landscape="mechanisms", landscape_seed=7)
TOOL_ERRORS = "When a tool returns an error, say it failed; never invent or guess a result."


@pytest.fixture
def docs() -> dict[str, dict]:
    return {n: load_surface(n, ROOT / "state" / "policies" / s.filename)[0] for n, s in SURFACES.items()}


def with_section(docs: dict, text: str) -> dict:
    out = copy.deepcopy(docs)
    out["wrapper_prompt"]["sections"]["tool_errors"] = text
    return out


def test_a_fix_lowers_the_target_only_where_its_mechanism_fires(docs) -> None:
    m = [x.name for x in MECHANISMS].index("invents_after_tool_error")
    fires = seed_strengths(SEEDS, PARAMS)[:, m] > 0
    assert fires.any() and not fires.all()
    before = mechanism_field(docs, DIMS, SEEDS, PARAMS)
    after = mechanism_field(with_section(docs, TOOL_ERRORS), DIMS, SEEDS, PARAMS)
    t = DIMS.index("broken_tool_use")
    change = after[:, t] - before[:, t]
    assert (change[fires] < 0).all() and np.allclose(change[~fires], 0.0)


def test_the_same_topic_without_the_features_fixes_nothing(docs) -> None:
    vague = with_section(docs, "Tools are useful. Use them well when the customer asks.")
    assert fixed_share(vague)["invents_after_tool_error"][0] == 0.0
    assert fixed_share(with_section(docs, TOOL_ERRORS))["invents_after_tool_error"][0] == 1.0
    # the right words on a surface the fix does not read do nothing either
    off = copy.deepcopy(docs)
    off["skill_catalog"]["skills"]["refunds"]["description"] = TOOL_ERRORS
    assert fixed_share(off)["invents_after_tool_error"][0] == 0.0


def test_highlights_name_symptoms_and_vanish_once_fixed(docs) -> None:
    names = {m.name for m in MECHANISMS}
    symptom = "after the tool returned an error"
    keys = [f"a{i}" for i in range(20)]
    notes = [h for k in keys for seed in highlights(docs, DIMS, SEEDS, PARAMS, k) for h in seed]
    assert any(symptom in h.text for h in notes)
    assert not any(n in h.text or n.replace("_", " ") in h.text for h in notes for n in names)
    fixed = with_section(docs, TOOL_ERRORS)
    notes = [h for k in keys for seed in highlights(fixed, DIMS, SEEDS, PARAMS, k) for h in seed]
    assert not any(symptom in h.text for h in notes)


@pytest.mark.parametrize("landscape", ["hashed", "mechanisms"])
def test_the_sim_audit_writes_highlights_only_on_the_mechanisms_world(tmp_path, landscape) -> None:
    from sil_policy.evidence import Evidence
    from tests.exec.test_sim_audit import run_sim, write_policies

    write_policies(tmp_path / "pol")
    proc, path = run_sim(tmp_path, tmp_path / "pol", p_crash=0.0, landscape=landscape)
    assert proc.returncode == 0, proc.stderr
    notes = [h for s in Evidence.model_validate_json(path.read_bytes()).samples for h in s.highlights]
    assert bool(notes) == (landscape == "mechanisms")
