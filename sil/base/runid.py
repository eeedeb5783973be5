"""Run ids, checked as a whole before any path or git ref is built from them (layer L0).

A run id names `state/runs/<id>` and the refs under `refs/sil/<id>/`, so it must be one
plain path component that is also a valid git ref component: letters, digits, '.', '_'
and '-', starting with a letter or digit, without '..' and not ending in '.' or '.lock'.
`project` is taken: `refs/sil/project` is the project's id, and git cannot keep a ref and
refs under it (`refs/sil/project/checkpoints`) at once.

    run_dir = run_dir_under(root / "state/runs", check_run_id(run_id))   # RunIdError if not
"""

from __future__ import annotations

import re
from pathlib import Path

RUN_ID_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
RESERVED_RUN_IDS = frozenset({"project"})  # names of project-level refs beside the runs' under refs/sil


class RunIdError(ValueError):
    """A run id that could leave its directory or is not a valid git ref component."""


def check_run_id(run_id: object) -> str:
    """`run_id` itself if it is allowed, else RunIdError naming the rule it breaks."""
    if (
        not isinstance(run_id, str)
        or not RUN_ID_PATTERN.fullmatch(run_id)
        or ".." in run_id
        or run_id.endswith((".", ".lock"))
    ):
        raise RunIdError(
            f"run id {run_id!r} is not allowed: use 1-128 letters, digits, '.', '_' or '-', "
            "starting with a letter or digit, without '..' or a trailing '.'/'.lock'"
        )
    if run_id in RESERVED_RUN_IDS:
        raise RunIdError(f"run id {run_id!r} is taken by the project's own ref (refs/sil/{run_id}): choose another id")
    return run_id


def run_dir_under(runs: Path, run_id: str) -> Path:
    """`runs/<run_id>`, refused if the run directory is a symlink (it would write elsewhere)."""
    path = Path(runs) / check_run_id(run_id)
    if path.is_symlink():
        raise RunIdError(f"{path} is a symlink; a run directory must be a plain directory under {runs}")
    return path
