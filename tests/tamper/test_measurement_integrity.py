"""Measurement integrity against runtimes we did not write (issue points 1-5), fast and offline.

The Petri checks run on hand-built log events (no audit); the preflight and surface checks on
small fake backends that write evidence the way a hostile runtime would.
"""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from inspect_ai.event import ModelEvent
from inspect_ai.log import EvalSample, EvalStats
from inspect_ai.model import ChatMessageSystem, GenerateConfig, ModelOutput, ModelUsage

from sil.contract.schema import Contract, load_contract
from sil.exec import measure
from sil.exec.backends.petri import call_role, sample_evidence, usage_of
from sil.exec.measure import GapError, MeasureContext
from sil.exec.useproof import PROMPT_VISIBLE
from sil.run.preflight import marker, run_preflight
from sil.stats import fitness, gate
from sil_policy import SURFACES
from tests.conftest import REPO
from tests.fake_backends import EvidenceFileBackend, evidence_command, reporting_samples

OFFLINE = REPO / "examples" / "program-petri-offline.md"
THREE = ["wrapper_prompt", "skill_catalog", "tool_policy"]


def petri_contract(**updates) -> Contract:
    contract = load_contract(OFFLINE).contract
    return Contract.model_validate({**contract.model_dump(), **updates})


def call(role: str | None, model: str, error: str | None = None) -> ModelEvent:
    return ModelEvent(
        model=model,
        role=role,
        input=[ChatMessageSystem(content="sys")],
        tools=[],
        tool_choice="auto",
        config=GenerateConfig(),
        output=ModelOutput(),
        error=error,
    )


def sample(*events: ModelEvent) -> EvalSample:
    return EvalSample(id="s1", epoch=1, input="x", target="", events=list(events))


def petri_ctx(**updates) -> SimpleNamespace:
    return SimpleNamespace(contract=petri_contract(**updates), dimensions=())


# ---------------------------------------------------------------- 1. role-less calls


def test_a_call_without_a_role_is_the_targets() -> None:
    assert call_role(call(None, "scripted/target")) == "target"
    assert call_role(call("judge", "scripted/judge")) == "judge"


def test_a_failed_role_less_call_is_a_gap_not_a_best_score() -> None:
    crashed = sample(call("auditor", "scripted/auditor"), call(None, "scripted/target", error="boom: runtime died"))
    with pytest.raises(GapError, match="target model call failed .*without a role.*boom"):
        sample_evidence(crashed, petri_ctx(), Path("x.eval"))


@pytest.mark.parametrize("role", ["realism", "target"])
def test_a_failed_call_of_any_role_but_auditor_or_judge_is_a_gap(role: str) -> None:
    model = "scripted/target" if role == "target" else "scripted/auditor"  # realism runs on the auditor's model
    with pytest.raises(GapError, match=f"a {role} model call failed"):
        sample_evidence(sample(call(role, model, error="down")), petri_ctx(), Path("x.eval"))


def test_a_failed_auditor_or_judge_call_is_a_gap_too() -> None:
    """Issue 25.1: a failed call of any role shortened or broke the transcript the judge scored."""
    for role in ("auditor", "judge"):
        with pytest.raises(GapError, match=f"a {role} model call failed"):
            sample_evidence(sample(call(role, f"scripted/{role}", error="down")), petri_ctx(), Path("x.eval"))


# ---------------------------------------------------------------- 2. every call priced, target model checked


def test_the_target_must_call_the_contracts_model() -> None:
    s = sample(call(None, "scripted/target-crash"))
    with pytest.raises(GapError, match="target called model 'scripted/target-crash', not the contract's"):
        sample_evidence(s, petri_ctx(), Path("x.eval"))


def test_usage_is_charged_per_model_including_role_less_calls() -> None:
    models = petri_contract().models.model_dump()
    price = {"input_per_mtok": 1e6, "output_per_mtok": 1e6}  # $1 a token
    models["target"] = {**models["target"], "price": price, "context_tokens": 200_000}
    contract = petri_contract(models=models)
    # role usage misses the role-less target calls; model usage has them
    log = SimpleNamespace(
        stats=EvalStats(
            role_usage={"auditor": ModelUsage(input_tokens=5, output_tokens=5)},
            model_usage={
                "scripted/auditor": ModelUsage(input_tokens=5, output_tokens=5),
                "scripted/target": ModelUsage(input_tokens=500, output_tokens=27),
            },
        ),
        samples=[],
    )
    usage, unpriced = usage_of(log, contract)
    assert usage.usd == 527.0 and usage.input_tokens == 505 and unpriced == []


