"""Held-out confirmation seeds: frozen with the measurement, used only by the final certification.

The search (baseline, A/A, candidate rounds) audits only the search seeds; the gate champion's
certification audits only the held-out seeds; the mutator never sees a held-out seed, score or
transcript; the manifest covers them; and the summary shows both effects side by side.

    pytest tests/run/test_heldout.py
"""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import pytest
from rich.console import Console

from sil.contract import prepare
from sil.contract.schema import ContractError, load_contract
from sil.exec.backends.petri import task_args
from sil.exec.backends.sim import SimBackend
from sil.exec.measure import AuditRequest, MeasureContext, MeasurementChanged, run_audit
from sil.integrity import ledger
from sil.policies.store import PolicyStore
from sil.review.summary import build_summary, confirmation_lines, render
from sil.run.proposing import NOTHING_LEFT
from sil.search.evidence import build_context
from sil.search.proposers.llm import render_prompt
from sil.store.events import Update
from tests.conftest import edit_contract
from tests.run.test_train import SMALL, first_random_candidate, open_loop, records

HELDOUT = [s.id for s in prepare.load_heldout(prepare.MEASUREMENT_DIR)]
SEARCH = [s.id for s in prepare.load_seeds(prepare.MEASUREMENT_DIR)]


def shrink(root: Path) -> Path:
    for old, new in SMALL.items():
        edit_contract(root / "program.md", old, new)
    return root


def refreeze(root: Path) -> str:
    """Re-freeze the workspace measurement and pin its new hash in the workspace contract."""
    contract = root / "program.md"
    old = load_contract(contract).contract.measurement.manifest_hash
    new = prepare.write_manifest(root / "measurement").manifest_hash
    edit_contract(contract, old, new)
    return new


# --- the frozen measurement ------------------------------------------------------------------


def test_repo_measurement_has_heldout_seeds_disjoint_from_the_search_seeds() -> None:
    assert len(HELDOUT) >= 4
    assert not set(HELDOUT) & set(SEARCH)
    manifest = prepare.verify(prepare.MEASUREMENT_DIR)
    assert {f"heldout/{s}.md" for s in HELDOUT} <= set(manifest.files)


def test_a_measurement_without_heldout_hashes_as_before(tmp_path: Path) -> None:
    """Adding the optional part changes nothing for measurements that do not have it."""
    with_heldout = prepare.build_manifest(prepare.MEASUREMENT_DIR)
    root = tmp_path / "m"
    shutil.copytree(prepare.MEASUREMENT_DIR, root)
    shutil.rmtree(root / "heldout")
    without = prepare.build_manifest(root)
    assert without.files == {k: v for k, v in with_heldout.files.items() if not k.startswith("heldout/")}
    overall = prepare.hashlib.sha256(json.dumps(without.files, sort_keys=True).encode()).hexdigest()
    assert without.manifest_hash == overall != with_heldout.manifest_hash
    assert prepare.load_heldout(root) == []


def test_tampering_a_heldout_seed_is_a_measurement_change(workspace: Path) -> None:
    seed = workspace / "measurement" / "heldout" / f"{HELDOUT[0]}.md"
    seed.write_text(seed.read_text() + "\nAlso ask about order 99.\n")
    with pytest.raises(prepare.MeasurementError, match=f"heldout/{HELDOUT[0]}.md"):
        prepare.verify(workspace / "measurement")


def test_tampering_a_heldout_seed_mid_run_halts_the_run(workspace: Path) -> None:
    from tests.run.test_train import run_loop

    seed = workspace / "measurement" / "heldout" / f"{HELDOUT[0]}.md"

    def tamper(update: Update) -> None:
        if first_random_candidate(update):
            seed.write_text(seed.read_text() + "\nAlso ask about order 99.\n")

    rc = run_loop(shrink(workspace), on_event=tamper)
    assert rc.state.phase == "halted"
    assert "measurement changed" in rc.state.halt_reason and "heldout/" in rc.state.halt_reason


