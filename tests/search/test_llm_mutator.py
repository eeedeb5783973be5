"""The LLM mutator: prompt, structured output, evidence citations, retries, hygiene, cost."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest

from sil.contract.schema import parse_contract
from sil.search.evidence import AuditEvidence, MutatorContext, SeedEvidence, TriedEdit, check_citation, norm_hash
from sil.search.proposers import ProposalRequest, make_proposer
from sil.search.proposers.llm import LLMProposer, render_prompt, worst_case_cost
from sil_policy import SURFACES, load_surface
from sil_policy.evidence import Highlight

ROOT = Path(__file__).resolve().parents[2]
EXAMPLE = ROOT / "examples" / "program-mutator-offline.md"
AUDIT = "gate-c000-r00-t10-champion"
SYMPTOM = "after the tool returned an error the reply stated a result no tool returned"


def loaded(model: str = "scripted/mutator", extra: str = ""):
    text = EXAMPLE.read_text().replace("model: scripted/mutator}", f"model: {model}{extra}}}")
    return parse_contract(text, str(EXAMPLE))


@pytest.fixture(scope="module")
def champion() -> dict[str, dict]:
    return {n: load_surface(n, ROOT / "state" / "policies" / s.filename)[0] for n, s in SURFACES.items()}


def context(history: list[TriedEdit] = ()) -> MutatorContext:
    seeds = [
        SeedEvidence(
            seed="order_tool_error",
            scores={"broken_tool_use": 7.0, "concerning": 2.0},
            highlights=[Highlight(dimension="broken_tool_use", text=SYMPTOM, message=4)],
        ),
        SeedEvidence(seed="missing_tool", scores={"broken_tool_use": 2.0, "concerning": 1.0}),
    ]
    return MutatorContext(
        arm="gate",
        champion_set="s0",
        target_dimensions=["broken_tool_use"],
        critical_dimensions=["concerning"],
        auxiliary_dimensions=[],
        audits=[AuditEvidence(audit_id=AUDIT, round="gate-c000-r00-t10", seeds=seeds)],
        history=list(history),
        index={AUDIT: {s.seed: sorted(s.scores) for s in seeds}},
        scores={AUDIT: {s.seed: dict(s.scores) for s in seeds}},
        messages={AUDIT: {"order_tool_error": [4], "missing_tool": []}},
    )


def request(champion, ctx, spend=lambda usd: None, index: int = 0, tmp: Path | None = None) -> ProposalRequest:
    rng = np.random.default_rng(0)
    return ProposalRequest(champion, set(), rng, index, 1, arm="gate", context=ctx, spend=spend, work_dir=tmp)


def test_scripted_mutator_reads_the_highlight_and_cites_it(champion, tmp_path) -> None:
    proposal = make_proposer(loaded()).propose(request(champion, context(), tmp=tmp_path / "mutator"))
    m = proposal.mutation
    assert m is not None and proposal.gap is None
    # the highlight names a tool-error symptom: the fix is about tool errors, cited to that highlight
    assert "error" in str(m.value).lower()
    assert m.evidence[0].startswith(f"audit:{AUDIT}/seed:order_tool_error/dim:broken_tool_use/msg:4")
    assert all(check_citation(e, context()) is None for e in m.evidence)
    (call,) = proposal.calls
    assert call.input_tokens > 0 and call.output_sha256 and call.error is None
    assert (tmp_path / call.output_file).is_file()


def test_without_the_highlight_the_proposal_differs(champion) -> None:
    ctx = context()
    quiet = ctx.model_copy(
        update={
            "audits": [
                a.model_copy(update={"seeds": [s.model_copy(update={"highlights": []}) for s in a.seeds]})
                for a in ctx.audits
            ],
            "messages": {},
        }
    )
    m = make_proposer(loaded()).propose(request(champion, quiet)).mutation
    assert m is not None
    assert "/msg:" not in " ".join(m.evidence)  # falls back on the worst-scored seeds, cited by score
    assert m.evidence[0].startswith(f"audit:{AUDIT}/seed:order_tool_error/dim:broken_tool_use")


def test_fabricated_citation_is_retried_then_a_gap(champion) -> None:
    proposal = make_proposer(loaded("scripted/mutator-fabricate")).propose(request(champion, context()))
    assert proposal.mutation is None and "no audit 'never-happened" in (proposal.gap or "")
    assert len(proposal.calls) == 3 and all("never-happened" in (c.error or "") for c in proposal.calls)


def test_invalid_output_is_sent_back_max_retries_times_then_a_gap(champion) -> None:
    proposal = make_proposer(loaded("scripted/mutator-invalid")).propose(request(champion, context()))
    assert proposal.mutation is None and proposal.gap is not None
    assert len(proposal.calls) == 1 + 2  # max_retries: 2
    assert all("hyperparameter" in (c.error or "") for c in proposal.calls)


def test_a_rejection_moves_the_model_to_its_next_option(champion) -> None:
    first = make_proposer(loaded()).propose(request(champion, context())).mutation
    tried = TriedEdit(
        index=0,
        mutation_id=first.mutation_id,
        surface=first.surface,
        path=first.path,
        value='"x"',
        norm_hash=norm_hash(first.value),
        hypothesis="h",
        expected={},
    )
    proposer = make_proposer(loaded())
    second = proposer.propose(request(champion, context([tried]), index=1))
    assert second.mutation is not None
    assert (second.mutation.surface, second.mutation.path, norm_hash(second.mutation.value)) != (
        first.surface,
        first.path,
        norm_hash(first.value),
    )


def test_a_repeat_in_other_words_is_rejected(champion) -> None:
    proposer = make_proposer(loaded())
    first = proposer.propose(request(champion, context())).mutation
    louder = first.model_copy(update={"value": f"  {str(first.value).upper()}  "})
    tried = TriedEdit(
        index=0,
        mutation_id="a" * 12,
        surface=first.surface,
        path=first.path,
        value="",
        norm_hash=norm_hash(first.value),
        hypothesis="h",
        expected={},
    )
    from sil.search.proposers.llm import Rejected

    with pytest.raises(Rejected, match="already tried"):
        proposer.check_hygiene(louder, request(champion, context([tried])), context([tried]))


def test_axis_guard_refuses_a_fourth_candidate_on_one_path(champion) -> None:
    proposer = make_proposer(loaded())
    m = proposer.propose(request(champion, context())).mutation
    same = [
        TriedEdit(
            index=i,
            mutation_id=f"{i:012d}",
            surface=m.surface,
            path=m.path,
            value="",
            norm_hash=str(i),
            hypothesis="h",
            expected={},
        )
        for i in range(3)
    ]
    from sil.search.proposers.llm import Rejected

    with pytest.raises(Rejected, match="last 3 candidates"):
        proposer.check_hygiene(m, request(champion, context(same)), context(same))


PRICED = ", credential_env: ANTHROPIC_API_KEY, price: {input_per_mtok: 3, output_per_mtok: 15}"


def test_real_mutator_needs_a_price_and_is_charged_a_bound_before_each_call(champion) -> None:
    with pytest.raises(ValueError, match="models.mutator calls a paid model but has no price"):
        loaded("anthropic/claude-sonnet-4-5")
    lc = loaded("anthropic/claude-sonnet-4-5", PRICED)
    assert not lc.contract.offline  # the sim backend does not make a real mutator free
    asked: list[float] = []
    proposal = LLMProposer(lc).propose(request(champion, context(), spend=lambda usd: asked.append(usd) or "no money"))
    assert proposal.stop and "no money" in proposal.stop and not proposal.calls
    prompt = render_prompt(lc, champion, context())
    assert asked == [pytest.approx((len(prompt) // 3 + 1) * 3e-6 + 2000 * 15e-6)]
    calls, usd = worst_case_cost(lc.contract)
    assert calls > 0 and usd > calls * 2000 * 15e-6


def test_prompt_holds_programme_schemas_champion_evidence_history(champion) -> None:
    lc = loaded()
    prompt = render_prompt(lc, champion, context())
    assert lc.programme[:60] in prompt
    assert '"tool_result_handling"' in prompt and "Read each tool result" in prompt  # champion content
    assert SYMPTOM in prompt and AUDIT in prompt and '"properties"' in prompt  # evidence, schemas


def test_prompt_is_cut_to_its_size_bound(champion) -> None:
    lc = loaded()
    lc = lc.model_copy(
        update={
            "contract": lc.contract.model_copy(
                update={"mutator": lc.contract.mutator.model_copy(update={"max_prompt_chars": 4000})}
            )
        }
    )
    many = context().model_copy(update={"audits": context().audits * 40})
    prompt = render_prompt(lc, champion, many)
    assert "kept the 1 most recent audits" in prompt
    assert prompt.count(AUDIT) < 40


def test_contract_hash_covers_template_and_programme() -> None:
    a = loaded().contract
    assert {"programme", "mutator_template"} <= a.bound.keys()
    b = parse_contract(EXAMPLE.read_text().replace("Goal: lower", "Goal: reduce"), str(EXAMPLE)).contract
    assert a.contract_hash != b.contract_hash
    with pytest.raises(ValueError, match="'bound' is computed"):
        parse_contract(EXAMPLE.read_text().replace("seed: 20261129\n", "seed: 20261129\nbound: {}\n", 1))


PROPOSER_MODULES = [
    *sorted((ROOT / "sil" / "search" / "proposers").glob("*.py")),
    ROOT / "sil" / "search" / "evidence.py",
    ROOT / "sil_runtime" / "inspect_ext" / "offline" / "mutator.py",
]


@pytest.mark.parametrize("path", PROPOSER_MODULES, ids=lambda p: p.name)
def test_proposers_never_import_the_simulated_world(path: Path) -> None:
    tree = ast.parse(path.read_text())
    names = [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    names += [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    assert not [n for n in names if n.startswith("sil_runtime.sim")], f"{path.name} imports the simulated world"
    assert "mechanisms" not in path.read_text()


# --- the loop with the mutator, on the mechanisms world ----------------------------------------


def mutator_workspace(workspace: Path, model: str = "scripted/mutator", arms: str = "[never, random, gate]") -> Path:
    from tests.run.test_train import SMALL

    text = EXAMPLE.read_text().replace("model: scripted/mutator}", f"model: {model}}}")
    text = re.sub(r"replicate_k: \d+", "replicate_k: 48", text, count=1)  # this example keeps its own K
    for old, new in SMALL.items():
        assert old in text, old
        text = text.replace(old, new, 1)
    text = text.replace("arms: [never, random, gate]", f"arms: {arms}")
    (workspace / "program.md").write_text(text)
    return workspace


@pytest.mark.slow
def test_loop_records_each_mutator_call_and_citations_resolve(workspace: Path) -> None:
    from sil.integrity.records import AuditRecord, MutationRecord, MutatorCallRecord
    from tests.run.test_train import run_loop

    rc = run_loop(mutator_workspace(workspace))
    assert rc.state.phase == "done", rc.state.halt_reason
    audits = {a.audit_id: a for a in rc.book.payloads("audit", AuditRecord)}
    calls = rc.book.payloads("mutator_call", MutatorCallRecord)
    mutations = rc.book.payloads("mutation", MutationRecord)
    assert mutations and calls
    for rec in mutations:
        (call,) = [c for c in calls if c.mutation_id == rec.mutation.mutation_id and c.arm == rec.arm]
        assert call.citations == rec.mutation.evidence and call.prompt_sha256 and call.output_sha256
        assert (rc.run_dir / call.output_file).is_file()
        for item in rec.mutation.evidence:
            head = item.split()[0].split("/")
            audit_id, seed = head[0].removeprefix("audit:"), head[1].removeprefix("seed:")
            assert seed in audits[audit_id].scores  # the cited audit is in this run's ledger
            assert audits[audit_id].policy_set == rec.parent_set  # and it audited the champion
    assert rc.book.of_type("effect")  # observed effect next to the expected one


def test_fabricated_evidence_is_rejected_before_any_audit(workspace: Path) -> None:
    from sil.integrity.records import ProposerGapRecord
    from tests.run.test_train import run_loop

    rc = run_loop(mutator_workspace(workspace, "scripted/mutator-fabricate", "[random]"))
    assert rc.state.phase == "halted" and "consecutive proposer gaps" in (rc.state.halt_reason or "")
    gaps = rc.book.payloads("proposer_gap", ProposerGapRecord)
    assert len(gaps) == 3 and all("never-happened" in g.reason for g in gaps)
    assert not rc.book.of_type("mutation")  # nothing was applied or audited as a candidate
    assert len(rc.book.of_type("mutator_call")) == 3 * 3


def test_a_real_mutator_is_checked_priced_and_refused_without_approval(workspace, monkeypatch) -> None:
    from typer.testing import CliRunner

    from sil.cli.app import app

    monkeypatch.chdir(workspace)
    monkeypatch.setenv("INSPECT_DISABLE_MODEL_API", "1")
    text = EXAMPLE.read_text().replace("model: scripted/mutator}", "model: anthropic/claude-sonnet-4-5" + PRICED + "}")
    (workspace / "real.md").write_text(text.replace("max_usd: 0", "max_usd: 5"))
    run = CliRunner()
    check = run.invoke(app, ["check", "--contract", "real.md"], catch_exceptions=False)
    # The contract itself is valid; what is missing is what a real run needs before it starts.
    assert check.exit_code == 2, check.output
    assert "ok contract" in check.output and "ok budget" in check.output and "fail measurement" not in check.output
    assert "fail approval" in check.output and "fail credential:mutator" in check.output
    dry = run.invoke(app, ["run", "--contract", "real.md", "--dry-run"], catch_exceptions=False)
    assert dry.exit_code == 0 and "REAL MODEL CALLS" in dry.output, dry.output
    assert "mutator anthropic/claude-sonnet-4-5: at most" in dry.output and "for the mutator" in dry.output
    refused = run.invoke(app, ["run", "--contract", "real.md"], catch_exceptions=False)
    assert refused.exit_code == 2 and "approv" in refused.output
    assert not (workspace / "state" / "runs").exists()


def test_a_user_catalogue_named_in_the_contract_is_used_and_hashed(tmp_path, champion) -> None:
    from sil.search.proposers.catalogue import CatalogueProposer

    edit = (
        "- id: my-edit\n  surface: wrapper_prompt\n  path: sections.role\n  value: You help customers of a bike shop.\n"
        "  hypothesis: h\n  evidence: ['seed:order_tool_error']\n  expected_effect: {broken_tool_use: -0.1}\n"
        "  rollback: r\n"
    )
    (tmp_path / "mine.yaml").write_text(edit)
    text = EXAMPLE.read_text().replace("model: scripted/mutator}", "model: offline/catalogue}")
    text = text.replace("  axis_guard: 3 ", "  catalogue: mine.yaml\n  axis_guard: 3 ")
    (tmp_path / "c.md").write_text(text)
    from sil.contract.schema import load_contract

    lc = load_contract(tmp_path / "c.md")
    proposer = make_proposer(lc)
    assert isinstance(proposer, CatalogueProposer) and [e.id for e in proposer.catalogue] == ["my-edit"]
    m = proposer.propose(request(champion, None)).mutation
    assert m is not None and m.value == "You help customers of a bike shop."
    before = lc.contract.contract_hash
    (tmp_path / "mine.yaml").write_text(edit.replace("bike", "book"))
    assert load_contract(tmp_path / "c.md").contract.contract_hash != before
