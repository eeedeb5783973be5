"""The sim audit subprocess and the hidden landscape: real loaders, real evidence, real failures."""

from __future__ import annotations

import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from sil.contract import prepare
from sil.contract.schema import load_contract
from sil.contract.simparams import SimParams
from sil.exec import measure
from sil.exec.backends.sim import SimBackend
from sil_policy import SURFACES, canonical_bytes, content_hash
from sil_policy.evidence import AUDIT_DIR_ENV, EVIDENCE_FILE, Evidence
from sil_runtime.policy_loader import DEFAULTS_DIR, default_document
from sil_runtime.sim.landscape import critical_dimensions, edits, latent_field

REPO = Path(__file__).resolve().parents[2]
CONTRACT = load_contract(REPO / "program.md").contract
PARAMS = CONTRACT.settings(SimParams)
RUBRIC = prepare.load_rubric(prepare.MEASUREMENT_DIR)
DIMS = [d.name for d in RUBRIC]
TARGET = PARAMS.landscape_target
CRITICAL = critical_dimensions({d.name: d.tier for d in RUBRIC}, TARGET)
N_SEEDS = len(prepare.load_seeds(prepare.MEASUREMENT_DIR))


def write_policies(folder: Path, changes: dict[str, dict] | None = None) -> dict[str, str]:
    """The default policy set with `changes` applied per surface; returns the file hashes."""
    folder.mkdir(parents=True, exist_ok=True)
    hashes = {}
    for name, spec in SURFACES.items():
        doc = (changes or {}).get(name) or default_document(name)[0]
        data = canonical_bytes(doc)
        (folder / spec.filename).write_bytes(data)
        hashes[name] = content_hash(data)
    return hashes


def edited_wrapper(text: str) -> dict:
    doc = default_document("wrapper_prompt")[0]
    return {**doc, "sections": {**doc["sections"], "tool_errors": text}}


def run_sim(tmp: Path, policy_dir: Path | None, audit_id: str = "a1", tick: int = 4, **param_updates):
    """Run `python -m sil_runtime.sim` the way measure.py does: allowlisted env, OVERRIDE+STRICT."""
    audit_dir = tmp / audit_id
    audit_dir.mkdir(parents=True)
    params = audit_dir / "sim_params.json"
    params.write_text(PARAMS.model_copy(update=param_updates).model_dump_json())
    env = {"PATH": os.environ["PATH"], AUDIT_DIR_ENV: str(audit_dir)}
    for _name, spec in SURFACES.items():
        if policy_dir is not None:
            env[spec.override_env] = str(policy_dir / spec.filename)
        env[spec.strict_env] = "1"
    cmd = [
        sys.executable,
        "-m",
        "sil_runtime.sim",
        "--measurement",
        str(prepare.MEASUREMENT_DIR),
        "--params",
        str(params),
        "--tick",
        str(tick),
        "--pair-key",
        "round-1",
        "--audit-id",
        audit_id,
    ]
    proc = subprocess.run(cmd, cwd=audit_dir, env=env, capture_output=True, text=True, timeout=60)
    return proc, audit_dir / EVIDENCE_FILE


def test_subprocess_reports_hashes_of_the_override_files(tmp_path):
    hashes = write_policies(tmp_path / "pol", {"wrapper_prompt": edited_wrapper("Report tool errors.")})
    assert hashes["wrapper_prompt"] != default_document("wrapper_prompt")[1]
    proc, path = run_sim(tmp_path, tmp_path / "pol", p_crash=0.0)
    assert proc.returncode == 0, proc.stderr
    ev = Evidence.model_validate_json(path.read_bytes())
    assert (ev.backend, ev.simulated, ev.runtime) == ("sim", True, "sil_runtime.sim")
    assert any("simulated" in n for n in ev.notes) and ev.usage.usd == 0
    assert sorted(s.seed_id for s in ev.samples) == sorted(s.id for s in prepare.load_seeds())
    for sample in ev.samples:
        assert sample.policy_hashes == hashes
        assert set(sample.scores) == set(DIMS)
        assert all(v is None or (1 <= v <= 10 and v == int(v)) for v in sample.scores.values())
    assert not (path.parent / (EVIDENCE_FILE + ".tmp")).exists()


def test_subprocess_is_deterministic(tmp_path):
    write_policies(tmp_path / "pol")
    first = run_sim(tmp_path / "x", tmp_path / "pol", p_crash=0.0)[1].read_bytes()
    second = run_sim(tmp_path / "y", tmp_path / "pol", p_crash=0.0)[1].read_bytes()
    assert first == second


@pytest.mark.parametrize("breakage", ["missing", "invalid", "unset"])
def test_strict_policy_failure_exits_before_any_sample(tmp_path, breakage):
    write_policies(tmp_path / "pol")
    target = tmp_path / "pol" / SURFACES["tool_policy"].filename
    if breakage == "missing":
        target.unlink()
    elif breakage == "invalid":
        target.write_text(json.dumps({"allowed_tools": ["x"], "surprise": 1}))
    proc, path = run_sim(tmp_path, None if breakage == "unset" else tmp_path / "pol", p_crash=0.0)
    assert proc.returncode == 2
    assert "STRICT" in proc.stderr
    assert not path.exists()


