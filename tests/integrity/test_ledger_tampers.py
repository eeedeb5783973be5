"""The ledger's one verifier (`ledger.verify_bytes`) refuses every tampered or odd ledger below,
and reads a torn tail as `read_records` does: what every view of a run is built on.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from sil.integrity import ledger


def _ledger(tmp_path: Path, n: int = 6, stop: bool = True) -> Path:
    path = tmp_path / "r1" / "ledger.jsonl"
    led = ledger.Ledger(path, offline=True, simulated=True)
    led.append("contract", {"contract_id": "c", "project": "p", "nested": {"x": [1.5, 2, None, "é"]}}, run_id="r1")
    for i in range(n):
        led.append("verdict", {"arm": "gate", "mutation_id": f"m{i}", "verdict": "keep", "reason": "ok"}, run_id="r1")
    if stop:
        led.append("stop", {"reason": "budget"}, run_id="r1")
    return path


def _relinked(lines: list[bytes]) -> bytes:
    """Lines with seq, prev and hash recomputed: a valid chain over whatever they now say."""
    out, prev = [], ledger.GENESIS
    for n, line in enumerate(lines):
        fields = {k: v for k, v in json.loads(line).items() if k != "hash"}
        fields.update(seq=n, prev=prev)
        fields["hash"] = prev = ledger.record_hash(fields)
        out.append(ledger.canonical(fields))
    return b"".join(line + b"\n" for line in out)


def _edit(line: bytes, **changes: object) -> bytes:
    obj = json.loads(line)
    obj.update(changes)
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()


TAMPERS = {
    "a payload edited": lambda ls: [ls[0], ls[1].replace(b'"keep"', b'"kept"'), *ls[2:]],
    "a record deleted": lambda ls: [ls[0], *ls[2:]],
    "two records swapped": lambda ls: [ls[0], ls[2], ls[1], *ls[3:]],
    "a record duplicated": lambda ls: [ls[0], ls[1], ls[1], *ls[2:]],
    "a space added": lambda ls: [ls[0], ls[1].replace(b'":', b'": ', 1), *ls[2:]],
    "keys reordered": lambda ls: [ls[0], json.dumps(dict(reversed(json.loads(ls[1]).items()))).encode(), *ls[2:]],
    "unicode escaped": lambda ls: [ls[0].replace("é".encode(), b"\\u00e9"), *ls[1:]],
    "an empty line": lambda ls: [ls[0], b"", *ls[1:]],
    "not json": lambda ls: [ls[0], b"{not json", *ls[1:]],
    "a list, not a record": lambda ls: [ls[0], b"[1,2]", *ls[1:]],
    "a field missing": lambda ls: [ls[0], _edit(ls[1]).replace(b'"offline":true,', b""), *ls[2:]],
    "an extra field": lambda ls: [ls[0], _edit(ls[1], extra=1), *ls[2:]],
    "seq as text": lambda ls: [ls[0], _edit(ls[1], seq="1"), *ls[2:]],
    "seq as a float": lambda ls: [ls[0], _edit(ls[1], seq=1.0), *ls[2:]],
    "simulated as 1": lambda ls: [ls[0], _edit(ls[1], simulated=1), *ls[2:]],
    "payload a list": lambda ls: [ls[0], _edit(ls[1], payload=[]), *ls[2:]],
    "NaN in a payload": lambda ls: [ls[0], ls[1].replace(b'"keep"', b"NaN"), *ls[2:]],
    "a huge exponent": lambda ls: [ls[0], ls[1].replace(b'"keep"', b"1e400"), *ls[2:]],
    "a lone surrogate": lambda ls: [ls[0], ls[1].replace(b'"ok"', b'"\\ud800"'), *ls[2:]],
    "deep nesting": lambda ls: [ls[0], ls[1].replace(b'"ok"', b"[" * 300 + b"]" * 300), *ls[2:]],
    "not utf-8": lambda ls: [ls[0], ls[1].replace(b'"ok"', b'"\xff"'), *ls[2:]],
}
RELINKED = {  # a valid chain that still breaks a rule of the ledger
    "an unknown type": lambda ls: _relinked([ls[0], _edit(ls[1], type="bogus"), *ls[2:]]),
    "a record after the stop": lambda ls: _relinked([*ls, ls[1]]),
}


def test_a_genuine_ledger_verifies_and_its_relinking_is_sound(tmp_path: Path) -> None:
    lines = _ledger(tmp_path).read_bytes().splitlines()
    assert ledger.verify_bytes(b"".join(x + b"\n" for x in lines)).ok
    assert ledger.verify_bytes(_relinked(lines)).ok and ledger.verify_bytes(b"").ok


@pytest.mark.parametrize("name", [*TAMPERS, *RELINKED])
def test_the_verifier_refuses_every_tampered_ledger(tmp_path: Path, name: str) -> None:
    lines = _ledger(tmp_path).read_bytes().splitlines()
    data = RELINKED[name](lines) if name in RELINKED else b"".join(x + b"\n" for x in TAMPERS[name](lines))
    report = ledger.verify_bytes(data)
    assert not report.ok and report.errors, name


def test_a_torn_tail_does_not_verify_and_is_not_read(tmp_path: Path) -> None:
    path = _ledger(tmp_path)
    records = len(list(ledger.read_records(path)))
    with open(path, "ab") as fh:
        fh.write(b'{"seq":9')
    assert not ledger.verify_bytes(path.read_bytes()).ok
    assert len(list(ledger.read_records(path))) == records


def test_a_ledger_that_is_no_regular_file_is_refused_without_blocking(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo" / "ledger.jsonl"
    fifo.parent.mkdir()
    os.mkfifo(fifo)
    folder = tmp_path / "dir" / "ledger.jsonl"
    folder.mkdir(parents=True)
    dangling = tmp_path / "link" / "ledger.jsonl"
    dangling.parent.mkdir()
    dangling.symlink_to(tmp_path / "nowhere")
    for path, kind in ((fifo, "a FIFO"), (folder, "a directory"), (dangling, "a dangling symlink")):
        with pytest.raises(OSError, match=kind):
            ledger.read_snapshot(path)
        assert not ledger.verify_file(path).ok
