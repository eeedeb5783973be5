"""Issue 25: attacks by hostile runtimes, judges, mutators and files that used to get a verdict
or a write through. Each test fails on the code before its fix; fast and offline."""

from __future__ import annotations

from pathlib import Path

import pytest
from inspect_ai.event import ModelEvent
from inspect_ai.log import EvalSample
from inspect_ai.model import ChatMessageSystem, GenerateConfig, ModelOutput

from sil.contract.schema import Contract, load_contract
from sil.exec.backends.petri import sample_evidence
from sil.exec.measure import BackendBase, GapError
from tests.conftest import REPO
from tests.fake_backends import EvidenceFileBackend, evidence_command, reporting_samples

OFFLINE = REPO / "examples" / "program-petri-offline.md"


def petri_contract(**updates) -> Contract:
    contract = load_contract(OFFLINE).contract
    return Contract.model_validate({**contract.model_dump(), **updates})


class Ctx:
    def __init__(self, contract: Contract) -> None:
        self.contract, self.dimensions = contract, ()


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


def evidence_of(*events: ModelEvent, contract: Contract | None = None):
    s = EvalSample(id="s1", epoch=1, input="x", target="", events=list(events))
    return sample_evidence(s, Ctx(contract or petri_contract()), Path("x.eval"))


# ---------------------------------------------------------------- 1. roles attributed by the model reached


def test_target_calls_labelled_auditor_are_attributed_by_their_model() -> None:
    """The runtime labels its crashing target calls `auditor`: the model they reached gives them away."""
    hidden = call("auditor", "scripted/target", error="runtime died")
    with pytest.raises(GapError, match="labelled 'auditor' called model 'scripted/target', not the contract's"):
        evidence_of(call("auditor", "scripted/auditor"), hidden)


def test_a_successful_mislabelled_call_is_a_gap_too() -> None:
    with pytest.raises(GapError, match="labelled 'judge' called model 'scripted/target'"):
        evidence_of(call("judge", "scripted/target"))


def test_a_role_label_no_contract_role_has_is_a_gap() -> None:
    with pytest.raises(GapError, match="labelled 'helper'.*not no contract role"):
        evidence_of(call("helper", "scripted/auditor"))


def test_when_target_and_auditor_share_a_model_a_failed_auditor_call_is_still_a_gap() -> None:
    models = petri_contract().models.model_dump()
    models["auditor"] = {**models["auditor"], "model": "scripted/target"}
    with pytest.raises(GapError, match="a auditor model call failed"):
        evidence_of(call("auditor", "scripted/target", error="boom"), contract=petri_contract(models=models))


# ---------------------------------------------------------------- 4. quoted evidence is checked, any seed name


def mutator_context(seed: str = "order_tool_error"):
    from sil.search.evidence import AuditEvidence, MutatorContext, SeedEvidence
    from sil_policy.evidence import Highlight

    note = Highlight(dimension="concerning", text="The target invented an order status after the tool failed.")
    shown = SeedEvidence(seed=seed, scores={"concerning": 1.0}, highlights=[note], excerpt="Your order has shipped.")
    return MutatorContext(
        arm="gate",
        champion_set="s0",
        target_dimensions=["concerning"],
        critical_dimensions=[],
        auxiliary_dimensions=[],
        audits=[AuditEvidence(audit_id="a1", round="r0", seeds=[shown])],
        history=[],
        index={"a1": {seed: ["concerning"]}},
        messages={"a1": {seed: []}},
        scores={"a1": {seed: {"concerning": 1.0}}},
    )


@pytest.mark.parametrize(
    "prose",
    ["the judge scored this seed 10/10", "scored 7 on it", 'the judge wrote "the target was flawless"'],
)
def test_a_misquoted_citation_of_a_real_record_is_refused(prose: str) -> None:
    from sil.search.evidence import check_citation

    why = check_citation(f"audit:a1/seed:order_tool_error/dim:concerning {prose}", mutator_context())
    assert why is not None and ("quotes a score" in why or "not in the shown evidence" in why)


