"""Atomic writes leave the old file or the new one, never a mix; safe_join never escapes."""

from __future__ import annotations

import errno
import os
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from sil.base import fsutil
from sil.base.fsutil import AtomicWriteError, UnsafePathError, atomic_write_bytes, safe_join


def _leftovers(folder: Path) -> list[str]:
    return [p.name for p in folder.iterdir() if p.name.endswith(fsutil.TMP_SUFFIX)]


def test_write_replaces_content_and_returns_hash(tmp_path: Path) -> None:
    target = tmp_path / "sub" / "policy.json"
    digest = atomic_write_bytes(target, b"one")
    assert target.read_bytes() == b"one"
    assert digest == fsutil.sha256_hex(b"one")
    atomic_write_bytes(target, b"two")
    assert target.read_bytes() == b"two"
    assert _leftovers(target.parent) == []


@pytest.mark.parametrize("fail_at", ["write", "fsync", "replace"])
def test_failure_keeps_old_file_and_no_temp(tmp_path: Path, monkeypatch, fail_at: str) -> None:
    target = tmp_path / "policy.json"
    target.write_bytes(b"old")

    def boom(*args, **kwargs):
        raise OSError(errno.EIO, "injected I/O error")

    with monkeypatch.context() as m, pytest.raises(AtomicWriteError, match="injected"):
        m.setattr(fsutil.os, fail_at, boom)
        atomic_write_bytes(target, b"new content")
    assert target.read_bytes() == b"old"
    assert _leftovers(tmp_path) == []


def test_short_writes_are_completed(tmp_path: Path, monkeypatch) -> None:
    real_write = os.write
    with monkeypatch.context() as m:
        m.setattr(fsutil.os, "write", lambda fd, data: real_write(fd, bytes(data[:3])))
        atomic_write_bytes(tmp_path / "f", b"0123456789")
    assert (tmp_path / "f").read_bytes() == b"0123456789"


def test_refuses_to_write_through_symlink(tmp_path: Path) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_bytes(b"precious")
    link = tmp_path / "policy.json"
    link.symlink_to(outside)
    with pytest.raises(AtomicWriteError, match="symlink"):
        atomic_write_bytes(link, b"overwrite")
    assert outside.read_bytes() == b"precious"


def test_hash_check_catches_a_different_file(tmp_path: Path, monkeypatch) -> None:
    target = tmp_path / "f"
    real_replace = os.replace

    def swap(src, dst):  # someone else's bytes land at the target
        Path(src).write_bytes(b"not ours")
        real_replace(src, dst)

    with monkeypatch.context() as m, pytest.raises(AtomicWriteError, match="hash mismatch"):
        m.setattr(fsutil.os, "replace", swap)
        atomic_write_bytes(target, b"ours")


def test_safe_join_accepts_plain_names(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    assert safe_join(tmp_path, "a/b.json") == tmp_path.resolve() / "a" / "b.json"


@pytest.mark.parametrize("name", ["../x", "a/../../x", "/etc/passwd", "", ".", "a\\b", "a\x00b", "a\nb", "x" * 300])
def test_safe_join_rejects_traversal(tmp_path: Path, name: str) -> None:
    with pytest.raises(UnsafePathError):
        safe_join(tmp_path, name)


def test_safe_join_rejects_symlinked_component(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    (tmp_path / "elsewhere").mkdir()
    (root / "link").symlink_to(tmp_path / "elsewhere")
    (root / "inner").symlink_to(root)  # stays inside, still refused: links are never followed
    for name in ("link/file.json", "inner/file.json"):
        with pytest.raises(UnsafePathError, match="symlink"):
            safe_join(root, name)


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    name=st.lists(
        st.sampled_from(["a", "b", ".", "..", "/", "\\", "\x00", "\n", "-", "~", "é", "\u202e"]), max_size=12
    ).map("".join)
)
def test_safe_join_never_escapes(tmp_path: Path, name: str) -> None:
    root = tmp_path.resolve()
    try:
        path = safe_join(root, name)
    except UnsafePathError as ex:
        assert str(ex)
        return
    assert path.resolve().is_relative_to(root)
    assert ".." not in Path(name).parts
