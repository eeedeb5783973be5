"""The views of a run (`sil runs`, `sil status`) kept for inputs they were already made from (L3).

Reading a run the one way (sil/review/status.py: the ledger verified, the snapshots held to it)
costs its record models and a verification per run. A view depends only on the bytes of the
run's ledger, state.json and contract.json, the commits its checkpoint and project refs point
at, the trust anchor named in the environment, whether the run is running, and the code: the
cache key is a SHA-256 over all of them, so any change to any of them, an edit that keeps the
size and mtime included, is a miss and the run is read afresh. The cache lives outside the
repository (SIL_CACHE_DIR, else $XDG_CACHE_HOME/sil or ~/.cache/sil), where whoever can rewrite
the repository cannot plant an answer. With SIL_WITNESS set nothing is cached: the witness is
outside state that may change between two calls. Past MAX_ENTRIES views the oldest are removed.

    rows = overviews(run_dirs(root))
    st = status_of(run_dir)
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import stat
import subprocess
from pathlib import Path
from typing import TYPE_CHECKING

import sil
from sil.base.fsutil import atomic_write_bytes
from sil.base.runpaths import CONTRACT_SNAPSHOT, LEDGER
from sil.base.sshsig import ALLOWED_SIGNERS_ENV
from sil.integrity.gitrefs import BARE_REPO, REF_PREFIX, git_env
from sil.integrity.witness import WITNESS_ENV

if TYPE_CHECKING:
    from sil.review.status import RunOverview, RunStatus

CACHE_ENV = "SIL_CACHE_DIR"
# Every change to a run makes a new entry (a watched run, one per `sil status`): past this many
# the oldest are removed, down to PRUNED_TO, so the cache cannot fill a disk.
MAX_ENTRIES = 4000
PRUNED_TO = 3000
FORMAT = b"sil-view-cache 1"
INPUTS = (LEDGER, "state.json", CONTRACT_SNAPSHOT)


def cache_dir() -> Path | None:
    if os.environ.get(WITNESS_ENV):
        return None
    named = os.environ.get(CACHE_ENV) or os.environ.get("XDG_CACHE_HOME")
    if named:
        return Path(named).expanduser() / ("views" if os.environ.get(CACHE_ENV) else "sil/views")
    home = Path.home()
    return home / ".cache" / "sil" / "views" if home.is_dir() else None


def _code_stamp() -> bytes:
    """Every module of the package by name, size and modification time: new code, new views."""
    h = hashlib.sha256(FORMAT)
    for folder, _, files in sorted(os.walk(Path(sil.__file__).parent)):
        for name in sorted(f for f in files if f.endswith(".py")):
            st = os.stat(os.path.join(folder, name))
            h.update(f"{folder}/{name}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.digest()


def _file_digest(path: Path) -> bytes:
    """The SHA-256 of a regular file's bytes; else what it is (never opened: a FIFO would block)."""
    try:
        info = os.lstat(path)
        if not stat.S_ISREG(info.st_mode):
            return f"not a file {stat.S_IFMT(info.st_mode)}".encode()
        with open(path, "rb") as fh:
            return hashlib.sha256(fh.read()).digest()
    except OSError as ex:
        return f"unreadable {ex.errno}".encode()


def _refs(root: Path) -> bytes:
    """Every ref under refs/sil of the checkpoint repository (one git call), as anchor_repo finds it."""
    for repo in (root, root / BARE_REPO):
        proc = subprocess.run(
            ["git", "-C", str(repo), "for-each-ref", "--format=%(objectname) %(refname)", REF_PREFIX + "/"],
            capture_output=True,
            env=git_env(),
            timeout=60,
            check=False,
        )
        if proc.returncode == 0:
            return f"{repo}\n".encode() + proc.stdout
    return b"no checkpoint repository\n"


def _anchor() -> bytes:
    named = os.environ.get(ALLOWED_SIGNERS_ENV)
    return f"{named}\n".encode() + (_file_digest(Path(named).expanduser()) if named else b"")


class ViewCache:
    """Keys for the runs of one project (its refs and environment read once), and the stored views."""

    def __init__(self, root: Path) -> None:
        self.folder = cache_dir()
        self.common = hashlib.sha256(_code_stamp() + _refs(root) + _anchor()).digest() if self.folder else b""

    def key(self, kind: str, run_dir: Path) -> str | None:
        if self.folder is None:
            return None
        from sil.review.status import is_running

        h = hashlib.sha256(self.common + f"{kind}\n{run_dir.resolve()}\n{is_running(run_dir)}\n".encode())
        for name in INPUTS:
            h.update(_file_digest(run_dir / name))
        return h.hexdigest()

    def get(self, key: str | None) -> bytes | None:
        if key is None or self.folder is None:
            return None
        try:
            return (self.folder / key).read_bytes()
        except OSError:
            return None

    def put(self, key: str | None, data: bytes) -> None:
        if key is None or self.folder is None:
            return
        try:
            self.folder.mkdir(parents=True, exist_ok=True)
            atomic_write_bytes(self.folder / key, data)
            prune(self.folder)
        except OSError:
            pass  # a cache that cannot be written only costs time


def prune(folder: Path) -> None:
    """Past MAX_ENTRIES entries, remove the least recently written down to PRUNED_TO (a view
    removed is only made again when asked for)."""
    with os.scandir(folder) as it:
        entries = [e for e in it if e.is_file(follow_symlinks=False)]
    if len(entries) <= MAX_ENTRIES:
        return
    entries.sort(key=lambda e: e.stat(follow_symlinks=False).st_mtime_ns)
    for entry in entries[: len(entries) - PRUNED_TO]:
        with contextlib.suppress(OSError):  # another process removed it first
            os.unlink(entry.path)


def overviews(run_dirs: list[Path]) -> list[RunOverview]:
    """The row of every run of `sil runs`, from the cache where its inputs are unchanged."""
    from sil.review.status import RunOverview, overview_of

    caches: dict[Path, ViewCache] = {}
    rows = []
    for run_dir in run_dirs:
        root = run_dir.parents[2]
        if root not in caches:  # the refs and the code are read once per project
            caches[root] = ViewCache(root)
        cache = caches[root]
        key = cache.key("overview", run_dir)
        stored = cache.get(key)
        if stored is not None:
            rows.append(RunOverview.model_validate_json(stored))
            continue
        row = overview_of(run_dir)
        cache.put(key, row.model_dump_json().encode())
        rows.append(row)
    return rows


def status_of(run_dir: Path) -> RunStatus:
    """`run_status(load_run(run_dir))`, from the cache where its inputs are unchanged."""
    from sil.review.status import RunStatus

    cache = ViewCache(run_dir.parents[2])
    key = cache.key("status", run_dir)
    stored = cache.get(key)
    if stored is not None:
        return RunStatus.model_validate_json(stored)
    from sil.review.runview import load_run
    from sil.review.status import run_status

    st = run_status(load_run(run_dir))
    cache.put(key, st.model_dump_json().encode())
    return st
