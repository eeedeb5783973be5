"""The Ray executor: each audit subprocess runs inside a detached Ray actor on a cluster node.

Chosen by `executor: {kind: ray}` in the contract. Ray is imported only here, and only when
a run uses it. What runs on the worker is the UNCHANGED audit: `auditproc.start/finish`
(the same command inside the same attempts wrapper, in its own process group, with the
explicit environment the loop built from its allowlist; the worker's own environment is
never passed on, and no Ray `runtime_env` is used). What stays on the driver: the ledger,
the run state, the refs, `result.json`, and the attempt's `launch` event, written before the
task is submitted, so the attempts log decides re-runs exactly as for a local audit.

Slots: a run keeps up to `audits_in_flight()` detached, named actors ("slots") in a Ray
namespace derived from its run directory; each runs one audit at a time, with the contract's
`num_cpus` and custom `resources`, `max_restarts=0` and `max_task_retries=0` (Ray never
re-runs an audit: the attempts log does). Slots outlive a driver that crashed: the resumed
driver finds them by name (`settle`) and awaits the audits they still run before it looks
at the attempts log. A slot that dies mid-audit raises `WorkerLost`; the round then recovers
that audit as after a crash (finished -> scored, died -> re-run once, unknown -> halt).

Shared filesystem: the audit directory and the frozen measurement are read and written at
the same paths on every node (on one machine, trivially). The worker verifies it sees the
measurement with the frozen manifest hash and the policy copies with the hashes the loop
sent, and refuses to start otherwise (a node without the shared filesystem halts the run).

    runner = rayexec.runner_for(contract, audits_dir)     # connects, or starts a local cluster
    rc = runner.run(cmd, audit_dir, env, timeout_s, attempt, checks)
"""

from __future__ import annotations

import atexit
import hashlib
import json
import os
import socket
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sil.base.errors import Halt
from sil.base.faults import crashpoint
from sil.contract import prepare
from sil.contract.schema import Contract
from sil.exec import attempts, auditproc
from sil.exec.attempts import AuditStateUnknown
from sil.exec.auditproc import AuditTimedOut, WorkerLost
from sil_policy import content_hash

NAMESPACE_PREFIX = "sil-"
SLOT_PREFIX = "slot-"
EXECUTOR_FILE = "executor.json"  # in the audit dir: which slot and node ran the last attempt
SLOT_THREADS = 4  # per slot actor: its one audit plus the driver's status queries
POLL_S = 0.05
PROBE_TIMEOUT_S = 2.0
# how long past an audit's own timeout the driver waits for its slot's answer before halting
ANSWER_GRACE_S = 60.0
# Ray's own settings for every process this module starts or connects: no usage reporting.
RAY_ENV = {"RAY_USAGE_STATS_ENABLED": "0"}
INSTALL_HINT = "pip install -e '.[ray]' (pins ray==2.60.0)"


@dataclass(frozen=True)
class AuditTask:
    """Everything one audit ships to its worker; nothing else crosses (no driver environment)."""

    audit_id: str
    audit_dir: str
    cmd: list[str]
    env: dict[str, str]
    attempt: int
    timeout_s: float
    files: dict[str, str]  # path -> content hash the worker must see (policy copies)
    measurement_root: str
    manifest_hash: str


@dataclass(frozen=True)
class TaskOutcome:
    """What the worker saw: the audit's exit status, a timeout, or why it could not start."""

    rc: int | None = None
    timed_out: bool = False
    refused: str | None = None


def verify_inputs(task: AuditTask) -> str | None:
    """Why this worker cannot run the task (it does not see the same files), or None."""
    try:
        prepare.verify(Path(task.measurement_root), task.manifest_hash)
    except (prepare.MeasurementError, OSError) as ex:
        return f"the frozen measurement at {task.measurement_root} is not the approved one here: {ex}"
    for path, want in task.files.items():
        try:
            got = content_hash(Path(path).read_bytes())
        except OSError as ex:
            return f"cannot read {path}: {ex.strerror or ex}"
        if got != want:
            return f"{path} does not have the hash the loop sent"
    return None


