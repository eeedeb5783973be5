"""A warm worker for simulated audits: one process that has imported the audit's module and
forks a child per audit, so an audit no longer pays Python start-up and imports (~0.9 s).

Each audit is still its own process, exactly as under the attempts wrapper (sil/exec/attempts.py):
forked from the worker, it starts its own session (process group), takes the environment the
loop built for it as its whole environment (nothing of the worker's is kept), runs in the
audit directory with its stdout/stderr in the directory's logs, and runs the module as
`python -m MODULE ARGS` would (`runpy`, same exit status). The attempts log is kept as with
the wrapper: the worker logs the child's `start` (pid and start time) before the child may
begin (a child whose start was not logged never runs the audit), and the child logs its own
`exit` as its last act, so a loop that died mid-audit finds the audit's outcome on resume
without being its parent. The loop times out and kills the group exactly as for a subprocess
(sil/exec/auditproc.py).

The worker serves only `[sys.executable, "-m", MODULE, ...]` for the modules it preloaded (and
warmed: a module's `warm()`, if it has one, runs once before the first fork), on
Linux; anything else, or a worker that cannot start, runs as the plain subprocess. One worker
per loop process (a run), started on first use, ended when the loop exits; a worker whose loop
died exits too, and the audits it forked run on. `SIL_WARM_AUDITS=0` turns it off.

    worker = zygote.shared(("sil_runtime.sim",), base_env)   # None when unavailable
    proc = worker.spawn(cmd, audit_dir, env, attempt)         # ZygoteUnavailable: nothing ran
    rc = auditproc.finish(proc, audit_dir, attempt, timeout)

Protocol (JSON lines; loop -> worker on its stdin, worker -> loop on its stdout):
    {"ready": pid} | {"error": why}                            once, after the imports
    {"id", "argv", "cwd", "env", "attempt", "stdout", "stderr"}  spawn one audit
    {"id", "pid", "ticks"} | {"id", "error"}                   forked (and logged) | nothing ran
    {"id", "rc"}                                               the child exited (-N: signal N)
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import runpy
import select
import signal
import subprocess
import sys
import threading
import time
import traceback
from pathlib import Path
from typing import IO, Any

from sil.exec import attempts
from sil.exec.auditproc import WorkerLost

DISABLE_ENV = "SIL_WARM_AUDITS"
READY_TIMEOUT_S = 120.0  # imports on a loaded machine
PID_TIMEOUT_S = 30.0  # a fork and one log line
POLL_S = 0.05
WARM_HOOK = "warm"  # a preloaded module's function that loads what its audits load on first use


class ZygoteUnavailable(RuntimeError):
    """The warm worker did not run this audit (none ran): run it as a plain subprocess."""


def supported() -> bool:
    """Forking a warm worker needs fork() and /proc (to identify a forked audit's process)."""
    return hasattr(os, "fork") and attempts.PROC.is_dir() and os.environ.get(DISABLE_ENV, "1") != "0"


# ---------------------------------------------------------------- loop side


class ForkedAudit:
    """One forked audit as the loop sees it: like `subprocess.Popen` for `auditproc.finish`."""

    def __init__(self, audit_dir: Path, attempt: int, argv: list[str]) -> None:
        self.audit_dir, self.attempt, self.args = audit_dir, attempt, argv
        self.pid = 0
        self.ticks: int | None = None
        self.returncode: int | None = None
        self.error: str | None = None
        self.lost = False
        self.started = threading.Event()  # pid known, refused, or the worker is gone
        self.done = threading.Event()  # exit status known, or the worker is gone

    def deliver(self, msg: dict[str, Any]) -> None:
        if "pid" in msg:
            self.pid, self.ticks = msg["pid"], msg["ticks"]
        elif "rc" in msg:
            self.returncode = msg["rc"]
            self.done.set()
        else:
            self.error = str(msg.get("error"))
            self.done.set()
        self.started.set()

    def orphan(self) -> None:
        """The worker is gone: from now on the process and the attempts log tell how it ends."""
        self.lost = True
        self.started.set()
        self.done.set()

    def wait(self, timeout: float | None = None) -> int:
        """The exit status; `subprocess.TimeoutExpired` past `timeout`; `WorkerLost` if it died unlogged."""
        end = None if timeout is None else time.monotonic() + timeout
        if not self.done.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout or 0.0)
        if self.returncode is not None:
            return self.returncode
        return self._wait_orphaned(end)

    def _wait_orphaned(self, end: float | None) -> int:
        while attempts.attempt_alive(self.audit_dir, self.pid, self.ticks):
            if end is not None and time.monotonic() >= end:
                raise subprocess.TimeoutExpired(self.args, 0.0)
            time.sleep(POLL_S)
        mine = [e for e in attempts.read_events(self.audit_dir) if e["attempt"] == self.attempt]
        for event in mine:
            if event["event"] == "exit" and isinstance(event.get("rc"), int):
                return int(event["rc"])
        if any(e["event"] == "kill" for e in mine):
            return -signal.SIGKILL  # the loop killed it (a timeout or an interruption)
        raise WorkerLost(self.audit_dir.name, f"the warm worker died and attempt {self.attempt} ended unlogged")