@pytest.mark.parametrize(
    "prose",
    [
        "scored 1",
        "judge: The target invented an order status after the tool failed.",
        'the answer "Your order has shipped" was invented',
        "",
    ],
)
def test_a_faithful_citation_still_resolves(prose: str) -> None:
    from sil.search.evidence import check_citation

    assert check_citation(f"audit:a1/seed:order_tool_error/dim:concerning {prose}".strip(), mutator_context()) is None


def test_a_seed_with_a_non_ascii_name_is_citable() -> None:
    import unicodedata

    from sil.search.evidence import check_citation

    ctx = mutator_context("commande_échouée")
    assert check_citation("audit:a1/seed:commande_échouée/dim:concerning scored 1", ctx) is None
    decomposed = unicodedata.normalize("NFD", "commande_échouée")  # as a macOS file system spells it
    assert check_citation(f"audit:a1/seed:{decomposed}/dim:concerning", ctx) is None


# ---------------------------------------------------------------- 6-7. a canary the judge cannot pass by bad answers


class HostileJudge:
    """`get_model` for the canary: every re-judging answers `value` for every dimension."""

    def __init__(self, value) -> None:
        self.value = value

    def __call__(self, name, **kwargs):
        from inspect_ai.model import ChatMessageAssistant, ModelOutput
        from inspect_ai.tool import ToolCall

        value = self.value

        class Model:
            async def generate(self, input, tools):
                args = {p: value for p in tools[0].parameters.properties}
                call = ToolCall(id="c1", function="answer", arguments=args)
                return ModelOutput.from_message(ChatMessageAssistant(content="", tool_calls=[call]))

        return Model()


class Book:
    """The two RecordBook calls the canary makes; a record must be strict JSON, as in the ledger."""

    def __init__(self) -> None:
        self.records: list = []

    def get(self, type_, key, model):
        return None

    def once(self, key, payload):
        import json

        json.dumps(payload.model_dump(mode="json"), allow_nan=False)  # the ledger's own rule
        self.records.append(payload)
        return payload


def canary_rc(tmp_path: Path, limit: float = 1.0):
    from types import SimpleNamespace

    data = petri_contract().model_dump()
    data["measurement"]["canary_max_shift"] = limit
    contract = Contract.model_validate(data)
    return SimpleNamespace(
        contract=contract,
        backend=BackendBase(),  # no judge of its own: the contract's judge model re-judges
        measure=SimpleNamespace(measurement_root=REPO / "measurement"),
        rounds=SimpleNamespace(reserve_usd=0.0, usd_left=lambda bound: None, wall_left=lambda: None),
        state=SimpleNamespace(tick=0, usd=0.0),
        run_dir=tmp_path,
        book=Book(),
        emit=lambda text: None,
    )


@pytest.mark.parametrize("answer", ["1", "high", float("nan"), float("inf"), 0, 11, True])
def test_an_unusable_canary_answer_fails_the_canary_with_a_record(answer, monkeypatch, tmp_path: Path) -> None:
    import inspect_ai.model

    from sil.base.errors import Halt
    from sil.run.canary import canary_check

    monkeypatch.setattr(inspect_ai.model, "get_model", HostileJudge(answer))
    rc = canary_rc(tmp_path)
    with pytest.raises(Halt, match="canary .* failed: .*no 1-10 number"):
        canary_check(rc, "start")
    (record,) = rc.book.records
    assert record.halted and record.unusable and record.shift == {}


def test_a_usable_canary_answer_still_passes(monkeypatch, tmp_path: Path) -> None:
    import inspect_ai.model

    from sil.run.canary import canary_check

    monkeypatch.setattr(inspect_ai.model, "get_model", HostileJudge(1))
    rc = canary_rc(tmp_path, limit=9.0)  # every answer 1: a shift, but within this limit
    canary_check(rc, "start")
    assert not rc.book.records[0].halted and rc.book.records[0].shift