class AuditSlot:
    """The worker side (a Ray actor): runs one audit at a time and remembers how it ended."""

    def __init__(self) -> None:
        self._running: set[str] = set()
        self._outcomes: dict[str, TaskOutcome] = {}
        self._lock = threading.Lock()

    def node_id(self) -> str:
        import ray

        return str(ray.get_runtime_context().get_node_id())

    def run(self, task: AuditTask) -> TaskOutcome:
        audit_dir = Path(task.audit_dir)
        if not audit_dir.is_dir():
            return TaskOutcome(refused=f"audit directory {audit_dir} does not exist on this node")
        problem = verify_inputs(task)
        if problem:
            return TaskOutcome(refused=problem)
        with self._lock:
            self._running.add(task.audit_id)
        try:
            proc = auditproc.start(task.cmd, audit_dir, task.env, task.attempt)
            try:
                outcome = TaskOutcome(rc=auditproc.finish(proc, audit_dir, task.attempt, task.timeout_s))
            except AuditTimedOut:
                outcome = TaskOutcome(timed_out=True)
        finally:
            with self._lock:
                self._running.discard(task.audit_id)
        with self._lock:
            self._outcomes[task.audit_id] = outcome
        return outcome

    def holds(self) -> list[str]:
        """Audits this slot is running now, or finished and not yet forgotten."""
        with self._lock:
            return sorted(self._running | set(self._outcomes))

    def wait(self, audit_id: str) -> TaskOutcome | None:
        """The outcome of an audit this slot runs or ran (blocks while it runs); None if unknown here."""
        while True:
            with self._lock:
                if audit_id in self._outcomes:
                    return self._outcomes[audit_id]
                if audit_id not in self._running:
                    return None
            time.sleep(POLL_S)

    def forget(self, audit_id: str) -> None:
        with self._lock:
            self._outcomes.pop(audit_id, None)


def namespace_for(audits_dir: Path) -> str:
    """The Ray namespace of a run: derived from its (absolute) audits directory."""
    return NAMESPACE_PREFIX + hashlib.sha256(str(Path(audits_dir).resolve()).encode()).hexdigest()[:16]


def import_ray() -> Any:
    """The `ray` module, or a Halt that says how to install it."""
    for key, value in RAY_ENV.items():
        os.environ.setdefault(key, value)
    try:
        import ray
    except ImportError:
        raise Halt(f"executor 'ray' needs the ray package, which is not installed: {INSTALL_HINT}") from None
    return ray


def probe_address(address: str, timeout_s: float = PROBE_TIMEOUT_S) -> str | None:
    """Why nothing answers at a Ray `host:port` address (a TCP connect, no Ray import), or None."""
    host, sep, port = address.removeprefix("ray://").rpartition(":")
    if not sep or not port.isdigit():
        return f"{address!r} is not host:port"
    try:
        with socket.create_connection((host, int(port)), timeout=timeout_s):
            return None
    except OSError as ex:
        return (
            f"nothing answers at {address} ({ex.strerror or ex}); start it with `ray start --head` or fix the address"
        )


def address_of(contract: Contract) -> str:
    """The cluster address: the value of the contract's named env var, or 'auto'."""
    name = contract.executor.address_env
    if name is None:
        return "auto"
    value = os.environ.get(name, "").strip()
    if not value:
        raise Halt(
            f"executor.address_env names {name}, which is not set: export {name}=<host:port> of the Ray "
            "cluster (e.g. from `ray start --head`), or set address_env: null to use a local cluster"
        )
    return value


def connect(contract: Contract) -> Any:
    """Connect this process to the contract's Ray cluster once (a local one if 'auto' finds none)."""
    ray = import_ray()
    if ray.is_initialized():
        return ray
    address = address_of(contract)
    kwargs: dict[str, Any] = dict(log_to_driver=False, include_dashboard=False, configure_logging=False)
    try:
        ray.init(address=address, **kwargs)
    except ConnectionError as ex:
        if contract.executor.address_env is not None:
            raise Halt(
                f"cannot reach the Ray cluster at {address} ({contract.executor.address_env}): {ex}; "
                "start it (ray start --head) or fix the address; a cluster with token auth (ray start "
                "enables it when ~/.ray/auth_token exists) also needs RAY_AUTH_MODE=token here"
            ) from None
        # 'auto' and no cluster here: one for this process (it ends with it; resume needs a cluster)
        ray.init(**kwargs)
    atexit.register(close_all)  # registered after ray's own shutdown hook, so it runs before it
    return ray


