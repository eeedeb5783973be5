"""Durable file writes: temp file in the same directory, fsync, rename, directory fsync.

    atomic_write_bytes(path, data)     # all-or-nothing; re-reads and checks the bytes
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path


def fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes, mode: int = 0o644) -> str:
    """Replace `path` with `data` atomically and durably; return the SHA-256 written."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    digest = hashlib.sha256(data).hexdigest()
    if hashlib.sha256(path.read_bytes()).hexdigest() != digest:
        raise OSError(f"{path}: content after write does not match what was written")
    return digest
