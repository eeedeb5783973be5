"""The id of a policy set: the hash of its seven surface hashes (no pydantic: `sil runs` reads it)."""

from __future__ import annotations

import hashlib
import json


def set_id_of(hashes: dict[str, str]) -> str:
    blob = json.dumps(hashes, sort_keys=True).encode()
    return hashlib.sha256(blob).hexdigest()[:16]