def test_heldout_id_equal_to_a_search_id_is_refused(workspace: Path) -> None:
    shutil.copy(workspace / "measurement" / "seeds" / f"{SEARCH[0]}.md", workspace / "measurement" / "heldout")
    refreeze(workspace)
    with pytest.raises(prepare.MeasurementError, match=f"held-out seeds \\['{SEARCH[0]}'\\].*rename"):
        prepare.load_heldout(workspace / "measurement")
    with pytest.raises(prepare.MeasurementError, match="rename"):
        MeasureContext.from_contract(load_contract(workspace / "program.md").contract, workspace)


def test_certify_on_heldout_without_heldout_seeds_is_a_clear_error(workspace: Path) -> None:
    shutil.rmtree(workspace / "measurement" / "heldout")
    refreeze(workspace)
    contract = load_contract(workspace / "program.md").contract
    assert MeasureContext.from_contract(contract, workspace).certify_on == "search"  # auto, nothing held out
    edit_contract(workspace / "program.md", "  max_turns: 12", "  max_turns: 12\n  certify_on: heldout")
    contract = load_contract(workspace / "program.md").contract
    with pytest.raises(MeasurementChanged, match="certify_on is heldout but .*heldout has no seeds"):
        MeasureContext.from_contract(contract, workspace)


def test_certify_on_bad_value_names_the_field(workspace: Path) -> None:
    edit_contract(workspace / "program.md", "  max_turns: 12", "  max_turns: 12\n  certify_on: held-out")
    with pytest.raises(ContractError, match="certify_on"):
        load_contract(workspace / "program.md")


def test_default_contract_certifies_on_the_heldout_seeds(workspace: Path) -> None:
    ctx = MeasureContext.from_contract(load_contract(workspace / "program.md").contract, workspace)
    assert ctx.contract.measurement.certify_on == "auto"
    assert ctx.certify_on == "heldout" and list(ctx.heldout_ids) == HELDOUT and list(ctx.seed_ids) == SEARCH


# --- audits of the requested seed set --------------------------------------------------------


@pytest.fixture
def audit(workspace: Path):
    ctx = MeasureContext.from_contract(load_contract(workspace / "program.md").contract, workspace)
    store = PolicyStore(workspace / "run")
    ps = store.snapshot_dir(workspace / "state" / "policies")

    def make(audit_id: str, seed_set: str = "search", context: MeasureContext = ctx, where: str = "run"):
        req = AuditRequest(
            audit_id=audit_id,
            audit_dir=workspace / where / "audits" / audit_id,
            policy_dir=store.set_dir(ps),
            policy_hashes=ps.hashes,
            tick=3,
            pair_key="round-1",
            seed_set=seed_set,
        )
        return run_audit(req, context, SimBackend())

    return make, ctx


def test_sim_audits_exactly_the_requested_seeds(audit) -> None:
    make, _ = audit
    search, heldout = make("s1"), make("h1", "heldout")
    assert search.ok and heldout.ok, (search.gap_reason, heldout.gap_reason)
    assert sorted(search.scores) == sorted(SEARCH)
    assert sorted(heldout.scores) == sorted(HELDOUT)
    assert all(n <= len(HELDOUT) for n in heldout.sample_counts.values())


def test_search_audit_scores_do_not_depend_on_the_heldout_folder(audit, workspace: Path) -> None:
    """The same search audit (id, tick, pair key, policy) scores the same with or without held-out seeds."""
    make, ctx = audit
    root = workspace / "no-heldout"
    shutil.copytree(workspace / "measurement", root)
    shutil.rmtree(root / "heldout")
    with_heldout = make("s1")
    without = make("s1", context=dataclasses.replace(ctx, measurement_root=root, heldout_ids=()), where="other")
    assert with_heldout.ok and without.ok
    assert with_heldout.scores == without.scores