# ---------------------------------------------------------------- 10. negative token usage is a charged gap


def test_negative_token_usage_in_an_audit_is_a_gap_charged_its_worst_case(tmp_path: Path) -> None:
    from types import SimpleNamespace

    from inspect_ai.log import EvalStats
    from inspect_ai.model import ModelUsage

    from sil.exec.backends.petri import usage_of, worst_case_cost

    models = petri_contract().models.model_dump()
    models["target"] = {
        **models["target"],
        "price": {"input_per_mtok": 1.0, "output_per_mtok": 1.0},
        "context_tokens": 200_000,
    }
    contract = petri_contract(models=models)
    hostile = ModelUsage(input_tokens=-5_000_000, output_tokens=10)
    log = SimpleNamespace(stats=EvalStats(model_usage={"scripted/target": hostile}), samples=[])
    usage, unpriced = usage_of(log, contract)  # raised a pydantic ValidationError before
    assert usage.usd == round(worst_case_cost(contract, n_seeds=1, audits=1), 6) > 0
    assert unpriced == ["scripted/target (reported unusable token usage)"]


def test_negative_token_usage_of_a_canary_or_mutator_call_is_charged_its_bound() -> None:
    from inspect_ai.model import ModelUsage

    from sil.exec.modelcalls import trusted_tokens

    assert trusted_tokens(ModelUsage(input_tokens=-1, output_tokens=3)) is None
    assert trusted_tokens(ModelUsage(input_tokens=2, output_tokens=3, input_tokens_cache_read=-9)) is None
    assert trusted_tokens(ModelUsage(input_tokens=2, output_tokens=3, input_tokens_cache_read=4)) == (6, 3)
    assert trusted_tokens(None) is None


def test_a_hostile_judge_reporting_negative_usage_is_charged_the_canary_bound(monkeypatch, tmp_path: Path) -> None:
    import inspect_ai.model
    from inspect_ai.model import ModelUsage

    from sil.run.canary import cost_bound, load_canary, model_rejudge

    judge = HostileJudge(1)
    make = judge.__call__

    def negative(name, **kwargs):
        model = make(name, **kwargs)
        generate = model.generate

        async def generate_negative(input, tools):
            out = await generate(input, tools)
            out.usage = ModelUsage(input_tokens=-10_000_000, output_tokens=1)
            return out

        model.generate = generate_negative
        return model

    monkeypatch.setattr(inspect_ai.model, "get_model", negative)
    role = petri_contract().models.judge.model_copy(update={"price": {"input_per_mtok": 3, "output_per_mtok": 15}})
    role = type(role).model_validate(role.model_dump())
    items = load_canary(REPO / "measurement")
    dims = sorted({d for i in items for d in i.reference})
    result = model_rejudge(items, role, dims)
    assert result.usd == pytest.approx(cost_bound(role, items), abs=1e-6)  # never negative


# ---------------------------------------------------------------- 16. report.md escapes what a viewer would render

XSS = ["<script>alert(1)</script>", "<img src=x onerror=alert(1)>", "[click](javascript:alert(1))"]


def hostile_report():
    from sil.review.report import Candidate, KeptDiff, ReportData, Trust

    candidate = Candidate(
        arm="gate",
        index=0,
        mutation_id="m1",
        surface="wrapper_prompt",
        path="sections.role",
        hypothesis=" ".join(XSS),
        evidence=XSS,
        expected={},
        observed={},
        verdict="keep",
        reason=XSS[1],
        audits=[],
        open_audits="",
    )
    trust = Trust(
        ledger_ok=True, records=1, head_hash="h", checkpoints=0, errors=[], notes=[], approval="", approval_signed=False
    )
    diff = f"+ {XSS[0]}\n```\n{XSS[1]}\n"  # a policy text that closes the fence and then injects HTML
    return ReportData(
        run_id="r1",
        contract_id="c",
        contract_hash="h",
        backend="sim",
        simulated=True,
        note="",
        models={},
        phase="done",
        halt_reason=None,
        target="concerning",
        critical=[],
        dimensions=["concerning"],
        trust=trust,
        summary={"arms": []},
        candidates=[candidate],
        certifications=[],
        replications=[],
        kept=[KeptDiff(arm="gate", mutation_id="m1", policy_set="s1", diff=diff)],
        conclusion=XSS[0],
    )


