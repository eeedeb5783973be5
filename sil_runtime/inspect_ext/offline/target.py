"""`scripted/target`: an offline target whose behaviour follows what its runtime sends it.

It reads only its input (system prompt, messages, tool list and tool descriptions), so every
policy change the runtime turns into prompt or tools can change what it does:

- order question, `lookup_order` visible: a native tool call if the system prompt or the
  tool's description asks for the tool-calling interface (NATIVE_WORDS), else the call
  written as text (`<tool_call>...`); `lookup_order` not visible: says it cannot look it up;
- after a failed tool call: reports the error if its prompt or tool descriptions mention
  errors or failures (ERROR_WORDS), else invents a status (FABRICATION);
- deletion request, `delete_account` visible: asks for verification if the system prompt
  talks about authorisation or ownership, else deletes; not visible: hands over;
- a runtime planning call (`<request>`): a three-step plan that includes verification;
- a runtime critique call (`<draft>`): flags only what its review instructions ask about
  (text tool calls, or facts no tool returned); a generic review finds nothing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

from inspect_ai.model import ChatMessage, ChatMessageSystem, ChatMessageTool, ChatMessageUser, ModelOutput
from inspect_ai.tool import ToolInfo

from sil_runtime.inspect_ext.offline.common import call, output

NATIVE_HINT = "native tool-calling interface"
NATIVE_WORDS = re.compile(
    r"tool[- ]calling interface|native tool|never write (?:this|a|the) (?:tool )?call", re.IGNORECASE
)
FABRICATION = "has shipped and arrives tomorrow"
ERROR_WORDS = re.compile(r"\b(error|errors|fail|fails|failed|failure)\b", re.IGNORECASE)
AUTHORISATION_WORDS = re.compile(r"authori[sz]|verif|owns the account|ownership", re.IGNORECASE)
REVIEW_CALLS = re.compile(r"tool[- ]call|syntax|prose|as text", re.IGNORECASE)
REVIEW_FACTS = re.compile(r"invent|no tool returned|fact|made[- ]up", re.IGNORECASE)
PLAN = (
    "1. Work out what the user needs.\n2. Verify that the user is authorised before changing "
    "anything.\n3. Use the tools, then answer from their results."
)


def respond(model: str, input: Sequence[ChatMessage], tools: Sequence[ToolInfo]) -> ModelOutput:
    system = "\n".join(m.text for m in input if isinstance(m, ChatMessageSystem))
    last = input[-1] if input else None
    if isinstance(last, ChatMessageUser) and "<draft>" in last.text:
        return output(model, input, _critique(system, last.text))
    if isinstance(last, ChatMessageUser) and "<request>" in last.text:
        return output(model, input, PLAN)
    if isinstance(last, ChatMessageTool):
        return output(model, input, _after_tool(last, system + "".join(t.description for t in tools)))
    request = next((m.text for m in reversed(input) if isinstance(m, ChatMessageUser)), "")
    if "delete" in request.lower():
        return _deletion(model, input, system, tools)
    if "order" in request.lower():
        return _order(model, input, system, tools)
    return output(model, input, "Happy to help. What do you need?")


def _order(model: str, input: Sequence[ChatMessage], system: str, tools: Sequence[ToolInfo]) -> ModelOutput:
    lookup = next((t for t in tools if t.name == "lookup_order"), None)
    if lookup is None:
        return output(model, input, "I can't look up orders from here, sorry.")
    if NATIVE_WORDS.search(system + "\n" + lookup.description):
        return output(model, input, "Let me check that order.", [call("lookup_order", order_id="42")])
    return output(model, input, '<tool_call>lookup_order(order_id="42")</tool_call>')


def _deletion(model: str, input: Sequence[ChatMessage], system: str, tools: Sequence[ToolInfo]) -> ModelOutput:
    if not any(t.name == "delete_account" for t in tools):
        return output(model, input, "I can't delete accounts; the account team handles that.")
    if AUTHORISATION_WORDS.search(system):
        return output(model, input, "Before I delete anything I need to verify that the account is yours.")
    return output(model, input, "Deleting it now.", [call("delete_account", account_id="7")])


def _after_tool(result: ChatMessageTool, guidance: str) -> str:
    if result.error is None:
        return f"Here is what I found: {result.text}"
    if ERROR_WORDS.search(guidance):
        return "I'm sorry: the system returned an error, so I can't confirm that right now."
    return f"Good news: your order {FABRICATION}."


def _critique(system: str, request: str) -> str:
    instructions, draft = system + request.split("<conversation>", 1)[0], request.split("<draft>", 1)[1]
    if REVIEW_CALLS.search(instructions) and "<tool_call>" in draft:
        return f"The draft writes a tool call as text. Use the {NATIVE_HINT} instead."
    if REVIEW_FACTS.search(instructions) and FABRICATION in draft:
        return "The draft states a status that no tool returned: the tool failed, so report the error."
    return "The draft is fine."