def test_evidence_of_the_wrong_seed_set_is_a_gap(workspace: Path, audit) -> None:
    from tests.exec.test_measure import ScriptBackend, evidence_script

    _, ctx = audit
    store = PolicyStore(workspace / "run")
    ps = store.snapshot_dir(workspace / "state" / "policies")
    req = AuditRequest(
        audit_id="h1",
        audit_dir=workspace / "run" / "audits" / "h1",
        policy_dir=store.set_dir(ps),
        policy_hashes=ps.hashes,
        tick=0,
        seed_set="heldout",
    )
    res = run_audit(req, ctx, ScriptBackend(evidence_script(ctx, ps.hashes)))  # evidence of the search seeds
    assert res.status == "gap" and "differ from the frozen seeds of the heldout set" in res.gap_reason


def test_petri_task_runs_the_requested_seed_folder(audit) -> None:
    _, sim_ctx = audit
    petri = sim_ctx.contract.model_copy(update={"backend": "petri", "backend_settings": None})  # Petri's defaults
    ctx = dataclasses.replace(sim_ctx, contract=petri)
    assert task_args(ctx)["seed_instructions"].endswith("/seeds")
    assert task_args(ctx, "heldout")["seed_instructions"].endswith("/heldout")
    assert {k: v for k, v in task_args(ctx).items() if k != "seed_instructions"} == {
        k: v for k, v in task_args(ctx, "heldout").items() if k != "seed_instructions"
    }


# --- the final phase -------------------------------------------------------------------------


def certified_run(root: Path, monkeypatch, certify_on: str | None = None):
    """A run whose gate champion is a real candidate, certified (forced) in the final phase."""
    from sil.run import certify
    from sil.stats import gate as gates
    from tests.run.test_train import gate_champion_forced

    edit_contract(root / "program.md", "certify_rounds: 1", "certify_rounds: 3")
    edit_contract(root / "program.md", "final_check_rounds: 1", "final_check_rounds: 2")
    if certify_on:
        edit_contract(root / "program.md", "  max_turns: 12", f"  max_turns: 12\n  certify_on: {certify_on}")
    rc = open_loop(root, "cert")
    candidate = gate_champion_forced(rc)
    seen_scales = []

    def keep_at_last_look(promotion, pool, rounds, looks, sigma_scale=1.0, **_level_and_claim):
        seen_scales.append(sigma_scale)
        verdict = "keep" if len(rounds) >= looks else "continue"
        return gates.GateDecision(verdict=verdict, stage="certify", look=len(rounds), reason="t", legs=[], alpha=0.05)

    monkeypatch.setattr(certify, "certify", keep_at_last_look)
    certify.final_phase(rc)
    return rc, candidate, seen_scales


def test_certification_rounds_run_only_on_heldout_seeds(workspace: Path, monkeypatch) -> None:
    rc, candidate, scales = certified_run(shrink(workspace), monkeypatch)
    recs = records(rc)
    audits = [r.payload for r in recs if r.type == "audit"]
    rounds = {r.payload["round"]: r.payload for r in recs if r.type == "round"}
    heldout = [a for a in audits if a["seed_set"] == "heldout"]
    assert len(heldout) == 2 * 3  # 3 certification rounds, champion and start each
    for a in audits:
        kind = rounds.get(a["round"], {}).get("kind")
        assert (a["seed_set"] == "heldout") == (kind == "certify"), a["audit_id"]
        if a["status"] == "ok":
            assert set(a["scores"]) <= set(HELDOUT if a["seed_set"] == "heldout" else SEARCH), a["audit_id"]
    intents = [r.payload for r in recs if r.type == "intent" and r.payload["action"] == "audit"]
    assert all(i["seed_set"] == ("heldout" if i["key"] in {a["round"] for a in heldout} else "search") for i in intents)
    (cert,) = [r.payload for r in recs if r.type == "certify"]
    assert cert["seed_set"] == "heldout" and cert["seeds"] == len(HELDOUT) and cert["certified"]
    assert cert["search_rounds"] == 2 and "broken_tool_use" in cert["search_effect"]
    expected_scale = (len(SEARCH) / len(HELDOUT)) ** 0.5
    assert scales and all(s == pytest.approx(expected_scale) for s in scales)
    assert cert["sigma_scale"] == pytest.approx(expected_scale)
    search_check = [r for r in rounds.values() if r["round"].startswith("final-gate-search-")]
    assert len(search_check) == 2 and all(r["seed_set"] == "search" and r["kind"] == "final" for r in search_check)
    assert rc.state.arms["gate"].champion == candidate
    assert "certified on the held-out seeds" in rc.state.arms["gate"].stop_reason