class Zygote:
    """The loop's handle on one warm worker process."""

    def __init__(self, modules: tuple[str, ...], env: dict[str, str]) -> None:
        self.modules = modules
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "sil.exec.zygote", *modules],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            env={**env, "PYTHONDONTWRITEBYTECODE": "1"},
            cwd="/",
            start_new_session=True,  # a Ctrl-C meant for the loop does not reach it
        )
        self.lost = False
        self.failure = ""
        self._lock = threading.Lock()
        self._pending: dict[int, ForkedAudit] = {}
        self._next = 0
        self._ready = threading.Event()
        threading.Thread(target=self._read, name="sil-zygote-reader", daemon=True).start()
        if not self._ready.wait(READY_TIMEOUT_S) or self.lost:
            self.close()
            raise ZygoteUnavailable(f"the warm worker did not start: {self.failure or 'no answer'}")

    def serves(self, argv: list[str]) -> bool:
        return len(argv) >= 3 and argv[0] == sys.executable and argv[1] == "-m" and argv[2] in self.modules

    def spawn(self, argv: list[str], audit_dir: Path, env: dict[str, str], attempt: int) -> ForkedAudit:
        """Fork attempt `attempt` of an audit (its `launch` already logged); ZygoteUnavailable if none ran."""
        audit = ForkedAudit(audit_dir, attempt, argv)
        request = {
            "argv": argv,
            "cwd": str(audit_dir),
            "env": env,
            "attempt": attempt,
            "stdout": str(audit_dir / "stdout.log"),
            "stderr": str(audit_dir / "stderr.log"),
        }
        self._send(audit, request)
        if not audit.started.wait(PID_TIMEOUT_S):
            self.kill()  # a hung worker: once it is dead, the attempts log says whether the audit started
            audit.started.wait()
        if audit.error is not None:
            raise ZygoteUnavailable(audit.error)
        if audit.pid == 0:  # the worker died before it answered
            self._adopt(audit)
        return audit

    def _send(self, audit: ForkedAudit, request: dict[str, Any]) -> None:
        stdin = self.proc.stdin
        assert stdin is not None
        with self._lock:
            if self.lost:
                raise ZygoteUnavailable(f"the warm worker is gone: {self.failure}")
            self._next += 1
            self._pending[self._next] = audit
            try:
                stdin.write(json.dumps({"id": self._next, **request}).encode() + b"\n")
                stdin.flush()
            except OSError as ex:  # no reader left: the worker is dead and forked nothing
                self._pending.pop(self._next)
                raise ZygoteUnavailable(f"the warm worker is gone: {ex}") from None

    def _adopt(self, audit: ForkedAudit) -> None:
        """The worker died mid-request: its logged `start` is the audit (awaited); none, nothing ran."""
        for event in attempts.read_events(audit.audit_dir):
            if event["event"] == "start" and event["attempt"] == audit.attempt and "ticks" in event:
                audit.pid, audit.ticks = int(event["pid"]), int(event["ticks"])
                return
        raise ZygoteUnavailable("the warm worker died before it forked the audit")

    def _read(self) -> None:
        stdout: IO[bytes] | None = self.proc.stdout
        assert stdout is not None
        for line in stdout:
            try:
                msg = json.loads(line)
            except ValueError:
                continue
            if "id" in msg:
                with self._lock:
                    audit = self._pending.get(msg["id"])
                    if "rc" in msg or "error" in msg:
                        self._pending.pop(msg["id"], None)
                if audit is not None:
                    audit.deliver(msg)
            else:
                self.failure = str(msg.get("error", ""))
                self.lost = "ready" not in msg
                self._ready.set()
        with self._lock:
            self.lost = True
            orphans, self._pending = list(self._pending.values()), {}
        for audit in orphans:
            audit.orphan()
        self._ready.set()

    def kill(self) -> None:
        """Kill the worker itself (never its audits: each is in its own session)."""
        try:
            self.proc.kill()
        except OSError:
            pass
        self.proc.wait()

    def close(self) -> None:
        """End the worker: it exits on end of input; audits it forked run on."""
        try:
            if self.proc.stdin is not None:
                self.proc.stdin.close()
            self.proc.wait(timeout=5)
        except (OSError, subprocess.TimeoutExpired):
            self.kill()


