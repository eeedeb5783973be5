"""What became of a local model server, for whoever finds it not answering.

`python -m sil_runtime.inspect_ext.local serve` (or `supervise -- CMD`) runs the server as a
child and keeps one record per port in `state_dir()`: running (its pid, its log), then how it
ended (stopped on request, or died: its exit status or signal, and its log's last lines). `sil
check`, the loop (an audit gap while a loopback server is down) and `LocalServer` read it to
tell a crashed server, with its signal and the fix, from one that was never started.

    write(ServerRecord(port=8765, pid=..., supervisor_pid=..., log="...", started_at=time.time()))
    explain_down("http://127.0.0.1:8765/v1")   # "... crashed at 10:31:02 UTC: killed by SIGSEGV ..." or None
"""

from __future__ import annotations

import os
import signal
import tempfile
import time
from pathlib import Path
from typing import Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict

from sil.base.fsutil import atomic_write_text

STATE_DIR_ENV = "SIL_LOCAL_SERVER_DIR"  # where the records live (tests point it elsewhere)
PORTABLE_INSTALL = "make local"
TAIL_LINES = 8
TAIL_CHARS = 800
# a server killed by one of these is broken code, most often a llama.cpp build for another CPU
CPU_FAULTS = frozenset({signal.SIGSEGV, signal.SIGILL, signal.SIGBUS, signal.SIGFPE, signal.SIGABRT})
VERDICT_WAIT_S = 3.0  # a child just gone: how long its supervisor may take to write how it ended
# A crashing process closes its sockets before it turns zombie: a client can see the connection
# drop while the pid still looks alive. Watch it this long before calling it alive.
DYING_GRACE_S = 1.0


class ServerRecord(BaseModel):
    """One supervised server on one loopback port: running, stopped on request, or died."""

    model_config = ConfigDict(frozen=True)
    port: int
    pid: int  # the server process (the supervisor's child)
    supervisor_pid: int
    log: str
    started_at: float
    state: Literal["running", "stopped", "died"] = "running"
    returncode: int | None = None  # as subprocess reports it: negative is the signal that killed it
    ended_at: float | None = None
    tail: list[str] = []

    def ended(self, returncode: int, requested: bool) -> ServerRecord:
        """The record once the server has exited; `requested`: its supervisor was asked to stop it."""
        return self.model_copy(
            update={
                "state": "stopped" if requested else "died",
                "returncode": returncode,
                "ended_at": time.time(),
                "tail": log_tail(Path(self.log)),
            }
        )


def state_dir() -> Path:
    default = Path(tempfile.gettempdir()) / f"sil-local-servers-{os.getuid()}"
    return Path(os.environ.get(STATE_DIR_ENV) or default)


def record_path(port: int) -> Path:
    return state_dir() / f"port-{port}.json"


def default_log(port: int) -> Path:
    return state_dir() / f"port-{port}.log"


def write(record: ServerRecord) -> None:
    record_path(record.port).parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(record_path(record.port), record.model_dump_json())


def read(port: int) -> ServerRecord | None:
    """The port's record; None when there is none or it cannot be read (then nothing is claimed)."""
    try:
        return ServerRecord.model_validate_json(record_path(port).read_bytes())
    except (OSError, ValueError):
        return None


def log_tail(path: Path, lines: int = TAIL_LINES) -> list[str]:
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - 64_000))
            text = f.read().decode(errors="replace")
    except OSError:
        return []
    return [line.strip() for line in text.splitlines() if line.strip()][-lines:]


def how_it_ended(returncode: int) -> str:
    """`killed by SIGSEGV (exit 139)` or `exit status 1`: what a shell would have shown."""
    if returncode < 0:
        try:
            name = signal.Signals(-returncode).name
        except ValueError:
            name = f"signal {-returncode}"
        return f"killed by {name} (exit {128 - returncode})"
    return f"exit status {returncode}"


def fix_for(record: ServerRecord) -> str:
    again = f"start it again (python -m sil_runtime.inspect_ext.local serve --port {record.port} &)"
    code = record.returncode or 0
    if code < 0 and -code in CPU_FAULTS:
        return (
            "a llama.cpp build for another CPU crashes like this: reinstall the portable build with "
            f"`{PORTABLE_INSTALL}` (docs/local-models.md), then {again}"
        )
    return f"{again}; its log says why it ended"


def describe(record: ServerRecord) -> str:
    """One paragraph: what happened to the server, its log's last lines, and what to do."""
    when = time.strftime("%H:%M:%S UTC", time.gmtime(record.ended_at or time.time()))
    where = f"the local model server on 127.0.0.1:{record.port} (pid {record.pid})"
    if record.state == "stopped":
        return f"{where} was stopped on request at {when}; start it again to go on"
    tail = " | ".join(record.tail)[-TAIL_CHARS:] or "(empty)"
    return (
        f"{where} crashed at {when}: {how_it_ended(record.returncode or 0)}; "
        f"the last lines of its log ({record.log}): {tail}; fix: {fix_for(record)}"
    )


def port_of(base_url: str) -> int | None:
    try:
        parts = urlsplit(base_url)
        return parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None


def explain_down(base_url: str, wait_s: float = VERDICT_WAIT_S) -> str | None:
    """Why the server at `base_url` does not answer, as far as its supervisor's record tells;
    None when no record tells (never supervised, or still alive and merely not answering)."""
    port = port_of(base_url)
    record = read(port) if port is not None else None
    if record is None:
        return None
    start = time.monotonic()
    while record.state == "running":
        waited = time.monotonic() - start
        if alive(record.pid) and waited >= DYING_GRACE_S:
            return None  # alive: it merely does not answer (busy, or not listening yet)
        if waited >= wait_s:
            return (
                f"the local model server on 127.0.0.1:{record.port} (pid {record.pid}) is gone and its "
                f"supervisor (pid {record.supervisor_pid}) recorded no exit (killed with it?); "
                f"the last lines of its log ({record.log}): {' | '.join(log_tail(Path(record.log)))[-TAIL_CHARS:]}"
            )
        time.sleep(0.1)
        record = read(record.port) or record
    return describe(record)


def alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie, dead but not yet reaped by its supervisor, does not)."""
    if Path("/proc/self/stat").exists():
        try:
            stat = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            return False
        return stat.rsplit(")", 1)[-1].split()[:1] not in (["Z"], ["X"])
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    return True
