"""Test-only fault injection: SIGKILL the loop at a named step of an iteration.

Like SQLite's crash-test VFS, this exists so tests can prove crash safety by killing the
process at every step boundary and resuming. Production code calls `crashpoint(name)` at
each boundary; it does nothing unless the environment variable `SIL_CRASH_AT` is set to
`<name>:<k>`, in which case the k-th time this process reaches `<name>` it sends itself
SIGKILL (no cleanup, no flush, no `finally`: the same as a power cut for this process,
but the kernel keeps what was already written). Audit subprocesses never inherit the
variable (their environment is an allowlist), so only the loop dies.

    SIL_CRASH_AT=apply.before_write:2 sil run     # dies before the 2nd candidate's file write

`SIL_DISK_FULL_AT=<name>:<k>` instead raises `OSError(ENOSPC)` at the k-th visit, as a write
there would on a full disk (the loop must halt cleanly and resume to the same result).
"""

from __future__ import annotations

import errno
import os
import signal
import threading
from collections import Counter

CRASH_ENV = "SIL_CRASH_AT"
DISK_FULL_ENV = "SIL_DISK_FULL_AT"

# Every boundary of one iteration, in the order an iteration reaches them (`audit.*` and
# `round.*` are also reached by baseline, never and final rounds). Names are stable: tests
# and docs refer to them.
CRASH_POINTS: tuple[str, ...] = (
    "propose.after_call",  # the proposer answered (its model calls paid); nothing recorded
    "propose.before_save",  # candidate chosen and stored as a set; state not saved
    "propose.after_save",  # pending candidate saved; nothing recorded in the ledger
    "apply.before_intent",  # mutation recorded; apply intent not yet
    "apply.before_write",  # apply intent recorded; working policy file not written
    "apply.before_record",  # file written; `applied` not recorded
    "apply.before_save",  # `applied` recorded; stage not saved
    "audit.before_launch",  # audit intent recorded and round planned; no audit started
    "audit.running",  # audit subprocesses started and mid-flight
    "audit.before_result",  # audits finished; no result.json written
    "audit.before_record",  # result.json written; no audit record
    "audit.between_records",  # one audit record written, the round's others not yet
    "round.before_record",  # audit records written; round record and decision not yet
    "verdict.before_save",  # verdict recorded; state not saved
    "verdict.before_anchor",  # verdict saved; ledger head not anchored
    "settle.before_intent",  # verdict saved; promote/revert intent not yet
    "settle.before_write",  # revert/promote intent recorded; file not written
    "settle.before_record",  # file written; revert/promote not recorded
    "settle.before_refs",  # revert/promote recorded; git refs not written
    "settle.before_save",  # refs written; settled state not saved
    "state.before_save",  # any state save, before the atomic write
    "state.after_save",  # any state save, after it
)

_reached: Counter[str] = Counter()
_filled: Counter[str] = Counter()
_lock = threading.Lock()


class FaultSpecError(ValueError):
    """`SIL_CRASH_AT` names no known crash point or has a bad count."""


def parse_spec(spec: str) -> tuple[str, int]:
    """`"<name>:<k>"` → (name, k); refuses unknown names so a typo cannot pass silently."""
    name, _, count = spec.rpartition(":")
    if name not in CRASH_POINTS:
        raise FaultSpecError(f"{CRASH_ENV}={spec!r}: unknown crash point {name!r}; known: {', '.join(CRASH_POINTS)}")
    if not count.isdigit() or int(count) < 1:
        raise FaultSpecError(f"{CRASH_ENV}={spec!r}: the count after ':' must be a positive integer")
    return name, int(count)


def crashpoint(name: str) -> None:
    """SIGKILL this process if `SIL_CRASH_AT` names this point and this is its k-th visit
    (or raise ENOSPC if `SIL_DISK_FULL_AT` does)."""
    _disk_full(name)
    if _due(CRASH_ENV, name, _reached):
        os.kill(os.getpid(), signal.SIGKILL)


def _due(env: str, name: str, visits: dict[str, int]) -> bool:
    """Whether the fault spec in `env` names point `name` and this visit is its k-th."""
    spec = os.environ.get(env)
    if not spec:
        return False
    target, k = parse_spec(spec)
    if name != target:
        return False
    with _lock:
        visits[name] += 1
        return visits[name] == k


def _disk_full(name: str) -> None:
    if _due(DISK_FULL_ENV, name, _filled):
        raise OSError(errno.ENOSPC, f"No space left on device (injected by {DISK_FULL_ENV} at {name})")
