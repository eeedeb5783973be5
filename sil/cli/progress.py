"""The live display of `sil run`: a rich progress bar on a terminal, plain lines otherwise (L3).

The loop reports events as text lines (`on_event`); after each one the display re-reads the
run's state file for audits spent, phase, arm and candidate. On a terminal the lines scroll
above one bar (audits of the planned total, current candidate, ETA); piped, each line is
printed as is and a `progress:` line follows every change of phase. By default the
per-look lines of a sequential test are left out (`verbosity` 1 shows them, -1 prints
nothing: the summary only), and long floats in the lines are rounded for reading.

    with RunProgress(console, run_dir, planned_total) as progress:
        execute_run(..., on_event=progress.event)
"""

from __future__ import annotations

import re
from pathlib import Path
from types import TracebackType

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from sil.base.errors import Halt
from sil.review.status import readable
from sil.store.runstate import RunState

BAR_WIDTH = 24
LOOK_LINE = re.compile(r"^\s+\S+: (continue|keep|revert) \(")  # one look of a candidate's sequential test


def shown(line: str, verbosity: int) -> bool:
    """Whether an event line is printed at this verbosity (-1 quiet, 0 default, 1 verbose)."""
    if verbosity < 0:
        return False
    return verbosity > 0 or not LOOK_LINE.match(line)


class RunProgress:
    def __init__(
        self, console: Console, run_dir: Path, total: int, *, live: bool | None = None, verbosity: int = 0
    ) -> None:
        self.console, self.run_dir, self.total, self.verbosity = console, run_dir, total, verbosity
        self.live = (console.is_terminal if live is None else live) and verbosity >= 0
        self._phase: str | None = None
        self._bar: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> RunProgress:
        if self.live:
            self._bar = Progress(
                TextColumn("[bold]{task.fields[phase]}[/]"),
                BarColumn(bar_width=BAR_WIDTH),
                TextColumn("{task.completed:.0f}/≤{task.total:.0f} audits"),
                TimeElapsedColumn(),
                TextColumn("ETA"),
                TimeRemainingColumn(),
                TextColumn("{task.fields[candidate]}"),
                console=self.console,
                transient=True,
            )
            self._bar.start()
            self._task = self._bar.add_task("run", total=self.total, phase="start", candidate="")
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.stop()

    def stop(self) -> None:
        """Take the bar off the screen (before the summary prints, so neither lands on the other)."""
        if self._bar is not None:
            self._bar.stop()
            self._bar = None

    def _state(self) -> RunState | None:
        try:
            return RunState.load(self.run_dir)
        except Halt:
            return None

    def event(self, line: str) -> None:
        if shown(line, self.verbosity):
            self.console.print(escape(readable(line)), highlight=False)
        if self.verbosity < 0:
            return
        state = self._state()
        if state is None:
            return
        candidate = ""
        arm = state.arms.get(state.phase)
        if arm is not None and arm.pending is not None:
            m = arm.pending.mutation
            candidate = f"{m.mutation_id[:8]} {m.surface} look {arm.pending.trial.rounds}"
        if self._bar is not None and self._task is not None:
            self._bar.update(
                self._task, completed=min(state.audits, self.total), phase=state.phase, candidate=candidate
            )
        elif state.phase != self._phase:
            eta = ""
            if state.audits:
                left = max(self.total - state.audits, 0) * state.elapsed_s / state.audits
                eta = f", ETA {left:.0f}s"
            self.console.print(
                f"progress: {state.phase}, {state.audits} of at most {self.total} audits{eta}", highlight=False
            )
        self._phase = state.phase
