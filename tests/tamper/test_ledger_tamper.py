"""Property test of tamper evidence: which edits `verify_file` alone catches, and that a
checkpoint catches every edit to the records it covers (issue 5 item 4; research §1.4 L5).

Expected, and asserted exactly:
- verify alone: byte flips, deletions, swaps, duplicates and an edit+rehash of any record but
  the last are caught; truncation at a line boundary, an edited last record and a fully
  recomputed chain are not (a bare chain cannot see them);
- with a checkpoint: every mutation that touches a record the checkpoint covers is caught.
"""

from __future__ import annotations

import json
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sil.integrity import ledger
from sil.integrity.checkpoint import verify_against_checkpoints, write_checkpoint
from sil.integrity.ledger import Ledger, verify_file

N = 8  # records in the ledger under test
COVERED = 5  # records covered by the checkpoint in the "partial" case
KINDS = ("flip", "delete", "swap", "duplicate", "edit_rehash", "truncate", "recompute")


@dataclass(frozen=True)
class Mutation:
    kind: str
    i: int
    j: int
    bit: int
    offset: float

    @property
    def first_touched(self) -> int:
        """Index of the first record whose bytes or position change (N if none)."""
        if self.kind == "swap":
            return min(self.i, self.j)
        if self.kind == "duplicate":
            return self.i + 1
        return self.i

    @property
    def chain_alone_detects(self) -> bool:
        if self.kind in ("truncate", "recompute"):
            return False
        if self.kind in ("delete", "edit_rehash"):
            return self.i != N - 1
        return True  # flip, swap, duplicate


mutations = st.builds(
    Mutation,
    kind=st.sampled_from(KINDS),
    i=st.integers(0, N - 1),
    j=st.integers(0, N - 1),
    bit=st.integers(0, 7),
    offset=st.floats(0, 1, exclude_max=True),
).filter(lambda m: m.kind != "swap" or m.i != m.j)


def _rehash(rec: dict, prev: str | None = None) -> bytes:
    if prev is not None:
        rec["prev"] = prev
    rec["hash"] = ledger.record_hash(rec)
    return ledger.canonical(rec) + b"\n"


def mutate(data: bytes, m: Mutation) -> bytes:
    lines = data.splitlines(keepends=True)
    if m.kind == "flip":
        start = sum(len(x) for x in lines[: m.i])
        pos = start + int(m.offset * len(lines[m.i]))
        buf = bytearray(data)
        buf[pos] ^= 1 << m.bit
        return bytes(buf)
    if m.kind == "delete":
        del lines[m.i]
    elif m.kind == "swap":
        lines[m.i], lines[m.j] = lines[m.j], lines[m.i]
    elif m.kind == "duplicate":
        lines.insert(m.i + 1, lines[m.i])
    elif m.kind == "edit_rehash":
        rec = json.loads(lines[m.i])
        rec["payload"]["verdict"] = "keep"
        lines[m.i] = _rehash(rec)
    elif m.kind == "truncate":
        lines = lines[: m.i]
    elif m.kind == "recompute":  # edit one record, then recompute the chain after it
        prev = json.loads(lines[m.i])["prev"]
        for k in range(m.i, len(lines)):
            rec = json.loads(lines[k])
            if k == m.i:
                rec["payload"]["verdict"] = "keep"
            lines[k] = _rehash(rec, prev)
            prev = rec["hash"]
    return b"".join(lines)


@pytest.fixture(scope="module")
def anchored(tmp_path_factory) -> dict[str, object]:
    """Two ledgers of N records in one repo: fully covered, and covered up to COVERED."""
    root = tmp_path_factory.mktemp("tamper")
    repo = root / "repo"
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    out = {"repo": repo}
    for run_id, cover in (("full", N), ("partial", COVERED)):
        path = root / run_id / "ledger.jsonl"
        led = Ledger(path, offline=True, simulated=True)
        for i in range(N):
            led.append("verdict", {"i": i, "verdict": "revert"}, run_id=run_id)
            if i + 1 == cover:
                write_checkpoint(path, repo, None)
        out[run_id] = path.read_bytes()
    return out


def _check(anchored: dict, run_id: str, m: Mutation) -> tuple[bool, bool]:
    tampered = mutate(anchored[run_id], m)
    assert tampered != anchored[run_id]
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "ledger.jsonl"
        path.write_bytes(tampered)
        alone = not verify_file(path).ok
        anchored_report = verify_against_checkpoints(path, anchored["repo"], None, run_id=run_id)
    return alone, not anchored_report.ok


@settings(max_examples=120, deadline=None)
@given(m=mutations)
def test_checkpoint_catches_every_mutation(anchored, m: Mutation) -> None:
    alone, with_checkpoint = _check(anchored, "full", m)
    assert alone == m.chain_alone_detects, m
    assert with_checkpoint, m


@settings(max_examples=80, deadline=None)
@given(m=mutations)
def test_checkpoint_protects_exactly_the_records_it_covers(anchored, m: Mutation) -> None:
    alone, with_checkpoint = _check(anchored, "partial", m)
    assert alone == m.chain_alone_detects, m
    assert with_checkpoint == (alone or m.first_touched < COVERED), m


def test_untouched_ledger_passes(anchored, tmp_path: Path) -> None:
    for run_id in ("full", "partial"):
        path = tmp_path / run_id / "ledger.jsonl"
        path.parent.mkdir()
        path.write_bytes(anchored[run_id])
        report = verify_against_checkpoints(path, anchored["repo"], None)
        assert report.ok and report.records == N and report.checkpoints == 1
