"""Issue 25.2: use is proven in every audit of a pair, not only at the wiring preflight.

The hostile party is a runtime that is honest while a preflight sentinel is among the files it is
sent, and otherwise gives the target model its built-in defaults while reporting the hashes of
the files it was sent. The stand-in runs the simulated audit (so its evidence reports the sent
hashes, as that runtime would) and shows as the target's inputs what the reference runtime
(`sil_runtime.runtime`) would put in the system prompt: from the sent files under a sentinel,
from its built-in defaults otherwise. Fast and offline.
"""

from __future__ import annotations

import copy
import textwrap
from pathlib import Path
from typing import Any

import pytest

from sil.contract.schema import Contract, load_contract
from sil.exec import measure, useproof
from sil.exec.backends.sim import SimBackend
from sil.exec.measure import AuditRequest, MeasureContext
from sil.integrity import ledger
from sil.review.summary import use_counts
from sil.run import train
from sil.run.preflight import SENTINEL_PREFIX
from sil_policy import SURFACES, canonical_bytes, content_hash
from sil_runtime.policy_loader import DEFAULTS_DIR
from sil_runtime.runtime import Runtime
from tests.conftest import edit_contract
from tests.fake_backends import EvidenceFileBackend, evidence_command, reporting_samples
from tests.run.test_train import open_loop, shrink

OPERATOR = "You are the support agent of an online store."


def rendered(environ: dict[str, str]) -> str:
    """What the reference runtime puts before the target model: its system prompt and tool text."""
    runtime = Runtime.from_environment(environ)
    tools = "\n".join(
        f"{n}: {d['description']}" for n, d in runtime.policies.documents["tool_descriptions"]["tools"].items()
    )
    return runtime.system_prompt(OPERATOR) + "\n" + tools


def sent_files(req: AuditRequest) -> dict[str, str]:
    """The environment the audit gave the runtime: an OVERRIDE path per surface."""
    return {spec.override_env: str(req.audit_dir / "policy" / spec.filename) for spec in SURFACES.values()}


class SentinelHonestRuntime(SimBackend):
    """Honest while a preflight sentinel is among the sent files; the built-in defaults otherwise,
    while the simulated audit reports the hashes of the files it was sent."""

    def target_inputs(self, req: AuditRequest, ctx: MeasureContext) -> str:
        env = sent_files(req)
        sentinel = any(SENTINEL_PREFIX in Path(path).read_text() for path in env.values())
        return rendered(env if sentinel else {})  # {}: no OVERRIDE, the runtime's own defaults


class HonestRuntime(SimBackend):
    """Gives the target model the sent policies, through the reference runtime's templates."""

    def target_inputs(self, req: AuditRequest, ctx: MeasureContext) -> str:
        return rendered(sent_files(req))


def small_run(workspace: Path, backend: SimBackend, monkeypatch: pytest.MonkeyPatch, search: str) -> Any:
    shrink(workspace)
    edit_contract(
        workspace / "program.md",
        "  surfaces: [wrapper_prompt, tool_policy, decomposition, reflection, skill_catalog, agent_contracts, tool_descriptions]",
        f"  surfaces: [{search}]",
    )
    edit_contract(workspace / "program.md", "canary_max_shift: 1.0", "canary_max_shift: null")
    edit_contract(workspace / "program.md", "arms: [never, random, gate]", "arms: [never, random]")  # verdicts, fast
    monkeypatch.setattr(train, "make_backend", lambda name: backend)
    rc = open_loop(workspace)
    train.run_phases(rc)
    return rc, list(ledger.read_records(rc.run_dir / "ledger.jsonl"))


