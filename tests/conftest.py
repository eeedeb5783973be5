"""Shared fixtures: a throw-away copy of the repository's contract, measurement and policies."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
# the views' cache (sil/review/readcache.py) of this test session, never the user's
os.environ["SIL_CACHE_DIR"] = tempfile.mkdtemp(prefix="sil-test-views-")


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    """A minimal project tree (program.md, measurement/, state/policies/) in a temp dir."""
    shutil.copy(REPO / "program.md", tmp_path / "program.md")
    shutil.copytree(REPO / "measurement", tmp_path / "measurement")
    shutil.copytree(REPO / "state" / "policies", tmp_path / "state" / "policies")
    return tmp_path


def edit_contract(path: Path, old: str, new: str) -> None:
    text = path.read_text()
    assert old in text, f"{old!r} not in contract"
    path.write_text(text.replace(old, new, 1))


def with_value(data, path: tuple, value):
    """A deep copy of JSON-like `data` with the item at `path` replaced by `value`."""
    import json

    out = json.loads(json.dumps(data))
    node = out
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return out
