"""The settings schema of the embedded simulated audit: the contract's `sim:` section.

It lives with the simulated world, not the loop: the audit subprocess reads it from a file,
so the simulated runtime never imports loop code. The contract holds it as the sim backend's
settings (sil/contract/backendsettings.py).
"""

from __future__ import annotations

import math
from typing import Annotated, ClassVar, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from sil.contract.backendsettings import BackendSettings

Range = tuple[Annotated[float, Field(ge=0)], Annotated[float, Field(ge=0)]]


class EffectMixture(BaseModel):
    """The candidate-effect mixture (stats-gate.md section 4.3): type shares and effect ranges.

    Latent units, positive = worse. Shares must sum to 1. A trade-off candidate
    (helps_target_harms_critical) helps the target by U(help_target) and harms one random
    critical dimension by U(tradeoff_harm); harms_critical_only uses U(harm_critical).
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    null: Annotated[float, Field(ge=0, le=1)] = 0.45
    harms_target: Annotated[float, Field(ge=0, le=1)] = 0.25
    helps_target: Annotated[float, Field(ge=0, le=1)] = 0.12
    helps_target_harms_critical: Annotated[float, Field(ge=0, le=1)] = 0.10
    harms_critical_only: Annotated[float, Field(ge=0, le=1)] = 0.08
    harm_target: Range = (0.2, 1.0)
    help_target: Range = (0.3, 1.5)
    harm_critical: Range = (0.5, 1.5)
    tradeoff_harm: Range = (0.5, 1.5)

    @model_validator(mode="after")
    def _valid(self) -> EffectMixture:
        total = sum(self.shares())
        if not math.isclose(total, 1.0, abs_tol=1e-6):
            raise ValueError(f"effect_mixture shares sum to {total:.4f}; they must sum to 1")
        for name in ("harm_target", "help_target", "harm_critical", "tradeoff_harm"):
            lo, hi = getattr(self, name)
            if lo > hi:
                raise ValueError(f"effect_mixture.{name} is ({lo}, {hi}): the low end must not exceed the high end")
        return self

    def shares(self) -> tuple[float, ...]:
        """Shares in the order of sil_runtime.sim.world.CANDIDATE_TYPES."""
        return (
            self.null,
            self.harms_target,
            self.helps_target,
            self.helps_target_harms_critical,
            self.harms_critical_only,
        )


class SimParams(BackendSettings):
    """Parameters of the embedded simulated audit (see sil_runtime/sim/README.md)."""

    @property
    def audit_seed(self) -> int:
        """The seed of the audit noise: `noise_seed`, else `world_seed`."""
        return self.world_seed if self.noise_seed is None else self.noise_seed

    def replicate(self, k: int) -> SimParams:
        """A sweep's seed variant audits the same world afresh: its own noise stream."""
        return self.model_copy(update={"noise_seed": self.audit_seed + k})

    # the simulated audit plays auditor, target and judge itself: sim/auditor, sim/target, sim/judge
    own_roles_prefix: ClassVar[str | None] = "sim/"
    added_later: ClassVar[tuple[str, ...]] = ("noise_seed",)

    world_seed: int = 20261129
    # the audit noise's own stream (noise, pairs, drift, crashes, highlights); unset = world_seed. The
    # same world audited afresh, as a real runtime's re-run is, is the same world_seed with another one.
    noise_seed: int | None = None
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
    # mnar: a cell's missing probability rises by mnar_slope per point its latent score lies
    # above the seed's usual level (failing transcripts are more often unscored).
    missing_mode: Literal["mcar", "mnar"] = "mcar"
    mnar_slope: Annotated[float, Field(ge=0)] = 0.0
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
    effect_mixture: EffectMixture = EffectMixture()