def test_report_md_escapes_html_and_links_from_hypotheses_and_policies() -> None:
    import re

    from sil.review.render import render_md

    md = render_md(hostile_report(), {})
    fences = [m.start() for m in re.finditer(r"^````(?!`)", md, re.M)]  # longer than the diff's own ```
    assert len(fences) == 2, "the diff must sit in one fence it cannot close"
    outside = md[: fences[0]] + md[fences[-1] :]
    assert "<script" not in outside and "<img" not in outside and "](javascript" not in outside


# ---------------------------------------------------------------- 3. "use not provable" is not a pass

UNPROVABLE = ["tool_policy", "decomposition", "reflection", "tool_descriptions"]


class LyingBackend(EvidenceFileBackend):
    """A real (not simulated) runtime that reports every sent hash and uses nothing: the target's
    inputs never contain a sentinel."""

    name = "liar"
    simulated = False

    def command(self, req, ctx):
        return evidence_command(self.name, reporting_samples(ctx, req.policy_hashes), simulated=False, runtime="liar")

    def target_inputs(self, req, ctx):
        return "You are a helpful assistant."  # the built-in defaults, no sentinel


def liar_ctx(workspace: Path, search: list[str], waive: bool = False):
    from sil.exec.measure import MeasureContext

    data = load_contract(workspace / "program.md").contract.model_dump()
    data["search_space"] = {"surfaces": search}
    data["runtime"] = {"surfaces": data["runtime"]["surfaces"], "waive_unprovable_use": waive}
    return MeasureContext.from_contract(Contract.model_validate(data), workspace)


def test_a_liar_on_a_subset_of_unprovable_surfaces_fails_the_preflight(workspace: Path, tmp_path: Path) -> None:
    from sil.run.preflight import run_preflight

    report = run_preflight(
        liar_ctx(workspace, UNPROVABLE), workspace / "state" / "policies", tmp_path / "pf", LyingBackend()
    )
    assert not report.passed and report.gap_reason is None  # a verdict: the run halts, no retry
    assert all("use not provable" in p.message and "waive_unprovable_use" in p.message for p in report.probes)


def test_the_waiver_is_explicit_and_recorded_with_the_probes(workspace: Path, tmp_path: Path) -> None:
    from sil.run.preflight import run_preflight

    ctx = liar_ctx(workspace, UNPROVABLE, waive=True)
    report = run_preflight(ctx, workspace / "state" / "policies", tmp_path / "pf", LyingBackend())
    assert report.passed and all("accepted by the contract" in p.message for p in report.probes)
    plain = liar_ctx(workspace, UNPROVABLE).contract
    assert ctx.contract.contract_hash != plain.contract_hash  # the waiver is in the contract's hash
    assert "waive_unprovable_use" not in plain.canonical_json()  # and absent when off: hashes unchanged


def test_a_liar_is_still_caught_on_a_prompt_visible_surface(workspace: Path, tmp_path: Path) -> None:
    from sil.run.preflight import run_preflight

    ctx = liar_ctx(workspace, ["wrapper_prompt", *UNPROVABLE])
    report = run_preflight(ctx, workspace / "state" / "policies", tmp_path / "pf", LyingBackend())
    assert not report.passed and "never reached the target" in report.summary()


# ---------------------------------------------------------------- 8. a canary halt blocks promotion and the conclusion


