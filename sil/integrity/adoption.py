"""`sil project adopt`: give a project that lost its id (refs/sil/project) one again, on record.

Restoring is the default: the id the runs here name is written back once every one of those
runs verifies (hash chain, its folder, checkpoints, declared trust, witness when set), so a
forged ledger cannot choose the project's id. Ledgers naming several ids are refused: a
project has one. `--new` makes a new id instead, and the runs under the old one then fail
verification here. Either way the ref's commit holds `adoption.json` (what was done, when, which
runs) and says so in its message, so an adopted id is never mistaken for one made on a first run.

    adoption = adopt_project(root, new=False, witness=witness_from_env(root))
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from sil.integrity.checkpoint import anchor_repo
from sil.integrity.gitrefs import PROJECT_REF, CheckpointError, Git
from sil.integrity.ledger import read_snapshot
from sil.integrity.projectid import ADOPTION_FILE, RUNS, EarlierRuns, earlier_runs, read_project_id, write_project_ref
from sil.integrity.verify import project_errors, verify_run_ledger
from sil.integrity.witness import Witness


class AdoptionRefused(ValueError):
    """The project's id cannot be adopted as asked; nothing was written."""


@dataclass(frozen=True)
class Adoption:
    project: str
    how: Literal["restored", "new"]
    runs: list[str]  # restored: the runs verified under the id; new: the runs left under other ids
    commit: str


def adopt_project(root: Path, *, new: bool, witness: Witness | None = None) -> Adoption:
    """Write refs/sil/project again: the id the runs here name (verified), or a new one with `new`."""
    repo = anchor_repo(root)
    assert repo is not None  # created when missing
    git = Git(repo)
    if (here := read_project_id(git)) is not None:
        raise AdoptionRefused(f"this project has its id ({here} at {PROJECT_REF}): there is nothing to adopt")
    runs = earlier_runs(root, repo)
    how: Literal["restored", "new"] = "new" if new else "restored"
    if new:
        pid, named = uuid.uuid4().hex, sorted(r for rs in runs.named.values() for r in rs)
    else:
        pid, named = _verified_id(root, runs, witness)
    record = {
        "adopted": how,
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "runs": named,
        "runs_without_ledger": runs.anchored,
    }
    body = json.dumps(record, sort_keys=True, indent=1) + "\n"
    message = f"sil project {pid} ({how} by `sil project adopt`)\n\n{body}"
    try:
        commit = write_project_ref(git, pid, message, {ADOPTION_FILE: body.encode()})
    except CheckpointError as ex:  # a concurrent writer: say so, never overwrite
        raise AdoptionRefused(
            f"could not write {PROJECT_REF} (did another command write it meanwhile?): {ex}"
        ) from None
    return Adoption(project=pid, how=how, runs=named, commit=commit)


def _verified_id(root: Path, runs: EarlierRuns, witness: Witness | None) -> tuple[str, list[str]]:
    """The one id the runs here name, once every run naming it verifies."""
    if not runs.named:
        raise AdoptionRefused(
            f"no ledger under {RUNS} names a project id, so there is none to restore. Fetch the refs if this "
            "is a clone, or make a new id with `sil project adopt --new` (recorded)"
        )
    if len(runs.named) > 1:
        raise AdoptionRefused(
            f"the ledgers here name {len(runs.named)} project ids ({runs.describe()}); a project has one. "
            "Move the runs of the other project out, or make a new id with `sil project adopt --new`"
        )
    [(pid, named)] = runs.named.items()
    failed = []
    for run in named:
        ledger = Path(root) / RUNS / run / "ledger.jsonl"
        report = verify_run_ledger(ledger, root, witness=witness)
        foreign = set(project_errors(read_snapshot(ledger), root))  # the missing id itself, expected here
        if errors := [e for e in report.errors if e not in foreign]:
            failed.append(f"{run}: {errors[0]}")
    if failed:
        raise AdoptionRefused(
            f"project {pid} is not restored: these runs naming it do not verify: {'; '.join(failed)}. "
            "`sil ledger verify RUN` shows why"
        )
    return pid, named
