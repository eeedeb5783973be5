"""The default run, `sil run` on program.md, against its recorded ledger (slow: a whole run).

A change that should not move the default run (moving code, speeding up audits) must leave
every verdict, round, score, policy hash and summary field as it was; only times, hashes that
cover times, git commit ids and the fields `tests/golden/ledgerdiff.py` names may differ. A
change that means to move the default run re-records the golden file in the same commit, with a
plain `sil run` in a fresh copy of program.md, measurement/ and state/policies/ (as the test runs
it: the run id, which feeds the preflight's tokens, must be the default one):

    sil run && gzip -9 -c state/runs/*/ledger.jsonl > tests/golden/default-run.jsonl.gz
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import REPO
from tests.golden.ledgerdiff import compare, read

GOLDEN = REPO / "tests" / "golden" / "default-run.jsonl.gz"


def test_ledgerdiff_sees_a_changed_verdict_and_ignores_times() -> None:
    old = [{"type": "verdict", "ts": "1", "hash": "a", "payload": {"verdict": "KEEP", "wall_s": 1.0}}]
    same = [{"type": "verdict", "ts": "2", "hash": "b", "payload": {"verdict": "KEEP", "wall_s": 9.0}}]
    other = [{"type": "verdict", "ts": "1", "hash": "a", "payload": {"verdict": "REVERT", "wall_s": 1.0}}]
    assert compare(old, same) == []
    assert compare(old, other) == ["record 0 (verdict).payload.verdict: 'KEEP' -> 'REVERT'"]
    assert compare(old, old + same) == ["record count 1 -> 2"]
    near = [{"type": "noise", "payload": {"sigma": 0.475325744588629}}]
    last_digit = [{"type": "noise", "payload": {"sigma": 0.475325744588289}}]
    moved = [{"type": "noise", "payload": {"sigma": 0.4754}}]
    assert compare(near, last_digit) == [], "a last-digit float difference between machines is no change"
    assert compare(near, moved) == ["record 0 (noise).payload.sigma: 0.475325744588629 -> 0.4754"]


@pytest.mark.slow
def test_the_default_run_matches_its_golden_ledger(tmp_path: Path) -> None:
    shutil.copy(REPO / "program.md", tmp_path / "program.md")
    shutil.copytree(REPO / "measurement", tmp_path / "measurement")
    shutil.copytree(REPO / "state" / "policies", tmp_path / "state" / "policies")
    sil = Path(sys.executable).parent / "sil"
    done = subprocess.run([str(sil), "run"], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr[-2000:]
    (ledger,) = (tmp_path / "state" / "runs").glob("*/ledger.jsonl")
    assert compare(read(GOLDEN), read(ledger)) == []
