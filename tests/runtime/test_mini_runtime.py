"""The second runtime (examples/mini_runtime), written from the integration doc, audited offline.

The example is "installed" the way `pip install -e examples/mini_runtime` would make inspect-ai
find it: its source directory and the records of an editable install (`*.dist-info` with its
entry point and `direct_url.json`, from which inspect-ai prefixes the package name) on the
audit's PYTHONPATH. The real pip install is tested in test_mini_runtime_install.py. The Petri
runs are slow (real `inspect_petri/audit` with scripted models); the policy loader is tested fast.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path

import pytest

from sil.contract.schema import Contract, load_contract
from sil.exec import measure
from sil.exec.backends.petri import PetriBackend
from sil.exec.measure import MeasureContext
from sil.run.preflight import run_preflight
from sil_policy import SURFACES, canonical_bytes
from tests.conftest import REPO
from tests.petri_support import make_workspace, request, variant

EXAMPLE = REPO / "examples" / "mini_runtime"
CONTRACT = REPO / "examples" / "program-mini-runtime.md"
IMPLEMENTED = ["wrapper_prompt", "tool_policy", "tool_descriptions"]


def installed(tmp: Path) -> str:
    """A PYTHONPATH on which inspect-ai discovers the example's entry point."""
    info = tmp / "site" / "mini_runtime-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: mini-runtime\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text("[inspect_ai]\nmini_runtime = mini_runtime._registry\n")
    (info / "direct_url.json").write_text(json.dumps({"url": EXAMPLE.as_uri(), "dir_info": {"editable": True}}))
    return f"{EXAMPLE}:{tmp / 'site'}"


def mini_ctx(ws: Path, tmp: Path, mode: str = "honest") -> MeasureContext:
    data = load_contract(CONTRACT).contract.model_dump()
    data["backend_settings"]["target_agent_params"] = {"mode": mode}
    ctx = MeasureContext.from_contract(Contract.model_validate(data), ws)
    return dataclasses.replace(ctx, extra_env={"PYTHONPATH": installed(tmp)})


# ---------------------------------------------------------------- fast: the loader


def test_mini_loader_hashes_the_bytes_it_read_and_fails_under_strict(tmp_path: Path, monkeypatch) -> None:
    monkeypatch.syspath_prepend(str(EXAMPLE))
    from mini_runtime.policies import load

    data = canonical_bytes({"sections": {"role": "Be brief."}})
    (tmp_path / "w.json").write_bytes(data)
    env = {SURFACES["wrapper_prompt"].override_env: str(tmp_path / "w.json")}
    policies = load(env)
    assert sorted(policies.hashes) == sorted(IMPLEMENTED)
    assert policies.hashes["wrapper_prompt"] == hashlib.sha256(data).hexdigest()
    assert policies.system_prompt() == "Be brief."
    bad = {**env, SURFACES["tool_policy"].override_env: str(tmp_path / "missing.json")}
    bad[SURFACES["tool_policy"].strict_env] = "1"
    with pytest.raises(RuntimeError, match="tool_policy"):
        load(bad)


def test_mini_contract_declares_its_three_surfaces() -> None:
    contract = load_contract(CONTRACT).contract
    assert contract.runtime.surfaces == IMPLEMENTED == contract.search_space.surfaces


# ---------------------------------------------------------------- slow: offline Petri


@pytest.mark.slow
def test_mini_runtime_passes_its_preflight_naming_what_it_does_not_read(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path / "ws")
    report = run_preflight(mini_ctx(ws, tmp_path), ws / "policies" / "baseline", tmp_path / "pf", PetriBackend())
    assert report.passed, report.summary()
    assert report.not_implemented == [s for s in SURFACES if s not in IMPLEMENTED]
    assert {p.surface: p.use for p in report.probes}["wrapper_prompt"] == "proven"


@pytest.mark.slow
def test_mini_runtime_completes_an_offline_petri_pair(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path / "ws")
    ctx = mini_ctx(ws, tmp_path)
    hint = variant(
        ws,
        "hint",
        "tool_descriptions",
        lambda d: d["tools"]["lookup_order"]["hints"].append("Use the native tool-calling interface."),
    )
    reqs = [request(ws, "base", ws / "policies" / "baseline"), request(ws, "hint", hint)]
    results = {r.audit_id: r for r in measure.run_audits(reqs, ctx, PetriBackend())}
    assert all(r.ok for r in results.values()), {k: r.gap_reason for k, r in results.items()}
    assert sorted(results["base"].loaded_policy_hashes) == sorted(IMPLEMENTED)
    assert set(results["base"].scores) == set(ctx.seed_ids)


@pytest.mark.slow
def test_a_role_less_crashing_runtime_yields_gaps_not_a_keep(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path / "ws")
    ctx = mini_ctx(ws, tmp_path, mode="roleless_crash")
    res = measure.run_audit(request(ws, "crash", ws / "policies" / "baseline"), ctx, PetriBackend())
    assert not res.ok and res.scores == {}  # a gap: no round statistic, so no verdict at all
    assert "without" in res.gap_reason and "target" in res.gap_reason, res.gap_reason


@pytest.mark.slow
def test_a_runtime_that_ignores_its_policy_fails_the_use_probe(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path / "ws")
    ctx = mini_ctx(ws, tmp_path, mode="ignore_policy")
    report = run_preflight(ctx, ws / "policies" / "baseline", tmp_path / "pf", PetriBackend())
    failed = {p.surface: p for p in report.probes if not p.passed}
    assert list(failed) == ["wrapper_prompt"] and report.gap_reason is None, report.summary()
    assert "never reached the target model" in failed["wrapper_prompt"].message
    assert json.loads(report.model_dump_json())["passed"] is False
