"""Audit backends by name: the contract's `backend` field picks one.

Each backend implements `measure.AuditBackend` (the command of its audit subprocess, how it
reads the evidence back, what one audit can cost at most). The built-in ones are imported only
when asked for (the petri backend pulls in inspect-ai, which the sim backend does not need).
Another package adds a backend without editing this one, as inspect-ai extensions do: register
it with `@register_backend("name")`, and make it discoverable through the `sil.backends` entry
point group (the entry point names the module to import, or the backend class itself):

    [project.entry-points."sil.backends"]
    mybackend = "mypackage.backend"

    backend = make_backend(contract.backend)
"""

from __future__ import annotations

from collections.abc import Callable

from sil.base.registry import Registry
from sil.exec.measure import AuditBackend

ENTRY_POINT_GROUP = "sil.backends"
BACKENDS: Registry[Callable[[], AuditBackend]] = Registry(
    "backend",
    ENTRY_POINT_GROUP,
    {"sim": "sil.exec.backends.sim:SimBackend", "petri": "sil.exec.backends.petri:PetriBackend"},
)
register_backend = BACKENDS.register


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
    return factory()
