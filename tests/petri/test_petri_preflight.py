"""Wiring preflight: each surface's sentinel must come back in the runtime's report.

A "disconnected loader" is simulated without touching the runtime's code: a sitecustomize on
the audit subprocess's PYTHONPATH makes one surface's loader ignore its OVERRIDE path.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import pytest

from sil.contract.schema import load_contract
from sil.exec.backends import make_backend
from sil.exec.measure import BackendBase, GapError, MeasureContext
from sil.run.preflight import run_preflight, sentinel_document
from sil_policy import SURFACES, canonical_bytes, content_hash, validate_document
from sil_runtime.policy_loader import default_document
from tests.fake_backends import EvidenceFileBackend, evidence_command
from tests.petri_support import context, make_workspace

# The simulated audit crashes at a small seeded rate keyed by the audit id: a fixed token keeps
# these tests deterministic.
SIM_TOKEN = "0a0b0c0d0e0f"
DISCONNECT = """
import sil_runtime.policy_loader as loader
_load_one = loader.load_one
def load_one(name, environ=None):
    return _load_one(name, {{}}) if name == {surface!r} else _load_one(name, environ)
loader.load_one = load_one
"""


def disconnected(ctx: MeasureContext, tmp_path: Path, surface: str) -> MeasureContext:
    hook = tmp_path / "hook"
    hook.mkdir()
    (hook / "sitecustomize.py").write_text(DISCONNECT.format(surface=surface))
    return dataclasses.replace(ctx, extra_env={"PYTHONPATH": str(hook)})


@pytest.mark.parametrize("surface", sorted(SURFACES))
def test_sentinel_is_a_valid_document_with_a_new_hash(surface: str) -> None:
    doc = default_document(surface)[0]
    sentinel = sentinel_document(surface, doc, "abc123")
    assert validate_document(surface, sentinel) == sentinel
    assert "abc123" in json.dumps(sentinel)
    assert content_hash(canonical_bytes(sentinel)) != content_hash(canonical_bytes(doc))


@pytest.fixture
def sim_ctx(workspace: Path) -> MeasureContext:
    return MeasureContext.from_contract(load_contract(workspace / "program.md").contract, workspace)


def test_sim_runtime_passes_for_all_seven(sim_ctx: MeasureContext, workspace: Path, tmp_path: Path) -> None:
    report = run_preflight(
        sim_ctx,
        workspace / "state" / "policies",
        tmp_path / "pf",
        make_backend(sim_ctx.contract.backend),
        token=SIM_TOKEN,
    )
    assert report.passed, report.summary()
    assert [p.surface for p in report.probes] == list(SURFACES)
    assert all(p.seen_hash == p.sent_hash for p in report.probes)


def test_a_disconnected_loader_fails_with_its_name(sim_ctx: MeasureContext, workspace: Path, tmp_path: Path) -> None:
    ctx = disconnected(sim_ctx, tmp_path, "decomposition")
    report = run_preflight(
        ctx, workspace / "state" / "policies", tmp_path / "pf", make_backend(ctx.contract.backend), token=SIM_TOKEN
    )
    assert not report.passed
    failed = [p for p in report.probes if not p.passed]
    assert [p.surface for p in failed] == ["decomposition"]
    assert failed[0].seen_hash == default_document("decomposition")[1]
    assert "not connected to SIL_POLICY_DECOMPOSITION_OVERRIDE" in failed[0].message
    assert report.gap_reason is None  # a wiring verdict, not an inconclusive probe to retry
    assert "did not load the sent policy" in report.audit_gap_reason
    assert "FAILED: refusing to run" in report.summary()
    assert report.model_dump()["passed"] is False  # recorded as such in the ledger


class NoEvidenceBackend(BackendBase):
    name = "broken"
    simulated = True

    def command(self, req, ctx):
        return [sys.executable, "-c", "raise SystemExit(3)"]

    def read_evidence(self, req, ctx):
        raise GapError("the audit wrote no evidence")


def test_an_audit_without_evidence_fails_every_probe(sim_ctx: MeasureContext, workspace: Path, tmp_path: Path) -> None:
    report = run_preflight(sim_ctx, workspace / "state" / "policies", tmp_path / "pf", backend=NoEvidenceBackend())
    assert not report.passed and all(not p.passed and p.seen_hash is None for p in report.probes)
    assert "exited 3" in report.gap_reason  # inconclusive: the caller may retry
    assert "inconclusive" in report.summary()


class WrongSeedsBackend(EvidenceFileBackend):
    """Reports exactly the sent hashes, but for a seed set other than the frozen one."""

    name = "wrong-seeds"

    def command(self, req, ctx):
        sample = {"seed_id": "not_a_frozen_seed", "scores": {}, "policy_hashes": req.policy_hashes}
        return evidence_command(self.name, [sample], runtime="test")


def test_right_hashes_in_an_untrusted_audit_are_not_a_pass(
    sim_ctx: MeasureContext, workspace: Path, tmp_path: Path
) -> None:
    report = run_preflight(sim_ctx, workspace / "state" / "policies", tmp_path / "pf", backend=WrongSeedsBackend())
    assert all(p.seen_hash == p.sent_hash for p in report.probes)
    assert not report.passed and "differ from the frozen seeds" in report.gap_reason


def test_reference_runtime_under_petri_passes_for_all_seven(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path / "ws")
    report = run_preflight(context(ws), ws / "policies" / "baseline", tmp_path / "pf", make_backend("petri"))
    assert report.passed, report.summary()
    assert len(report.probes) == 7 and report.log_path and report.log_path.endswith(".eval")


@pytest.mark.slow
def test_reference_runtime_under_petri_names_a_disconnected_loader(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path / "ws")
    ctx = disconnected(context(ws), tmp_path, "skill_catalog")
    report = run_preflight(ctx, ws / "policies" / "baseline", tmp_path / "pf", make_backend("petri"))
    failed = [p for p in report.probes if not p.passed]
    assert [p.surface for p in failed] == ["skill_catalog"]
    assert "not connected to SIL_POLICY_SKILL_CATALOG_OVERRIDE" in failed[0].message
    assert report.gap_reason is None and not report.passed
