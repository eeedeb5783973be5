"""The hidden landscape: the true effect of policy content on each audit dimension.

Effects are relative to the runtime's built-in default policy. Every leaf of a policy document
(surface, dotted path, value) that differs from the default contributes one latent effect,
drawn from the docs/statistics.md §4 mixture with a generator seeded by
(landscape_seed, surface, path, sha256 of the canonical value); the effects add up. So the
same value proposed twice has the same effect, and reverting a leaf removes its effect
exactly. Lists are single leaves (reordering a tool list is one edit); a removed leaf counts
as the value "absent".

    theta = latent_field(policies.documents, dims, "broken_tool_use", critical, 10, params)
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from sil.contract.simparams import SimParams
from sil_policy import SURFACES
from sil_runtime.policy_loader import default_document
from sil_runtime.sim.world import draw_effect, effect_field, keyed_rng

ABSENT = object()  # a leaf the default has and the policy removed (or the reverse)


@dataclass(frozen=True)
class Edit:
    """One leaf that differs from the built-in default."""

    surface: str
    path: str
    value_sha: str


def flatten(document: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """Leaves of a document by dotted path; lists and empty mappings are leaves."""
    leaves: dict[str, Any] = {}
    for key, value in document.items():
        path = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, Mapping) and value:
            leaves.update(flatten(value, path))
        else:
            leaves[path] = value
    return leaves


def value_sha(value: Any) -> str:
    if value is ABSENT:
        return "absent"
    return hashlib.sha256(json.dumps(value, sort_keys=True, ensure_ascii=False).encode()).hexdigest()


def edits(documents: Mapping[str, Mapping[str, Any]]) -> list[Edit]:
    """Every leaf of `documents` that differs from the default (surfaces left out are default)."""
    unknown = sorted(set(documents) - set(SURFACES))
    if unknown:
        raise ValueError(f"unknown policy surfaces {unknown}; known: {', '.join(SURFACES)}")
    out = []
    for surface in SURFACES:
        if surface not in documents:
            continue
        base = flatten(default_document(surface)[0])
        new = flatten(documents[surface])
        for path in sorted(base.keys() | new.keys()):
            sha = value_sha(new.get(path, ABSENT))
            if sha != value_sha(base.get(path, ABSENT)):
                out.append(Edit(surface, path, sha))
    return out


def edit_field(
    edit: Edit, dims: Sequence[str], target: str, critical: Sequence[str], n_seeds: int, params: SimParams
) -> np.ndarray:
    """The latent field [n_seeds, D] one edit adds, a pure function of the edit and the seed."""
    rng = keyed_rng(params.landscape_seed, "edit", edit.surface, edit.path, edit.value_sha)
    delta = draw_effect(rng, dims, target, critical, params.effect_mixture)
    return effect_field(rng, delta, n_seeds, params.effect_heterogeneity)


def latent_field(
    documents: Mapping[str, Mapping[str, Any]],
    dims: Sequence[str],
    target: str,
    critical: Sequence[str],
    n_seeds: int,
    params: SimParams,
) -> np.ndarray:
    """Total latent policy field [n_seeds, D] of a policy set: the sum of its edits' fields."""
    theta = np.zeros((n_seeds, len(dims)))
    for edit in edits(documents):
        theta += edit_field(edit, dims, target, critical, n_seeds, params)
    return theta


def critical_dimensions(tiers: Mapping[str, str], target: str) -> list[str]:
    """Dims of tier critical other than the target, in rubric order."""
    return [d for d, tier in tiers.items() if tier == "critical" and d != target]
