"""Reading a policy file safely: only a regular file, never blocking on a FIFO, bounded in size.

The loop reads every file it stores this way (`sil.base.fsutil` re-exports it), and so does
`sil_policy.load_surface` in a runtime, so both refuse the same files.

    data = read_regular(path, max_bytes=1 << 20)   # refuses FIFOs, devices, dirs, links
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path


class NotRegularFileError(OSError):
    """The path is a FIFO, device, directory or symlink, or larger than allowed; not read."""


def read_regular(path: Path, max_bytes: int | None = None) -> bytes:
    """The bytes of a regular file, refusing anything else without blocking on it.

    O_NONBLOCK makes opening a FIFO return at once (a plain open would wait for a writer)
    and O_NOFOLLOW refuses a symlink; the type is then checked on the open descriptor.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_NOCTTY)
    except OSError as ex:
        if ex.errno == errno.ELOOP:
            raise NotRegularFileError(ex.errno, "is a symlink; only regular files are read", str(path)) from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise NotRegularFileError(errno.EINVAL, "is not a regular file (FIFO, device or directory?)", str(path))
        if max_bytes is not None and info.st_size > max_bytes:
            raise NotRegularFileError(errno.EFBIG, f"is larger than {max_bytes} bytes", str(path))
        chunks, total = [], 0
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
            total += len(chunk)
            if max_bytes is not None and total > max_bytes:
                raise NotRegularFileError(errno.EFBIG, f"is larger than {max_bytes} bytes", str(path))
    finally:
        os.close(fd)
    data = b"".join(chunks)
    return data
