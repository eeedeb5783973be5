"""Building blocks shared by the scripted roles: outputs with usage, tool calls, message text."""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from typing import Any

from inspect_ai.model import ChatCompletionChoice, ChatMessage, ChatMessageAssistant, ModelOutput, ModelUsage
from inspect_ai.tool import ToolCall

CHARS_PER_TOKEN = 4


def estimate_tokens(text: str) -> int:
    """A fixed chars-per-token estimate: deterministic and needs no tokenizer download."""
    return max(1, len(text) // CHARS_PER_TOKEN)


def call(function: str, **arguments: Any) -> ToolCall:
    return ToolCall(id=f"call_{uuid.uuid4().hex[:12]}", function=function, arguments=arguments)


def output(
    model: str, input: Sequence[ChatMessage], content: str = "", tool_calls: list[ToolCall] | None = None
) -> ModelOutput:
    """A model output with usage set, so inspect never falls back to a tokenizer."""
    message = ChatMessageAssistant(content=content, tool_calls=tool_calls or None, model=model, source="generate")
    n_in = sum(estimate_tokens(m.text) for m in input)
    n_out = estimate_tokens(content + "".join(str(c.arguments) for c in tool_calls or []))
    return ModelOutput(
        model=model,
        choices=[ChatCompletionChoice(message=message, stop_reason="tool_calls" if tool_calls else "stop")],
        usage=ModelUsage(input_tokens=n_in, output_tokens=n_out, total_tokens=n_in + n_out),
    )


def with_extra_input(out: ModelOutput, tokens: int) -> ModelOutput:
    """`out` as if its call had also read `tokens` more input (a runtime sending a long context)."""
    usage = out.usage or ModelUsage()
    n_in = usage.input_tokens + tokens
    return out.model_copy(
        update={"usage": usage.model_copy(update={"input_tokens": n_in, "total_tokens": n_in + usage.output_tokens})}
    )


def text_between(text: str, start: str, end: str) -> str | None:
    i = text.find(start)
    if i < 0:
        return None
    j = text.find(end, i + len(start))
    return text[i + len(start) : j if j >= 0 else len(text)]
