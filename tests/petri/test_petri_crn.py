"""Common random numbers for paired Petri rounds: the auditor of both arms shares one seed.

The command tests read the `--model-role` JSON the backend builds; the log tests run one real
paired round (offline scripted models, first seed only, two judge passes) and break copies of
its logs. The offline auditor is deterministic, so these tests prove the plumbing (the seed is
sent, recorded and checked), not that CRN makes a real audit's arms' noise correlate.

    python -m pytest -q -o addopts="" tests/petri/test_petri_crn.py
"""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from pathlib import Path

import pytest
from inspect_ai.log import read_eval_log

from sil.contract.schema import ContractError, Measurement, parse_contract
from sil.exec import measure
from sil.exec.backends.petri import PetriBackend, check_run, crn_seed
from sil.exec.backends.petri_passes import rejudge_command
from sil.exec.measure import AuditRequest, GapError, MeasureContext
from sil.exec.startchecks import start_checks
from sil.run.preflight import cheap_context
from tests.petri_support import REPO, context, make_workspace, request, variant

PROGRAM = (REPO / "program.md").read_text()
PETRI_OFFLINE = (REPO / "examples" / "program-petri-offline.md").read_text()
MEASUREMENT_LINE = "  manifest_hash:"
ROUND = "gate-t7"
PASSES = 2


def crn_context(ws: Path, on: bool = True, passes: int = 1) -> MeasureContext:
    base = context(ws).contract.measurement.model_dump()
    return context(ws, measurement={**base, "common_random_numbers": on, "judge_resamples": passes})


def paired(req: AuditRequest, key: str | None) -> AuditRequest:
    return req.model_copy(update={"pair_key": key})


def roles_of(req: AuditRequest, ctx: MeasureContext) -> dict[str, dict]:
    req.audit_dir.mkdir(parents=True, exist_ok=True)
    cmd = PetriBackend().command(req, ctx)
    pairs = [cmd[i + 1].split("=", 1) for i, a in enumerate(cmd) if a == "--model-role"]
    return {role: json.loads(config) for role, config in pairs}


def with_crn(text: str, value: str) -> str:
    assert text.count(MEASUREMENT_LINE) == 1
    return text.replace(MEASUREMENT_LINE, f"  {value}\n{MEASUREMENT_LINE}", 1)


# ---------------------------------------------------------------- the seed and the command


def test_crn_seed_is_stable_across_processes_and_31_bit() -> None:
    code = "from sil.exec.backends.petri import crn_seed; print(crn_seed('gate-t7'))"
    other = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True, cwd=REPO)
    assert int(other.stdout) == crn_seed("gate-t7")
    seeds = {crn_seed(f"gate-t{i}") for i in range(200)}
    assert len(seeds) == 200 and all(0 <= s < 2**31 for s in seeds)


