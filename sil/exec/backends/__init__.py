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

import importlib
from collections.abc import Callable
from importlib import metadata
from typing import TypeVar

from sil.exec.measure import AuditBackend

ENTRY_POINT_GROUP = "sil.backends"
# built-in backend name -> "module:class", imported on first use
BUILTIN: dict[str, str] = {
    "sim": "sil.exec.backends.sim:SimBackend",
    "petri": "sil.exec.backends.petri:PetriBackend",
}
_REGISTERED: dict[str, Callable[[], AuditBackend]] = {}
B = TypeVar("B", bound=Callable[[], AuditBackend])


def register_backend(name: str) -> Callable[[B], B]:
    """Decorator: make `make_backend(name)` build the decorated class (or zero-argument factory)."""

    def add(factory: B) -> B:
        if name in BUILTIN:
            raise ValueError(f"backend name {name!r} is built in; choose another")
        _REGISTERED[name] = factory
        return factory

    return add


def _from_entry_points(name: str) -> Callable[[], AuditBackend] | None:
    for ep in metadata.entry_points(group=ENTRY_POINT_GROUP, name=name):
        loaded = ep.load()  # importing the module runs its @register_backend
        if name not in _REGISTERED and callable(loaded):
            _REGISTERED[name] = loaded
    return _REGISTERED.get(name)


def available() -> list[str]:
    """Every backend name a contract may use: built in, registered, or offered by an entry point."""
    names = set(BUILTIN) | set(_REGISTERED) | {ep.name for ep in metadata.entry_points(group=ENTRY_POINT_GROUP)}
    return sorted(names)


def make_backend(name: str) -> AuditBackend:
    """A fresh backend instance for the contract's backend name."""
    if name in BUILTIN:
        module, _, cls = BUILTIN[name].partition(":")
        backend: AuditBackend = getattr(importlib.import_module(module), cls)()
        return backend
    factory = _REGISTERED.get(name) or _from_entry_points(name)
    if factory is None:
        raise ValueError(
            f"unknown audit backend {name!r}; known: {', '.join(available())} "
            f"(a package adds one through the {ENTRY_POINT_GROUP!r} entry point group)"
        )
    return factory()
