"""Reading a policy file remembers its validated form (a run reads the same files thousands of
times), without letting one caller's changes or one refusal leak into the next read."""

from __future__ import annotations

import json

import pytest

from sil_policy import SURFACES, PolicyError, parse_surface
from sil_policy.format import MEMO_BYTES, canonical_bytes
from sil_runtime.policy_loader import DEFAULTS_DIR

NAME = next(iter(SURFACES))


def _default() -> bytes:
    return (DEFAULTS_DIR / SURFACES[NAME].filename).read_bytes()


def test_each_read_returns_its_own_copy() -> None:
    first = parse_surface(NAME, _default())
    first["tampered"] = True
    second = parse_surface(NAME, _default())
    assert "tampered" not in second and second == json.loads(canonical_bytes(second))


def test_a_refused_file_is_refused_again_and_its_fix_accepted() -> None:
    bad = json.loads(_default())
    bad["no_such_field"] = 1
    data = json.dumps(bad).encode()
    for _ in range(2):
        with pytest.raises(PolicyError, match="no_such_field"):
            parse_surface(NAME, data)
    assert parse_surface(NAME, _default()) == parse_surface(NAME, bytearray(_default()))


def test_a_file_past_the_memo_size_is_still_validated() -> None:
    doc = json.loads(_default())
    padded = json.dumps(doc).encode() + b" " * (MEMO_BYTES + 1)
    assert parse_surface(NAME, padded) == parse_surface(NAME, _default())
    doc["no_such_field"] = 1
    with pytest.raises(PolicyError, match="no_such_field"):
        parse_surface(NAME, json.dumps(doc).encode() + b" " * (MEMO_BYTES + 1))
