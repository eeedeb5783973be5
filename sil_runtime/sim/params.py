"""The settings schema of the embedded simulated audit: the contract's `sim:` section.

It lives with the simulated world, not the loop: the audit subprocess reads it from a file,
so the simulated runtime never imports loop code. loop/contract.py embeds it in the contract.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field


class SimParams(BaseModel):
    """Parameters of the embedded simulated audit (see sil_runtime/sim/README.md)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    world_seed: int = 20261129
    landscape_seed: int = 7
    intercepts: dict[str, float]
    drift_loading: dict[str, float] = {}
    seed_difficulty_sd: float = 1.5
    batch_sd: float = 0.4
    batch_dim_correlation: Annotated[float, Field(ge=0, le=1)] = 0.5
    noise_scale: float = 1.4
    noise_df: Annotated[float, Field(gt=2)] = 3.0
    drift_sd: Annotated[float, Field(ge=0)] = 0.7
    drift_corr_audits: Annotated[float, Field(gt=0)] = 20.0
    drift_trend: float = 0.0
    pair_correlation: Annotated[float, Field(ge=0, le=1)] = 0.0
    # Share of the per-seed noise variance that comes from the judge (the rest is the rollout);
    # only this share shrinks when measurement.judge_resamples > 1.
    judge_noise_share: Annotated[float, Field(ge=0, lt=1)] = 0.0
    effect_heterogeneity: Annotated[float, Field(ge=0)] = 0.5
    p_missing_cell: Annotated[float, Field(ge=0, le=1)] = 0.05
    p_missing_dimension: Annotated[float, Field(ge=0, le=1)] = 0.03
    p_crash: Annotated[float, Field(ge=0, le=1)] = 0.01
    seconds_per_audit: Annotated[float, Field(ge=0)] = 0.0
    landscape_target: str = "broken_tool_use"
    # Simulated judge drift (a model update behind the same name): every score the simulated
    # judge gives rises by this much per tick of the audit clock, audits and canary alike.
    judge_drift_per_tick: float = 0.0
    # hashed: every edit's effect is a hash of its text (no proposer can beat chance);
    # mechanisms: hidden per-seed failure mechanisms that the right text fixes (mechanisms.py)
    landscape: Literal["hashed", "mechanisms"] = "hashed"
    mechanism_scale: Annotated[float, Field(ge=0)] = 1.0  # multiplies every mechanism's cost (and so a fix's benefit)
    hashed_scale: Annotated[float, Field(ge=0)] = 1.0  # mechanisms world: weight of each edit's random component
