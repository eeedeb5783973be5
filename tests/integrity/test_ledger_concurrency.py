"""Ledger under other processes: concurrent writers never interleave; SIGKILL loses no acked record.

Heavy variants: `pytest -m slow tests/integrity/test_ledger_concurrency.py`.
"""

from __future__ import annotations

import random
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sil.integrity.ledger import read_records, read_snapshot, verify_bytes, verify_file

WRITER = """
import sys
from pathlib import Path
from sil.integrity.ledger import Ledger
path, writer, count, big = Path(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
led = Ledger(path, offline=True, simulated=True)
for i in range(count):
    pad = "x" * (big if i % 7 == 0 else 10)
    led.append("audit", {"writer": writer, "i": i, "pad": pad}, run_id="r1")
"""

ACKER = """
import random, sys
from pathlib import Path
from sil.integrity.ledger import Ledger
path, seed = Path(sys.argv[1]), int(sys.argv[2])
rng = random.Random(seed)
led = Ledger(path, offline=True, simulated=True)
while True:
    rec = led.append("audit", {"pad": "y" * rng.choice([10, 500, 5_000, 100_000])}, run_id="r1")
    print(rec.seq, rec.hash, flush=True)
"""


def _spawn(code: str, *args: object) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", code, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _concurrent(tmp_path: Path, writers: int, count: int) -> None:
    path = tmp_path / "ledger.jsonl"
    procs = [_spawn(WRITER, path, w, count, 30_000) for w in range(writers)]
    snapshots = 0
    while any(p.poll() is None for p in procs):
        if path.exists():
            report = verify_bytes(read_snapshot(path))  # a locked reader sees a valid chain
            assert report.ok, report.errors
            snapshots += 1
        time.sleep(0.01)
    for p in procs:
        assert p.wait() == 0, p.stderr.read()
    report = verify_file(path)
    assert report.ok, report.errors
    assert report.records == writers * count
    recs = list(read_records(path))
    assert [r.seq for r in recs] == list(range(writers * count))
    for w in range(writers):  # each writer's records all landed, in its own order
        assert [r.payload["i"] for r in recs if r.payload["writer"] == w] == list(range(count))
    assert snapshots > 0


def test_concurrent_writers_never_interleave(tmp_path: Path) -> None:
    _concurrent(tmp_path, writers=4, count=60)


@pytest.mark.slow
def test_concurrent_writers_many(tmp_path: Path) -> None:
    _concurrent(tmp_path, writers=8, count=200)


def _kill_loop(tmp_path: Path, kills: int) -> dict[str, int]:
    """SIGKILL an appending process at random times; every acknowledged record must survive."""
    path = tmp_path / "ledger.jsonl"
    rng = random.Random(1234)
    acked: dict[int, str] = {}
    torn_seen = 0
    for k in range(kills):
        proc = _spawn(ACKER, path, k)
        lines: list[str] = []
        reader = threading.Thread(target=lines.extend, args=(proc.stdout,), daemon=True)
        reader.start()
        deadline = time.monotonic() + 300  # start-up on a loaded machine can take many seconds
        while not lines and time.monotonic() < deadline:  # kill while it appends, not at start-up
            time.sleep(0.005)
        assert lines, "the appending process acknowledged nothing in 300 s"
        time.sleep(rng.uniform(0.0, 0.15))
        proc.send_signal(signal.SIGKILL)
        proc.wait()
        reader.join(timeout=5)
        for line in lines:
            if line.endswith("\n"):  # an ack printed in full came after append() returned
                seq, digest = line.split()
                acked[int(seq)] = digest
        report = verify_file(path)
        if not report.ok:
            assert len(report.errors) == 1 and "torn tail" in report.errors[0], report.errors
            torn_seen += 1
        present = {r.seq: r.hash for r in read_records(path)}
        lost = {s for s, h in acked.items() if present.get(s) != h}
        assert not lost, f"acknowledged records lost after kill {k}: {sorted(lost)}"
    return {"acked": len(acked), "torn": torn_seen}


def test_sigkill_during_appends_loses_no_acked_record(tmp_path: Path) -> None:
    stats = _kill_loop(tmp_path, kills=5)
    print(f"kill loop: {stats}, ledger {(tmp_path / 'ledger.jsonl').stat().st_size} bytes")
    assert stats["acked"] > 0


@pytest.mark.slow
def test_sigkill_many_times(tmp_path: Path) -> None:
    stats = _kill_loop(tmp_path, kills=60)
    print(f"kill loop: {stats}")
    assert stats["acked"] > 0