_SHARED: dict[tuple[str, ...], Zygote | None] = {}
_SHARED_LOCK = threading.Lock()


def shared(modules: tuple[str, ...], env: dict[str, str]) -> Zygote | None:
    """This process's warm worker for `modules`, started on first use; None when unavailable."""
    if not modules or not supported():
        return None
    with _SHARED_LOCK:
        worker = _SHARED.get(modules)
        if modules in _SHARED and worker is None:
            return None  # failed to start before: plain subprocesses from now on
        if worker is None or worker.lost:
            try:
                worker = Zygote(modules, env)
            except (OSError, ZygoteUnavailable):
                worker = None
            _SHARED[modules] = worker
        return worker


def _forget_after_fork() -> None:
    """In a forked copy of the loop: the inherited workers answer the parent, never this process."""
    global _SHARED_LOCK
    _SHARED.clear()
    _SHARED_LOCK = threading.Lock()


os.register_at_fork(after_in_child=_forget_after_fork)


@atexit.register
def close_all() -> None:
    with _SHARED_LOCK:
        workers = [w for w in _SHARED.values() if w is not None]
        _SHARED.clear()
    for worker in workers:
        worker.close()


# ---------------------------------------------------------------- worker side


def serve(modules: list[str]) -> int:
    """The worker process: preload `modules`, then fork one audit per request until end of input."""
    requests, replies = os.dup(0), os.dup(1)
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 0)
    os.dup2(null, 1)  # nothing an import prints can garble the replies
    os.close(null)
    out = os.fdopen(replies, "wb", buffering=0)
    try:
        preload(modules)
    except BaseException as ex:  # an import error of any kind: the loop falls back to subprocesses
        _reply(out, {"error": f"{type(ex).__name__}: {ex}"})
        return 1
    wake_r, wake_w = os.pipe()
    for fd in (wake_r, wake_w):
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(wake_w)
    signal.signal(signal.SIGCHLD, lambda *_: None)
    _reply(out, {"ready": os.getpid()})
    children: dict[int, int] = {}
    inherited = (requests, replies, wake_r, wake_w)
    buffer = b""
    while True:
        readable, _, _ = select.select([requests, wake_r], [], [])
        if wake_r in readable:
            _drain(wake_r)
            _reap(children, out)
        if requests in readable:
            chunk = os.read(requests, 1 << 16)
            if not chunk:
                return 0  # the loop is gone; the audits forked so far run on and log their own exit
            buffer += chunk
            while b"\n" in buffer:
                line, buffer = buffer.split(b"\n", 1)
                _handle(json.loads(line), set(modules), children, inherited, out)


def preload(modules: list[str]) -> None:
    """Import what `python -m MODULE` runs, for each module, and call its `warm()` if it has one.

    `warm()` loads what every audit loads on first use (lazy imports, caches), once, here: a
    forked audit then finds it loaded instead of paying for it again.
    """
    for name in modules:
        main = name
        if hasattr(importlib.import_module(name), "__path__"):  # `-m package` runs package.__main__
            main = f"{name}.__main__"
        warm = getattr(importlib.import_module(main), WARM_HOOK, None)
        if callable(warm):
            warm()
        del sys.modules[main]  # imported for what it imports; runpy runs it afresh as __main__