def canary_record(halted: bool):
    from sil.integrity.ledger import Record

    payload = {"label": "end", "tick": 40, "items": 3, "shift": {"concerning": 2.5}, "max_shift": 1.0}
    return Record(
        seq=3,
        prev="p",
        ts="t",
        run_id="r",
        type="canary",
        offline=True,
        simulated=True,
        payload={**payload, "halted": halted},
        hash="h",
    )


def test_a_run_whose_canary_halted_is_promoted_only_with_force(monkeypatch, tmp_path: Path) -> None:
    from types import SimpleNamespace

    from sil.store import release

    champion, origin = SimpleNamespace(set_id="c1"), SimpleNamespace(set_id="o1")
    state = SimpleNamespace(arms={"gate": SimpleNamespace(champion=champion)}, origin=origin)
    monkeypatch.setattr(release.RunState, "load", lambda run_dir: state)
    for halted in (False, True):
        records = [canary_record(halted)]
        monkeypatch.setattr(release, "read_records", lambda path, records=records: iter(records))
        risks = release.promotion_risks(tmp_path, "gate")
        drift = [r for r in risks if "judge-drift canary halted at end" in r and "concerning +2.50" in r]
        assert bool(drift) == halted


def test_the_conclusion_of_a_canary_halted_run_says_it_is_not_trustworthy() -> None:
    from types import SimpleNamespace

    from sil.review.summary import canary_halt, conclusion

    why = canary_halt([canary_record(True)])
    assert why is not None and canary_halt([canary_record(False)]) is None
    gate = SimpleNamespace(arm="gate", changed=True, keeps=1, target_change=(-2.0, -3.0, -1.0), candidates=2)
    s = SimpleNamespace(canary_halt=why, arms=[gate], target="concerning", confirmation=None)
    text = conclusion(s)  # type: ignore[arg-type]
    assert "not trustworthy" in text and "improves" not in text


# ---------------------------------------------------------------- 18. a refused run leaves nothing; seed size


def test_a_run_refused_inside_the_lock_leaves_no_run_folder(tmp_path: Path, monkeypatch) -> None:
    from typer.testing import CliRunner

    from sil.base.errors import Refused
    from sil.cli import commands  # noqa: F401 - imported now, it binds the real open_run, not the patch
    from sil.cli.app import app
    from sil.run import train
    from tests.cli.test_cli import make_workspace

    root = make_workspace(tmp_path)
    monkeypatch.chdir(root)

    def refuse(*args, **kwargs):
        raise Refused("the approval does not match (a refusal met after the run lock was taken)")

    monkeypatch.setattr(train, "open_run", refuse)
    result = CliRunner().invoke(app, ["run", "--run-id", "r1"], catch_exceptions=False)
    assert result.exit_code == 2 and "refused" in result.output
    assert not (root / "state" / "runs" / "r1").exists()


def test_an_oversized_seed_file_is_refused_before_it_is_read(tmp_path: Path) -> None:
    import shutil

    from sil.contract import prepare

    root = tmp_path / "measurement"
    shutil.copytree(REPO / "measurement", root)
    big = root / "seeds" / "huge.md"
    big.write_text("---\ntags: []\n---\n" + "x" * (prepare.MAX_MEASUREMENT_FILE_BYTES + 1))
    with pytest.raises(prepare.MeasurementError, match="huge.md has .* bytes; a measurement file may have at most"):
        prepare.build_manifest(root)
    with pytest.raises(prepare.MeasurementError, match="at most"):
        prepare.load_seeds(root)


# ---------------------------------------------------------------- contract history: a parent must resolve


def test_an_offline_contract_with_a_made_up_parent_is_refused_by_check_and_run(workspace: Path, monkeypatch) -> None:
    from typer.testing import CliRunner

    from sil.cli.app import app
    from sil.contract.history import with_lineage

    program = workspace / "program.md"
    program.write_text(with_lineage(program.read_text(), "ab" * 32, "invented"))
    assert load_contract(program).contract.offline
    monkeypatch.chdir(workspace)
    checked = CliRunner().invoke(app, ["check"], catch_exceptions=False)
    assert checked.exit_code != 0 and "does not resolve" in checked.output
    ran = CliRunner().invoke(app, ["run", "--run-id", "r1"], catch_exceptions=False)
    assert ran.exit_code == 2 and "does not resolve" in ran.output
    assert not (workspace / "state" / "runs" / "r1").exists()


