"""Exit codes and the errors every layer may raise (no project imports: the ground floor).

raise Halt("3 consecutive audit gaps")     # the run stops with a recorded reason
raise typer.Exit(ExitCode.REFUSED)
"""

from __future__ import annotations

from enum import IntEnum


class ExitCode(IntEnum):
    """Process exit codes of every `sil` command (documented in the README)."""

    OK = 0
    FAILED = 1  # a check failed (ledger does not verify, measurement check failed)
    REFUSED = 2  # bad input, missing or invalid approval: nothing was changed
    HALTED = 3  # the run stopped with a recorded reason; re-run the command to resume
    INTERRUPTED = 130  # Ctrl-C; re-run the command to resume
    LOCKED = 75  # EX_TEMPFAIL: another sil process holds the run or the policies


class Halt(RuntimeError):
    """Stop the whole run with an explicit, recorded reason."""


class Refused(RuntimeError):
    """The command's input cannot be accepted; nothing was changed. The message says how to fix it."""
