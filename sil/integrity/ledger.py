"""The append-only, hash-chained ledger of a run (one canonical JSON record per line).

Each record carries `seq`, the previous record's hash (`prev`) and its own `hash` (SHA-256
of the canonical record without `hash`). Appends take an exclusive lock, repair a torn last
line left by a crash (kept aside as `<ledger>.torn-<n>` and recorded), write the whole line
with one `write()`, and `fsync`. A failed write or fsync raises `LedgerError` and leaves the
`Ledger` refusing every later append: after a failed fsync the kernel may have dropped the
data, so a retry that "succeeds" could hide a lost record.

Verification alone detects edits, deletions, reordering and duplicates of any record but the
last; truncation and a recomputed chain need an anchor held elsewhere (`sil/integrity/checkpoint.py`).

    led = Ledger(Path("state/runs/r1/ledger.jsonl"))
    led.append("stop", {"reason": "budget"}, run_id="r1")
    report = verify_file(path)          # sil ledger verify
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import stat
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

from filelock import FileLock
from pydantic import BaseModel, ConfigDict

from sil.base import runid
from sil.base.fsutil import atomic_write_bytes
from sil.integrity.records import (
    RECORD_TYPES,
    Keys,
    Payload,
    RepairRecord,
    SegmentRecord,
    Trust,
    parse_payload,
    record_type,
)

GENESIS = "0" * 64
_TAIL_CHUNK = 65536
P = TypeVar("P", bound=Payload)
_CANONICAL = json.JSONEncoder(sort_keys=True, separators=(",", ":"), ensure_ascii=False, allow_nan=False)


def next_record(
    last: Record | None, type_: str, body: dict[str, Any], run_id: str, *, offline: bool, simulated: bool
) -> Record:
    """The record that follows `last` in a hash chain (the first one when `last` is None)."""
    fields: dict[str, Any] = {
        "seq": 0 if last is None else last.seq + 1,
        "prev": GENESIS if last is None else last.hash,
        "ts": datetime.now(UTC).isoformat(timespec="milliseconds"),
        "run_id": run_id,
        "type": type_,
        "offline": offline,
        "simulated": simulated,
        "payload": body,
    }
    return Record(**fields, hash=record_hash(fields))


class LedgerError(RuntimeError):
    """The ledger cannot be appended to safely (I/O or fsync failure, bad record)."""


class Record(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)
    seq: int
    prev: str
    ts: str
    run_id: str
    type: str
    offline: bool
    simulated: bool
    payload: dict[str, Any]
    hash: str


class VerifyReport(BaseModel):
    """Outcome of `sil ledger verify`: `size` is the byte length of the complete lines."""

    model_config = ConfigDict(frozen=True)
    ok: bool
    records: int
    head_hash: str
    errors: list[str]
    size: int = 0
    checkpoints: int = 0
    notes: list[str] = []
    checked: list[str] = []  # what was checked, in words ("hash chain", "3 checkpoints", "signed by x")


def canonical(obj: Any) -> bytes:
    """Canonical JSON bytes: sorted keys, no spaces, UTF-8, and NaN/inf refused."""
    return _CANONICAL.encode(obj).encode()


def record_hash(fields: dict[str, Any]) -> str:
    return hashlib.sha256(canonical({k: v for k, v in fields.items() if k != "hash"})).hexdigest()


def ledger_lock(path: Path) -> FileLock:
    """The lock every writer (and a consistent reader) of this ledger takes."""
    # Keyed by the real path: two names (a symlink alias) for one ledger share one lock.
    return FileLock(os.path.realpath(path) + ".lock", fallback_to_soft=False)


def read_plain(path: Path) -> bytes:
    """The bytes of a regular file; OSError naming what else it is (a FIFO would block a plain
    read forever, a directory or a dangling symlink is no ledger). Missing: empty."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        if os.path.lexists(path):
            raise OSError(f"{Path(path).name} is a dangling symlink") from None
        return b""
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = "a directory" if stat.S_ISDIR(mode) else "a FIFO" if stat.S_ISFIFO(mode) else "not a regular file"
            raise OSError(f"{Path(path).name} is {kind}, not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as fh:
            return fh.read()
    finally:
        os.close(fd)


def read_snapshot(path: Path) -> bytes:
    """The ledger's bytes as of one instant: read as is, and again under the writers' lock when a
    write was under way (a torn tail). OSError when it is no regular file or cannot be read."""
    data = read_plain(Path(path))
    if not data or data.endswith(b"\n"):
        return data
    try:
        with ledger_lock(Path(path)):
            return read_plain(Path(path))
    except OSError:  # no lock in a read-only folder: the torn tail is what there is
        return data


def check_run_id(run_id: str) -> str:
    """Run ids name directories and git refs (sil/base/runid.py); LedgerError if not allowed."""
    try:
        return runid.check_run_id(run_id)
    except runid.RunIdError as ex:
        raise LedgerError(str(ex)) from None


def _payload(payload: BaseModel | dict[str, Any]) -> dict[str, Any]:
    try:
        if isinstance(payload, BaseModel):
            payload = payload.model_dump(mode="json")
        body = json.loads(canonical(payload))
    except (TypeError, ValueError) as ex:
        raise LedgerError(f"record payload is not plain finite JSON: {ex}") from None
    if not isinstance(body, dict):
        raise LedgerError("record payload must be a JSON object")
    return body


class Ledger:
    """Appender for one ledger file; safe across processes through a file lock."""

    def __init__(self, path: Path, *, offline: bool, simulated: bool) -> None:
        self.path = Path(path)
        self.offline = offline
        self.simulated = simulated
        self._lock = ledger_lock(self.path)
        self._failed: str | None = None

    @classmethod
    def existing(cls, path: Path) -> Ledger:
        """The ledger of an existing run, writing with the flags its first record states."""
        try:
            first = next(read_records(Path(path)), None)
        except OSError as ex:
            raise LedgerError(f"cannot read {path}: {ex.strerror}") from None
        if first is None:
            raise LedgerError(f"{path} has no records: not the ledger of a started run")
        return cls(path, offline=first.offline, simulated=first.simulated)

    def append(self, type_: str, payload: BaseModel | dict[str, Any], *, run_id: str) -> Record:
        """Append one record; return it only once it is on disk (written and fsynced)."""
        if self._failed:
            raise LedgerError(
                f"ledger {self.path} stopped after an earlier failure ({self._failed}); "
                "not retrying. Run `sil ledger verify` before resuming."
            )
        if type_ not in RECORD_TYPES:
            raise LedgerError(f"unknown record type {type_!r}")
        check_run_id(run_id)
        body = _payload(payload)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            with self._lock:
                return self._append_locked(type_, body, run_id)
        except LedgerError as ex:
            self._failed = str(ex)
            raise

    def _append_locked(self, type_: str, body: dict[str, Any], run_id: str) -> Record:
        created = not self.path.exists()
        fd = os.open(self.path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            last = self._repair_and_read_last(fd, run_id)
            record = self._make(last, type_, body, run_id)
            _write_line(fd, canonical(record.model_dump(mode="json")) + b"\n")
        finally:
            os.close(fd)
        if created:
            _fsync_dir(self.path.parent)
        return record

    def _make(self, last: Record | None, type_: str, body: dict[str, Any], run_id: str) -> Record:
        return next_record(last, type_, body, run_id, offline=self.offline, simulated=self.simulated)

    def _repair_and_read_last(self, fd: int, run_id: str) -> Record | None:
        """Return the last complete record, cutting a torn tail first if there is one."""
        size = os.fstat(fd).st_size
        if size == 0:
            return None
        end = _last_newline_end(fd, size)
        if end == size:
            return _parse_last(fd, end)
        torn = os.pread(fd, size - end, end)
        aside = self._aside_path()
        try:
            atomic_write_bytes(aside, torn)
        except OSError as ex:
            raise LedgerError(f"cannot keep the torn tail aside at {aside}: {ex}") from ex
        try:
            os.ftruncate(fd, end)
        except OSError as ex:
            raise LedgerError(f"cannot cut the torn tail of {self.path}: {ex}") from ex
        _fsync(fd)
        body = RepairRecord(
            torn_tail_bytes=len(torn), kept_at=aside.name, torn_tail_sha256=hashlib.sha256(torn).hexdigest()
        ).model_dump(mode="json")
        record = self._make(_parse_last(fd, end), "repair", body, run_id)
        _write_line(fd, canonical(record.model_dump(mode="json")) + b"\n")
        return record

    def _aside_path(self) -> Path:
        n = 0
        while (p := self.path.with_name(f"{self.path.name}.torn-{n}")).exists():
            n += 1
        return p


def _write_line(fd: int, line: bytes) -> None:
    """One write() of the whole line, then fsync; a partial write is cut before raising."""
    start = os.fstat(fd).st_size
    try:
        written = os.write(fd, line)
    except OSError as ex:
        _cut(fd, start)
        raise LedgerError(f"ledger write failed: {ex}") from ex
    if written != len(line):
        _cut(fd, start)
        raise LedgerError(f"short ledger write ({written} of {len(line)} bytes)")
    _fsync(fd)


def _cut(fd: int, size: int) -> None:
    try:
        os.ftruncate(fd, size)
    except OSError:
        pass  # the next append sees a torn tail and repairs it


def _fsync(fd: int) -> None:
    try:
        os.fsync(fd)
    except OSError as ex:  # fsyncgate: after a failed fsync the data may be gone; stop.
        raise LedgerError(f"fsync failed, stopping without retry: {ex}") from ex


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        _fsync(fd)
    finally:
        os.close(fd)


def _last_newline_end(fd: int, size: int) -> int:
    """Offset just past the last b'\\n' in the file (0 if there is none)."""
    pos = size
    while pos > 0:
        start = max(0, pos - _TAIL_CHUNK)
        chunk = os.pread(fd, pos - start, start)
        i = chunk.rfind(b"\n")
        if i >= 0:
            return start + i + 1
        pos = start
    return 0


def _parse_last(fd: int, end: int) -> Record | None:
    if end == 0:
        return None
    start = _last_newline_end(fd, end - 1)
    line = os.pread(fd, end - start, start)
    try:
        return Record.model_validate_json(line)
    except ValueError as ex:
        raise LedgerError(f"last ledger record is unreadable; run `sil ledger verify`: {ex}") from None


def read_records(path: Path) -> Iterator[Record]:
    """Every complete record in order; a torn last line (no newline yet) is not yielded."""
    with open(path, "rb") as fh:
        for n, line in enumerate(fh):
            if not line.endswith(b"\n"):
                return
            yield _record(n, line)


def read_records_of(data: bytes) -> Iterator[Record]:
    """`read_records` of a snapshot already read (`read_snapshot`)."""
    for n, rec in enumerate(parsed_lines(data)):
        if rec is None:
            raise LedgerError(f"line {n + 1} is not a ledger record")
        yield rec


@functools.lru_cache(maxsize=8)
def parsed_lines(data: bytes) -> tuple[Record | None, ...]:
    """Each complete line of a ledger snapshot as a record (None: not one), parsed once however
    many checks read the snapshot (records are frozen, so they are shared safely)."""
    out: list[Record | None] = []
    for line in data.split(b"\n")[:-1]:
        try:
            out.append(Record.model_validate_json(line))
        except ValueError:
            out.append(None)
    return tuple(out)


def _record(n: int, line: bytes) -> Record:
    try:
        return Record.model_validate_json(line)
    except ValueError as ex:
        raise LedgerError(f"line {n + 1} is not a ledger record: {ex}") from None


def verify_file(path: Path) -> VerifyReport:
    """Check every line: canonical form, hash, sequence, chain, and nothing but a segment after a stop."""
    try:
        if not os.path.lexists(path):
            raise FileNotFoundError(f"no such file: {path}")
        data = read_plain(Path(path))
    except OSError as ex:
        return VerifyReport(ok=False, records=0, head_hash=GENESIS, errors=[f"cannot read: {ex}"])
    return verify_bytes(data)


def verify_bytes(data: bytes) -> VerifyReport:
    """`verify_file` on bytes already read (e.g. a snapshot taken under the lock)."""
    errors: list[str] = []
    prev, count, head, last_type = GENESIS, 0, GENESIS, None
    lines = data.split(b"\n")
    complete = len(data)
    if lines and lines[-1] == b"":
        lines.pop()
    elif lines:
        errors.append(f"line {len(lines)}: torn tail (no final newline)")
        complete -= len(lines.pop())
    parsed = parsed_lines(data)
    for n, line in enumerate(lines):
        where = f"line {n + 1}"
        rec = parsed[n] if n < len(parsed) else None
        if rec is None:
            errors.append(f"{where}: not a ledger record")
            continue
        fields = rec.model_dump(mode="json")
        if canonical(fields) != line:
            errors.append(f"{where}: not in canonical form (edited?)")
        if record_hash(fields) != rec.hash:
            errors.append(f"{where}: hash does not match content (edited)")
        if rec.type not in RECORD_TYPES:
            errors.append(f"{where}: unknown record type {rec.type!r}")
        if rec.seq != n:
            errors.append(f"{where}: seq {rec.seq}, expected {n} (deleted, duplicated or reordered)")
        if rec.prev != prev:
            errors.append(f"{where}: prev does not match the record before (chain broken)")
        if last_type == "stop" and rec.type != "segment":
            errors.append(f"{where}: a {rec.type!r} record follows the run's stop (appended after the run finished)")
        prev, head, count, last_type = rec.hash, rec.hash, count + 1, rec.type
    return VerifyReport(ok=not errors, records=count, head_hash=head, errors=errors, size=complete)


class RecordBook:
    """Typed ledger appends keyed by (type, key), each written at most once across resumes.

    The index is rebuilt from the ledger on open, so after a crash a step that already wrote
    its record writes nothing again.
    """

    def __init__(self, ledger: Ledger, run_id: str) -> None:
        self.ledger = ledger
        self.run_id = run_id
        self.seen: dict[tuple[str, str], Record] = {}
        self.records: list[Record] = []
        if ledger.path.exists():
            for rec in read_records(ledger.path):
                self._index(rec)

    def _index(self, rec: Record) -> None:
        self.records.append(rec)
        key = rec.payload.get("_key")
        if key is not None:
            self.seen[(rec.type, key)] = rec

    def has(self, type_: str, key: str) -> bool:
        return (type_, key) in self.seen

    def once(self, key: str, payload: Payload, type_: str | None = None) -> Record | None:
        """Append `payload` under `key` unless a record of its type has that key already."""
        kind = record_type(payload, type_)
        if self.has(kind, key):
            return None
        if self.records and self.records[-1].type == "stop" and kind != "segment":
            raise LedgerError(
                f"no record may follow the run's stop (a {kind!r} record was about to); "
                "a later command must open a new segment first (RecordBook.open_segment)"
            )
        rec = self.ledger.append(kind, {**payload.model_dump(mode="json"), "_key": key}, run_id=self.run_id)
        self._index(rec)
        return rec

    def open_segment(self, reason: str, trust: Trust) -> Record | None:
        """After a finished run's `stop`, open a linked segment for what follows; else nothing."""
        if not self.records or self.records[-1].type != "stop":
            return None
        n = len(self.of_type("segment"))
        return self.once(Keys.segment(n), SegmentRecord(reason=reason, after_stop=self.records[-1].hash, trust=trust))

    def get(self, type_: str, key: str, model: type[P]) -> P | None:
        rec = self.seen.get((type_, key))
        return None if rec is None else _typed(parse_payload(type_, rec.payload), model)

    def of_type(self, type_: str) -> list[Record]:
        return [r for r in self.records if r.type == type_]

    def payloads(self, type_: str, model: type[P]) -> list[P]:
        """The typed payloads of every record of `type_`, in ledger order."""
        return [_typed(parse_payload(type_, r.payload), model) for r in self.of_type(type_)]


def _typed[P: Payload](payload: Payload, model: type[P]) -> P:
    if not isinstance(payload, model):
        raise TypeError(f"expected a {model.__name__} payload, got {type(payload).__name__}")
    return payload