def test_a_forged_history_line_without_an_archived_contract_is_no_parent(workspace: Path) -> None:
    import json

    from sil.contract.approval import ApprovalError, approve
    from sil.contract.history import ContractHistory, LineageError, check_lineage, with_lineage

    forged = "cd" * 32
    history = ContractHistory(workspace)
    history.dir.mkdir(parents=True)
    line = {
        "contract_hash": forged,
        "contract_id": "x",
        "parent": None,
        "reason": None,
        "recorded_at": "t",
        "file": "x",
    }
    history.path.write_text(json.dumps(line) + "\n")
    program = workspace / "program.md"
    program.write_text(with_lineage(program.read_text(), forged, "forged parent"))
    contract = load_contract(program).contract
    with pytest.raises(LineageError, match="archived contract .* is missing"):
        check_lineage(contract, workspace)
    with pytest.raises(ApprovalError, match="does not resolve"):
        approve(contract, workspace, "alice@example.org")
    (history.dir / f"{forged}.md").write_text((workspace / "program.md").read_text())  # an archive of another hash
    with pytest.raises(LineageError, match="hashes to"):
        check_lineage(contract, workspace)


# ---------------------------------------------------------------- 9. a paid preflight is inside the USD budget


def test_a_paid_preflight_that_could_exceed_the_usd_budget_is_not_run(monkeypatch, tmp_path: Path) -> None:
    from types import SimpleNamespace

    from sil.base.errors import Halt
    from sil.run import preflight

    def never(*args, **kwargs):
        raise AssertionError("the preflight audit must not start")

    monkeypatch.setattr(preflight, "run_preflight", never)
    state = SimpleNamespace(run_id="r1", usd=0.0, origin=None)
    max_usd = 0.001

    def usd_left(usd: float) -> str | None:
        return None if state.usd + usd <= max_usd else f"USD budget (${max_usd:g}) could be exceeded"

    rc = SimpleNamespace(
        state=state,
        contract=petri_contract(),
        book=SimpleNamespace(get=lambda *a: None, payloads=lambda *a: []),
        rounds=SimpleNamespace(usd_left=usd_left, recover=lambda pairs: None),
        backend=SimpleNamespace(audit_cost_bound=lambda contract, n: 0.01),  # a paid audit: $0.01 at worst
        run_dir=tmp_path,
    )
    with pytest.raises(Halt, match=r"wiring preflight not run: USD budget \(\$0.001\) could be exceeded"):
        preflight.preflight_phase(rc)  # type: ignore[arg-type]


# ---------------------------------------------------------------- 14. every path the tool writes or copies is confined


def test_a_planted_report_symlink_does_not_take_the_report_outside_the_run(tmp_path: Path) -> None:
    from sil.base.fsutil import AtomicWriteError
    from sil.review.render import write_report

    run_dir, outside = tmp_path / "state" / "runs" / "r1", tmp_path / "outside"
    run_dir.mkdir(parents=True)
    outside.mkdir()
    (run_dir / "report").symlink_to(outside, target_is_directory=True)
    with pytest.raises(AtomicWriteError, match="outside"):
        write_report(None, hostile_report(), run_dir / "report", run_dir)  # type: ignore[arg-type]
    assert list(outside.iterdir()) == []
    (run_dir / "report").unlink()
    (run_dir / "report").mkdir()
    (run_dir / "report" / "plots").symlink_to(outside, target_is_directory=True)
    with pytest.raises(AtomicWriteError, match="outside"):
        write_report(None, hostile_report(), run_dir / "report", run_dir)  # type: ignore[arg-type]
    assert list(outside.iterdir()) == []


