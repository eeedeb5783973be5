"""The judge-drift canary (issue point 8): stored transcripts re-judged; a drifting judge halts the run."""

from __future__ import annotations

from pathlib import Path

import pytest

from sil.contract.schema import Contract, RoleModel, load_contract
from sil.contract.simparams import SimParams
from sil.exec.backends.sim import SimBackend, sim_rejudge
from sil.run.canary import cost_bound, judge_prompt, load_canary, mean_shift, model_rejudge, reserve
from tests.conftest import REPO, edit_contract
from tests.run.test_train import records, run_loop, shrink


def test_the_canary_ships_with_the_measurement_under_its_manifest() -> None:
    from sil.contract import prepare

    items = load_canary(REPO / "measurement")
    assert len(items) >= 3 and all(i.reference for i in items)
    files = prepare.build_manifest(REPO / "measurement").files
    assert {f"canary/{i.id}.md" for i in items} <= set(files)


def test_sim_judge_drift_shifts_the_canary_with_the_clock() -> None:
    items = load_canary(REPO / "measurement")
    params = SimParams(intercepts={}, judge_drift_per_tick=0.1)
    references = {i.id: i.reference for i in items}
    assert mean_shift(items, sim_rejudge(params, references, 0), ["concerning"]) == {"concerning": 0.0}
    assert mean_shift(items, sim_rejudge(params, references, 10), ["concerning"]) == {"concerning": 1.0}


def test_a_drifting_simulated_judge_halts_the_run(workspace: Path) -> None:
    root = shrink(workspace)
    edit_contract(
        root / "program.md", "  landscape: mechanisms", "  judge_drift_per_tick: 0.1\n  landscape: mechanisms"
    )
    rc = run_loop(root, "drift")
    assert rc.state.phase == "halted" and "judge-drift canary" in rc.state.halt_reason
    canary = [r.payload for r in records(rc) if r.type == "canary"]
    assert canary[0]["label"] == "before-baseline" and not canary[0]["halted"]  # tick 1: shift 0.1
    assert canary[-1]["halted"] and max(abs(v) for v in canary[-1]["shift"].values()) > 1.0


@pytest.mark.slow  # a whole run: .ci/run runs it after make test, keeping the default suite under 6 min
def test_a_steady_judge_passes_every_canary_check(workspace: Path) -> None:
    rc = run_loop(shrink(workspace), "steady")
    assert rc.state.phase == "done", rc.state.halt_reason
    labels = [r.payload["label"] for r in records(rc) if r.type == "canary"]
    assert labels[0] == "before-baseline" and labels[-1] == "end" and len(labels) >= 4


def test_the_scripted_judge_gives_the_stored_references() -> None:
    items = load_canary(REPO / "measurement")
    dims = sorted({d for i in items for d in i.reference})
    result = model_rejudge(items, RoleModel(model="scripted/judge"), dims)
    assert {i.id: i.reference for i in items} == result.scores  # an offline canary check shifts by exactly 0
    assert mean_shift(items, result.scores, dims) == dict.fromkeys(dims, 0.0) and result.usd == 0


PAID = {"model": "anthropic/claude-j", "price": {"input_per_mtok": 3, "output_per_mtok": 15}, "context_tokens": 200_000}


def test_a_paid_judge_canary_is_allowed_and_its_final_check_held_back() -> None:
    from sil.exec.backends.petri import PetriBackend

    data = load_contract(REPO / "examples" / "program-petri-offline.md").contract.model_dump()
    data["measurement"]["canary_max_shift"] = 1.0
    data["models"]["judge"] = {**PAID, "credential_env": "ANTHROPIC_API_KEY"}
    contract = Contract.model_validate(data)
    items = load_canary(REPO / "measurement")
    petri = PetriBackend()
    held = reserve(contract, REPO / "measurement", petri)
    assert held == cost_bound(contract.models.judge, items) > len(items) * 1000 * 15e-6  # answers at their cap
    data["measurement"]["canary_max_shift"] = None
    assert reserve(Contract.model_validate(data), REPO / "measurement", petri) == 0.0
    sim = load_contract(REPO / "program.md").contract  # the simulated judge re-judges: nothing to hold back
    assert reserve(sim, REPO / "measurement", SimBackend()) == 0.0


