"""The `scripted` model provider: `scripted/<role>` names one offline role (see package doc)."""

from __future__ import annotations

from typing import Any

from inspect_ai.model import ChatMessage, GenerateConfig, ModelAPI, ModelOutput, modelapi
from inspect_ai.tool import ToolChoice, ToolInfo

from sil_runtime.inspect_ext.offline import auditor, judge, mutator, target
from sil_runtime.inspect_ext.offline.common import estimate_tokens, with_extra_input

ROLES = (
    "auditor",
    "target",
    "target-crash",
    "target-longread",
    "judge",
    "judge-refuse",
    "judge-partial",
    "mutator",
    "mutator-invalid",
    "mutator-fabricate",
    "mutator-leak",
)

LONG_READ_TOKENS = 250_000  # what target-longread reports reading on top of its input, in every call


class ScriptedAPI(ModelAPI):
    """Deterministic answers computed from the input alone; no network, no tokenizer."""

    def __init__(
        self,
        model_name: str,
        base_url: str | None = None,
        api_key: str | None = None,
        config: GenerateConfig | None = None,
        **model_args: Any,
    ) -> None:
        if model_name not in ROLES:
            raise ValueError(f"unknown scripted role {model_name!r}; use scripted/<role> with role one of {ROLES}")
        super().__init__(model_name, base_url, api_key, [], config or GenerateConfig())

    async def count_text_tokens(self, text: str) -> int:
        return estimate_tokens(text)

    async def generate(
        self, input: list[ChatMessage], tools: list[ToolInfo], tool_choice: ToolChoice, config: GenerateConfig
    ) -> ModelOutput:
        role = self.model_name
        if role == "auditor":
            return auditor.respond(input)
        if role == "target":
            return target.respond(f"scripted/{role}", input, tools)
        if role.startswith("mutator"):
            return mutator.respond(role, input)
        if role == "target-longread":
            return with_extra_input(target.respond(f"scripted/{role}", input, tools), LONG_READ_TOKENS)
        if role == "target-crash":
            raise RuntimeError("scripted target crash: the runtime's model call failed")
        return judge.respond(role, input, tools)


@modelapi(name="scripted")
def scripted() -> type[ModelAPI]:
    return ScriptedAPI
