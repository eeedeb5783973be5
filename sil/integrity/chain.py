"""The ledger's hash chain read with the standard library only, for `sil runs` and `sil status`.

Importing pydantic and building the record models costs more than half a second, so the
everyday views read the ledger here: canonical form and record hash are defined here (the
ledger writes with them), and `clean_chain` accepts a ledger only when every check of
`ledger.verify_bytes` passes. It never reports an error itself: whenever it cannot vouch for a
ledger (`None`), the caller runs the full verifier, which names what is wrong.

    entries = clean_chain(read_snapshot(path))   # None: run ledger.verify_bytes for the errors
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from filelock import FileLock

GENESIS = "0" * 64
# the record types of records.RECORD_MODELS (tests/integrity/test_chain.py keeps them equal)
RECORD_TYPES = frozenset(
    {
        "contract",
        "baseline",
        "noise",
        "mutation",
        "intent",
        "applied",
        "audit",
        "round",
        "verdict",
        "promote",
        "revert",
        "certify",
        "demote",
        "replicate",
        "user_promote",
        "probe",
        "canary",
        "recovery",
        "repair",
        "halt",
        "resume",
        "mutator_call",
        "proposer_gap",
        "effect",
        "stop",
        "segment",
    }
)
FIELDS = frozenset({"seq", "prev", "ts", "run_id", "type", "offline", "simulated", "payload", "hash"})
_STR_FIELDS = ("prev", "ts", "run_id", "type", "hash")
# Deeper or odder lines go to the full reader: its JSON parser has its own limits.
MAX_DEPTH = 64
MAX_INT = 2**63


_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def canonical(obj: Any) -> bytes:
    """Canonical JSON bytes: sorted keys, no spaces, UTF-8, and NaN/inf refused."""
    return _CANONICAL.encode(obj).encode()


def record_hash(fields: dict[str, Any]) -> str:
    return hashlib.sha256(canonical({k: v for k, v in fields.items() if k != "hash"})).hexdigest()


def ledger_lock(path: Path) -> FileLock:
    """The lock every writer (and a consistent reader) of this ledger takes."""
    from filelock import FileLock  # here: `sil status` reads a ledger without it

    # Keyed by the real path: two names (a symlink alias) for one ledger share one lock.
    return FileLock(os.path.realpath(path) + ".lock", fallback_to_soft=False)


def read_snapshot(path: Path) -> bytes:
    """The ledger's bytes as of one instant, read under the writers' lock."""
    with ledger_lock(Path(path)):
        return Path(path).read_bytes()


class Entry(NamedTuple):
    """One ledger record as the full reader (`ledger.Record`) would read it."""

    seq: int
    prev: str
    ts: str
    run_id: str
    type: str
    offline: bool
    simulated: bool
    payload: dict[str, Any]
    hash: str
    fields: dict[str, Any]  # the whole record, for the canonical-form and hash checks


def _depth(node: Any, level: int = 0) -> int:
    if level > MAX_DEPTH:
        return level
    items = node.values() if isinstance(node, dict) else node if isinstance(node, list) else ()
    return max((_depth(v, level + 1) for v in items), default=level)


def parse_entry(line: bytes) -> Entry | None:
    """The record on one ledger line, or None unless it is plainly one (exact types, no oddities)."""
    if b"\\ud" in line or b"\\uD" in line:  # surrogate escapes: left to the full reader
        return None
    try:
        obj = json.loads(line.decode("utf-8"))  # NaN and inf read as the full reader reads them
    except (ValueError, RecursionError):
        return None
    if not isinstance(obj, dict) or obj.keys() != FIELDS:
        return None
    if type(obj["seq"]) is not int or not -MAX_INT <= obj["seq"] < MAX_INT:
        return None
    if any(type(obj[k]) is not str for k in _STR_FIELDS) or type(obj["payload"]) is not dict:
        return None
    if type(obj["offline"]) is not bool or type(obj["simulated"]) is not bool:
        return None
    if line.count(b"[") + line.count(b"{") > MAX_DEPTH and _depth(obj) > MAX_DEPTH:
        return None
    return Entry(
        obj["seq"],
        obj["prev"],
        obj["ts"],
        obj["run_id"],
        obj["type"],
        obj["offline"],
        obj["simulated"],
        obj["payload"],
        obj["hash"],
        obj,
    )


def read_entries(data: bytes) -> list[Entry] | None:
    """Every complete record, as `ledger.read_records` yields them (a torn last line is left out);
    None when a line is not plainly a record (the full reader then says what it is)."""
    lines = data.split(b"\n")[:-1]
    entries = [parse_entry(line) for line in lines]
    return None if any(e is None for e in entries) else [e for e in entries if e is not None]


def _hash_of_canonical(line: bytes, digest: str) -> str:
    """`record_hash` of a record whose canonical line this is, without encoding it again: "hash"
    sorts first of the record's keys, so the line without it is the line minus its first member."""
    member = b'{"hash":' + canonical(digest) + b","
    if not line.startswith(member):
        return ""
    return hashlib.sha256(b"{" + line[len(member) :]).hexdigest()


def clean_chain(data: bytes) -> list[Entry] | None:
    """The records when `ledger.verify_bytes(data)` finds nothing wrong; else None."""
    if data and not data.endswith(b"\n"):
        return None  # a torn tail
    entries = read_entries(data)
    if entries is None:
        return None
    prev, last_type = GENESIS, None
    for n, (entry, line) in enumerate(zip(entries, data.split(b"\n"), strict=False)):
        try:
            if canonical(entry.fields) != line or _hash_of_canonical(line, entry.hash) != entry.hash:
                return None
        except (ValueError, TypeError, UnicodeError):  # NaN, inf: not canonical JSON
            return None
        if entry.type not in RECORD_TYPES or entry.seq != n or entry.prev != prev:
            return None
        if last_type == "stop" and entry.type != "segment":
            return None
        prev, last_type = entry.hash, entry.type
    return entries
