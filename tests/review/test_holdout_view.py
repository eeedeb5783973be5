"""`sil project holdout --json` and the holdout lines: a ledger that cannot be read is reported, not raised."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from sil.integrity.ledger import LedgerError
from sil.review import holdoutview


def test_a_project_without_certifications_verifies_with_no_sets(tmp_path: Path) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    found = holdoutview.holdout_json(tmp_path)
    assert found["ok"] and found["sets"] == [] and found["errors"] == []
    json.dumps(found)  # plain JSON for scripts


def test_an_unreadable_ledger_is_reported_in_both_views(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def broken(_root: Path) -> None:
        raise LedgerError("line 3 is not JSON")

    monkeypatch.setattr(holdoutview, "verify_holdout", broken)
    found = holdoutview.holdout_json(tmp_path)
    assert not found["ok"] and found["sets"] == []
    assert found["errors"] == ["project holdout ledger cannot be read: line 3 is not JSON"]
    assert holdoutview.holdout_lines(tmp_path) == ["project holdout ledger cannot be read: line 3 is not JSON"]