@dataclass
class _Slot:
    name: str
    handle: Any
    node_id: str


@dataclass
class RayRunner:
    """The driver side of one run's slots: submit an audit, settle audits a crash left behind."""

    contract: Contract
    namespace: str
    ray: Any
    local_node: str
    measurement_root: Path
    free: list[_Slot] = field(default_factory=list)
    live: dict[str, _Slot] = field(default_factory=dict)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def run(
        self, cmd: list[str], audit_dir: Path, env: dict[str, str], timeout: float, attempt: int, files: dict[str, str]
    ) -> int:
        """Run one attempt on a slot; its exit status, or AuditTimedOut / WorkerLost / Halt."""
        slot = self._acquire()
        task = AuditTask(
            audit_id=audit_dir.name,
            audit_dir=str(audit_dir),
            cmd=list(cmd),
            env=dict(env),
            attempt=attempt,
            timeout_s=timeout,
            files=files,
            measurement_root=str(self.measurement_root),
            manifest_hash=self.contract.measurement.manifest_hash,
        )
        record = {"namespace": self.namespace, "slot": slot.name, "node_id": slot.node_id, "attempt": attempt}
        (audit_dir / EXECUTOR_FILE).write_text(json.dumps(record, sort_keys=True) + "\n")
        attempts.log_launch(audit_dir, attempt)  # before the task exists: the log decides re-runs
        ref = slot.handle.run.remote(task)
        crashpoint("audit.running")
        try:
            outcome: TaskOutcome = self.ray.get(ref, timeout=timeout + ANSWER_GRACE_S)
        except self.ray.exceptions.GetTimeoutError:
            raise AuditStateUnknown(_silent(task.audit_id, slot.name, timeout)) from None
        except self.ray.exceptions.RayActorError as ex:
            self._drop(slot)
            raise WorkerLost(
                task.audit_id, f"slot {slot.name} on node {slot.node_id[:12]} died: {type(ex).__name__}"
            ) from None
        self._release(slot, task.audit_id)
        if outcome.refused:
            raise Halt(
                f"ray worker on node {slot.node_id[:12]} cannot run audit {task.audit_id}: {outcome.refused}; "
                "the Ray executor needs the run and measurement directories on a filesystem shared by all nodes"
            )
        if outcome.timed_out:
            raise AuditTimedOut(auditproc.timeout_reason(timeout))
        assert outcome.rc is not None
        return outcome.rc

    def settle(self, audits: list[tuple[str, Path]]) -> list[str]:
        """Await the audits that live slots (of a driver that died) still run or hold.

        An audit no live slot holds and whose log shows no exit is judged from the log, as a
        local one is; but if it last ran on another node that is still alive, this driver cannot
        see its processes, so whether it still runs is unknown (AuditStateUnknown). Returns the
        audits it awaited.
        """
        wanted = {audit_id for audit_id, _ in audits}
        awaited = []
        for slot in self._adopt():
            for audit_id in sorted(set(self._ask(slot, "holds") or []) & wanted):
                self._ask(slot, "wait", audit_id)  # the wrapper logged its exit in the audit dir
                self._ask(slot, "forget", audit_id)
                awaited.append(audit_id)
        for audit_id, audit_dir in audits:
            self.check_remote(audit_id, audit_dir)
        return awaited

    def close(self) -> None:
        """Kill this run's slots (after their results are stored)."""
        with self.lock:
            slots, self.live, self.free = list(self.live.values()), {}, []
        for slot in slots:
            try:
                self.ray.kill(slot.handle, no_restart=True)
            except Exception:  # already gone, or the cluster is: nothing left to stop
                pass

    # ---- slots ---------------------------------------------------------------------------

    def _acquire(self) -> _Slot:
        with self.lock:
            if self.free:
                return self.free.pop()
        ex = self.contract.executor
        name = f"{SLOT_PREFIX}{uuid.uuid4().hex[:12]}"
        actor_cls = self.ray.remote(AuditSlot)
        handle = actor_cls.options(
            name=name,
            namespace=self.namespace,
            lifetime="detached",
            max_restarts=0,
            max_task_retries=0,
            max_concurrency=SLOT_THREADS,
            num_cpus=ex.num_cpus,
            resources=dict(ex.resources),
        ).remote()
        slot = _Slot(name, handle, self.ray.get(handle.node_id.remote()))
        with self.lock:
            self.live[name] = slot
        return slot

    def _release(self, slot: _Slot, audit_id: str) -> None:
        slot.handle.forget.remote(audit_id)
        with self.lock:
            if slot.name in self.live:
                self.free.append(slot)

    def _drop(self, slot: _Slot) -> None:
        with self.lock:
            self.live.pop(slot.name, None)

    def _adopt(self) -> list[_Slot]:
        """The live slots in this run's namespace, including those a crashed driver left."""
        names = [
            a["name"]
            for a in self.ray.util.list_named_actors(all_namespaces=True)
            if a.get("namespace") == self.namespace and a["name"].startswith(SLOT_PREFIX)
        ]
        found = []
        for name in names:
            with self.lock:
                known = self.live.get(name)
            if known is not None:
                found.append(known)
                continue
            try:
                handle = self.ray.get_actor(name, namespace=self.namespace)
                node = self.ray.get(handle.node_id.remote())
            except (ValueError, self.ray.exceptions.RayActorError):
                continue  # died between listing and lookup: it holds nothing
            slot = _Slot(name, handle, node)
            with self.lock:
                self.live[name] = slot
            found.append(slot)
        return found

    def _ask(self, slot: _Slot, method: str, *args: Any) -> Any:
        timeout = self.contract.measurement.audit_timeout_s + ANSWER_GRACE_S
        try:
            return self.ray.get(getattr(slot.handle, method).remote(*args), timeout=timeout)
        except self.ray.exceptions.GetTimeoutError:
            raise AuditStateUnknown(_silent(str(args[0]) if args else "?", slot.name, timeout)) from None
        except self.ray.exceptions.RayActorError:
            self._drop(slot)
            return None

    def check_remote(self, audit_id: str, audit_dir: Path) -> None:
        """AuditStateUnknown if the audit last ran on another live node and may still run there."""
        status = attempts.read_status(audit_dir)
        if status.state not in ("running", "died"):
            return
        try:
            record = json.loads((audit_dir / EXECUTOR_FILE).read_text())
        except (OSError, ValueError):
            return  # never submitted to Ray by this executor: the local rules apply
        node = record.get("node_id")
        if record.get("attempt") != status.attempt or node in (None, self.local_node):
            return
        alive = {n["NodeID"] for n in self.ray.nodes() if n.get("Alive")}
        if node in alive:
            raise AuditStateUnknown(
                f"audit {audit_id}: attempt {status.attempt} ran on node {node[:12]}, which is alive but its slot "
                "is gone; this driver cannot see whether the audit's processes still run there"
            )


def _silent(audit_id: str, slot: str, seconds: float) -> str:
    return (
        f"audit {audit_id}: Ray slot {slot} gave no answer within {seconds:g}s (its audit's timeout has passed); "
        "whether the audit still runs cannot be established"
    )


_RUNNERS: dict[str, RayRunner] = {}
_RUNNERS_LOCK = threading.Lock()


def runner_for(contract: Contract, audits_dir: Path, measurement_root: Path) -> RayRunner:
    """This process's runner for a run (one per run directory, kept across its batches)."""
    namespace = namespace_for(audits_dir)
    with _RUNNERS_LOCK:
        if namespace not in _RUNNERS:
            ray = connect(contract)
            local = str(ray.get_runtime_context().get_node_id())
            _RUNNERS[namespace] = RayRunner(contract, namespace, ray, local, measurement_root)
        return _RUNNERS[namespace]


def close_all() -> None:
    """Kill every slot this process started or adopted; a crashed driver's slots wait for its resume."""
    with _RUNNERS_LOCK:
        runners = list(_RUNNERS.values())
        _RUNNERS.clear()
    for runner in runners:
        runner.close()
