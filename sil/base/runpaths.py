"""Where runs live under a project, and which folder a run id names (no pydantic: `sil runs` reads it).

run_dirs(root)                # every run folder with a ledger, oldest first
resolve_run(root, "r1")       # its folder; Refused with how to fix it
"""

from __future__ import annotations

import os
from pathlib import Path

from sil.base.errors import Refused
from sil.base.runid import RunIdError, run_dir_under

RUNS = Path("state/runs")
SWEEPS = Path("state/sweeps")  # each sweep run is a project of its own: state/sweeps/<id>/state/runs/<id>
CONTRACT_SNAPSHOT = "contract.json"
LEDGER = "ledger.jsonl"


def run_dirs(root: Path, sweeps: bool = True) -> list[Path]:
    """Every run folder under state/runs (and of every sweep), oldest first, whatever its name or
    its ledger is (a directory, a FIFO, a dangling symlink: the reader says what is wrong); one
    without any ledger entry is skipped."""
    found = _with_ledger(root / RUNS)
    if sweeps:
        for sweep in _folders(root / SWEEPS):
            found += _with_ledger(sweep / RUNS)
    return sorted(found, key=_written)


def _folders(path: Path) -> list[Path]:
    try:
        return [Path(e.path) for e in os.scandir(path) if e.is_dir(follow_symlinks=False)]
    except OSError:
        return []


def _with_ledger(runs: Path) -> list[Path]:
    return [d for d in _folders(runs) if os.path.lexists(d / LEDGER)]


def _written(run_dir: Path) -> tuple[float, str]:
    try:
        return os.lstat(run_dir / LEDGER).st_mtime, run_dir.name
    except OSError:
        return 0.0, run_dir.name


def sweep_run_dirs(root: Path) -> list[Path]:
    """The run folders of every sweep under state/sweeps, in name order."""
    return sorted(d for sweep in _folders(root / SWEEPS) for d in _with_ledger(sweep / RUNS))


def resolve_run(root: Path, run: str | None) -> Path:
    """The folder of run `run` (default: the most recently written); Refused with how to fix it."""
    base = root / RUNS
    if run is None:
        found = run_dirs(root)
        if not found:
            raise Refused(f"no runs under {base}; start one with `sil run`")
        return found[-1]
    try:
        path = run_dir_under(base, run)
        swept = run_dir_under(root / SWEEPS, run) / RUNS / run
    except RunIdError as ex:
        raise Refused(f"{ex} (list them with `sil runs`)") from None
    for candidate in (path, swept):
        if (candidate / LEDGER).is_file():
            return candidate
    raise Refused(f"no run {run!r} with a ledger under {base} or {root / SWEEPS} (list them with `sil runs`)")
