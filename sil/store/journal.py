"""A run's persisted state and its ledger, with the one way to save and report progress.

The ledger is written before the state: after a crash the audit counters are re-derived
from the ledger (`recount`), so an audit recorded just before the crash counts exactly once.

    journal = Journal.open(run_dir, ledger, new_state=lambda: RunState(...), on_event=display.update)
    journal.state.phase = "baseline"; journal.save()
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from pathlib import Path

from sil.base.faults import crashpoint
from sil.integrity.ledger import Ledger, RecordBook
from sil.integrity.records import AuditRecord, PreflightReport
from sil.store.events import Event, Update
from sil.store.runstate import RunState

STALE_TEMP = re.compile(r"^\..+\.[0-9a-f]{12}\.tmp$")  # sil.base.fsutil's atomic-write temp files
RESULT_FILE = "result.json"  # an audit's stored result, written atomically once it finished


class Journal:
    """The live run's state (saved atomically) and its record book (append-only)."""

    def __init__(self, run_dir: Path, state: RunState, book: RecordBook, on_event: Callable[[Update], None]) -> None:
        self.run_dir = run_dir
        self.state = state
        self.book = book
        self.on_event = on_event
        self._since = time.monotonic()

    @classmethod
    def open(
        cls, run_dir: Path, ledger: Ledger, new_state: Callable[[], RunState], on_event: Callable[[Update], None]
    ) -> Journal:
        """The stored run, recounted from its ledger, or a new one from `new_state()`."""
        book = RecordBook(ledger, run_dir.name)
        stored = RunState.load(run_dir)
        journal = cls(run_dir, stored or new_state(), book, on_event)
        if stored is not None:
            journal.recount()
            journal.drop_stale_temps()
        return journal

    def elapsed(self) -> float:
        """Wall time the run has spent, this session included."""
        return self.state.elapsed_s + (time.monotonic() - self._since)

    def save(self) -> None:
        now = time.monotonic()
        self.state.elapsed_s += now - self._since
        self._since = now
        crashpoint("state.before_save")
        self.state.save(self.run_dir)
        crashpoint("state.after_save")

    def emit(self, event: Event) -> None:
        """Tell the display about a step, with where the run stands now."""
        s = self.state
        candidate = ""
        arm = s.arms.get(s.phase)
        if arm is not None and arm.pending is not None:
            m = arm.pending.mutation
            candidate = f"{m.mutation_id[:8]} {m.surface} look {arm.pending.trial.rounds}"
        self.on_event(
            Update(event=event, phase=s.phase, audits=s.audits, elapsed_s=self.elapsed(), candidate=candidate)
        )

    def recount(self) -> None:
        """Audit counters from the ledger, which is written before the state."""
        s = self.state
        s.audits, s.usd, s.gaps = 0, 0.0, 0
        for arm in s.arms.values():
            arm.audits = 0
        for probe in self.book.payloads("probe", PreflightReport):
            s.audits += 1
            s.usd += probe.usage.usd
            s.gaps += probe.audit_gap_reason is not None
        for audit in self.book.payloads("audit", AuditRecord):
            s.audits += 1
            s.usd += audit.usage.usd
            s.gaps += audit.status == "gap"
            if audit.arm in s.arms:
                s.arms[audit.arm].audits += 1

    def drop_stale_temps(self) -> None:
        """Temp files of atomic writes a crash cut short (never an audit's own files)."""
        for path in self.run_dir.rglob(".*.tmp"):
            in_audit = path.relative_to(self.run_dir).parts[0] == "audits"
            if STALE_TEMP.match(path.name) and (not in_audit or path.name.startswith(f".{RESULT_FILE}.")):
                path.unlink(missing_ok=True)