def test_both_arms_of_a_round_share_the_auditor_seed_and_rounds_differ(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    ctx = crn_context(ws)
    cand = variant(ws, "cand", "reflection", lambda d: d.update(enabled=True))
    champ = roles_of(paired(request(ws, f"{ROUND}-champ", ws / "policies" / "baseline"), ROUND), ctx)
    cand_roles = roles_of(paired(request(ws, f"{ROUND}-cand", cand), ROUND), ctx)
    other = roles_of(paired(request(ws, "gate-t8-champ", ws / "policies" / "baseline"), "gate-t8"), ctx)
    assert champ["auditor"] == cand_roles["auditor"] == {"model": "scripted/auditor", "seed": crn_seed(ROUND)}
    assert other["auditor"]["seed"] == crn_seed("gate-t8") != crn_seed(ROUND)
    for roles in (champ, cand_roles, other):
        assert "seed" not in roles["target"] and "seed" not in roles["judge"]


@pytest.mark.parametrize("on, key", [(False, ROUND), (True, None), (False, None)])
def test_off_or_unpaired_audits_get_no_seed(tmp_path: Path, on: bool, key: str | None) -> None:
    ws = make_workspace(tmp_path)
    roles = roles_of(paired(request(ws, "a1", ws / "policies" / "baseline"), key), crn_context(ws, on))
    assert all("seed" not in config for config in roles.values())


def test_judge_passes_never_seed_the_judge(tmp_path: Path) -> None:
    ws = make_workspace(tmp_path)
    ctx = crn_context(ws, passes=3)
    req = paired(request(ws, "a1", ws / "policies" / "baseline"), ROUND)
    req.audit_dir.mkdir(parents=True)
    cmd = PetriBackend().command(req, ctx)
    assert cmd[:3] == [sys.executable, "-m", "sil.exec.backends.petri_passes"]
    judge = next(a for a in cmd if a.startswith("judge="))
    assert json.loads(judge.split("=", 1)[1]) == {"model": "scripted/judge"}
    assert not any("seed" in a for a in rejudge_command(Path("x.eval"), Path("rubric")))


# ---------------------------------------------------------------- a real paired round's logs


@pytest.fixture(scope="module")
def crn_round(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, MeasureContext, dict]:
    """One paired round with CRN on, first seed only, two judge passes: both arms' logs."""
    ws = make_workspace(tmp_path_factory.mktemp("crn"))
    ctx = cheap_context(crn_context(ws, passes=PASSES), ws / "small")
    cand = variant(ws, "cand", "reflection", lambda d: d.update(enabled=True))
    reqs = [
        paired(request(ws, f"{ROUND}-champ", ws / "policies" / "baseline"), ROUND),
        paired(request(ws, f"{ROUND}-cand", cand), ROUND),
    ]
    results = [measure.run_audit(req, ctx, PetriBackend()) for req in reqs]  # the small copy has no manifest
    assert all(r.ok for r in results), [r.gap_reason for r in results]
    return ws, ctx, {r.audit_id: read_eval_log(r.log_path, resolve_attachments=True) for r in results}


@pytest.mark.slow  # a whole run or real audits: .ci/run runs it after make test
def test_a_real_round_records_the_shared_seed_through_the_judge_passes(crn_round) -> None:
    _, ctx, logs = crn_round
    for log in logs.values():
        roles = log.eval.model_roles
        assert roles["auditor"].config.seed == crn_seed(ROUND)
        assert roles["target"].config.seed is None and roles["judge"].config.seed is None
        assert sorted(k for k in log.samples[0].scores if k.startswith("audit_judge")) == [
            "audit_judge",
            "audit_judge1",
        ]
        check_run(log, ctx, "search", ROUND)


def _seeded(log, role: str, seed: int | None):
    broken = log.model_copy(deep=True)
    config = broken.eval.model_roles[role]
    broken.eval.model_roles[role] = config.model_copy(
        update={"config": config.config.model_copy(update={"seed": seed})}
    )
    return broken


@pytest.mark.slow  # shares the real round above
def test_check_run_rejects_a_log_from_another_seed_configuration(crn_round) -> None:
    _, ctx, logs = crn_round
    log = logs[f"{ROUND}-champ"]
    with pytest.raises(
        GapError, match=f"auditor ran with seed {crn_seed(ROUND) + 1}.*must run with seed {crn_seed(ROUND)}"
    ):
        check_run(_seeded(log, "auditor", crn_seed(ROUND) + 1), ctx, "search", ROUND)
    with pytest.raises(GapError, match="auditor ran with seed None"):
        check_run(_seeded(log, "auditor", None), ctx, "search", ROUND)
    with pytest.raises(GapError, match=f"seed {crn_seed(ROUND)}.*must run with seed {crn_seed('gate-t8')}"):
        check_run(log, ctx, "search", "gate-t8")  # another round's log
    with pytest.raises(GapError, match="role judge ran with seed 5.*must run with no seed"):
        check_run(_seeded(log, "judge", 5), ctx, "search", ROUND)
    with pytest.raises(GapError, match="must run with no seed"):
        check_run(log, ctx, "search", None)  # an unpaired audit must not be seeded
    measurement = ctx.contract.measurement.model_copy(update={"common_random_numbers": False})
    off = dataclasses.replace(ctx, contract=ctx.contract.model_copy(update={"measurement": measurement}))
    with pytest.raises(GapError, match="must run with no seed .common_random_numbers is off"):
        check_run(log, off, "search", ROUND)
    check_run(_seeded(log, "auditor", None), off, "search", ROUND)  # CRN off and unseeded: accepted


# ---------------------------------------------------------------- contract and start checks


def test_the_field_is_strict_and_in_the_hash_only_when_on() -> None:
    plain = parse_contract(PROGRAM).contract
    assert plain.measurement.common_random_numbers is False
    off = parse_contract(with_crn(PROGRAM, "common_random_numbers: false")).contract
    on = parse_contract(with_crn(PROGRAM, "common_random_numbers: true")).contract
    assert on.measurement.common_random_numbers is True
    assert off.contract_hash == plain.contract_hash  # contracts written before the field keep their hash
    assert on.contract_hash != plain.contract_hash
    with pytest.raises(ContractError, match=r"measurement\.common_random_number: Extra inputs are not permitted"):
        parse_contract(with_crn(PROGRAM, "common_random_number: true"))
    with pytest.raises(ContractError, match="common_random_numbers"):
        parse_contract(with_crn(PROGRAM, "common_random_numbers: sometimes"))
    assert "common_random_numbers" in Measurement.model_fields


def _crn_item(text: str, root: Path) -> str | None:
    items = [i for i in start_checks(parse_contract(text), root).items if i.name == "crn"]
    assert len(items) <= 1
    return f"{items[0].status}: {items[0].detail}" if items else None


def test_check_warns_where_crn_cannot_act(tmp_path: Path) -> None:
    assert _crn_item(PROGRAM, REPO) is None
    assert _crn_item(with_crn(PROGRAM, "common_random_numbers: true"), REPO) == (
        "warn: measurement.common_random_numbers has no effect on the sim backend: "
        "its arms' noise correlation is sim.pair_correlation"
    )
    offline = _crn_item(with_crn(PETRI_OFFLINE, "common_random_numbers: true"), REPO)
    assert offline.startswith("warn: ") and "offline auditor is deterministic" in offline
    for model, says in [
        ("anthropic/claude-x", "anthropic provider never sends seed, so CRN has no effect"),
        ("openai/gpt-4.1", "best-effort basis and on the Chat Completions API only"),
        ("mistral/m", "passes seed to mistral; whether mistral honours it is not checked"),
    ]:
        paid = with_crn(PETRI_OFFLINE, "common_random_numbers: true").replace(
            "auditor: {model: scripted/auditor}",
            f"auditor: {{model: {model}, price: {{input_per_mtok: 1, output_per_mtok: 1}}, context_tokens: 200000}}",
        )
        item = _crn_item(paid, tmp_path)
        assert item.startswith("warn: ") and says in item, item
