"""`verify.verify_chain_and_checkpoints` for a ledger that passes it, without pydantic (`sil runs`).

The same checks: the hash chain (chain.clean_chain), every record naming
the run of its folder, the run's project, and every git checkpoint still a prefix of the
ledger. It answers only "all of them pass" (a `QuickCheck`) or None: on None, or on anything it
cannot read plainly, the caller runs the full verifier, which names what is wrong. So nothing
shows "ok" here that the full check would not, and no result is cached between calls.

    found = quick_check(run_dir / "ledger.jsonl", root)   # None: verify_chain_and_checkpoints(...)
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

from sil.base.runid import RunIdError, check_run_id
from sil.integrity.chain import GENESIS, Entry, clean_chain
from sil.integrity.gitrefs import (
    META_FILE,
    NAMESPACE,
    NOTE_FILE,
    PROJECT_FILE,
    PROJECT_REF,
    SIG_FILE,
    CheckpointError,
    Git,
    anchor_repo,
    checkpoint_ref_of,
)

NAMES = (NOTE_FILE, META_FILE, SIG_FILE)


class QuickCheck(NamedTuple):
    entries: list[Entry]  # the records of the snapshot that was checked
    checkpoints: int

    @property
    def records(self) -> int:
        return len(self.entries)


def quick_check(ledger_path: Path, root: Path) -> QuickCheck | None:
    """Every check of `verify_chain_and_checkpoints` passed (None: run that, for its errors)."""
    path = Path(ledger_path)
    # Read without the writers' lock (and without importing filelock): an append is one write()
    # and only a torn tail is ever cut, so a read mid-append shows a torn tail, which is not
    # clean and goes to the full check, which reads under the lock.
    data = path.read_bytes() if path.exists() else b""
    entries = clean_chain(data)
    if entries is None:
        return None
    ids = {e.run_id for e in entries}
    if ids and ids != {path.parent.name}:
        return None  # copied from another run
    run_id = entries[0].run_id if entries else path.parent.name
    try:
        ref = checkpoint_ref_of(check_run_id(run_id))
    except RunIdError:
        return None
    project = _declared_project(entries)
    listed = _listed(root, ref)
    if listed is None:
        return None
    if not listed:
        return None if project else QuickCheck(entries, 0)  # a run naming a project needs its id
    repo, commits = listed
    anchored = _anchored(repo, commits, project)
    if anchored is None or not _prefixes(data, entries, anchored):
        return None
    return QuickCheck(entries, len(anchored))


def _listed(root: Path, ref: str) -> tuple[Path, list[str]] | tuple[()] | None:
    """The checkpoint repository and the run's checkpoint commits, oldest first; () when there is
    no checkpoint repository; None when the ref is there but not readable as checkpoints."""
    listed = Git(root, check=False).run("rev-list", "--first-parent", "--reverse", ref + "^{commit}", "--")
    if listed.returncode == 0:  # the project's own git repository, as anchor_repo would find
        return root, listed.stdout.decode().split()
    repo = anchor_repo(root, create=False)
    if repo is None:
        return ()
    git = Git(repo, check=False)  # a broken one fails below
    listed = git.run("rev-list", "--first-parent", "--reverse", ref + "^{commit}", "--")
    if listed.returncode == 0:
        return repo, listed.stdout.decode().split()
    try:
        return (repo, []) if Git(repo).resolve(ref) is None else None
    except CheckpointError:
        return None


def _declared_project(entries: list[Entry]) -> str | None:
    """The project the run's first record names, when it names one."""
    if not entries or entries[0].type != "contract":
        return None
    project = entries[0].payload.get("project")
    return str(project) if project else None


def _anchored(repo: Path, commits: list[str], project: str | None) -> list[tuple[int, int, str]] | None:
    """(records, size, head) of every checkpoint commit, if the project id is `project` (when
    the run names one); None when a checkpoint is unreadable or the project differs."""
    git = Git(repo, check=False)
    names = [f"{c}:{n}" for c in commits for n in NAMES] + [f"{PROJECT_REF}^{{commit}}:{PROJECT_FILE}"]
    try:
        blobs = git.cat_batch(names)
        here = blobs[-1]
        if project is not None and (here is None or here.decode().strip() != project):
            return None
        found = [_head(*blobs[3 * i : 3 * i + 3]) for i in range(len(commits))]
    except (CheckpointError, ValueError, TypeError, IndexError):
        return None
    return None if any(f is None for f in found) else [f for f in found if f is not None]


def _head(note: bytes | None, meta: bytes | None, sig: bytes | None) -> tuple[int, int, str] | None:
    """A checkpoint as `GitPlumbing._parse` reads it (records, size, head), or None where it refuses one."""
    origin, records, size, head = (note or b"").decode().splitlines()
    fields = json.loads(meta or b"{}")
    if not isinstance(fields, dict) or any(type(fields.get(k)) is not str for k in ("run_id", "created_at")):
        return None
    if fields.get("signer") is not None and type(fields["signer"]) is not str:
        return None
    if sig is not None:
        sig.decode()
    if origin != f"{NAMESPACE}/{fields['run_id']}":
        return None
    return int(records), int(size), head


def _prefixes(data: bytes, entries: list[Entry], anchored: list[tuple[int, int, str]]) -> bool:
    """`checkpoint.compare_checkpoints` finds nothing: each checkpoint is still a prefix."""
    heads: list[tuple[int, str]] = []
    offset = 0
    for line, entry in zip(data.split(b"\n"), entries, strict=False):
        offset += len(line) + 1
        heads.append((offset, entry.hash))
    last = 0
    for records, size, head in anchored:
        if records < last or records > len(heads):
            return False
        last = records
        if (heads[records - 1] if records else (0, GENESIS)) != (size, head):
            return False
    return True
