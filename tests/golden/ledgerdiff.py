"""Compare two run ledgers field by field, ignoring only times and the fields named here.

    python -m tests.golden.ledgerdiff OLD.jsonl NEW.jsonl

Used to show that a change which should not move the default run (a code move, a speed-up)
leaves every verdict, round, score, policy hash and summary as it was.
"""

from __future__ import annotations

import gzip
import json
import math
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

# Fields that differ between two runs of the same contract without any change of behaviour.
IGNORED = frozenset(
    {
        "ts",  # wall-clock time of the append
        "hash",  # the record's own hash covers ts
        "prev",  # the chain links hashes that cover ts
        "wall_s",  # audit and phase durations
        "wall",
        "started_at",
        "finished_at",
        "elapsed_s",
        "measurement_hash",  # hashes the measurement *code* by path: moving files changes it
        "measurement",  # the per-file component hashes behind measurement_hash
        "log_path",  # absolute paths of audit logs
        "pid",
        "commit",  # git commit ids of the policy refs cover the commit time
        "project",  # a random id per project (refs/sil/project)
    }
)


def read(path: Path) -> list[dict[str, Any]]:
    opener = gzip.open if path.suffix == ".gz" else open
    with opener(path, "rt") as f:
        return [json.loads(line) for line in f if line.strip()]


def normalise(obj: Any) -> Any:
    """The record with every ignored field removed, at any depth."""
    if isinstance(obj, dict):
        return {k: normalise(v) for k, v in obj.items() if k not in IGNORED}
    if isinstance(obj, list):
        return [normalise(v) for v in obj]
    return obj


# Floats may differ in their last digits between machines (BLAS kernels, summation order) with
# no change of behaviour: a change that matters moves a verdict, a count or a score beyond this.
REL_TOL = 1e-9


def _numbers(old: Any, new: Any) -> bool:
    return all(isinstance(x, int | float) and not isinstance(x, bool) for x in (old, new))


def differences(old: Any, new: Any, where: str = "") -> Iterator[str]:
    """Every path at which the two normalised values differ (floats beyond a relative 1e-9)."""
    if _numbers(old, new):
        if not math.isclose(old, new, rel_tol=REL_TOL, abs_tol=1e-12):
            yield f"{where}: {old!r} -> {new!r}"
    elif isinstance(old, dict) and isinstance(new, dict):
        for key in sorted(set(old) | set(new)):
            if key not in new or key not in old:
                yield f"{where}.{key}: only in {'old' if key in old else 'new'}"
            else:
                yield from differences(old[key], new[key], f"{where}.{key}")
    elif isinstance(old, list) and isinstance(new, list) and len(old) == len(new):
        for i, (a, b) in enumerate(zip(old, new, strict=True)):
            yield from differences(a, b, f"{where}[{i}]")
    elif old != new:
        yield f"{where}: {str(old)[:80]!r} -> {str(new)[:80]!r}"


def compare(old: list[dict[str, Any]], new: list[dict[str, Any]]) -> list[str]:
    out = [] if len(old) == len(new) else [f"record count {len(old)} -> {len(new)}"]
    for i, (a, b) in enumerate(zip(old, new, strict=False)):
        out += [f"record {i} ({a.get('type')}){d}" for d in differences(normalise(a), normalise(b))]
    return out


if __name__ == "__main__":
    diffs = compare(read(Path(sys.argv[1])), read(Path(sys.argv[2])))
    print("\n".join(diffs[:200]) or "identical (ignoring: " + ", ".join(sorted(IGNORED)) + ")")
    sys.exit(1 if diffs else 0)
