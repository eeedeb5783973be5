"""One audit process: the wrapped audit command in its own process group, waited for with a timeout.

Used wherever an audit runs: by `measure` on the runner's machine and by the Ray executor's
worker actor (`sil/exec/rayexec.py`) on a cluster node, so both run exactly the same subprocess:
the command inside the attempts wrapper (`attempts.wrap`), in the audit directory, with the
explicit environment it was given (nothing inherited), stdout/stderr in the directory's logs.
The caller logs the attempt's `launch` before calling `start`; a timeout or an interruption
logs a `kill` and kills the whole group.

    proc = auditproc.start(cmd, audit_dir, env, attempt)
    rc = auditproc.finish(proc, audit_dir, attempt, timeout_s)   # AuditTimedOut past the timeout
"""

from __future__ import annotations

import os
import signal
import subprocess
from pathlib import Path
from typing import Protocol

from sil.exec import attempts

STDOUT_LOG = "stdout.log"
STDERR_LOG = "stderr.log"


class AuditTimedOut(RuntimeError):
    """The audit ran past its timeout; its process group was killed."""


def timeout_reason(timeout: float) -> str:
    return f"audit timed out after {timeout:g}s; its process group was killed"


class AuditProcess(Protocol):
    """A started audit: a `subprocess.Popen`, or a warm worker's forked audit (sil/exec/zygote.py)."""

    pid: int

    def wait(self, timeout: float | None = None) -> int: ...


def start(cmd: list[str], audit_dir: Path, env: dict[str, str], attempt: int) -> subprocess.Popen[bytes]:
    """Start attempt `attempt` of the audit command, wrapped, in a new session (process group)."""
    with open(audit_dir / STDOUT_LOG, "wb") as out, open(audit_dir / STDERR_LOG, "wb") as err:
        return subprocess.Popen(
            attempts.wrap(cmd, attempt),
            cwd=audit_dir,
            env=env,
            stdout=out,
            stderr=err,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )


def finish(proc: AuditProcess, audit_dir: Path, attempt: int, timeout: float) -> int:
    """The audit's exit status; past `timeout` (or when interrupted) its group is logged and killed."""
    try:
        return proc.wait(timeout=timeout)
    except WorkerLost:
        raise  # its process is gone already (a forked audit whose worker died): nothing to kill
    except subprocess.TimeoutExpired:
        attempts.log_kill(audit_dir, attempt, "timeout")
        kill_group(proc)
        raise AuditTimedOut(timeout_reason(timeout)) from None
    except BaseException:
        attempts.log_kill(audit_dir, attempt, "interrupted")
        kill_group(proc)
        raise


def kill_group(proc: AuditProcess) -> None:
    """SIGTERM the audit's process group, then SIGKILL after a grace period, and reap it."""
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=attempts.KILL_GRACE_S)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        pass
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    proc.wait()


class WorkerLost(RuntimeError):
    """The worker running an audit died mid-audit; the round recovers it as after a crash."""

    def __init__(self, audit_id: str, detail: str) -> None:
        super().__init__(f"audit {audit_id}: {detail}")
        self.audit_id = audit_id
