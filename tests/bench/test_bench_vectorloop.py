"""bench/vectorloop.py: the gate benchmark's candidates enter the product's loop as policy edits.

Candidate i is the edit that adds its marker to tool_policy; the in-process executor audits a
policy set at the sum of the fields its markers name, with the very world the truth comes from.
(Whole runs of the loop on this world: tests/bench/test_bench.py, marked slow.)
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest

from bench import gates
from bench.gates import Cell, load_setup
from bench.looprun import policy_env
from bench.proposers import origin_documents
from bench.vectorloop import MARKER, MarkerProposer, VectorInProcess, VectorWorld
from sil.contract.schema import load_contract
from sil.exec.backends import make_backend
from sil.exec.measure import AuditRequest, MeasureContext
from sil.policies.mutation import apply_mutation
from sil.search.proposers import ProposalRequest
from sil_policy import SURFACES
from sil_runtime.policy_loader import load_policies
from sil_runtime.sim.world import World

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def world() -> VectorWorld:
    setup = load_setup(REPO / "program.md", ("loop_gate",), with_aux=False)
    w = World(setup.cell_params(Cell("calibrated", 0.0, 300), 0), setup.dims, setup.n_seeds)
    rng = np.random.default_rng(1)
    cands = gates.candidate_stream(w, rng, 6, setup.dims[0], setup.promotion.critical_dimensions)
    return VectorWorld(w, cands, [1, 2, 3, 4])


def propose(docs: dict, index: int, world: VectorWorld) -> dict:
    request = ProposalRequest(docs, set(), np.random.default_rng(0), index, 7)
    m = MarkerProposer(len(world.candidates), world.target).propose(request).mutation
    assert m is not None and m.surface == "tool_policy"
    return {**docs, m.surface: apply_mutation(m, docs, list(SURFACES))}


def test_a_policy_set_is_the_sum_of_the_fields_its_markers_name(world: VectorWorld) -> None:
    origin = origin_documents()
    assert world.markers(origin) == () and not world.theta(origin).any()
    two = propose(propose(origin, 2, world), 5, world)
    assert world.markers(two) == (2, 5)
    assert np.allclose(world.theta(two), world.candidates[2].field + world.candidates[5].field)
    assert np.allclose(world.truth(two), world.world.expected_scores(world.theta(two)))
    request = ProposalRequest(origin, set(), np.random.default_rng(0), 6, 7)
    assert MarkerProposer(6, world.target).propose(request).stop == "the candidate stream is spent"


def test_the_executor_audits_the_markers_field_with_the_worlds_noise(world: VectorWorld, tmp_path: Path) -> None:
    contract = load_contract(REPO / "program.md").contract
    ctx = MeasureContext.from_contract(contract, REPO)
    policies = tmp_path / "policies"
    shutil.copytree(REPO / "state" / "policies", policies)
    docs = propose(origin_documents(), 3, world)
    (policies / "tool_policy.json").write_text(json.dumps(docs["tool_policy"]))
    req = AuditRequest(audit_id="a1", audit_dir=tmp_path / "a1", policy_dir=policies, policy_hashes={}, tick=4)
    req = req.model_copy(update={"policy_hashes": dict(load_policies(policy_env(req)).hashes)})
    result = VectorInProcess(ctx, make_backend("sim"), world, 1)([req])[0]
    assert result.ok, result.gap_reason
    expected = world.world.audit(world.candidates[3].field, 4, "a1", "a1", 1)
    seeds = list(ctx.seed_ids)
    for k, dim in enumerate(world.dims):
        got = [result.scores[s].get(dim) for s in seeds]
        want = [None if np.isnan(v) else pytest.approx(float(v)) for v in expected[:, k]]
        assert got == want, dim
    assert all(n.startswith(MARKER) for n in docs["tool_policy"]["forbidden_tools"])
