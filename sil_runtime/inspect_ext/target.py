"""The reference runtime as a Petri target agent: `sil_runtime/runtime_target`.

Petri's auditor stages a system prompt, user messages and tool results; this agent hands each
turn to the runtime (`sil_runtime.runtime`), which calls the `target` model role once or
several times (planning, draft, critique, revision). Every call goes through Petri's replay
wrapper, so each is a logged `ModelEvent` in the target's span, counts toward the sample's
limits and replays on rollback. The runtime's answer is the last call of its turn, so the
judge (which renders the last model call of each branch) sees the conversation as the
runtime's user saw it: the runtime's own system prompt and tools, and its final answers,
not its drafts.

What it reports (the loop trusts a score only with these):
- each answer's message metadata carries `PETRI_REPORT_KEY`: the SHA-256 of every policy
  file the runtime loaded;
- a failed model call is an `InfoEvent` (source `sil-runtime`, key `runtime_error`) before
  Petri reports it to the auditor; a failure in the runtime's own code fails the sample.

Selected on the command line of the stock task:
    inspect eval inspect_petri/audit --model-role target=<inner model> \
        -T 'target={type: agent, name: sil_runtime/runtime_target, params: {}}' ...
The policies load when the agent is created, before any sample: under STRICT a missing or
invalid policy file makes `inspect eval` exit non-zero with no sample run.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from inspect_ai.agent import Agent, AgentState, agent
from inspect_ai.log import transcript
from inspect_ai.model import ChatMessage, ChatMessageAssistant, ModelOutput, get_model
from inspect_ai.tool import ToolInfo
from inspect_ai.util import LimitExceededError
from inspect_petri.target import TOOL_RESULT, ExitSignal, TargetContext

from sil_policy.evidence import PETRI_REPORT_KEY
from sil_runtime.runtime import DEFAULT_AGENT, Runtime

AGENT_NAME = "sil_runtime/runtime_target"
EVENT_SOURCE = "sil-runtime"


@agent(name=AGENT_NAME)
def runtime_target(agent_name: str = DEFAULT_AGENT) -> Agent:
    """Petri target driver that runs the reference runtime as `agent_name`."""
    runtime = Runtime.from_environment(agent=agent_name)  # raises under STRICT: no sample runs

    async def execute(state: AgentState, context: TargetContext) -> AgentState:
        transcript().info(
            {
                # dict()/list() copies type as JSON values (a dict[str, str] is not a dict[str, JsonValue])
                "policy_hashes": dict(runtime.hashes),
                "agent": runtime.agent,
                "sources": dict(runtime.policies.sources),
                "warnings": list(runtime.policies.warnings),
            },
            source=EVENT_SOURCE,
        )
        generate = _generate_fn(context)
        session = runtime.session()
        try:
            await context.wait_for_resume()
            state.messages[:] = [await context.system_message(), await context.user_message()]
            while True:
                if prefill := context.prefill():
                    state.messages.append(ChatMessageAssistant(content=prefill, metadata={"prefill": True}))
                state.output = await session.respond(list(state.messages), context.tools, generate)
                state.output.message.metadata = {
                    **(state.output.message.metadata or {}),
                    PETRI_REPORT_KEY: runtime.hashes,
                }
                state.messages.append(state.output.message)  # mutate: the auditor watches this list
                await _hand_back(state, context)
        except ExitSignal:
            return state

    return execute


def _generate_fn(context: TargetContext) -> Callable[[list[ChatMessage], list[ToolInfo]], Awaitable[ModelOutput]]:
    model = get_model(role="target")

    async def generate(input: list[ChatMessage], tools: list[ToolInfo]) -> ModelOutput:
        try:
            return await model.generate(input=input, tools=tools)
        except LimitExceededError:
            raise
        except Exception as ex:
            transcript().info({"runtime_error": f"{type(ex).__name__}: {ex}"}, source=EVENT_SOURCE)
            raise

    # replayable: recorded and replayed across auditor rollbacks; failures go to the auditor
    return context.replayable(generate, surface_errors=True)


async def _hand_back(state: AgentState, context: TargetContext) -> None:
    """Send the answer to the auditor; collect tool results or the next user message."""
    if tool_calls := state.output.message.tool_calls:
        context.expect({TOOL_RESULT: {tc.id for tc in tool_calls}})
        await context.send_output(state.output)
        state.messages.extend(await context.tool_results(tool_calls))
        if user := await context.user_message(required=False):
            state.messages.append(user)
    else:
        context.expect({TOOL_RESULT: set()})
        await context.send_output(state.output)
        state.messages.append(await context.user_message())