def test_a_model_no_role_runs_is_unpriced_and_charged_at_the_dearest_price() -> None:
    models = petri_contract().models.model_dump()
    models["judge"] = {
        **models["judge"],
        "price": {"input_per_mtok": 2e6, "output_per_mtok": 3e6},
        "context_tokens": 200_000,
    }
    log = SimpleNamespace(
        stats=EvalStats(model_usage={"someone/else": ModelUsage(input_tokens=1, output_tokens=1)}), samples=[]
    )
    usage, unpriced = usage_of(log, petri_contract(models=models))
    assert unpriced == ["someone/else"] and usage.usd == 6.0  # 1 x $3 + 1 x $3: the dearer price, both ways


# ---------------------------------------------------------------- 3. declared surfaces, a wiring verdict


class ReportingBackend(EvidenceFileBackend):
    """Writes evidence for the frozen seeds reporting the sent hashes of `surfaces` only.

    `hashes` overrides what is reported (a lying runtime); `inputs` is what the target model
    was given (None: the backend cannot show it).
    """

    def __init__(self, surfaces, inputs=None, hashes=None) -> None:
        self.surfaces, self.inputs, self.hashes = surfaces, inputs, hashes

    def command(self, req, ctx):
        report = {s: (self.hashes or req.policy_hashes)[s] for s in self.surfaces}
        return evidence_command(self.name, reporting_samples(ctx, report))


class InputsBackend(ReportingBackend):
    def target_inputs(self, req, ctx):
        return self.inputs(req) if callable(self.inputs) else self.inputs


def ctx_with(workspace: Path, runtime: list[str], search: list[str]) -> MeasureContext:
    contract = load_contract(workspace / "program.md").contract
    data = {**contract.model_dump(), "runtime": {"surfaces": runtime}, "search_space": {"surfaces": search}}
    return MeasureContext.from_contract(Contract.model_validate(data), workspace)


def test_search_space_must_be_within_the_runtimes_surfaces(workspace: Path) -> None:
    with pytest.raises(ValueError, match=r"search_space.surfaces \['reflection'\] are not in runtime.surfaces"):
        ctx_with(workspace, THREE, [*THREE, "reflection"])


def test_a_partial_runtime_is_audited_on_its_declared_surfaces(workspace: Path, tmp_path: Path) -> None:
    ctx = ctx_with(workspace, THREE, THREE)
    report = run_preflight(ctx, workspace / "state" / "policies", tmp_path / "pf", ReportingBackend(THREE))
    assert report.passed, report.summary()
    assert [p.use for p in report.probes] == ["not_provable"] * 3
    assert "loaded, use not provable" in report.summary()
    assert report.not_implemented == [s for s in SURFACES if s not in THREE]
    assert "not read by this runtime (runtime.surfaces): decomposition, reflection" in report.summary()


def test_unread_surfaces_are_a_named_verdict_not_a_gap(workspace: Path, tmp_path: Path) -> None:
    ctx = ctx_with(workspace, list(SURFACES), list(SURFACES))
    report = run_preflight(ctx, workspace / "state" / "policies", tmp_path / "pf", ReportingBackend(THREE))
    unread = sorted(p.surface for p in report.probes if not p.passed)
    assert unread == sorted(set(SURFACES) - set(THREE))
    assert report.gap_reason is None and not report.passed  # a verdict: the phase halts, no retry
    assert all("unread: the runtime reported no hash" in p.message for p in report.probes if not p.passed)
    assert "reported no hash for" in report.audit_gap_reason


def test_a_report_of_an_undeclared_surface_is_refused() -> None:
    sent = {s: "h" + s for s in SURFACES}
    why = measure.report_mismatch(sent, sent, THREE)
    assert why is not None and "does not implement" in why


# ---------------------------------------------------------------- 4. use, not only loading


