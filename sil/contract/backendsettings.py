"""A backend's settings in the contract: the model that validates them, found without the backend.

The contract holds its audit backend's settings (`backend: {kind: NAME, settings: {...}}`), so
they are frozen and hashed with it, and the backend's own settings model validates them. The
contract is read in a layer below the backends (sil/exec), so the model is found here: a
built-in backend's settings model lives in this folder, and a plugin's is the `settings_model`
of the backend it registers (`@register_backend`), found through the same `sil.backends` entry
point group as the backend itself.

Contracts written before backends carried their settings (v1) had one top-level section per
built-in backend (`backend: sim` and a `sim:` section); `V1_SECTIONS` names them, so such a
contract is read as before and keeps its hash.

    model = settings_model("sim")            # SimParams; None for a backend that is not installed
    settings = model.model_validate(contract.backend_settings or {})
"""

from __future__ import annotations

from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from sil.base.registry import Registry

ENTRY_POINT_GROUP = "sil.backends"  # the backends' group: a plugin declares its backend once
# v1 contracts: the top-level section that held each built-in backend's settings, and its model
V1_SECTIONS = {"sim": "sil.contract.simparams:SimParams", "petri": "sil.contract.petriparams:PetriParams"}


class BackendSettings(BaseModel):
    """Base of every backend's settings model: strict (a misspelt setting is an error) and frozen."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    # A backend that plays auditor, target and judge itself (no model is called) names the model
    # prefix those roles must carry in the contract, so its record never claims a real model.
    own_roles_prefix: ClassVar[str | None] = None
    # A backend that checks its token limit only after each call pays the call that crosses it in
    # full: its paid roles must say how many tokens one call can read (`context_tokens`).
    limit_checked_after_each_call: ClassVar[bool] = False
    # Settings added after contracts that name this backend were written: left out of the
    # contract's hash while at their default, so an older contract keeps its hash.
    added_later: ClassVar[tuple[str, ...]] = ()

    def replicate(self, k: int) -> BackendSettings:
        """The settings of a sweep's k-th seed variant (`sil sweep --seeds`, k >= 1). A backend
        whose audits draw their noise from a setting, not from fresh model calls, moves it here so
        that the variants are audited afresh, as real re-runs are. Default: unchanged."""
        return self

    @classmethod
    def hashed(cls, settings: dict[str, Any]) -> dict[str, Any]:
        """The settings as the contract hashes them: `added_later` ones at their default left out."""
        return {k: v for k, v in settings.items() if k not in cls.added_later or v != cls.model_fields[k].default}


class NoSettings(BackendSettings):
    """The settings of a backend that takes none: any setting given is an error."""


def settings_model_of(backend: object) -> type[BackendSettings] | None:
    """The settings model a registered backend class declares (`NoSettings` if it declares none);
    None for an object that is not a backend class."""
    if not isinstance(backend, type):
        return None
    model = getattr(backend, "settings_model", NoSettings)
    if not (isinstance(model, type) and issubclass(model, BackendSettings)):
        raise TypeError(
            f"{backend.__name__}.settings_model must be a subclass of "
            f"sil.contract.backendsettings.BackendSettings, not {model!r}"
        )
    return model


SETTINGS: Registry[type[BackendSettings]] = Registry("backend", ENTRY_POINT_GROUP, V1_SECTIONS, adapt=settings_model_of)
register_settings = SETTINGS.register


def settings_model(kind: str) -> type[BackendSettings] | None:
    """The settings model of backend `kind`; None when no installed package provides the backend.
    Raises ValueError, with how to fix it, when the package providing it fails to import."""
    try:
        return SETTINGS.get(kind)
    except ImportError as ex:
        raise ValueError(str(ex)) from None
