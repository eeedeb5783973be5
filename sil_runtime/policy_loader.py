"""The runtime's policy loaders: one per surface, reading the OVERRIDE path and STRICT flag.

Without an override the runtime uses its built-in default for the surface. With STRICT set,
a missing or invalid override is fatal before any sample runs; without STRICT it falls back
to the default and says so in the load report (a real runtime's graceful mode, which the
loop never uses).

    policies = load_policies()          # raises PolicyLoadError under STRICT
    policies.documents["tool_policy"], policies.hashes["tool_policy"]
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sil_policy import SURFACES, PolicyError, canonical_bytes, content_hash, load_surface

DEFAULTS_DIR = Path(__file__).resolve().parent / "defaults"


class PolicyLoadError(RuntimeError):
    """A STRICT policy override that cannot be loaded; the audit must not start."""


@dataclass(frozen=True)
class LoadedPolicies:
    documents: dict[str, dict[str, Any]]
    hashes: dict[str, str]
    sources: dict[str, str]
    warnings: list[str] = field(default_factory=list)


def default_document(name: str) -> tuple[dict[str, Any], str]:
    return load_surface(name, DEFAULTS_DIR / SURFACES[name].filename)


def load_one(name: str, environ: Mapping[str, str] = os.environ) -> tuple[dict[str, Any], str, str, str | None]:
    """Load one surface: (document, sha256, source, warning)."""
    spec = SURFACES[name]
    override = environ.get(spec.override_env)
    strict = environ.get(spec.strict_env, "") == "1"
    if override:
        try:
            doc, digest = load_surface(name, Path(override))
            return doc, digest, override, None
        except PolicyError as ex:
            if strict:
                raise PolicyLoadError(f"STRICT: cannot load {name} policy from {override}: {ex}") from None
            warning = f"{name}: override unusable, using built-in default ({ex})"
    elif strict:
        raise PolicyLoadError(f"STRICT: {spec.override_env} is not set for {name}")
    else:
        warning = None
    doc, digest = default_document(name)
    return doc, digest, "default", warning


def load_policies(environ: Mapping[str, str] = os.environ) -> LoadedPolicies:
    docs, hashes, sources, warnings = {}, {}, {}, []
    for name in SURFACES:
        doc, digest, source, warning = load_one(name, environ)
        docs[name], hashes[name], sources[name] = doc, digest, source
        if warning:
            warnings.append(warning)
    return LoadedPolicies(docs, hashes, sources, warnings)


def document_hash(document: dict[str, Any]) -> str:
    return content_hash(canonical_bytes(document))
