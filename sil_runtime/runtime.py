"""The reference agent runtime: seven policy files decide what the model receives and does.

A small customer-support runtime in the inspect-ai message model. It loads every surface
through `policy_loader` (per-surface OVERRIDE path and STRICT flag from the environment) and
gives each one a live effect on a turn:

    wrapper_prompt     sections of the system prompt, before everything else
    agent_contracts    the active agent's role and instructions, its tool allow-list, the team
    skill_catalog      the skills section of the system prompt
    tool_policy        which offered tools are visible (allowed minus forbidden), in what order
    tool_descriptions  each visible tool's description, replaced and extended with hints
    decomposition      when enabled: a planning call per new user request; the plan joins the prompt
    reflection         when enabled: the draft is critiqued by a second call, then revised

Every model call of a turn goes through the `generate` function the host passes in (so a host
such as Petri logs, limits and replays each one); the last call of a turn is the answer. The
runtime also enforces the tool policy: a call to a tool the agent was not given is refused
back to the model (DENIED_RETRIES times), then dropped from the answer.

    runtime = Runtime.from_environment()          # PolicyLoadError under STRICT
    session = runtime.session()                   # one per conversation
    output = await session.respond(conversation, offered_tools, generate)
"""

from __future__ import annotations

import os
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from inspect_ai.model import (
    ChatMessage,
    ChatMessageAssistant,
    ChatMessageSystem,
    ChatMessageTool,
    ChatMessageUser,
    ModelOutput,
)
from inspect_ai.tool import ToolCallError, ToolInfo

from sil_runtime.policy_loader import LoadedPolicies, PolicyLoadError, load_policies

DEFAULT_AGENT = "support"
PLAN_HEADING = "## Plan for this request"
REVIEW_HEADING = "## Review of your draft"
OPERATOR_HEADING = "## Operator instructions"
DENIED_RETRIES = 1

Generate = Callable[[list[ChatMessage], list[ToolInfo]], Awaitable[ModelOutput]]


@dataclass(frozen=True)
class Runtime:
    """The seven loaded policies and the agent they run as; pure composition, no I/O."""

    policies: LoadedPolicies
    agent: str = DEFAULT_AGENT

    def __post_init__(self) -> None:
        agents = self.policies.documents["agent_contracts"]["agents"]
        if self.agent not in agents:
            raise PolicyLoadError(
                f"agent contract {self.agent!r} is not defined; agent_contracts defines "
                f"{sorted(agents)}: add it or run the runtime as one of those"
            )

    @classmethod
    def from_environment(cls, environ: Mapping[str, str] = os.environ, agent: str = DEFAULT_AGENT) -> Runtime:
        return cls(load_policies(environ), agent)

    @property
    def hashes(self) -> dict[str, str]:
        """SHA-256 of every policy file as loaded: what the runtime reports per response."""
        return dict(self.policies.hashes)

    def _doc(self, surface: str) -> dict[str, Any]:
        return self.policies.documents[surface]

    def _contract(self) -> dict[str, Any]:
        contract: dict[str, Any] = self._doc("agent_contracts")["agents"][self.agent]
        return contract

    # ---- what the model receives -------------------------------------------------------

    def system_prompt(self, operator: str, notes: Sequence[str] = ()) -> str:
        """Wrapper sections, agent contract, team, skills, operator text, then turn notes."""
        contract = self._contract()
        parts = list(self._doc("wrapper_prompt")["sections"].values())
        parts.append(f"## Your role\nYou are the {self.agent} agent: {contract['role']}.\n{contract['system_prompt']}")
        if team := self._team():
            parts.append(team)
        if skills := self._skills():
            parts.append(skills)
        if operator.strip():
            parts.append(f"{OPERATOR_HEADING}\n{operator.strip()}")
        parts.extend(n for n in notes if n)
        return "\n\n".join(p.strip() for p in parts if p.strip())

    def _team(self) -> str:
        others = {k: v for k, v in self._doc("agent_contracts")["agents"].items() if k != self.agent}
        if not others:
            return ""
        lines = [f"- {name}: {c['role']}" for name, c in others.items()]
        return "## Team (hand work outside your role to them)\n" + "\n".join(lines)

    def _skills(self) -> str:
        skills = self._doc("skill_catalog")["skills"]
        if not skills:
            return ""
        lines = [
            f"- {name}: {s['description']}" + (" (the user may ask for it by name)" if s["user_invocable"] else "")
            for name, s in skills.items()
        ]
        return "## Skills\n" + "\n".join(lines)

    def visible_tool_names(self, offered: Sequence[str]) -> list[str]:
        """Offered tools the policy allows and the agent may use, in priority order."""
        policy = self._doc("tool_policy")
        allowed = set(policy["allowed_tools"]) - set(policy["forbidden_tools"])
        allowed &= set(self._contract()["tools"])
        visible = [name for name in offered if name in allowed]
        rank = {name: i for i, name in enumerate(policy["priority_order"])}
        return sorted(visible, key=lambda n: (rank.get(n, len(rank)), visible.index(n)))

    def tool_description(self, name: str, offered: str) -> str:
        """The policy's description for a tool (if it has one), followed by its hints."""
        entry = self._doc("tool_descriptions")["tools"].get(name)
        if entry is None:
            return offered
        hints = "".join(f"\n- {h}" for h in entry["hints"])
        description: str = entry["description"]
        return description + (f"\nHints:{hints}" if hints else "")

    def tools(self, offered: Sequence[ToolInfo]) -> list[ToolInfo]:
        by_name = {t.name: t for t in offered}
        return [
            by_name[n].model_copy(update={"description": self.tool_description(n, by_name[n].description)})
            for n in self.visible_tool_names([t.name for t in offered])
        ]

    def planning_request(self, request: str) -> str | None:
        """The decomposition prompt for a new user request, or None when disabled."""
        d = self._doc("decomposition")
        if not d["enabled"]:
            return None
        return "\n\n".join(p for p in (d["prefix"], f"<request>\n{request}\n</request>", d["suffix"]) if p)

    def reflection_request(
        self, conversation: Sequence[ChatMessage], draft: ChatMessageAssistant
    ) -> list[ChatMessage] | None:
        """The critique call for a draft answer, or None when reflection is disabled."""
        r = self._doc("reflection")
        if not r["enabled"]:
            return None
        user = (
            f"{r['description']}\n\n<conversation>\n{render(conversation)}\n</conversation>\n\n"
            f"<draft>\n{render([draft])}\n</draft>"
        )
        return [ChatMessageSystem(content=r["system_prompt"]), ChatMessageUser(content=user)]

    def session(self) -> Session:
        return Session(self)