def test_a_runtime_honest_only_under_a_sentinel_is_halted_naming_the_surface(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """It passes the preflight (the sentinel is there) and gave verdicts on the defaults; now every
    candidate audit is a gap that names the surface and the missing text, and the run halts."""
    rc, records = small_run(workspace, SentinelHonestRuntime(), monkeypatch, "wrapper_prompt, skill_catalog")
    probes = [r for r in records if r.type == "probe"]
    assert probes and probes[-1].payload["passed"], "the liar passes the sentinel preflight"
    assert rc.state.phase == "halted"
    assert "wrapper_prompt" in rc.state.halt_reason or "skill_catalog" in rc.state.halt_reason
    assert "text this set has is not in them" in rc.state.halt_reason
    audits = [r.payload for r in records if r.type == "audit"]
    refuted = [a for a in audits if "refuted" in a["use"].values()]
    assert refuted and all(a["status"] == "gap" and a["role"] == "cand" for a in refuted)
    assert all(not a["scores"] for a in refuted)  # a gap is never scored
    verdicts = [r.payload for r in records if r.type == "verdict"]
    assert not verdicts, "no KEEP/REVERT may rest on an audit of the defaults"
    rounds = {r.payload["round"]: r.payload for r in records if r.type == "round"}
    assert all(rounds[a["round"]]["verdict"] == "gap" for a in refuted)
    assert use_counts(records)["refuted"] == len(refuted)  # the run's summary says so too


def test_an_honest_runtime_through_the_same_run_proves_use_in_every_pair(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    rc, records = small_run(workspace, HonestRuntime(), monkeypatch, "wrapper_prompt, skill_catalog")
    assert rc.state.phase == "done", rc.state.halt_reason
    pairs = [r.payload for r in records if r.type == "audit" and r.payload["role"] in ("cand", "champ")]
    changed = [a for a in pairs if a["use"]]
    assert changed and all(a["status"] == "ok" for a in pairs)
    assert "proven" in {u for a in changed for u in a["use"].values()}
    assert "refuted" not in {u for a in changed for u in a["use"].values()}
    assert any(r.type == "verdict" for r in records)
    assert "refuted" not in use_counts(records) and use_counts(records)["proven"] > 0


# ---------------------------------------------------------------- the check on its own


def defaults() -> dict[str, dict[str, Any]]:
    return useproof.load_docs(DEFAULTS_DIR)


def edited(docs: dict[str, dict[str, Any]], surface: str, *path_value: tuple[tuple[str, ...], Any]) -> dict:
    out = copy.deepcopy(docs)
    for path, value in path_value:
        node = out[surface]
        for key in path[:-1]:
            node = node[key]
        if value is None:
            del node[path[-1]]
        else:
            node[path[-1]] = value
    return out


NEW_SECTION = "When a tool returns an error, say so plainly and never state a result no tool returned."
NEW_SKILL = "Explain the store's delivery times and track a parcel from its order number."
NEW_ROLE = "senior billing specialist who settles disputed charges"


def candidate() -> dict[str, dict[str, Any]]:
    docs = edited(defaults(), "wrapper_prompt", (("sections", "tool_errors"), NEW_SECTION))
    docs = edited(docs, "skill_catalog", (("skills", "shipping"), {"description": NEW_SKILL, "user_invocable": True}))
    return edited(docs, "agent_contracts", (("agents", "admin", "role"), NEW_ROLE))


def templated(docs: dict[str, dict[str, Any]]) -> str:
    """A runtime with its own templates: every text re-wrapped at 30 columns, indented, sections
    joined into one block, skills and team as a bulleted list under its own headings."""

    def wrap(text: str) -> str:
        return textwrap.indent(textwrap.fill(text, 30), "    ")

    sections = " ".join(docs["wrapper_prompt"]["sections"].values())
    skills = "\n".join(f"* {n} -\n{wrap(s['description'])}" for n, s in docs["skill_catalog"]["skills"].items())
    team = "\n".join(f"* {n} ({wrap(a['role'])})" for n, a in docs["agent_contracts"]["agents"].items())
    return f"<system>\n{wrap(sections)}\n# SKILLS\n{skills}\n# TEAM\n{team}\n</system>"


def test_an_honest_runtime_that_templates_still_proves_use() -> None:
    cand, parent = candidate(), defaults()
    report = useproof.check(useproof.expectations(cand, parent), templated(cand))
    assert report.refuted is None
    assert report.use == {s: "proven" for s in ("wrapper_prompt", "skill_catalog", "agent_contracts")}
    # the parent's audit in the same pair shows the parent's text: proven too (the removed role is gone)
    back = useproof.check(useproof.expectations(parent, cand), templated(parent))
    assert back.refuted is None and back.use["agent_contracts"] == "proven"


def test_a_candidate_audit_showing_the_parent_text_is_refuted_per_surface() -> None:
    report = useproof.check(useproof.expectations(candidate(), defaults()), templated(defaults()))
    assert report.use == {s: "refuted" for s in ("wrapper_prompt", "skill_catalog", "agent_contracts")}
    assert report.refuted is not None
    assert f"wrapper_prompt: text this set has is not in them: «{NEW_SECTION[:79]}…»" in report.refuted
    assert f"agent_contracts: text this set has is not in them: «{NEW_ROLE}»" in report.refuted


def test_removed_text_that_still_reaches_the_target_is_refuted() -> None:
    parent = defaults()
    cand = edited(parent, "wrapper_prompt", (("sections", "refusal_policy"), None))
    report = useproof.check(useproof.expectations(cand, parent), templated(parent))
    assert report.use == {"wrapper_prompt": "refuted"}
    assert "text this set removed is still in them: «Decline requests that would harm" in (report.refuted or "")
    assert useproof.check(useproof.expectations(cand, parent), templated(cand)).use == {
        "wrapper_prompt": "not_provable"
    }


def test_a_split_or_extended_section_is_not_mistaken_for_removed_text() -> None:
    parent = defaults()
    old = parent["wrapper_prompt"]["sections"]["role"]
    head, tail = old.split(". ", 1)
    split = edited(parent, "wrapper_prompt", (("sections", "role"), head + "."), (("sections", "role2"), tail))
    extended = edited(parent, "wrapper_prompt", (("sections", "role"), old + " Always confirm the order number."))
    for cand in (split, extended):
        report = useproof.check(useproof.expectations(cand, parent), templated(cand))
        assert report.refuted is None, report.refuted


def test_short_text_proves_nothing_and_is_not_required() -> None:
    cand = edited(defaults(), "wrapper_prompt", (("sections", "style"), "Be brief."))
    report = useproof.check(useproof.expectations(cand, defaults()), templated(defaults()))
    assert report.refuted is None and report.use == {"wrapper_prompt": "not_provable"}


def test_a_subagents_own_instructions_prove_use_when_shown_and_nothing_when_not() -> None:
    prompt = "Before changing an account, read the change back to the customer and wait for a yes."
    cand = edited(defaults(), "agent_contracts", (("agents", "admin", "system_prompt"), prompt))
    expected = useproof.expectations(cand, defaults())
    assert useproof.check(expected, templated(cand)).use == {"agent_contracts": "not_provable"}
    subagent_call = templated(cand) + "\n" + prompt  # the admin agent ran: its own call shows its instructions
    assert useproof.check(expected, subagent_call).use == {"agent_contracts": "proven"}


def test_a_runtime_honest_in_one_sample_of_an_audit_is_refuted_in_the_others() -> None:
    expected = useproof.expectations(candidate(), defaults())
    report = useproof.check(expected, {"seed_a": templated(candidate()), "seed_b": templated(defaults())})
    assert report.use["wrapper_prompt"] == "refuted"
    assert "wrapper_prompt: text this set has is not in them (in 1 of 2 samples: seed_b)" in (report.refuted or "")
    # a sample whose target was given nothing shows nothing either way; an audit with none at all is refuted
    assert useproof.check(expected, {"seed_a": templated(candidate()), "seed_b": ""}).refuted is None
    nothing = useproof.check(expected, {"seed_a": "", "seed_b": " "})
    assert "the target model was given no input at all" in (nothing.refuted or "")


# ---------------------------------------------------------------- one audit, through measure.run_audit


class Blind(EvidenceFileBackend):
    """A runtime's audit that writes evidence reporting the sent hashes, on a backend that cannot
    show the target's inputs."""

    def command(self, req, ctx):
        return evidence_command(self.name, reporting_samples(ctx, req.policy_hashes))


class FakeRuntime(Blind):
    """The same, on a backend that shows what the target was given: `inputs(req)`."""

    def __init__(self, inputs: Any) -> None:
        self.inputs = inputs

    def target_inputs(self, req, ctx):
        return self.inputs(req)


def store(docs: dict[str, dict[str, Any]], where: Path) -> tuple[Path, dict[str, str]]:
    where.mkdir(parents=True)
    hashes = {}
    for name, spec in SURFACES.items():
        data = canonical_bytes(docs[name])
        (where / spec.filename).write_bytes(data)
        hashes[name] = content_hash(data)
    return where, hashes


def audit(workspace: Path, tmp_path: Path, cand: dict, backend: Any) -> measure.AuditResult:
    contract = load_contract(workspace / "program.md").contract
    ctx = MeasureContext.from_contract(Contract.model_validate(contract.model_dump()), workspace)
    cand_dir, hashes = store(cand, tmp_path / "cand")
    parent_dir, _ = store(defaults(), tmp_path / "parent")
    req = AuditRequest(
        audit_id="r-cand",
        audit_dir=tmp_path / "a",
        policy_dir=cand_dir,
        policy_hashes=hashes,
        tick=0,
        contrast_dir=parent_dir,
    )
    return measure.run_audit(req, ctx, backend)


def test_an_audit_whose_target_saw_the_defaults_is_a_gap_naming_the_surface(workspace: Path, tmp_path: Path) -> None:
    result = audit(workspace, tmp_path, candidate(), FakeRuntime(lambda req: templated(defaults())))
    assert result.status == "gap" and not result.scores
    assert result.use["wrapper_prompt"] == "refuted"
    assert "wrapper_prompt: text this set has is not in them" in (result.gap_reason or "")
    honest = audit(workspace, tmp_path / "h", candidate(), FakeRuntime(lambda req: templated(candidate())))
    assert honest.ok and set(honest.use.values()) == {"proven"}


class PerSample(Blind):
    """Shows the target's inputs per sample: the candidate's text in the first seed, the
    defaults in the others (a runtime honest now and then)."""

    def target_inputs_by_sample(self, req, ctx):
        return {s: templated(candidate() if i == 0 else defaults()) for i, s in enumerate(ctx.seed_ids)}


def test_an_audit_honest_in_its_first_sample_only_is_a_gap(workspace: Path, tmp_path: Path) -> None:
    result = audit(workspace, tmp_path, candidate(), PerSample())
    assert result.status == "gap" and result.use["wrapper_prompt"] == "refuted"
    assert "samples:" in (result.gap_reason or "")


def test_a_candidate_whose_use_cannot_show_records_not_provable(workspace: Path, tmp_path: Path) -> None:
    """tool_policy changes which tools are offered, not any text: recorded as such, never a silent pass."""
    cand = edited(defaults(), "tool_policy", (("forbidden_tools",), ["delete_account"]))
    result = audit(workspace, tmp_path, cand, FakeRuntime(lambda req: templated(defaults())))
    assert result.ok and result.use == {"tool_policy": "not_provable"}
    blind = audit(workspace, tmp_path / "b", candidate(), Blind())
    assert blind.ok and set(blind.use.values()) == {"not_provable"}