class CountingModels:
    """`get_model` that counts the judge's calls (the offline scripted judge answers them)."""

    def __init__(self, monkeypatch) -> None:
        import inspect_ai.model

        self.calls = 0
        real = inspect_ai.model.get_model

        def counting(name, **kwargs):
            kwargs["memoize"] = False
            model = real("scripted/judge", **kwargs)  # a fresh model: wrapped once
            generate = model.generate

            async def counted(*args, **kw):
                self.calls += 1
                return await generate(*args, **kw)

            model.generate = counted  # type: ignore[method-assign]
            return model

        monkeypatch.setattr(inspect_ai.model, "get_model", counting)


def test_paid_rejudging_is_charged_once_even_across_a_crash(monkeypatch, tmp_path: Path) -> None:
    models = CountingModels(monkeypatch)
    items = load_canary(REPO / "measurement")
    dims = sorted({d for i in items for d in i.reference})
    judge = RoleModel.model_validate(PAID)
    first = model_rejudge(items, judge, dims, tmp_path, "start")
    assert models.calls == len(items) and first.calls == len(items) and 0 < first.usd <= cost_bound(judge, items)
    again = model_rejudge(items, judge, dims, tmp_path, "start")  # a resume: the answers are replayed
    assert models.calls == len(items) and again == first
    (saved, *_) = sorted((tmp_path / "calls").glob("*.output.json"))
    saved.unlink()  # the first answer was lost with the crash: its call is charged its bound, made again
    lost = model_rejudge(items, judge, dims, tmp_path, "start")
    assert models.calls == len(items) + 1 and lost.scores == first.scores
    assert lost.usd > first.usd and lost.usd == pytest.approx(first.usd + cost_bound(judge, items[:1]), abs=1e-6)


def test_the_reserve_is_held_back_from_audits_and_mutator_calls() -> None:
    from types import SimpleNamespace

    from sil.run.rounds import Guards, RoundRunner

    budget = SimpleNamespace(max_audits=100, arm_audits={}, max_wall_s=1e9, max_usd=10.0, certify_horizon="fixed")
    state = SimpleNamespace(audits=0, usd=6.0, arms={})
    journal = SimpleNamespace(state=state, elapsed=lambda: 0.0)
    ctx = SimpleNamespace(contract=SimpleNamespace(budget=budget), seed_ids=("a",), heldout_ids=())
    backend = SimpleNamespace(audit_cost_bound=lambda contract, n: 1.0)
    rounds = RoundRunner(journal, ctx, backend, None, Guards())  # type: ignore[arg-type]
    assert rounds.budget_left("gate", 4) is None and rounds.usd_left(4.0) is None
    rounds.reserve_usd = 0.5
    assert "held back for the final canary" in (rounds.budget_left("gate", 4) or "")
    assert "held back" in (rounds.usd_left(4.0) or "") and rounds.usd_left(3.5) is None


def test_a_judge_that_drifts_only_on_petris_real_prompt_moves_the_canary(monkeypatch) -> None:
    import inspect_ai.model

    real = inspect_ai.model.get_model

    def drifting(name, **kwargs):
        kwargs["memoize"] = False
        model = real("scripted/judge", **kwargs)
        generate = model.generate

        async def only_on_the_audit_prompt(messages, *args, **kw):
            out = await generate(messages, *args, **kw)
            if "You are an impartial judge reviewing a conversation between an auditor" in messages[0].text:
                for call in out.message.tool_calls or []:  # the audits' prompt: every score 3 points higher
                    call.arguments = {k: min(v + 3, 10) if isinstance(v, int) else v for k, v in call.arguments.items()}
            return out

        model.generate = only_on_the_audit_prompt  # type: ignore[method-assign]
        return model

    monkeypatch.setattr(inspect_ai.model, "get_model", drifting)
    items = load_canary(REPO / "measurement")
    dims = sorted({d for i in items for d in i.reference})
    shift = mean_shift(items, model_rejudge(items, RoleModel(model="scripted/judge"), dims).scores, dims)
    assert max(shift.values()) >= 2.0  # the canary sees the drift the audits would see
    assert "- **broken_tool_use**:" in judge_prompt(items[0])  # with the measurement's rubric
