"""Audit backends by name: the contract's `backend` picks one.

Each backend implements `measure.AuditBackend` by subclassing `measure.BackendBase` (the command
of its audit subprocess, how it reads the evidence back, its settings model, what one audit can
cost at most, and the optional hooks, docs/reference.md "Writing a backend"). The built-in ones
are imported only when asked for (the petri backend pulls in inspect-ai, which the sim backend
does not need). Another package adds a backend without editing this one, as inspect-ai
extensions do: register it with `@register_backend("name")`, and make it discoverable through
the `sil.backends` entry point group (the entry point names the module to import, or the
backend class itself). Its settings model is registered with it, so the contract validates and
hashes its settings (sil/contract/backendsettings.py):

    [project.entry-points."sil.backends"]
    mybackend = "mypackage.backend"

    backend = make_backend(contract.backend)
"""

from __future__ import annotations

from collections.abc import Callable

from sil.base.registry import Registry
from sil.contract.backendsettings import ENTRY_POINT_GROUP, register_settings, settings_model_of
from sil.exec.measure import AuditBackend, missing_members

BACKENDS: Registry[Callable[[], AuditBackend]] = Registry(
    "backend",
    ENTRY_POINT_GROUP,
    {"sim": "sil.exec.backends.sim:SimBackend", "petri": "sil.exec.backends.petri:PetriBackend"},
)


def register_backend[B: type[AuditBackend]](name: str) -> Callable[[B], B]:
    """Decorator: make `name` resolve to the decorated backend class, and its settings model with it."""

    def add(backend: B) -> B:
        model = settings_model_of(backend)
        BACKENDS.register(name)(backend)
        if model is not None:
            register_settings(name)(model)
        return backend

    return add


def available() -> list[str]:
    """Every backend name a contract may use: built in, registered, or offered by an entry point."""
    return BACKENDS.names()


def make_backend(name: str) -> AuditBackend:
    """A fresh backend instance for the contract's backend name."""
    factory = BACKENDS.get(name)
    if factory is None:
        raise ValueError(
            f"unknown audit backend {name!r}; known: {', '.join(available())} "
            f"(a package adds one through the {ENTRY_POINT_GROUP!r} entry point group)"
        )
    backend = factory()
    if missing := missing_members(backend):
        raise ValueError(
            f"audit backend {name!r} ({type(backend).__name__}) lacks {', '.join(missing)}: subclass "
            "sil.exec.measure.BackendBase, which gives every optional member its default"
        )
    return backend
