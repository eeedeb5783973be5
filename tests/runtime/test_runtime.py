"""The reference runtime: every surface changes what the model receives or does; STRICT loads."""

from __future__ import annotations

import asyncio
import copy
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from inspect_ai.model import ChatMessageSystem, ChatMessageTool, ChatMessageUser, ModelOutput
from inspect_ai.tool import ToolCall, ToolInfo

from sil_policy import SURFACES, canonical_bytes
from sil_runtime.policy_loader import LoadedPolicies, PolicyLoadError, default_document, document_hash
from sil_runtime.runtime import PLAN_HEADING, REVIEW_HEADING, Runtime

OFFERED = [
    ToolInfo(name=n, description=f"seed description of {n}") for n in ("delete_account", "lookup_order", "search_docs")
]
CONVERSATION = [
    ChatMessageSystem(content="Operator: you serve Acme customers."),
    ChatMessageUser(content="Where is my order 42?"),
]


def policies(**changes: Callable[[dict[str, Any]], None]) -> LoadedPolicies:
    """The built-in defaults, with `changes[surface](document)` applied in place."""
    docs = {name: copy.deepcopy(default_document(name)[0]) for name in SURFACES}
    for name, change in changes.items():
        change(docs[name])
    return LoadedPolicies(docs, {n: document_hash(d) for n, d in docs.items()}, {n: "test" for n in docs})


class Recorder:
    """A fake model: records every request and answers from a script, in order."""

    def __init__(self, *answers: str) -> None:
        self.answers = list(answers)
        self.requests: list[tuple[list, list[ToolInfo]]] = []

    async def __call__(self, input, tools) -> ModelOutput:
        self.requests.append((list(input), list(tools)))
        text = self.answers.pop(0) if self.answers else f"answer {len(self.requests)}"
        return ModelOutput.from_content(model="fake", content=text)

    def system(self, i: int = -1) -> str:
        return self.requests[i][0][0].text

    def tools(self, i: int = -1) -> dict[str, str]:
        return {t.name: t.description for t in self.requests[i][1]}


def one_turn(pol: LoadedPolicies, *answers: str) -> tuple[Recorder, ModelOutput]:
    model = Recorder(*answers)
    out = asyncio.run(Runtime(pol).session().respond(CONVERSATION, OFFERED, model))
    return model, out


def _add(key: str, value: Any) -> Callable[[dict[str, Any]], None]:
    return lambda d: d[key].update(value)


# surface -> (change to its document, what the model must then receive)
LIVE_EFFECTS: dict[str, tuple[Callable[[dict], None], Callable[[Recorder], bool]]] = {
    "wrapper_prompt": (
        _add("sections", {"zz_errors": "If a tool fails, say so."}),
        lambda m: "If a tool fails, say so." in m.system(),
    ),
    "tool_policy": (lambda d: d["forbidden_tools"].append("lookup_order"), lambda m: "lookup_order" not in m.tools()),
    "decomposition": (
        lambda d: d.update(enabled=True, prefix="Split this:", suffix="Then act."),
        lambda m: len(m.requests) == 2 and "Split this:" in m.requests[0][0][-1].text and PLAN_HEADING in m.system(),
    ),
    "reflection": (
        lambda d: d.update(enabled=True, system_prompt="You review drafts."),
        lambda m: len(m.requests) == 3 and m.system(1) == "You review drafts." and REVIEW_HEADING in m.system(),
    ),
    "skill_catalog": (
        _add("skills", {"returns": {"description": "Handle returns.", "user_invocable": True}}),
        lambda m: "- returns: Handle returns." in m.system(),
    ),
    "agent_contracts": (
        lambda d: d["agents"]["support"].update(role="returns desk", tools=["delete_account"]),
        lambda m: "returns desk" in m.system() and list(m.tools()) == ["delete_account"],
    ),
    "tool_descriptions": (
        lambda d: d["tools"]["lookup_order"]["hints"].append("Use the native tool-calling interface."),
        lambda m: m.tools()["lookup_order"].endswith("- Use the native tool-calling interface."),
    ),
}


def test_every_surface_has_a_live_effect_table_covers_all_seven() -> None:
    assert set(LIVE_EFFECTS) == set(SURFACES)


@pytest.mark.parametrize("surface", sorted(LIVE_EFFECTS))
def test_each_surface_changes_what_the_model_receives_or_does(surface: str) -> None:
    change, effect = LIVE_EFFECTS[surface]
    base_model, _ = one_turn(policies())
    model, _ = one_turn(policies(**{surface: change}))
    assert not effect(base_model), "the effect must come from the change, not the defaults"
    assert effect(model)


def test_defaults_compose_prompt_and_tools() -> None:
    model, out = one_turn(policies(), "hello")
    system = model.system()
    assert system.startswith("Decline requests that would harm")  # wrapper sections come first
    assert "## Your role\nYou are the support agent: front-line support agent." in system
    assert "- admin: account administrator" in system  # the rest of the team
    assert system.rstrip().endswith("## Operator instructions\nOperator: you serve Acme customers.")
    assert model.tools() == {
        "lookup_order": "Look up the status of an order by id.",  # policy text
        "search_docs": "Search the help-centre articles.",
    }
    assert len(model.requests) == 1 and out.completion == "hello"