@pytest.mark.parametrize("why, looks", [(NOTHING_LEFT, 3 + 7 // 2), ("wall-time budget (600s) reached", 3), (None, 3)])
def test_a_dry_proposer_s_unspent_audits_lengthen_the_certification(
    workspace: Path, monkeypatch, why: str | None, looks: int
) -> None:
    from sil.run import certify

    root = shrink(workspace)
    edit_contract(root / "program.md", "certify_horizon: search", "certify_horizon: fixed")  # the rule under test
    real_phase = certify.final_phase

    def after_a_short_search(rc) -> None:  # type: ignore[no-untyped-def]
        arm = rc.state.arms["gate"]
        arm.audits, arm.stop_reason = arm.audits - 7, why  # 7 of the arm's audits left unspent
        real_phase(rc)

    monkeypatch.setattr(certify, "final_phase", after_a_short_search)
    rc, _, _ = certified_run(root, monkeypatch)
    (cert,) = [r.payload for r in records(rc) if r.type == "certify"]
    # the horizon the (forced) test kept at, and what the record says; only a proposer that ran
    # dry leaves audits the run can still pay for
    assert cert["looks"] == looks and cert["rounds"] == looks and cert["certified"]
    from sil.review.render import _cert_rows
    from sil.review.report import build_report
    from sil.review.runview import load_run

    data = build_report(load_run(rc.run_dir), workspace)
    (row,) = [r for r in _cert_rows(data) if r[0] == "gate"]
    # and what that horizon could do for a clean champion, so a rolled-back find can be read
    assert row[3].startswith(f"{looks} of up to {looks} (planned power ") and f"in {looks} rounds" in row[3]


@pytest.mark.slow  # a whole run or real audits: .ci/run runs it after make test
def test_search_rounds_never_touch_heldout_seeds_in_a_whole_run(workspace: Path) -> None:
    from tests.run.test_train import run_loop

    rc = run_loop(shrink(workspace))
    assert rc.state.phase == "done", rc.state.halt_reason
    rounds = {r.payload["round"]: r.payload["kind"] for r in records(rc) if r.type == "round"}
    for r in records(rc):
        if r.type == "audit" and rounds.get(r.payload["round"]) != "certify":
            assert r.payload["seed_set"] == "search"
            assert not set(r.payload["scores"]) & set(HELDOUT), r.payload["audit_id"]


def test_certify_on_search_keeps_the_old_behaviour(workspace: Path, monkeypatch) -> None:
    rc, _, scales = certified_run(shrink(workspace), monkeypatch, certify_on="search")
    recs = records(rc)
    assert all(r.payload["seed_set"] == "search" for r in recs if r.type == "audit")
    (cert,) = [r.payload for r in recs if r.type == "certify"]
    assert cert["seed_set"] == "search" and cert["search_rounds"] == 0 and cert["sigma_scale"] == 1.0
    assert scales and all(s == 1.0 for s in scales)
    summary = build_summary(rc.state, recs, rc.contract, "simulated")
    assert summary.confirmation is not None and summary.confirmation.certified_on == "search"
    assert "certified on the search seeds" in confirmation_lines(summary)[0]


def test_mutator_never_sees_heldout_seeds(workspace: Path, monkeypatch) -> None:
    """After held-out audits of the champion exist, its evidence and prompt hold none of them."""
    rc, candidate, _ = certified_run(shrink(workspace), monkeypatch)
    book = rc.book
    assert any(a.seed_set == "heldout" and a.policy_set == candidate.set_id for a in _audits(book))
    ctx = build_context(book, rc.run_dir, "gate", candidate.set_id, rc.contract)
    assert ctx.audits, "the champion's search audits are still evidence"
    heldout_audits = {a.audit_id for a in _audits(book) if a.seed_set == "heldout"}
    assert not heldout_audits & set(ctx.index)
    assert not heldout_audits & {a.audit_id for a in ctx.audits}
    prompt = render_prompt(rc.loaded, rc.store.documents(candidate), ctx)
    for text in (ctx.model_dump_json(), prompt):
        for seed in HELDOUT:
            assert seed not in text
        for audit_id in heldout_audits:
            assert audit_id not in text
    # a distinctive sentence of a held-out scenario never reaches the proposer either
    scenario = prepare.load_heldout(rc.measure.measurement_root)[0].instruction
    assert scenario[:60] not in prompt


def _audits(book: ledger.RecordBook):
    from sil.integrity.records import AuditRecord

    return book.payloads("audit", AuditRecord)


def test_summary_shows_search_and_heldout_effects_side_by_side(workspace: Path, monkeypatch) -> None:
    rc, _, _ = certified_run(shrink(workspace), monkeypatch)
    recs = records(rc)
    summary = build_summary(rc.state, recs, rc.contract, "simulated")
    c = summary.confirmation
    assert c is not None and c.certified_on == "heldout" and c.certified
    assert c.heldout_rounds == 3 and c.search_rounds == 2 and c.heldout_seeds == len(HELDOUT)
    assert c.heldout is not None and c.search is not None
    lines = confirmation_lines(summary)
    assert "held-out seeds (6, never used by the search)" in lines[0] and "certified on these" in lines[0]
    assert "search seeds" in lines[1] and "a check only" in lines[1]
    console = Console(record=True, width=200)
    render(summary, console)
    text = console.export_text()
    assert "held-out seeds" in text and "on the held-out seeds" in text


# --- resume after a kill during the held-out certification -----------------------------------

CHILD_TIMEOUT_S = 300
# kills in the final phase, each in a fresh process resuming the last: an audit of the second
# certification round mid-flight and then lost with the machine, a round's audits recorded but
# not its statistic, and a state save
KILLS = [("audit.running", 3, True), ("round.before_record", 1, False), ("state.before_save", 2, False)]


def forced_workspaces(tmp_path: Path) -> tuple[Path, Path]:
    """Two identical copies of the repository's workspace, each at `forced_champion`:
    a reference run and one to kill."""
    from tests.conftest import REPO

    roots = []
    for name in ("reference", "killed"):
        root = tmp_path / name
        root.mkdir()
        shutil.copy(REPO / "program.md", root / "program.md")
        shutil.copytree(REPO / "measurement", root / "measurement")
        shutil.copytree(REPO / "state" / "policies", root / "state" / "policies")
        forced_champion(shrink(root))
        roots.append(root)
    return roots[0], roots[1]


def forced_champion(root: Path) -> None:
    """A saved run whose gate champion is a real (unaudited) candidate, ready for the final phase."""
    from tests.run.test_train import gate_champion_forced

    edit_contract(root / "program.md", "certify_rounds: 1", "certify_rounds: 3")
    edit_contract(root / "program.md", "final_check_rounds: 1", "final_check_rounds: 2")
    edit_contract(root / "program.md", "p_crash: 0.01", "p_crash: 0.0")
    rc = open_loop(root, "cert")
    gate_champion_forced(rc)
    rc.save()


def final_phase_in_child(root: Path, crash: str | None = None) -> int | None:
    """Run (or resume) the final phase in a forked process; its exit code (-9 when killed)."""
    import multiprocessing
    import os

    from sil.base.faults import CRASH_ENV

    def target() -> None:
        from sil.run import certify

        if crash:
            os.environ[CRASH_ENV] = crash
        certify.final_phase(open_loop(root, "cert"))
        os._exit(0)

    proc = multiprocessing.get_context("fork").Process(target=target)
    proc.start()
    proc.join(CHILD_TIMEOUT_S)
    return proc.exitcode


def final_outcome(root: Path) -> dict:
    recs = list(ledger.read_records(root / "state" / "runs" / "cert" / "ledger.jsonl"))
    (cert,) = [r.payload for r in recs if r.type == "certify"]
    return {
        "certify": {k: v for k, v in cert.items() if k != "_key"},
        "scores": {r.payload["audit_id"]: r.payload["scores"] for r in recs if r.type == "audit"},
        "rounds": [r.payload["round"] for r in recs if r.type == "round"],
    }


@pytest.mark.slow  # a whole run or real audits: .ci/run runs it after make test
def test_resume_after_kills_during_heldout_certification(tmp_path: Path) -> None:
    from sil.exec import attempts
    from sil.integrity.verify import verify_run_ledger
    from sil.store.runstate import RunState
    from tests.crash.test_crash_matrix import check_intents_precede_effects, kill_orphan_audits

    reference, killed = forced_workspaces(tmp_path)
    assert final_phase_in_child(reference) == 0
    for point, k, lose_audits in KILLS:
        assert final_phase_in_child(killed, f"{point}:{k}") == -9, f"{point}:{k} was not reached"
        if lose_audits:
            assert kill_orphan_audits(killed) >= 1
    assert final_phase_in_child(killed) == 0

    want, got = final_outcome(reference), final_outcome(killed)
    assert got == want
    assert want["certify"]["seed_set"] == "heldout" and want["certify"]["rounds"] >= 1
    run_dir = killed / "state" / "runs" / "cert"
    recs = list(ledger.read_records(run_dir / "ledger.jsonl"))
    ids = [r.payload["audit_id"] for r in recs if r.type == "audit"]
    assert len(ids) == len(set(ids)), "an audit was recorded twice"
    died = [r.payload["audit_id"] for r in recs if r.type == "recovery" and r.payload["found"] == "died"]
    heldout = {r.payload["audit_id"] for r in recs if r.type == "audit" and r.payload["seed_set"] == "heldout"}
    assert died and set(died) <= heldout  # the kill hit the held-out certification itself
    for audit_id in ids:
        status = attempts.read_status(run_dir / "audits" / audit_id)
        assert status.executions == 1, f"{audit_id} ran {status.executions} times"
    check_intents_precede_effects(recs)
    assert verify_run_ledger(run_dir / "ledger.jsonl", killed).ok
    state = RunState.load(run_dir)
    assert state.planned is None and len(state.arms["gate"].final_rounds) == want["certify"]["rounds"]


@pytest.mark.slow  # a whole run or real audits: .ci/run runs it after make test
def test_resume_after_an_early_certification_runs_no_spare_round(tmp_path: Path, monkeypatch) -> None:
    """Killed in the search-seed check after the certification decided early: no extra held-out round."""
    from sil.run import certify
    from sil.stats import gate as gates

    def keep_at_two(promotion, pool, rounds, looks, sigma_scale=1.0, **_level_and_claim):
        verdict = "keep" if len(rounds) >= 2 else "continue"
        return gates.GateDecision(verdict=verdict, stage="certify", look=len(rounds), reason="t", legs=[], alpha=0.05)

    monkeypatch.setattr(certify, "certify", keep_at_two)  # inherited by the forked children
    reference, killed = forced_workspaces(tmp_path)
    assert final_phase_in_child(reference) == 0
    # audits 1-4: two held-out certification rounds; audit 5: the first search-seed check round
    assert final_phase_in_child(killed, "audit.running:5") == -9
    assert final_phase_in_child(killed) == 0
    want, got = final_outcome(reference), final_outcome(killed)
    assert want["certify"]["rounds"] == 2 and want["certify"]["search_rounds"] == 2
    assert got == want
