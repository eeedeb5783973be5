"""Atomic, durable file writes and safe path resolution for everything SIL persists.

`atomic_write_bytes` writes a temp file in the target's directory (O_EXCL, O_NOFOLLOW),
fsyncs it, renames it over the target, fsyncs the directory, then re-reads the target and
checks its SHA-256. After a crash the target holds either the old bytes or the new ones,
never a mix; a failed write leaves the old file and no temp file behind.

    digest = atomic_write_bytes(Path("state/policies/tool_policy.json"), data)
    path = safe_join(policy_root, "tool_policy.json")   # refuses '..', absolute, symlinks
"""

from __future__ import annotations

import hashlib
import json
import os
import secrets
from pathlib import Path, PurePosixPath
from typing import Any

TMP_SUFFIX = ".tmp"
MAX_COMPONENT = 255


class AtomicWriteError(OSError):
    """The file could not be written durably; the previous content is still in place."""


class UnsafePathError(ValueError):
    """A name would leave its root, follow a symlink, or is not a plain relative path."""


def sha256_hex(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def fsync_dir(path: Path) -> None:
    """Make a rename or create in `path` durable."""
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: Path, data: bytes, mode: int = 0o644) -> str:
    """Replace `path` with `data` atomically and durably; return the SHA-256 of `data`."""
    path = Path(path)
    if path.is_symlink():
        raise AtomicWriteError(f"refusing to write through symlink {path}")
    parent = path.parent
    parent.mkdir(parents=True, exist_ok=True)
    tmp = parent / f".{path.name}.{secrets.token_hex(6)}{TMP_SUFFIX}"
    expected = sha256_hex(data)
    try:
        _write_new_file(tmp, data, mode)
        os.replace(tmp, path)
        fsync_dir(parent)
    except OSError as ex:
        _discard(tmp)
        raise AtomicWriteError(f"could not write {path}: {ex.strerror or ex}") from ex
    except BaseException:
        _discard(tmp)
        raise
    if sha256_hex(path.read_bytes()) != expected:
        raise AtomicWriteError(f"{path} does not hold the bytes just written (hash mismatch)")
    return expected


def confined(path: Path, root: Path) -> Path:
    """`path`, if it resolves inside `root`; AtomicWriteError otherwise (a planted symlink on the
    way would make the tool write or copy outside the folder it was asked to use)."""
    resolved, top = Path(path).resolve(), Path(root).resolve()
    if not resolved.is_relative_to(top):
        raise AtomicWriteError(f"refusing to write {path}: it resolves to {resolved}, outside {top} (a symlink?)")
    return Path(path)


def atomic_write_text(path: Path, text: str, mode: int = 0o644) -> str:
    return atomic_write_bytes(path, text.encode("utf-8"), mode=mode)


def atomic_write_json(path: Path, obj: Any, mode: int = 0o644) -> str:
    """Write JSON (sorted keys, two-space indent, trailing newline) atomically."""
    text = json.dumps(obj, sort_keys=True, indent=2, ensure_ascii=False, allow_nan=False)
    return atomic_write_text(path, text + "\n", mode=mode)


def _write_new_file(tmp: Path, data: bytes, mode: int) -> None:
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    try:
        view = memoryview(data)
        while view:
            written = os.write(fd, view)
            view = view[written:]
        os.fsync(fd)
    finally:
        os.close(fd)


def _discard(tmp: Path) -> None:
    try:
        tmp.unlink()
    except FileNotFoundError:
        pass


def check_component(name: str) -> str:
    """One path component: not empty, not '.'/'..', no separators, NUL or control chars."""
    if not name or name in (".", "..") or len(name.encode()) > MAX_COMPONENT:
        raise UnsafePathError(f"{name!r} is not a usable file name")
    bad = [c for c in name if c in "/\\\0" or ord(c) < 32 or ord(c) == 127]
    if bad:
        raise UnsafePathError(f"file name {name!r} contains {bad[0]!r}")
    return name


def safe_join(root: Path, relative: str) -> Path:
    """Resolve `relative` under `root`, refusing absolute paths, '..', and any symlink."""
    rel = PurePosixPath(relative)
    if rel.is_absolute() or not rel.parts:
        raise UnsafePathError(f"{relative!r} must be a relative path inside {root}")
    for part in rel.parts:
        check_component(part)
    root = Path(root).resolve()
    current = root
    for part in rel.parts:
        current = current / part
        if current.is_symlink():
            raise UnsafePathError(f"{relative!r}: {current} is a symlink; SIL never follows links")
    if not current.resolve().is_relative_to(root):
        raise UnsafePathError(f"{relative!r} resolves outside {root}")
    return current
