"""The settings of the `petri` backend: the contract's `petri:` section (sil/exec/backends/petri.py).

They live in the contract's layer, as the sim backend's do (sil/contract/simparams.py), so the
contract validates and hashes them without importing the backend (and inspect-ai with it).
"""

from __future__ import annotations

from typing import Annotated, ClassVar, Literal

from pydantic import Field

from sil.contract.backendsettings import BackendSettings


class PetriParams(BackendSettings):
    """Settings of the `petri` backend (Petri's `inspect_petri/audit` task; sil/exec/backends/petri.py)."""

    limit_checked_after_each_call: ClassVar[bool] = True  # inspect's sample token limit

    # registry name of the Petri target agent that runs the runtime under test, and its params
    target_agent: Annotated[str, Field(pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")] = "sil_runtime/runtime_target"
    target_agent_params: dict[str, str] = {}
    # seeds pre-register the runtime's tools ("fixed"); "synthetic" lets the auditor invent them
    target_tools: Literal["fixed", "synthetic", "none"] = "fixed"
    realism_filter: bool = False
    # per-sample limit on tokens of all solver calls (auditor, target, realism): bounds the cost
    sample_token_limit: Annotated[int, Field(ge=1_000, le=50_000_000)] = 300_000