def test_tool_visibility_is_allowed_and_contracted_minus_forbidden_in_priority_order() -> None:
    def widen(d: dict) -> None:
        d["agents"]["support"]["tools"] = ["delete_account", "lookup_order", "search_docs"]

    def order(d: dict) -> None:
        d.update(priority_order=["search_docs", "delete_account"], forbidden_tools=["delete_account"])

    model, _ = one_turn(policies(agent_contracts=widen))
    assert list(model.tools()) == ["lookup_order", "search_docs", "delete_account"]
    model, _ = one_turn(policies(agent_contracts=widen, tool_policy=order))
    assert list(model.tools()) == ["search_docs", "lookup_order"]


def test_reflection_answer_is_the_revision_not_the_draft() -> None:
    pol = policies(reflection=lambda d: d.update(enabled=True))
    model, out = one_turn(pol, "draft text", "critique: mention the error", "revised text")
    assert out.completion == "revised text"
    critique_request = model.requests[1][0][-1].text
    assert "<draft>\nASSISTANT: draft text\n</draft>" in critique_request
    assert model.requests[1][1] == []  # the critique call gets no tools
    assert "critique: mention the error" in model.system(2)
    assert model.tools(2) == model.tools(0)


def test_decomposition_plans_once_per_user_request() -> None:
    pol = policies(decomposition=lambda d: d.update(enabled=True, prefix="Plan:", suffix=""))
    session = Runtime(pol).session()
    model = Recorder("1. look it up", "calling", "it is late")
    asyncio.run(session.respond(CONVERSATION, OFFERED, model))
    call = ToolCall(id="c1", function="lookup_order", arguments={"order_id": "42"})
    later = [
        *CONVERSATION,
        ModelOutput.for_tool_call("fake", "lookup_order", {"order_id": "42"}).message,
        ChatMessageTool(content="in transit", tool_call_id=call.id, function="lookup_order"),
    ]
    asyncio.run(session.respond(later, OFFERED, model))
    assert len(model.requests) == 3  # plan + answer, then only an answer after the tool result
    assert f"{PLAN_HEADING}\n1. look it up" in model.system(2)


class Caller(Recorder):
    """A fake model that calls the given tools (in order) before answering in text."""

    def __init__(self, *calls: str) -> None:
        super().__init__()
        self.calls = list(calls)

    async def __call__(self, input, tools) -> ModelOutput:
        self.requests.append((list(input), list(tools)))
        if self.calls:
            return ModelOutput.for_tool_call("fake", self.calls.pop(0), {"account_id": "7"})
        return ModelOutput.from_content(model="fake", content="done")


def test_a_call_to_a_tool_the_agent_lacks_is_refused_back_to_the_model() -> None:
    model = Caller("delete_account")  # support agent: delete_account is not among its tools
    out = asyncio.run(Runtime(policies()).session().respond(CONVERSATION, OFFERED, model))
    assert out.completion == "done" and not out.message.tool_calls
    retry_input = model.requests[1][0]
    assert retry_input[-1].error.type == "permission"
    assert "not available to this agent" in retry_input[-1].error.message


def test_a_persistently_refused_call_is_dropped_from_the_answer() -> None:
    model = Caller("delete_account", "delete_account")
    out = asyncio.run(Runtime(policies()).session().respond(CONVERSATION, OFFERED, model))
    assert len(model.requests) == 2 and not out.message.tool_calls


def test_a_permitted_call_goes_out() -> None:
    model = Caller("lookup_order")
    out = asyncio.run(Runtime(policies()).session().respond(CONVERSATION, OFFERED, model))
    assert [c.function for c in out.message.tool_calls] == ["lookup_order"] and len(model.requests) == 1


def write_policy_dir(tmp_path: Path, **broken: bytes) -> dict[str, str]:
    env = {}
    for name, spec in SURFACES.items():
        path = tmp_path / spec.filename
        path.write_bytes(broken.get(name, canonical_bytes(default_document(name)[0])))
        env[spec.override_env], env[spec.strict_env] = str(path), "1"
    return env


def test_strict_loads_every_override_and_reports_its_hash(tmp_path: Path) -> None:
    env = write_policy_dir(tmp_path)
    runtime = Runtime.from_environment(env)
    assert set(runtime.hashes) == set(SURFACES)
    assert all(runtime.policies.sources[n] != "default" for n in SURFACES)


def test_strict_invalid_override_fails_before_anything_runs(tmp_path: Path) -> None:
    env = write_policy_dir(tmp_path, reflection=json.dumps({"enabled": True}).encode())
    with pytest.raises(PolicyLoadError, match="cannot load reflection policy"):
        Runtime.from_environment(env)


def test_strict_missing_override_fails_before_anything_runs(tmp_path: Path) -> None:
    env = write_policy_dir(tmp_path)
    env.pop(SURFACES["skill_catalog"].override_env)
    with pytest.raises(PolicyLoadError, match="SIL_POLICY_SKILL_CATALOG_OVERRIDE is not set"):
        Runtime.from_environment(env)


def test_unknown_agent_is_refused() -> None:
    with pytest.raises(PolicyLoadError, match="agent contract 'billing' is not defined"):
        Runtime(policies(), agent="billing")
