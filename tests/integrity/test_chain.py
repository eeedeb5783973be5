"""The pydantic-free chain reader says "clean" only where the full verifier says ok.

`chain.clean_chain` and `chain.read_entries` stand in for `ledger.verify_bytes` and
`ledger.read_records` in `sil runs` and `sil status`; each tampered or odd ledger below must
be refused by them whenever the full reader refuses it (they may refuse more: the caller then
asks the full reader).
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sil.integrity import chain, ledger
from sil.integrity.records import RECORD_TYPES


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


def _same(entries: list[chain.Entry], records: list[ledger.Record]) -> bool:
    """The same records, field by field (NaN and inf compared as written)."""
    as_text = lambda x: json.dumps(x, sort_keys=True)  # noqa: E731
    return [as_text(e.fields) for e in entries] == [as_text(r.model_dump()) for r in records]


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


def test_the_record_types_are_the_ledgers() -> None:
    assert chain.RECORD_TYPES == RECORD_TYPES


def test_a_genuine_ledger_is_clean_and_read_alike(tmp_path: Path) -> None:
    data = _ledger(tmp_path).read_bytes()
    assert ledger.verify_bytes(data).ok
    entries = chain.clean_chain(data)
    assert entries is not None
    records = list(ledger.read_records(tmp_path / "r1" / "ledger.jsonl"))
    assert _same(entries, records)
    assert chain.clean_chain(b"") == [] and ledger.verify_bytes(b"").ok


@pytest.mark.parametrize("name", [*TAMPERS, *RELINKED])
def test_the_quick_reader_never_vouches_for_what_the_full_one_refuses(tmp_path: Path, name: str) -> None:
    lines = _ledger(tmp_path).read_bytes().splitlines()
    data = RELINKED[name](lines) if name in RELINKED else b"".join(x + b"\n" for x in TAMPERS[name](lines))
    if name in RELINKED:
        assert chain.clean_chain(_relinked(lines)) is not None, "the relinking itself is sound"
    full = ledger.verify_bytes(data)
    if chain.clean_chain(data) is not None:
        assert full.ok, name
    assert not full.ok, name  # each case is one the full verifier refuses
    entries = chain.read_entries(data)
    if entries is not None:  # read as the full reader reads it
        path = tmp_path / "copy.jsonl"
        path.write_bytes(data)
        assert _same(entries, list(ledger.read_records(path))), name


def test_a_torn_tail_is_not_clean_but_is_read_as_the_full_reader_reads_it(tmp_path: Path) -> None:
    data = _ledger(tmp_path).read_bytes() + b'{"seq":9'
    assert not ledger.verify_bytes(data).ok and chain.clean_chain(data) is None
    entries = chain.read_entries(data)
    assert entries is not None and len(entries) == len(list(ledger.read_records(tmp_path / "r1" / "ledger.jsonl")))