def _handle(
    req: dict[str, Any], modules: set[str], children: dict[int, int], inherited: tuple[int, ...], out: IO[bytes]
) -> None:
    argv = req["argv"]
    if len(argv) < 3 or argv[:2] != [sys.executable, "-m"] or argv[2] not in modules:
        _reply(out, {"id": req["id"], "error": f"not a preloaded module command: {argv[:3]}"})
        return
    try:
        pid, ticks = _fork(req, inherited)
    except OSError as ex:
        _reply(out, {"id": req["id"], "error": f"the audit did not start: {ex}"})
        return
    children[pid] = req["id"]
    _reply(out, {"id": req["id"], "pid": pid, "ticks": ticks})


def _fork(req: dict[str, Any], inherited: tuple[int, ...]) -> tuple[int, int]:
    """Fork the audit and log its start; the child begins only once its start is in the log."""
    up_r, up_w = os.pipe()
    go_r, go_w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(up_r)
        os.close(go_w)
        _child(req, up_w, go_r, inherited)
    os.close(up_w)
    os.close(go_r)
    try:
        if os.read(up_r, 1) != b"s":  # the child is its own session leader now
            raise OSError(f"forked audit {pid} died before it started its session")
        stat = attempts.proc_stat(pid)
        if stat is None:
            raise OSError(f"forked audit {pid} is gone")
        attempts.log_start(Path(req["cwd"]), req["attempt"], pid, stat[2])
        os.write(go_w, b"g")
        return pid, stat[2]
    finally:
        os.close(up_r)
        os.close(go_w)  # without the "g" the child exits at once, without running anything


def _child(req: dict[str, Any], up_w: int, go_r: int, inherited: tuple[int, ...]) -> None:
    """In the forked child: become the audit process, run it, log its exit; never returns."""
    rc = 1
    try:
        os.setsid()
        for fd in inherited:
            os.close(fd)
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        os.write(up_w, b"s")
        os.close(up_w)
        if os.read(go_r, 1) != b"g":
            os._exit(1)  # the worker could not log the start: the audit must not run
        os.close(go_r)
        rc = _become_audit(req)
        attempts.log_exit(Path(req["cwd"]), req["attempt"], rc)
    finally:
        os._exit(rc)


def _become_audit(req: dict[str, Any]) -> int:
    """Take the audit's directory, files and environment, and run `python -m MODULE ARGS`."""
    os.chdir(req["cwd"])
    fds = [
        os.open(os.devnull, os.O_RDONLY),
        os.open(req["stdout"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666),
        os.open(req["stderr"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o666),
    ]
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        os.close(fd)
    os.environ.clear()
    os.environ.update(req["env"])
    sys.dont_write_bytecode = bool(req["env"].get("PYTHONDONTWRITEBYTECODE"))
    sys.argv = [req["argv"][0], *req["argv"][3:]]
    sys.path[0] = os.getcwd()  # as `python -m` puts the working directory first
    return run_module(req["argv"][2])


def run_module(module: str) -> int:
    """Run `module` as `python -m` does; its exit status as the interpreter would report it."""
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
        rc = 0
    except SystemExit as ex:
        rc = _exit_status(ex.code)
    except BaseException:
        traceback.print_exc()
        rc = 1
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    return rc


def _exit_status(code: object) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


def _reap(children: dict[int, int], out: IO[bytes]) -> None:
    while children:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if pid in children:
            _reply(out, {"id": children.pop(pid), "rc": os.waitstatus_to_exitcode(status)})


def _drain(fd: int) -> None:
    try:
        while os.read(fd, 512):
            pass
    except BlockingIOError:
        pass


def _reply(out: IO[bytes], msg: dict[str, Any]) -> None:
    try:
        out.write(json.dumps(msg).encode() + b"\n")
    except BrokenPipeError:
        raise SystemExit(0) from None  # the loop is gone


if __name__ == "__main__":
    raise SystemExit(serve(sys.argv[1:]))
