"""The project's id at refs/sil/project: read it, make it on the first run, never silently replace it.

Every run's first record names the project's id, so a genuine ledger copied from another
project does not verify here. A plain `git clone` does not fetch refs/sil/*, and a ref can be
deleted: a new id made then would turn every earlier run into "copied from another project".
So an id is made only while no run of an earlier one is here; otherwise the caller is refused
with the way back: fetch the refs, or adopt an id explicitly (sil/integrity/adoption.py), which
is recorded in the ref's commit.

    pid = project_id(root)                # ProjectIdLost: earlier runs are here, their id is not
    runs = earlier_runs(root, repo)       # the runs that show an id existed
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from sil.integrity.gitrefs import PROJECT_FILE, PROJECT_REF, REF_PREFIX, CheckpointError, Git, anchor_repo

RUNS = Path("state") / "runs"
ADOPTION_FILE = "adoption.json"  # in the ref's commit when the id was adopted, not made on a first run
CHECKPOINTS_SUFFIX = "/checkpoints"
MAX_FIRST_LINE = 1 << 20  # a run record is a few kB; a longer first line names no project we trust


class ProjectIdLost(CheckpointError):
    """The project's id is missing while runs made under an id are here: none is made."""


@dataclass(frozen=True)
class EarlierRuns:
    """What shows that runs were made here under a project id."""

    named: dict[str, list[str]] = field(default_factory=dict)  # project id -> runs whose ledgers name it
    anchored: list[str] = field(default_factory=list)  # runs with checkpoint refs here but no ledger here

    def __bool__(self) -> bool:
        return bool(self.named or self.anchored)

    def describe(self) -> str:
        parts = [
            f"run {', '.join(runs)} name{'s' if len(runs) == 1 else ''} project {pid}"
            for pid, runs in self.named.items()
        ]
        if self.anchored:
            parts.append(
                f"run {', '.join(self.anchored)} ha{'s' if len(self.anchored) == 1 else 've'} checkpoints here"
            )
        return "; ".join(parts)


def project_id(root: Path, *, create: bool = True) -> str | None:
    """The project's id, bound into every run's first record so a genuine ledger copied from
    another project does not verify here: a random id kept at refs/sil/project of the
    checkpoint repo, made on first use. It travels with refs/sil/* as the checkpoints do.
    None when the project has none and `create` is False; ProjectIdLost when it has none and
    runs made under an id are here."""
    repo = anchor_repo(root, create=create)
    if repo is None:
        return None
    git = Git(repo)
    for _ in range(2):  # a concurrent first run may create it between our read and our write
        pid = read_project_id(git)
        if pid is not None:
            return pid
        if not create:
            return None
        runs = earlier_runs(root, repo)
        if runs:
            raise ProjectIdLost(lost_message(root, repo, runs))
        pid = uuid.uuid4().hex
        try:
            write_project_ref(git, pid, f"sil project {pid}", {})
            return pid
        except CheckpointError:
            continue
    raise CheckpointError(f"could not read or create {PROJECT_REF} in {repo}")


def check_project_id(root: Path) -> None:
    """ProjectIdLost when the project has no id while runs made under one are here; else nothing
    (writes nothing: a run checks this before it writes, and makes the id once its inputs passed)."""
    repo = anchor_repo(root, create=False)
    if repo is None or read_project_id(Git(repo)) is not None:
        return
    if runs := earlier_runs(root, repo):
        raise ProjectIdLost(lost_message(root, repo, runs))


def read_project_id(git: Git) -> str | None:
    commit = git.resolve(PROJECT_REF)
    return None if commit is None else git.out("cat-file", "blob", f"{commit}:{PROJECT_FILE}")


def write_project_ref(git: Git, pid: str, message: str, extra: dict[str, bytes]) -> str:
    """Create refs/sil/project holding `pid` (and `extra` files); fails if the ref exists by now."""
    made = git.commit(git.tree({PROJECT_FILE: pid.encode(), **extra}), message, [])
    git.out("update-ref", "-m", "sil project", PROJECT_REF, made, "")
    return made


def earlier_runs(root: Path, repo: Path) -> EarlierRuns:
    """Runs here whose ledgers name a project, and checkpointed runs whose ledgers are not here.

    A ledger written before runs named their project is bound to none, so a new id costs it
    nothing and it is not counted."""
    named: dict[str, list[str]] = {}
    present = set()
    for ledger in sorted((Path(root) / RUNS).glob("*/ledger.jsonl")):
        present.add(ledger.parent.name)
        if pid := declared_project(ledger):
            named.setdefault(pid, []).append(ledger.parent.name)
    anchored = [run for run in checkpointed_runs(Git(repo)) if run not in present]
    return EarlierRuns(named, anchored)


def declared_project(ledger: Path) -> str | None:
    """The project a run's first record names (None when it names none or cannot be read)."""
    try:
        with ledger.open("rb") as f:
            first = json.loads(f.readline(MAX_FIRST_LINE))
        project = first["payload"].get("project") if first.get("type") == "contract" else None
    except (OSError, ValueError, TypeError, KeyError, AttributeError):
        return None
    return project if isinstance(project, str) and project else None


def checkpointed_runs(git: Git) -> list[str]:
    """The runs with a checkpoint ref (refs/sil/<run>/checkpoints) in the repository."""
    refs = git.out("for-each-ref", "--format=%(refname)", f"{REF_PREFIX}/").split()
    prefix = f"{REF_PREFIX}/"
    return sorted(
        ref.removeprefix(prefix).removesuffix(CHECKPOINTS_SUFFIX)
        for ref in refs
        if ref.endswith(CHECKPOINTS_SUFFIX) and ref.count("/") == 3
    )


def fetch_commands(root: Path, repo: Path) -> list[str]:
    """How to fetch the refs a clone was made without, from each remote of the project's repo."""
    if Path(repo).resolve() != Path(root).resolve():
        return []  # the tool's own bare repository (a project without git): no remote to fetch from
    remotes = Git(repo).out("remote").split() or ["origin"]
    return [f"git fetch {remote} '{REF_PREFIX}/*:{REF_PREFIX}/*'" for remote in remotes]


def lost_message(root: Path, repo: Path, runs: EarlierRuns) -> str:
    fetch = fetch_commands(root, repo)
    where = (
        f"If this repository was cloned (a clone does not fetch {REF_PREFIX}/*), fetch them: "
        + " or ".join(f"`{c}`" for c in fetch)
        if fetch
        else f"If {repo} was moved or deleted, restore it from a copy"
    )
    return (
        f"this project has no id ({PROJECT_REF} is missing in {repo}), but runs were made here under one "
        f"({runs.describe()}). A new id would make every one of them fail verification as copied from "
        f"another project, so none is made. {where}. If the id is lost for good, `sil project adopt` "
        f"restores the id the runs name after verifying them, and `sil project adopt --new` makes a new "
        f"one; either is recorded in {PROJECT_REF}"
    )
