"""The live display of `sil run`: a rich progress bar on a terminal, plain lines otherwise (L3).

The loop reports typed events (sil/store/events.py), each with where the run stands (phase,
audits, candidate). On a terminal their lines scroll above one bar (audits of at most the
planned total, current candidate, ETA); piped, each line is printed as is and a `progress:`
line follows every change of phase. By default the per-look events of a sequential test are
left out (`verbosity` 1 shows them, -1 prints nothing: the summary only).

    with RunProgress(console, planned_total) as progress:
        execute_run(..., on_event=progress.event)
"""

from __future__ import annotations

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

from sil.store.events import Event, LookTaken, Update

BAR_WIDTH = 24


def shown(event: Event, verbosity: int) -> bool:
    """Whether an event is printed at this verbosity (-1 quiet, 0 default, 1 verbose: every look too)."""
    if verbosity < 0:
        return False
    return verbosity > 0 or not isinstance(event, LookTaken)


class RunProgress:
    def __init__(self, console: Console, total: int, *, live: bool | None = None, verbosity: int = 0) -> None:
        self.console, self.total, self.verbosity = console, total, verbosity
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

    def event(self, update: Update) -> None:
        if shown(update.event, self.verbosity):
            self.console.print(escape(update.event.text()), highlight=False)
        if self.verbosity < 0:
            return
        if self._bar is not None and self._task is not None:
            self._bar.update(
                self._task, completed=min(update.audits, self.total), phase=update.phase, candidate=update.candidate
            )
        elif update.phase != self._phase:
            eta = ""
            if update.audits:
                left = max(self.total - update.audits, 0) * update.elapsed_s / update.audits
                eta = f", ETA {left:.0f}s"
            self.console.print(
                f"progress: {update.phase}, {update.audits} of at most {self.total} audits{eta}", highlight=False
            )
        self._phase = update.phase
