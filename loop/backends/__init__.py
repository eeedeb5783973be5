"""Audit backends by name: the contract's `backend` field picks one.

Each backend implements `measure.AuditBackend` (the command of its audit subprocess, how it
reads the evidence back, what one audit can cost at most). They are imported only when asked
for: the petri backend pulls in inspect-ai, which the sim backend does not need.

    backend = make_backend(contract.backend)
"""

from __future__ import annotations

import importlib

from measure import AuditBackend

# backend name -> "module:class"
BACKENDS: dict[str, str] = {
    "sim": "loop.backends.sim:SimBackend",
    "petri": "loop.backends.petri:PetriBackend",
}


def make_backend(name: str) -> AuditBackend:
    """A fresh backend instance for the contract's backend name."""
    try:
        target = BACKENDS[name]
    except KeyError:
        raise ValueError(f"unknown audit backend {name!r}; known: {', '.join(BACKENDS)}") from None
    module, _, cls = target.partition(":")
    backend: AuditBackend = getattr(importlib.import_module(module), cls)()
    return backend