@dataclass
class Session:
    """One conversation with the runtime: remembers the plan for the current request."""

    runtime: Runtime
    plan: str | None = None
    planned_for: str | None = field(default=None, repr=False)

    def compose(self, conversation: Sequence[ChatMessage], notes: Sequence[str] = ()) -> list[ChatMessage]:
        """The conversation as the model receives it: one composed system message first."""
        operator = "\n\n".join(m.text for m in conversation if isinstance(m, ChatMessageSystem))
        plan = [f"{PLAN_HEADING}\n{self.plan}"] if self.plan else []
        system = self.runtime.system_prompt(operator, [*plan, *notes])
        rest = [m for m in conversation if not isinstance(m, ChatMessageSystem)]
        return [ChatMessageSystem(content=system), *rest]

    async def respond(
        self, conversation: Sequence[ChatMessage], offered: Sequence[ToolInfo], generate: Generate
    ) -> ModelOutput:
        """One turn: [plan], draft, [critique, revision]. Returns the answer to send."""
        await self._plan(conversation, generate)
        tools = self.runtime.tools(offered)
        draft = await self._permitted(self.compose(conversation), tools, generate)
        critique_input = self.runtime.reflection_request(conversation, draft.message)
        if critique_input is None:
            return draft
        critique = await generate(critique_input, [])
        note = f"{REVIEW_HEADING}\n{critique.completion.strip()}"
        return await self._permitted(self.compose(conversation, [note]), tools, generate)

    async def _permitted(self, input: list[ChatMessage], tools: list[ToolInfo], generate: Generate) -> ModelOutput:
        """Generate; refuse calls to tools the agent was not given, then drop any left."""
        allowed = {t.name for t in tools}
        output = await generate(input, tools)
        for _ in range(DENIED_RETRIES):
            calls = output.message.tool_calls or []
            if all(c.function in allowed for c in calls):
                return output
            input = [*input, output.message, *[_refusal(c.id, c.function, c.function in allowed) for c in calls]]
            output = await generate(input, tools)
        kept = [c for c in output.message.tool_calls or [] if c.function in allowed]
        output.message.tool_calls = kept or None
        return output

    async def _plan(self, conversation: Sequence[ChatMessage], generate: Generate) -> None:
        users = [i for i, m in enumerate(conversation) if isinstance(m, ChatMessageUser)]
        if not users or conversation[users[-1]].id == self.planned_for:
            return
        latest = conversation[users[-1]]
        request = self.runtime.planning_request(latest.text)
        self.planned_for, self.plan = latest.id, None
        if request is None:
            return
        prior = list(conversation[: users[-1]])
        plan = await generate([*self.compose(prior), ChatMessageUser(content=request)], [])
        self.plan = plan.completion.strip() or None


def _refusal(call_id: str, function: str, allowed: bool) -> ChatMessageTool:
    reason = (
        "not run: another call in the same message was refused"
        if allowed
        else f"tool {function} is not available to this agent"
    )
    return ChatMessageTool(
        content="", tool_call_id=call_id, function=function, error=ToolCallError(type="permission", message=reason)
    )


def render(messages: Sequence[ChatMessage]) -> str:
    """Plain-text view of messages (for the critique call), tool calls included."""
    lines = []
    for m in messages:
        if isinstance(m, ChatMessageSystem):
            continue
        text = m.text
        if isinstance(m, ChatMessageAssistant) and m.tool_calls:
            calls = ", ".join(f"{c.function}({c.arguments})" for c in m.tool_calls)
            text = f"{text}\n[tool calls: {calls}]".strip()
        if isinstance(m, ChatMessageTool) and m.error:
            text = f"{text}\n[tool error: {m.error.message}]".strip()
        lines.append(f"{m.role.upper()}: {text}")
    return "\n".join(lines)
