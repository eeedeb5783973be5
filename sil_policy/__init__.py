"""The policy file format shared by the loop and any runtime under test.

Seven surfaces, one JSON file each. Both sides import this module: the loop to validate a
candidate before it is applied, the runtime to load it (STRICT). Nothing else is shared, so
the loop never needs a runtime's internals.

    from sil_policy import SURFACES, load_surface, canonical_bytes
"""

from sil_policy.format import (
    HYPERPARAMETER_KEYS,
    SURFACES,
    DuplicateKeyError,
    PolicyError,
    Surface,
    canonical_bytes,
    content_hash,
    describe_validation_errors,
    load_surface,
    parse_surface,
    reject_duplicate_keys,
    surface,
    validate_document,
)

__all__ = [
    "HYPERPARAMETER_KEYS",
    "SURFACES",
    "PolicyError",
    "Surface",
    "DuplicateKeyError",
    "canonical_bytes",
    "describe_validation_errors",
    "reject_duplicate_keys",
    "content_hash",
    "load_surface",
    "parse_surface",
    "surface",
    "validate_document",
]