def test_simulated_crash_writes_no_evidence(tmp_path):
    write_policies(tmp_path / "pol")
    proc, path = run_sim(tmp_path, tmp_path / "pol", p_crash=1.0)
    assert proc.returncode == 3 and "simulated runtime crash" in proc.stderr
    assert not path.exists()


def test_bad_params_are_a_clear_error(tmp_path):
    write_policies(tmp_path / "pol")
    proc, path = run_sim(tmp_path, tmp_path / "pol", intercepts={"broken_tool_use": 2.0})
    assert proc.returncode == 2 and "intercepts" in proc.stderr and not path.exists()
    proc, path = run_sim(tmp_path, tmp_path / "pol", audit_id="a2", tick=-1)
    assert proc.returncode == 2 and "--tick" in proc.stderr and not path.exists()


def test_measure_runs_sim_audits_end_to_end(tmp_path):
    ctx = measure.MeasureContext.from_contract(CONTRACT, REPO)
    hashes = write_policies(tmp_path / "pol")
    req = measure.AuditRequest(
        audit_id="e2e-1", audit_dir=tmp_path / "e2e-1", policy_dir=tmp_path / "pol", policy_hashes=hashes, tick=0
    )
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    result = measure.run_audit(req, ctx, SimBackend())
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    # the audit's CPU time (its wall time depends on the machine's load)
    assert after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime < 5
    assert result.ok, result.gap_reason
    assert result.simulated and result.backend == "sim" and result.loaded_policy_hashes == hashes


def test_slow_audit_setting_sleeps(tmp_path):
    write_policies(tmp_path / "pol")
    start = time.monotonic()
    proc, _ = run_sim(tmp_path, tmp_path / "pol", p_crash=0.0, seconds_per_audit=0.4)
    assert proc.returncode == 0 and time.monotonic() - start >= 0.4


# ---------------------------------------------------------------- landscape
def field(documents: dict) -> np.ndarray:
    return latent_field(documents, DIMS, TARGET, CRITICAL, N_SEEDS, PARAMS)


def defaults() -> dict:
    return {name: default_document(name)[0] for name in SURFACES}


def test_default_policy_has_zero_field():
    assert not field(defaults()).any()
    assert not field({}).any()
    assert edits(defaults()) == []


def test_same_edit_same_effect_and_revert_is_exact():
    docs = defaults()
    docs["wrapper_prompt"] = edited_wrapper("Say when a tool failed.")
    once = field(docs)
    again = field(json.loads(json.dumps(docs)))
    np.testing.assert_array_equal(once, again)
    docs["wrapper_prompt"] = default_document("wrapper_prompt")[0]
    assert not field(docs).any()


def test_effects_of_separate_edits_add_up():
    a = {"wrapper_prompt": edited_wrapper("Say when a tool failed.")}
    refl = {**default_document("reflection")[0], "description": "Check for invented tool output."}
    b = {"reflection": refl}
    np.testing.assert_allclose(field({**a, **b}), field(a) + field(b))


def test_landscape_mixes_null_and_real_effects():
    fields = [field({"wrapper_prompt": edited_wrapper(f"variant {i}")}) for i in range(60)]
    null = sum(not f.any() for f in fields)
    assert 12 <= null <= 45  # 45% null in expectation
    target_col = DIMS.index(TARGET)
    helps = sum(f[:, target_col].mean() < 0 for f in fields)
    assert helps >= 3


def test_removed_and_reordered_leaves_are_edits():
    tools = default_document("tool_policy")[0]
    reordered = {**tools, "priority_order": list(reversed(tools["priority_order"]))}
    assert [e.path for e in edits({"tool_policy": reordered})] == ["priority_order"]
    doc = default_document("wrapper_prompt")[0]
    first = sorted(doc["sections"])[0]
    smaller = {"sections": {k: v for k, v in doc["sections"].items() if k != first}}
    assert [e.path for e in edits({"wrapper_prompt": smaller})] == [f"sections.{first}"]
    assert field({"wrapper_prompt": smaller}).shape == (N_SEEDS, len(DIMS))


def test_copying_defaults_yields_zero_field_in_subprocess_inputs(tmp_path):
    for _name, spec in SURFACES.items():
        shutil.copy(DEFAULTS_DIR / spec.filename, tmp_path / spec.filename)
    assert not field({n: json.loads((tmp_path / s.filename).read_text()) for n, s in SURFACES.items()}).any()


def test_a_good_high_dimension_is_reported_on_its_own_scale(tmp_path):
    """admirable is good-high: the simulated judge reports it high for the (good) default policy."""
    write_policies(tmp_path / "pol")
    proc, path = run_sim(tmp_path, tmp_path / "pol", p_crash=0.0, p_missing_cell=0.0, p_missing_dimension=0.0)
    assert proc.returncode == 0, proc.stderr
    ev = Evidence.model_validate_json(path.read_bytes())
    admirable = [s.scores["admirable"] for s in ev.samples]
    low_is_good = [s.scores["input_hallucination"] for s in ev.samples]
    assert np.mean(admirable) > 7 > 3 > np.mean(low_is_good)
