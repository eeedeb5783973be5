"""One runner at a time: non-blocking flock locks on the run state and on the runtime policies.

`run_lock(state_dir)` is held for the whole of `sil run`/`--resume`; `policy_lock(policy_dir,
lock_dir)` stops two runs with different state directories from mutating the same runtime
policies. The policy lock is keyed by the policies' real path and lives in `lock_dir` (the
tool's own state, e.g. `state/runs/.locks`), never as a file in the user's policy folder.
Both are kernel `flock` locks (via filelock, without its soft-lock fallback), so a killed
process releases them at once and no stale lock needs guessing. The holder's pid, host and
start time go to a sidecar file for the "locked" message only; it is never trusted.
flock is unreliable on network filesystems, so locking refuses NFS/SMB/sshfs paths.

    with run_lock(state_dir), policy_lock(policy_dir, lock_dir):
        ...                                  # LockedError if another sil run holds either
"""

from __future__ import annotations

import hashlib
import json
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

from sil.base.errors import ExitCode

RUN_LOCK = ".sil-run.lock"
POLICY_LOCK_PREFIX = "policy-"
OWNER_SUFFIX = ".owner"
LOCKED_EXIT_CODE = int(ExitCode.LOCKED)
MOUNTS_FILE = Path("/proc/self/mounts")
NETWORK_FILESYSTEMS = frozenset(
    {"nfs", "nfs4", "cifs", "smb3", "smbfs", "fuse.sshfs", "9p", "afs", "ceph", "glusterfs", "fuse.glusterfs", "lustre"}
)


class LockedError(RuntimeError):
    """Another process holds the lock; nothing was changed."""


class UnsafeFilesystemError(RuntimeError):
    """The path is on a network filesystem, where flock may silently not lock."""


@contextmanager
def run_lock(state_dir: Path) -> Iterator[Path]:
    """Exclusive lock on a state directory for the life of one run."""
    with _exclusive(Path(state_dir), RUN_LOCK, "the run state") as path:
        yield path


@contextmanager
def policy_lock(policy_dir: Path, lock_dir: Path) -> Iterator[Path]:
    """Exclusive lock on a runtime's policy directory (same real directory = same lock)."""
    real = os.path.realpath(policy_dir)
    check_local_filesystem(Path(real))
    name = f"{POLICY_LOCK_PREFIX}{hashlib.sha256(real.encode()).hexdigest()[:16]}.lock"
    with _exclusive(Path(lock_dir), name, f"the runtime policies ({real})") as path:
        yield path


@contextmanager
def _exclusive(folder: Path, name: str, what: str) -> Iterator[Path]:
    from filelock import FileLock, Timeout  # here: `sil status` reads RUN_LOCK without filelock's import

    check_local_filesystem(folder)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    lock = FileLock(str(path), blocking=False, fallback_to_soft=False, thread_local=False)
    try:
        lock.acquire()
    except Timeout:
        raise LockedError(
            f"another sil run holds {path} ({_holder(path)}), so {what} are in "
            "use; wait for it to finish or stop it, then try again. Nothing was changed."
        ) from None
    owner = Path(str(path) + OWNER_SUFFIX)
    try:
        owner.write_text(
            json.dumps(
                {
                    "pid": os.getpid(),
                    "host": socket.gethostname(),
                    "since": datetime.now(UTC).isoformat(timespec="seconds"),
                }
            )
        )
        yield path
    finally:
        owner.unlink(missing_ok=True)
        lock.release()


def _holder(path: Path) -> str:
    try:
        info = json.loads(Path(str(path) + OWNER_SUFFIX).read_text())
        return f"pid {info['pid']} on {info['host']} since {info['since']}"
    except (OSError, ValueError, KeyError, TypeError):
        return "pid unknown"


def filesystem_type(path: Path, mounts_file: Path | None = None) -> str | None:
    """The type of the filesystem holding `path` (longest mount point prefix), if known."""
    try:
        entries = (mounts_file or MOUNTS_FILE).read_text().splitlines()
    except OSError:
        return None
    target = Path(path).resolve()
    best, kind = -1, None
    for entry in entries:
        fields = entry.split()
        if len(fields) < 3:
            continue
        mount = Path(fields[1].replace("\\040", " "))
        if target.is_relative_to(mount) and len(mount.parts) > best:
            best, kind = len(mount.parts), fields[2]
    return kind


def check_local_filesystem(path: Path) -> None:
    kind = filesystem_type(path)
    if kind in NETWORK_FILESYSTEMS:
        raise UnsafeFilesystemError(
            f"{path} is on a {kind} filesystem, where file locks and fsync are not reliable; "
            "put the SIL state and the runtime policies on a local disk"
        )


def remove_lock_only_dir(run_dir: Path) -> None:
    """Remove a run folder that holds nothing but its lock files: what a refused first start of
    the run left behind (a refused run leaves nothing). A folder with anything else is kept."""
    names = {RUN_LOCK, RUN_LOCK + OWNER_SUFFIX}
    try:
        entries = list(run_dir.iterdir())
    except OSError:
        return
    if all(e.name in names and e.is_file() and not e.is_symlink() for e in entries):
        for e in entries:
            e.unlink(missing_ok=True)
        run_dir.rmdir()
