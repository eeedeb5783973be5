"""Full or failing disks: how to recognise them and how much room is left (layer L0).

ENOSPC, EDQUOT and EIO are not bugs in the run: the loop halts with a recorded reason (if the
disk still takes the record) and resumes once there is room. An audit that failed because of
the disk is re-run on resume, never scored as a gap, so the result does not depend on when
the disk filled.

    if is_disk_error(ex): ...                    # anywhere in the exception's cause chain
    if mentions_disk_error(stderr_tail): ...     # an audit process that died of it
    check_free_space(run_dir, min_free_mb)       # DiskFull when below the contract's minimum
"""

from __future__ import annotations

import errno
import os
import re
import shutil
from pathlib import Path

DISK_ERRNOS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EIO})
# What a process that died of the disk prints (Python, coreutils, git), e.g. "[Errno 28] No space left on device".
DISK_MESSAGE = re.compile(
    r"No space left on device|Disk quota exceeded|Input/output error|\[Errno (28|122|5)\]|ENOSPC|EDQUOT"
)
MB = 1024 * 1024


class DiskFull(OSError):
    """The disk is full, over quota or failing, or below the contract's free-space minimum."""


def is_disk_error(ex: BaseException | None) -> bool:
    """Whether `ex`, or any exception it was raised from, is a disk error."""
    seen: set[int] = set()
    while ex is not None and id(ex) not in seen:
        seen.add(id(ex))
        if isinstance(ex, DiskFull) or (isinstance(ex, OSError) and ex.errno in DISK_ERRNOS):
            return True
        ex = ex.__cause__ or ex.__context__
    return False


def describe(ex: BaseException) -> str:
    """The disk error in `ex`'s chain, readably."""
    current: BaseException | None = ex
    while current is not None:
        if isinstance(current, OSError) and (current.errno in DISK_ERRNOS or isinstance(current, DiskFull)):
            where = f" ({current.filename})" if current.filename else ""
            return f"{current.strerror or current}{where}"
        current = current.__cause__ or current.__context__
    return str(ex)


def mentions_disk_error(text: str | None) -> bool:
    return text is not None and DISK_MESSAGE.search(text) is not None


def free_mb(path: Path) -> float:
    """Free space for unprivileged writers on the filesystem holding `path` (its nearest existing parent)."""
    path = Path(path).absolute()
    while not path.exists() and path != path.parent:
        path = path.parent
    return shutil.disk_usage(path).free / MB


def check_free_space(path: Path, min_free_mb: int) -> None:
    """DiskFull when the filesystem holding `path` has less than `min_free_mb` free."""
    if min_free_mb <= 0:
        return
    free = free_mb(path)
    if free < min_free_mb:
        raise DiskFull(
            errno.ENOSPC,
            f"only {free:.0f} MB free, the contract asks for at least {min_free_mb} MB (budget.min_free_mb); "
            "free some space, then re-run the command to resume",
            os.fspath(path),
        )
