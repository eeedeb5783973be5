"""The attempts log of one audit directory, and what happened to an audit whose loop died.

An audit runs in its own process group, so when the loop is killed mid-audit the audit keeps
running and may finish later. To resume without repeating a finished (paid) audit or losing
one, every launch is logged in `<audit_dir>/attempts`, one JSON line per event:

    {"event": "launch", "attempt": n, "t": <unix time>}    loop, fsynced, before the process starts
    {"event": "start", "attempt": n, "pid": <pid>}          wrapper, first thing it does
    {"event": "start", "attempt": n, "pid": <pid>, "ticks": <start time>}
                                                            warm worker (sil/exec/zygote.py), before
                                                            its forked audit may begin
    {"event": "exit", "attempt": n, "rc": <status>}         wrapper, after the audit exits
    {"event": "kill", "attempt": n, "reason": "timeout"}    loop, before it kills the group
    {"event": "kill", "attempt": n, "reason": "disk"}       loop: it failed because of the disk
    {"event": "kill", "attempt": n, "reason": "server"}     loop: it failed while a local model
                                                            server was down (sil/exec/localprobe.py)

`read_status` turns the log of the last attempt (plus a look at the live processes) into one
state: new, finished, timed_out, running, died or unknown. `await_attempt` waits for a
running attempt until its audit timeout (then kills it, as the loop would have). A finished
attempt is scored, never re-run; a died one is re-run; unknown halts the run.

    status = await_attempt(audit_dir, timeout_s=600)
    if status.state == "finished": ...      # score the evidence it left
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from sil_policy.evidence import AUDIT_DIR_ENV

ATTEMPTS_FILE = "attempts"
SET_ASIDE_PREFIX = "prior-attempt-"
POLL_S = 0.05
KILL_GRACE_S = 2.0
START_GRACE_S = 2.0  # how long a launched wrapper may take to log its pid (or show its environment)
PROC = Path("/proc")
EVENTS = ("launch", "start", "exit", "kill")
# The wrapper logs its pid first and the audit's exit status last, so a loop that died while
# the audit ran can still learn whether, and how, the audit finished.
WRAPPER_SH = """n=$1; shift
printf '{"event":"start","attempt":%s,"pid":%s}\\n' "$n" "$$" >> attempts
"$@"
rc=$?
printf '{"event":"exit","attempt":%s,"rc":%s}\\n' "$n" "$rc" >> attempts
exit "$rc"
"""

# kill reasons that mean the attempt failed for a cause outside the policy: re-run, never a gap
DIED_OF = {"disk": "of the disk", "server": "a local model server was down"}

State = Literal["new", "finished", "timed_out", "running", "died", "unknown"]


class AuditStateUnknown(RuntimeError):
    """Whether an audit ran cannot be established; the run must halt rather than guess."""


class AttemptStatus(BaseModel):
    """What the last attempt of an audit directory did, as far as can be established."""

    model_config = ConfigDict(frozen=True)
    state: State
    attempt: int = 0  # the last attempt's number; 0 when never launched
    launches: int = 0
    executions: int = 0  # attempts that ran to an exit status
    pid: int | None = None
    ticks: int | None = None  # start time of a warm worker's audit process (sil/exec/zygote.py), else None
    rc: int | None = None
    launched_at: float | None = None
    wall_s: float | None = None
    detail: str = ""


def wrap(cmd: list[str], attempt: int) -> list[str]:
    """The audit command inside the logging wrapper (same process group, same exit status)."""
    return ["/bin/sh", "-c", WRAPPER_SH, "sil-audit", str(attempt), *cmd]


def log_launch(audit_dir: Path, attempt: int) -> None:
    """Durably note that attempt `attempt` is about to start (cuts a torn last line first)."""
    path = Path(audit_dir) / ATTEMPTS_FILE
    if path.exists():
        data = path.read_bytes()
        if data and not data.endswith(b"\n"):
            os.truncate(path, data.rfind(b"\n") + 1)
    _append(path, {"event": "launch", "attempt": attempt, "t": round(time.time(), 3)})


def log_start(audit_dir: Path, attempt: int, pid: int, ticks: int) -> None:
    """A warm worker's forked audit: its pid and start time, logged before it may begin."""
    _append(Path(audit_dir) / ATTEMPTS_FILE, {"event": "start", "attempt": attempt, "pid": pid, "ticks": ticks}, False)


def log_exit(audit_dir: Path, attempt: int, rc: int) -> None:
    """A forked audit's exit status, logged by the audit process itself as its last act."""
    _append(Path(audit_dir) / ATTEMPTS_FILE, {"event": "exit", "attempt": attempt, "rc": rc}, False)


def log_kill(audit_dir: Path, attempt: int, reason: Literal["timeout", "interrupted", "disk", "server"]) -> None:
    _append(Path(audit_dir) / ATTEMPTS_FILE, {"event": "kill", "attempt": attempt, "reason": reason})


