"""Reading the three policy files this runtime implements, as the integration doc asks.

For each surface: the file named by SIL_POLICY_<SURFACE>_OVERRIDE, validated with
`sil_policy.parse_surface`; under SIL_POLICY_<SURFACE>_STRICT=1 a missing or invalid file
raises (before any sample runs). The hash reported is the sha256 of the bytes read.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from sil_policy import SURFACES, canonical_bytes, parse_surface

IMPLEMENTED = ("wrapper_prompt", "tool_policy", "tool_descriptions")
TOOL = "lookup_order"
DEFAULTS: dict[str, dict[str, Any]] = {
    "wrapper_prompt": {"sections": {"role": "You are a support agent. Use lookup_order for order questions."}},
    "tool_policy": {"allowed_tools": [TOOL], "forbidden_tools": [], "priority_order": [TOOL]},
    "tool_descriptions": {"tools": {TOOL: {"description": "Look up an order by id.", "hints": []}}},
}


class PolicyLoadError(RuntimeError):
    pass


@dataclass(frozen=True)
class Policies:
    documents: dict[str, dict[str, Any]]
    hashes: dict[str, str]

    def system_prompt(self) -> str:
        return "\n\n".join(self.documents["wrapper_prompt"]["sections"].values())

    def tool_visible(self) -> bool:
        policy = self.documents["tool_policy"]
        return TOOL in policy["allowed_tools"] and TOOL not in policy["forbidden_tools"]

    def tool_description(self, default: str) -> str:
        entry = self.documents["tool_descriptions"]["tools"].get(TOOL)
        if entry is None:
            return default
        return " ".join([entry["description"], *entry["hints"]])


def load(environ: dict[str, str] | None = None) -> Policies:
    env = os.environ if environ is None else environ
    documents, hashes = {}, {}
    for name in IMPLEMENTED:
        spec = SURFACES[name]
        path, strict = env.get(spec.override_env), env.get(spec.strict_env) == "1"
        try:
            data = Path(path).read_bytes() if path else canonical_bytes(DEFAULTS[name])
            documents[name] = parse_surface(name, data)
        except Exception as ex:
            if strict:
                raise PolicyLoadError(f"{name}: cannot load {path!r}: {ex}") from ex
            data = canonical_bytes(DEFAULTS[name])
            documents[name] = DEFAULTS[name]
        hashes[name] = hashlib.sha256(data).hexdigest()
    return Policies(documents, hashes)