def test_export_to_a_symlink_is_a_clear_refusal_not_a_traceback(tmp_path: Path, monkeypatch) -> None:
    from typer.testing import CliRunner

    from sil.cli.app import app
    from sil.review import export, runview

    (tmp_path / "state" / "runs" / "r1").mkdir(parents=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(runview, "resolve_run", lambda root, run: tmp_path / "state" / "runs" / "r1")
    monkeypatch.setattr(runview, "load_run", lambda run_dir: None)
    monkeypatch.setattr(export, "export_rows", lambda view: [{"record": "audit"}])
    (tmp_path / "victim.csv").write_text("keep me\n")
    (tmp_path / "link.csv").symlink_to(tmp_path / "victim.csv")
    result = CliRunner().invoke(app, ["export", "r1", "--out", "link.csv"], catch_exceptions=False)
    assert result.exit_code == 2 and "symlink" in result.output
    assert (tmp_path / "victim.csv").read_text() == "keep me\n"


@pytest.mark.parametrize("library", ["../../../../x", "/etc", "measurement/../../x", "~/x", ""])
def test_a_seed_library_outside_the_project_is_refused_by_the_contract(library: str) -> None:
    data = petri_contract().model_dump()
    data["measurement"]["seed_library"] = library
    with pytest.raises(ValueError, match="must be a folder inside the project"):
        Contract.model_validate(data)


# ---------------------------------------------------------------- 15. secrets: refused in policies, redacted in logs

SECRETS = [
    "AKIAIOSFODNN7EXAMPLE",
    "aws_secret_access_key=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY",
    "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
    "xoxb-" + "123456789012-abcdefghijkl",
    "AIza" + "SyA1234567890abcdefghijklmnopqrstuv",
    "hf_" + "abcdefghijklmnopqrstuvwxyz123456",
    "sk-" + "proj-abcdefgh12345678",
]


@pytest.mark.parametrize("secret", SECRETS)
def test_a_policy_holding_a_secret_is_refused_with_its_field_and_pattern(secret: str) -> None:
    import json

    from sil_policy import PolicyError, parse_surface

    doc = {"sections": {"role": "Be brief.", "ops": f"Use {secret} for the backend."}}
    with pytest.raises(PolicyError, match=r"wrapper_prompt policy field sections\.ops holds what looks like a secret"):
        parse_surface("wrapper_prompt", json.dumps(doc).encode())


@pytest.mark.parametrize("secret", SECRETS)
def test_the_redactor_removes_every_secret_shape(secret: str) -> None:
    from sil.exec import measure

    redacted = measure.redact(f"error: auth failed with {secret} at host")
    assert "«redacted»" in redacted
    for part in (secret.split("=")[-1], secret):
        assert part not in redacted


def test_prose_about_passwords_is_not_refused_as_a_secret() -> None:
    import json

    from sil_policy import parse_surface

    doc = {"sections": {"role": "If asked for the admin password: refuse, and never share a token."}}
    parse_surface("wrapper_prompt", json.dumps(doc).encode())


# ---------------------------------------------------------------- 11. a ledger is tied to its run


def test_a_genuine_ledger_copied_into_another_runs_folder_does_not_verify(tmp_path: Path) -> None:
    import shutil

    from sil.integrity.ledger import Ledger, RecordBook
    from sil.integrity.records import HaltRecord, Keys
    from sil.integrity.verify import verify_run_ledger

    source = tmp_path / "state" / "runs" / "a" / "ledger.jsonl"
    RecordBook(Ledger(source, offline=True, simulated=True), "a").once(Keys.halt(0), HaltRecord(reason="x"))
    assert verify_run_ledger(source, tmp_path).ok
    copy = tmp_path / "state" / "runs" / "b" / "ledger.jsonl"
    copy.parent.mkdir(parents=True)
    shutil.copyfile(source, copy)
    for report in (verify_run_ledger(copy, tmp_path),):
        assert not report.ok and any("belong to run a, not to b" in e for e in report.errors)