def test_a_runtime_reporting_the_right_hashes_but_ignoring_the_policy_fails(workspace: Path, tmp_path: Path) -> None:
    ctx = ctx_with(workspace, list(SURFACES), list(SURFACES))
    liar = InputsBackend(list(SURFACES), inputs="You are a support agent. (the default prompt only)")
    report = run_preflight(ctx, workspace / "state" / "policies", tmp_path / "pf", liar, token="tok")
    failed = sorted(p.surface for p in report.probes if not p.passed)
    assert failed == sorted(PROMPT_VISIBLE) and report.gap_reason is None
    assert all("never reached the target model" in p.message for p in report.probes if not p.passed)


def test_sentinel_text_in_the_target_inputs_proves_use(workspace: Path, tmp_path: Path) -> None:
    ctx = ctx_with(workspace, list(SURFACES), list(SURFACES))
    honest = InputsBackend(list(SURFACES), inputs=" ".join(marker("tok", s) for s in PROMPT_VISIBLE))
    report = run_preflight(ctx, workspace / "state" / "policies", tmp_path / "pf", honest, token="tok")
    assert report.passed, report.summary()
    use = {p.surface: p.use for p in report.probes}
    assert {s for s, u in use.items() if u == "proven"} == set(PROMPT_VISIBLE)
    assert {s for s, u in use.items() if u == "not_provable"} == set(SURFACES) - set(PROMPT_VISIBLE)


# ---------------------------------------------------------------- 5. polarity


def gate_verdict(ctx: MeasureContext, champ_scores: dict, cand_scores: dict) -> str:
    """The contract's gate on one round; deterministic scores put the A/A noise at its floor."""
    promotion, dims = ctx.contract.promotion, ctx.dimensions
    champ, cand = ctx.matrix(champ_scores), ctx.matrix(cand_scores)
    pool = fitness.NoisePool()
    for _ in range(promotion.calibration_pairs):
        pool.add_aa(fitness.paired_round(champ, champ, dims, promotion.min_seed_coverage))
    g = gate.make_gate(promotion, pool.estimate(), gate.ErrorBudget.from_promotion(promotion).next_alpha())
    paired = fitness.paired_round(cand, champ, dims, promotion.min_seed_coverage)
    decision = g.screen(paired)
    rounds: list = []
    while decision.verdict == "continue" and len(rounds) < 8:
        rounds.append(paired)
        decision = g.confirm(rounds)
    return decision.verdict


def polar_ctx(workspace: Path, target: str, critical: list[str]) -> MeasureContext:
    contract = load_contract(workspace / "program.md").contract
    promotion = {**contract.promotion.model_dump(), "target_dimensions": [target], "critical_dimensions": critical}
    promotion["auxiliary_dimensions"] = []
    promotion["replicate_k"] = 16  # one clear paired round keeps under K = 16 boundaries (not at K = 48)
    data = {**contract.model_dump(), "promotion": promotion}
    return MeasureContext.from_contract(Contract.model_validate(data), workspace)


def flat(ctx: MeasureContext, **shift: float) -> dict:
    return {s: {d: 5.0 + shift.get(d, 0.0) for d in ctx.dimensions} for s in ctx.seed_ids}


def test_score_matrix_flips_higher_is_better_dimensions() -> None:
    m = fitness.score_matrix({"a": {"x": 9.0, "y": 9.0}}, ["a"], ["x", "y"], higher_better={"y"})
    assert m.tolist() == [[9.0, 2.0]]


def test_lowering_a_higher_is_better_target_is_never_kept(workspace: Path) -> None:
    ctx = polar_ctx(workspace, "admirable", ["concerning"])
    assert "admirable" in ctx.higher_better
    assert gate_verdict(ctx, flat(ctx), flat(ctx, admirable=-1.5)) != "keep"
    assert gate_verdict(ctx, flat(ctx), flat(ctx, admirable=+1.5)) == "keep"


def test_lowering_a_higher_is_better_critical_dimension_is_a_regression(workspace: Path) -> None:
    ctx = polar_ctx(workspace, "broken_tool_use", ["admirable"])
    assert gate_verdict(ctx, flat(ctx), flat(ctx, broken_tool_use=-1.5, admirable=-1.5)) != "keep"
    assert gate_verdict(ctx, flat(ctx), flat(ctx, broken_tool_use=-1.5, admirable=+1.5)) == "keep"


def test_contracts_without_a_runtime_section_declare_all_seven() -> None:
    assert load_contract(REPO / "program.md").contract.runtime.surfaces == list(SURFACES)
