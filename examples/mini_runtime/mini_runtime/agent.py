"""`mini_runtime/mini_target`: the Petri target agent of the mini runtime.

Registered as `@agent(name="mini_target")`: inspect-ai itself puts the installed package's name
in front (`mini_runtime/mini_target`), so the name given here carries no package prefix.

One model call per turn, through `get_model(role="target")` wrapped once in
`context.replayable(..., surface_errors=True)`; the answer carries the policy report; a failed
call is reported as a `runtime_error` info event before it is re-raised.

`mode` (a task argument, so a string) makes it misbehave on purpose, for the loop's tests:
`honest` (default), `roleless_crash` (calls a model by name, without the target role, that
fails), `ignore_policy` (reports the right hashes but sends a fixed prompt).
"""

from __future__ import annotations

from inspect_ai.agent import Agent, AgentState, agent
from inspect_ai.log import transcript
from inspect_ai.model import ChatMessage, ChatMessageAssistant, ChatMessageSystem, ModelOutput, get_model
from inspect_ai.tool import ToolInfo
from inspect_ai.util import LimitExceededError
from inspect_petri.target import TOOL_RESULT, ExitSignal, TargetContext

from mini_runtime.policies import TOOL, load
from sil_policy.evidence import PETRI_REPORT_KEY

FIXED_PROMPT = "You are a support agent."
CRASHING_MODEL = "scripted/target-crash"


@agent(name="mini_target")  # registered as mini_runtime/mini_target
def mini_target(mode: str = "honest") -> Agent:
    policies = load()  # under STRICT a bad file raises here: no sample runs

    def inputs(messages: list[ChatMessage], tools: list[ToolInfo]) -> tuple[list[ChatMessage], list[ToolInfo]]:
        prompt = FIXED_PROMPT if mode == "ignore_policy" else policies.system_prompt()
        visible = []
        for tool in tools:
            if tool.name == TOOL and (mode == "ignore_policy" or policies.tool_visible()):
                description = (
                    tool.description if mode == "ignore_policy" else policies.tool_description(tool.description)
                )
                visible.append(tool.model_copy(update={"description": description}))
        staged = "\n\n".join(m.text for m in messages if m.role == "system")  # the auditor's scenario
        rest = [m for m in messages if m.role != "system"]
        return [ChatMessageSystem(content=f"{prompt}\n\n{staged}".strip()), *rest], visible

    async def execute(state: AgentState, context: TargetContext) -> AgentState:
        model = get_model(CRASHING_MODEL) if mode == "roleless_crash" else get_model(role="target")

        async def call(messages: list[ChatMessage], tools: list[ToolInfo]) -> ModelOutput:
            try:
                return await model.generate(input=messages, tools=tools)
            except LimitExceededError:
                raise
            except Exception as ex:
                if mode != "roleless_crash":  # the hostile mode also hides its failure
                    transcript().info({"runtime_error": f"{type(ex).__name__}: {ex}"}, source="mini-runtime")
                raise

        generate = context.replayable(call, surface_errors=True)
        try:
            await context.wait_for_resume()
            state.messages[:] = [await context.system_message(), await context.user_message()]
            while True:
                if prefill := context.prefill():  # the auditor's words put in the target's mouth
                    state.messages.append(ChatMessageAssistant(content=prefill, metadata={"prefill": True}))
                state.output = await generate(*inputs(list(state.messages), context.tools))
                state.output.message.metadata = {
                    **(state.output.message.metadata or {}),
                    PETRI_REPORT_KEY: policies.hashes,
                }
                state.messages.append(state.output.message)
                await hand_back(state, context)
        except ExitSignal:
            return state

    return execute


async def hand_back(state: AgentState, context: TargetContext) -> None:
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
