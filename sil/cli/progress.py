"""The live display of `sil run`: a rich progress bar on a terminal, plain lines otherwise (L3).

The loop reports events as text lines (`on_event`); after each one the display re-reads the
run's state file for audits spent, phase, arm and candidate. On a terminal the lines scroll
above one bar (audits of the planned total, current candidate, ETA); piped, each line is
printed as is and a `progress:` line follows every change of phase.

    with RunProgress(console, run_dir, planned_total) as progress:
        execute_run(..., on_event=progress.event)
"""

from __future__ import annotations

from pathlib import Path
from types import TracebackType

from rich.console import Console
from rich.markup import escape
from rich.progress import (
    BarColumn,
    MofNCompleteColumn,
    Progress,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
    TimeRemainingColumn,
)

from sil.base.errors import Halt
from sil.store.runstate import RunState

BAR_WIDTH = 24


class RunProgress:
    def __init__(self, console: Console, run_dir: Path, total: int, *, live: bool | None = None) -> None:
        self.console, self.run_dir, self.total = console, run_dir, total
        self.live = console.is_terminal if live is None else live
        self._phase: str | None = None
        self._bar: Progress | None = None
        self._task: TaskID | None = None

    def __enter__(self) -> RunProgress:
        if self.live:
            self._bar = Progress(
                TextColumn("[bold]{task.fields[phase]}[/]"),
                BarColumn(bar_width=BAR_WIDTH),
                MofNCompleteColumn(),
                TextColumn("audits"),
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
        if self._bar is not None:
            self._bar.stop()

    def _state(self) -> RunState | None:
        try:
            return RunState.load(self.run_dir)
        except Halt:
            return None

    def event(self, line: str) -> None:
        self.console.print(escape(line), highlight=False)
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
            self.console.print(f"progress: {state.phase}, {state.audits}/{self.total} audits{eta}", highlight=False)
        self._phase = state.phase