def _append(path: Path, event: dict[str, Any], durable: bool = True) -> None:
    """Append one event; `durable=False` (start, exit) as the wrapper's plain append: a lost line
    after a power cut reads as an attempt that died, which is re-run."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        os.write(fd, (json.dumps(event, sort_keys=True) + "\n").encode())
        if durable:
            os.fsync(fd)
    finally:
        os.close(fd)


def read_events(audit_dir: Path) -> list[dict[str, Any]]:
    """Parsed log lines; a torn last line (no newline) is ignored; anything else unreadable raises."""
    path = Path(audit_dir) / ATTEMPTS_FILE
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return []
    except OSError as ex:
        raise AuditStateUnknown(f"cannot read {path}: {ex.strerror or ex}") from None
    events = []
    for n, line in enumerate(data.split(b"\n")[:-1], start=1):
        try:
            event = json.loads(line)
            if event["event"] not in EVENTS or not isinstance(event["attempt"], int):
                raise ValueError
        except (ValueError, KeyError, TypeError):
            raise AuditStateUnknown(f"{path} line {n} is not a readable attempt event") from None
        events.append(event)
    return events


def read_status(audit_dir: Path) -> AttemptStatus:
    """The state of the last attempt, without waiting (see module docstring)."""
    audit_dir = Path(audit_dir)
    try:
        events = read_events(audit_dir)
    except AuditStateUnknown as ex:
        return AttemptStatus(state="unknown", detail=str(ex))
    launches = [e for e in events if e["event"] == "launch"]
    if not launches:
        return AttemptStatus(state="new")
    n = launches[-1]["attempt"]
    mine = {e["event"]: e for e in events if e["attempt"] == n}
    base = dict(
        attempt=n,
        launches=len(launches),
        launched_at=launches[-1].get("t"),
        executions=sum(1 for e in events if e["event"] == "exit"),
        pid=mine.get("start", {}).get("pid"),
        ticks=mine.get("start", {}).get("ticks"),
    )
    kill = mine.get("kill")
    if kill is not None and kill.get("reason") == "timeout":
        return AttemptStatus(state="timed_out", **base, detail="the loop killed it at its timeout")
    if kill is not None and kill.get("reason") in DIED_OF:  # its outcome says nothing about the policy
        why = DIED_OF[kill["reason"]]
        return AttemptStatus(state="died", **base, detail=f"attempt {n} failed because {why}; re-run it")
    if "exit" in mine:
        rc = mine["exit"].get("rc")
        if not isinstance(rc, int):
            return AttemptStatus(state="unknown", **base, detail=f"attempt {n} logged exit without a status")
        wall = _mtime(audit_dir / ATTEMPTS_FILE) - (base["launched_at"] or 0.0)
        return AttemptStatus(
            state="finished",
            rc=rc,
            wall_s=round(max(wall, 0.0), 3),
            **base,
            detail=f"attempt {n} exited with status {rc}",
        )
    alive = _live_pids(audit_dir, base["pid"], base["ticks"])
    if alive is None or (not alive and base["pid"] is None and _just_launched(base["launched_at"])):
        # no /proc and no pid yet, or a wrapper still inside its exec (its environment not yet
        # readable): give it a moment to log its pid
        return _await_pid(audit_dir, base)
    if not alive and _logged_exit(audit_dir, n):
        # It exited between our read of the log and the process scan (the wrapper logs its exit
        # before it dies, so a log read after the scan is conclusive): read it again, never "died".
        return read_status(audit_dir)
    if alive and kill is None:
        return AttemptStatus(state="running", **base, detail=f"attempt {n} is still running (pids {alive})")
    if alive:
        return AttemptStatus(
            state="unknown", **base, detail=f"attempt {n} was killed by the loop but pids {alive} are alive"
        )
    why = "was interrupted" if kill else ("never started" if base["pid"] is None else "died without an exit status")
    return AttemptStatus(state="died", **base, detail=f"attempt {n} {why}")


def _logged_exit(audit_dir: Path, attempt: int) -> bool:
    """Whether the log now holds attempt `attempt`'s exit (an unreadable log: let a fresh read say so)."""
    try:
        return any(e["event"] == "exit" and e["attempt"] == attempt for e in read_events(audit_dir))
    except AuditStateUnknown:
        return True


def await_attempt(audit_dir: Path, timeout_s: float) -> AttemptStatus:
    """`read_status`, but a running attempt is waited for until its own deadline, then killed."""
    status = read_status(audit_dir)
    while status.state == "running":
        deadline = (status.launched_at or time.time()) + timeout_s
        if time.time() >= deadline:
            return _kill_overdue(Path(audit_dir), status)
        time.sleep(POLL_S)
        status = read_status(audit_dir)
    return status


def set_aside(audit_dir: Path, attempt: int) -> Path:
    """Move a died attempt's outputs (everything but the log) aside so the re-run starts clean."""
    audit_dir = Path(audit_dir)
    dest = audit_dir / f"{SET_ASIDE_PREFIX}{attempt}"
    dest.mkdir(exist_ok=True)
    for entry in audit_dir.iterdir():
        if entry.name != ATTEMPTS_FILE and not entry.name.startswith(SET_ASIDE_PREFIX):
            shutil.move(str(entry), str(dest / entry.name))
    return dest


