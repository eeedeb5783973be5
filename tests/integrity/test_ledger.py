"""Ledger durability: chain, torn-tail repair, no retry after fsync failure, bad records."""

from __future__ import annotations

import errno
import hashlib
import json
import math
import os
from pathlib import Path

import pytest

from sil.integrity import ledger
from sil.integrity.ledger import GENESIS, Ledger, LedgerError, read_records, verify_file


def _fill(path: Path, n: int, run_id: str = "r1") -> Ledger:
    led = Ledger(path, offline=True, simulated=True)
    for i in range(n):
        led.append("audit", {"i": i, "scores": {"a": 1.5}}, run_id=run_id)
    return led


def test_chain_links_every_record(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    _fill(path, 5)
    recs = list(read_records(path))
    assert [r.seq for r in recs] == [0, 1, 2, 3, 4]
    assert recs[0].prev == GENESIS
    assert all(b.prev == a.hash for a, b in zip(recs, recs[1:], strict=False))
    report = verify_file(path)
    assert report.ok and report.records == 5 and report.head_hash == recs[-1].hash
    assert report.size == path.stat().st_size
    assert all(json.loads(line)["offline"] is True for line in path.read_text().splitlines())


def test_offline_and_simulated_flags_are_recorded(tmp_path: Path) -> None:
    rec = Ledger(tmp_path / "l", offline=False, simulated=False).append("stop", {}, run_id="r")
    assert (rec.offline, rec.simulated) == (False, False)


def test_torn_tail_is_reported_kept_aside_cut_and_recorded(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    _fill(path, 3)
    intact = path.read_bytes()
    # A crash in the middle of a write leaves the first part of a line, without its newline.
    torn = intact.splitlines(keepends=True)[1][:57]
    with open(path, "ab") as fh:
        fh.write(torn)
    report = verify_file(path)
    assert not report.ok and "torn tail" in report.errors[0]
    assert report.records == 3 and report.size == len(intact)
    assert len(list(read_records(path))) == 3  # readers see the complete records only

    rec = Ledger(path, offline=True, simulated=True).append("stop", {"reason": "after crash"}, run_id="r1")
    recs = list(read_records(path))
    assert [r.type for r in recs[-2:]] == ["repair", "stop"]
    recovery = recs[-2].payload
    aside = tmp_path / recovery["kept_at"]
    assert aside.read_bytes() == torn
    assert recovery["torn_tail_bytes"] == len(torn)
    assert recovery["torn_tail_sha256"] == hashlib.sha256(torn).hexdigest()
    assert path.read_bytes().startswith(intact)
    assert rec.seq == 4 and verify_file(path).ok


def test_torn_tail_on_an_empty_ledger(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    path.write_bytes(b'{"seq":0,"pr')
    Ledger(path, offline=True, simulated=True).append("stop", {}, run_id="r1")
    assert [r.type for r in read_records(path)] == ["repair", "stop"]
    assert verify_file(path).ok
    assert (tmp_path / "ledger.jsonl.torn-0").read_bytes() == b'{"seq":0,"pr'


def test_second_torn_tail_gets_its_own_file(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    for garbage in (b"first", b"second"):
        with open(path, "ab") as fh:
            fh.write(garbage)
        Ledger(path, offline=True, simulated=True).append("halt", {}, run_id="r1")
    assert (tmp_path / "ledger.jsonl.torn-0").read_bytes() == b"first"
    assert (tmp_path / "ledger.jsonl.torn-1").read_bytes() == b"second"
    assert verify_file(path).ok


def _eio(*args, **kwargs):
    raise OSError(errno.EIO, "injected EIO")


def test_fsync_error_stops_without_retry(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "ledger.jsonl"
    led = _fill(path, 2)
    calls = {"write": 0, "fsync": 0}
    real_write = os.write

    def counting_write(fd, data):
        calls["write"] += 1
        return real_write(fd, data)

    def failing_fsync(fd):
        calls["fsync"] += 1
        raise OSError(errno.EIO, "injected EIO")

    with monkeypatch.context() as m:
        m.setattr(ledger.os, "write", counting_write)
        m.setattr(ledger.os, "fsync", failing_fsync)
        with pytest.raises(LedgerError, match="fsync failed, stopping without retry"):
            led.append("audit", {"i": 2}, run_id="r1")
        assert calls == {"write": 1, "fsync": 1}
        size = path.stat().st_size
        # The same Ledger refuses everything after that, without touching the file again.
        with pytest.raises(LedgerError, match="stopped after an earlier failure"):
            led.append("audit", {"i": 3}, run_id="r1")
        assert calls == {"write": 1, "fsync": 1}
    with pytest.raises(LedgerError, match="not retrying"):
        led.append("audit", {"i": 4}, run_id="r1")  # even once fsync works again
    assert path.stat().st_size == size


def test_short_write_is_cut_and_the_ledger_still_verifies(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "ledger.jsonl"
    led = _fill(path, 2)
    before = path.read_bytes()
    real_write = os.write
    with monkeypatch.context() as m:
        m.setattr(ledger.os, "write", lambda fd, data: real_write(fd, data[:20]))
        with pytest.raises(LedgerError, match="short ledger write"):
            led.append("audit", {"i": 2}, run_id="r1")
    assert path.read_bytes() == before
    assert verify_file(path).ok


def test_write_error_leaves_no_partial_line(tmp_path: Path, monkeypatch) -> None:
    path = tmp_path / "ledger.jsonl"
    led = _fill(path, 1)
    before = path.read_bytes()
    with monkeypatch.context() as m:
        m.setattr(ledger.os, "write", _eio)
        with pytest.raises(LedgerError, match="ledger write failed"):
            led.append("audit", {}, run_id="r1")
    assert path.read_bytes() == before


@pytest.mark.parametrize(
    ("type_", "payload", "run_id", "message"),
    [
        ("nonsense", {}, "r1", "unknown record type"),
        ("audit", {"x": math.nan}, "r1", "not plain finite JSON"),
        ("audit", {"x": object()}, "r1", "not plain finite JSON"),
        ("audit", {}, "../escape", "run id"),
        ("audit", {}, "a/b", "run id"),
        ("audit", {}, "", "run id"),
        ("audit", {}, "r1.lock", "run id"),
    ],
)
def test_bad_records_are_refused_and_nothing_written(tmp_path: Path, type_, payload, run_id, message) -> None:
    path = tmp_path / "ledger.jsonl"
    led = _fill(path, 1)
    before = path.read_bytes()
    with pytest.raises(LedgerError, match=message):
        led.append(type_, payload, run_id=run_id)
    assert path.read_bytes() == before
    led.append("stop", {}, run_id="r1")  # a refused record does not poison the ledger


def test_unreadable_last_record_stops_appends(tmp_path: Path) -> None:
    path = tmp_path / "ledger.jsonl"
    _fill(path, 2)
    with open(path, "ab") as fh:
        fh.write(b"not json at all\n")
    with pytest.raises(LedgerError, match="sil ledger verify"):
        Ledger(path, offline=True, simulated=True).append("stop", {}, run_id="r1")


@pytest.mark.parametrize("edit", ["reorder_keys", "add_space", "unknown_type"])
def test_verify_rejects_non_canonical_or_unknown_records(tmp_path: Path, edit: str) -> None:
    path = tmp_path / "ledger.jsonl"
    _fill(path, 2)
    lines = path.read_bytes().splitlines()
    rec = json.loads(lines[1])
    if edit == "reorder_keys":
        lines[1] = json.dumps(dict(reversed(list(rec.items()))), separators=(",", ":")).encode()
    elif edit == "add_space":
        lines[1] = lines[1].replace(b'"seq":1', b'"seq": 1')
    else:
        rec["type"] = "made_up"
        rec["hash"] = ledger.record_hash(rec)
        lines[1] = ledger.canonical(rec)
    path.write_bytes(b"\n".join(lines) + b"\n")
    assert not verify_file(path).ok


def test_verify_missing_file(tmp_path: Path) -> None:
    report = verify_file(tmp_path / "nope.jsonl")
    assert not report.ok and "cannot read" in report.errors[0]
