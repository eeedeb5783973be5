"""Imported by inspect-ai through this package's `inspect_ai` entry point.

Importing registers the Petri target agent `sil_runtime/runtime_target` and the offline model
provider `scripted`, and gives the offline model names a context window and a zero price (so
compaction knows its threshold and usage reports cost 0).
"""

from inspect_ai.model import ModelCost, ModelInfo, set_model_info

from sil.exec.backends.rubric import RUBRIC_MODELS, rubric, rubric_judge  # noqa: F401
from sil_runtime.inspect_ext.local import install_if_asked
from sil_runtime.inspect_ext.offline.provider import ROLES, scripted  # noqa: F401
from sil_runtime.inspect_ext.target import runtime_target  # noqa: F401

OFFLINE_CONTEXT_TOKENS = 200_000
_FREE = ModelCost(input=0.0, output=0.0, input_cache_write=0.0, input_cache_read=0.0)

for _role in ROLES:
    set_model_info(
        f"scripted/{_role}", ModelInfo(model=f"scripted/{_role}", context_length=OFFLINE_CONTEXT_TOKENS, cost=_FREE)
    )

for _name in RUBRIC_MODELS:
    set_model_info(_name, ModelInfo(model=_name, context_length=OFFLINE_CONTEXT_TOKENS, cost=_FREE))

install_if_asked()  # SIL_TOKEN_COUNT=chars (local runs): no tokenizer download in this process