def _kill_overdue(audit_dir: Path, status: AttemptStatus) -> AttemptStatus:
    """Kill an attempt past its timeout, as the loop would have had it been alive."""
    log_kill(audit_dir, status.attempt, "timeout")
    for sig in (signal.SIGTERM, signal.SIGKILL):
        for pid in _live_pids(audit_dir, status.pid, status.ticks) or []:
            try:
                os.killpg(os.getpgid(pid), sig)
            except (ProcessLookupError, PermissionError):
                pass
        if _wait_gone(audit_dir, status.pid, status.ticks, KILL_GRACE_S):
            return read_status(audit_dir)
    raise AuditStateUnknown(
        f"{audit_dir.name}: attempt {status.attempt} is still alive after SIGKILL "
        "past its timeout; it may still spend budget or write evidence"
    )


def _wait_gone(audit_dir: Path, pid: int | None, ticks: int | None, seconds: float) -> bool:
    end = time.monotonic() + seconds
    while _live_pids(audit_dir, pid, ticks):
        if time.monotonic() >= end:
            return False
        time.sleep(POLL_S)
    return True


def _just_launched(launched_at: float | None) -> bool:
    return launched_at is not None and time.time() - launched_at < START_GRACE_S


def _await_pid(audit_dir: Path, base: dict[str, Any]) -> AttemptStatus:
    """A launched attempt with no pid logged and no process seen: wait for either to show."""
    attempt = base["attempt"]
    end = time.monotonic() + START_GRACE_S
    while time.monotonic() < end:
        time.sleep(POLL_S)
        try:
            started = any(e["event"] == "start" and e["attempt"] == attempt for e in read_events(audit_dir))
        except AuditStateUnknown as ex:
            return AttemptStatus(state="unknown", **base, detail=str(ex))
        if started or _live_pids(audit_dir, None):
            return read_status(audit_dir)
    return AttemptStatus(state="died", **base, detail=f"attempt {attempt} never started")


def _live_pids(audit_dir: Path, pid: int | None, ticks: int | None = None) -> list[int] | None:
    """Live processes of this audit, else None when that cannot be checked.

    On Linux: every process started with this audit's `SIL_AUDIT_DIR` (the wrapper and all it
    spawned; an operator's shell sitting in the directory is not one), plus, for an audit a warm
    worker forked (`ticks` logged: its environment block is the worker's), the live members of
    its process group. Elsewhere: the logged process group, if it still exists.
    """
    if PROC.is_dir():
        found = _environ_pids(audit_dir)
        if pid is not None and ticks is not None:
            found = sorted(set(found) | set(_group_pids(pid, ticks)))
        return found
    if pid is None:
        return None
    try:
        return [pid] if os.getpgid(pid) == pid else []
    except ProcessLookupError:
        return []


def attempt_alive(audit_dir: Path, pid: int | None, ticks: int | None) -> bool | None:
    """Whether any process of this audit (attempt with this pid and start time) still runs; None: cannot tell."""
    alive = _live_pids(audit_dir, pid, ticks)
    return None if alive is None else bool(alive)


def _environ_pids(audit_dir: Path) -> list[int]:
    target = os.path.realpath(audit_dir)
    prefix = f"{AUDIT_DIR_ENV}=".encode()
    found = []
    for entry in PROC.iterdir():
        if not entry.name.isdigit():
            continue
        try:
            env = (entry / "environ").read_bytes()  # empty for a zombie
        except OSError:  # gone, or another user's process
            continue
        for item in env.split(b"\0"):
            if item.startswith(prefix) and os.path.realpath(os.fsdecode(item[len(prefix) :])) == target:
                found.append(int(entry.name))
                break
    return found


def proc_stat(pid: int) -> tuple[str, int, int] | None:
    """(state, process group, start time in clock ticks) of a process, from /proc; None if gone."""
    try:
        text = (PROC / str(pid) / "stat").read_text()
    except OSError:
        return None
    fields = text[text.rfind(")") + 2 :].split()  # the name in parentheses may hold spaces
    return fields[0], int(fields[2]), int(fields[19])


def _group_pids(leader: int, ticks: int) -> list[int]:
    """Live (non-zombie) members of the process group a forked audit leads.

    A pid is not reused while its process group has members, so a leader pid that now belongs
    to a process with another start time means the audit's whole group is gone.
    """
    stat = proc_stat(leader)
    if stat is not None and stat[2] != ticks:
        return []
    if stat is not None and stat[0] != "Z":
        return [leader]  # enough to know it runs, and to kill its group
    members = []
    for entry in PROC.iterdir():
        if entry.name.isdigit() and (info := proc_stat(int(entry.name))) and info[1] == leader and info[0] != "Z":
            members.append(int(entry.name))
    return members


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return time.time()
