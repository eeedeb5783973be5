"""The fixed-budget loop (`sil run`): a phase sequencer over one frozen run context.

    0. preflight  a sentinel audit proves every searched surface reaches the target
    1. baseline   K audits of the starting policy, recorded with provenance
    2. never      concurrent A/A pairs of the starting policy: noise floor and drift
    3. random     one candidate at a time, one paired round, a seeded coin decides
    4. gate       one candidate at a time: screen, then sequential paired confirmation
    5. final      the gate's champion is certified against the start (or rolled back);
                  the random arm's champion is re-measured, for the summary

Each phase is a function of the run context (sil/run/context.py). State is saved atomically
after every step and the ledger is written first, so re-running the same command resumes
where the run stopped without repeating a finished audit. This module is also the
composition root: it builds the context from a contract (`open_run`) and runs the whole
`sil run` command (`execute_run`: approval, locks, phases, summary).

    python train.py [--contract program.md]        # same as `sil run`
"""

from __future__ import annotations

import argparse
import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from sil.base.diskspace import check_free_space, is_disk_error
from sil.base.diskspace import describe as describe_disk_error
from sil.base.errors import ExitCode, Halt, Refused
from sil.base.locks import LockedError, policy_lock, remove_lock_only_dir, run_lock
from sil.base.runid import RunIdError, run_dir_under
from sil.base.sshsig import SignatureError, Signer, fingerprint
from sil.contract import prepare
from sil.contract.approval import ApprovalError, frozen_measurement_hash, require_approval
from sil.contract.schema import (
    ContractError,
    LoadedContract,
    approval_free_reason,
    load_contract,
)
from sil.exec import measure
from sil.exec.backends import make_backend
from sil.exec.holdoutcheck import holdout_check
from sil.exec.measure import MeasureContext
from sil.exec.startchecks import run_refusals
from sil.integrity.checkpoint import CheckpointError, anchor_repo, project_id, start_conflict, write_checkpoint
from sil.integrity.ledger import Ledger, LedgerError, read_records
from sil.integrity.projectid import ProjectIdLost, check_project_id
from sil.integrity.records import HaltRecord, Keys, ResumeRecord, RunRecord, StopRecord, Trust
from sil.integrity.witness import Witness, WitnessError, witness_from_env
from sil.policies.store import HandEditedPolicy, PolicyStore
from sil.review.runview import write_contract_snapshot
from sil.review.summary import build_summary, render
from sil.run.arms import candidate_phase, never_phase
from sil.run.baseline import baseline_phase
from sil.run.canary import canary_check
from sil.run.canary import reserve as canary_reserve
from sil.run.certify import final_phase
from sil.run.context import RunContext
from sil.run.preflight import preflight_phase
from sil.run.proposing import proposer_check
from sil.run.rounds import AuditExecutor, Guards, RoundRunner
from sil.stats.judges import JudgeState
from sil.store.binding import stored_run_problems
from sil.store.events import AnchorFailed, Halted, Resuming, Update
from sil.store.journal import Journal
from sil.store.policyrefs import RunRefs
from sil.store.runstate import RunState
from sil_policy import PolicyError

RUNS = Path("state/runs")
POLICIES = Path("state/policies")
LOCKS = RUNS / ".locks"  # cross-run locks (the runtime policies): tool state, never the user's tree
ARMS = ("never", "random", "gate")
MODEL_ROLES = ("auditor", "target", "judge", "mutator")
Phases = tuple[tuple[str, Callable[[RunContext], None]], ...]
PHASES: Phases = (
    ("preflight", preflight_phase),
    ("baseline", baseline_phase),
    ("never", never_phase),
    ("random", functools.partial(candidate_phase, name="random")),
    ("gate", functools.partial(candidate_phase, name="gate")),
    ("final", final_phase),
)
HALT_NEXT = "the halt is recorded; fix its cause, then run the same `sil run` command again to resume"
STOPPING = (Halt, measure.MeasurementChanged, HandEditedPolicy)
RESUME_HINT = "Free some space, then re-run the same command to resume."


def _nothing() -> None:
    return None


def print_update(update: Update) -> None:
    print(update.event.text())


@dataclass(frozen=True)
class RunConfig:
    repo_root: Path
    run_dir: Path
    policy_dir: Path
    replicate_k: int | None = None  # None: the contract's (new run) or the run's own (resume)
    approval_id: str = "not required (offline)"
    on_event: Callable[[Update], None] = print_update
    before_audits: Callable[[], None] = _nothing  # re-checks the approval; raises Halt to stop
    anchor: Callable[[], None] = _nothing  # signs and anchors the ledger head outside the file
    policy_repo: Path | None = None  # git repo for the candidates' refs (sil/store/policyrefs.py)
    trust: Trust = Trust()  # how this command signs checkpoints; must match what the run declared
    execute: AuditExecutor | None = None  # None: the backend's processes; the bench's audits run in-process


# ---- the phase sequencer -------------------------------------------------------------------


def run_phases(rc: RunContext, phases: Phases = PHASES) -> RunState:
    """Drive the run to completion or to a recorded halt, from its persisted state (`phases`:
    the bench swaps in an arm with its own proposer or judge; a run always has PHASES)."""
    state = rc.state
    if state.phase == "halted" and state.resume_phase is None:
        return state
    try:
        resume_after_halt(rc)
        check_same_run(rc)
        for phase, step in phases:
            if state.phase_done(phase) or (phase in ARMS and phase not in rc.contract.arms):
                continue
            state.phase = phase  # type: ignore[assignment]
            rc.save()
            if phase != "preflight":  # the judge is checked once the wiring is known to work
                canary_check(rc, f"before-{phase}")
            step(rc)
        canary_check(rc, "end")
        state.phase = "done"
        stop(rc, "completed")
    except STOPPING as ex:
        halt(rc, str(ex))
    except (OSError, LedgerError) as ex:
        if not is_disk_error(ex):
            raise
        disk_halt(rc, ex)
    return state


def disk_halt(rc: RunContext, ex: BaseException) -> None:
    """Halt on a full or failing disk: recorded if the disk still takes the record, else only said."""
    reason = f"disk: {describe_disk_error(ex)}; free some space, then re-run the command to resume"
    try:
        halt(rc, reason)
    except (OSError, LedgerError) as again:
        rc.state.phase = "halted"
        also = (
            f"the halt could not be recorded either ({again}); the run's files on disk are as they were "
            "before the failed write, and re-running resumes from them"
        )
        rc.emit(Halted(reason=reason, next_step=HALT_NEXT, also=also))


def resume_after_halt(rc: RunContext) -> None:
    """Run again after a halt: back to the halted phase, where the cause is checked anew with
    fresh retries (the `resume` record says from where; the recorded gaps stay)."""
    state = rc.state
    if state.phase == "halted":
        rc.emit(Resuming(state.halt_reason))
        phase = state.resume_phase or "preflight"
        resume = ResumeRecord(
            after_halt=state.halt_reason or "", phase=phase, preflight_attempts_before=len(rc.book.of_type("probe"))
        )
        rc.book.once(Keys.resume(len(rc.book.of_type("resume"))), resume)
        state.phase, state.halt_reason = phase, None
        state.consecutive_gaps = {}


def check_same_run(rc: RunContext) -> None:
    if rc.state.contract_hash != rc.contract.contract_hash:
        raise Halt("this run was started under another contract; start a new run (--new)")
    if rc.state.measurement_hash != rc.measurement_hash:
        raise Halt(
            "the frozen measurement (seeds, rubric, code or pinned packages) changed "
            "since this run started; start a new run under a new contract"
        )


def stop(rc: RunContext, reason: str) -> None:
    rc.save()
    s = rc.state
    rc.book.once(
        Keys.STOP, StopRecord(reason=reason, audits=s.audits, gaps=s.gaps, usd=s.usd, elapsed_s=round(s.elapsed_s, 2))
    )
    rc.rounds.anchor()


def halt(rc: RunContext, reason: str) -> None:
    state = rc.state
    if state.phase != "halted":
        state.resume_phase = state.phase
    state.phase, state.halt_reason = "halted", reason
    rc.book.once(Keys.halt(len(rc.book.of_type("halt"))), HaltRecord(reason=reason, phase=state.resume_phase))
    rc.emit(Halted(reason=reason, next_step=HALT_NEXT))
    rc.save()
    try:
        rc.rounds.anchor()
    except Halt as anchor_failure:
        rc.emit(AnchorFailed(str(anchor_failure)))


# ---- the composition root ------------------------------------------------------------------


def open_run(loaded: LoadedContract, cfg: RunConfig, measurement_hash: str) -> RunContext:
    """The run context for a new or stored run (Refused if it cannot be resumed as asked)."""
    contract = loaded.contract
    refuse_a_lost_project(cfg.repo_root)
    measure_ctx = MeasureContext.from_contract(contract, cfg.repo_root)
    backend = make_backend(contract.backend)
    store = PolicyStore(cfg.run_dir)
    ledger = Ledger(cfg.run_dir / "ledger.jsonl", offline=contract.offline, simulated=backend.simulated)
    stored = RunState.load(cfg.run_dir)
    if stored is not None and cfg.replicate_k is not None and cfg.replicate_k != stored.replicate_k:
        raise Refused(
            f"run {cfg.run_dir.name} confirms each candidate with --replicate {stored.replicate_k}; "
            f"resuming it with {cfg.replicate_k} would change the design mid-candidate. Resume "
            "without --replicate, or start a new run with --new"
        )
    replicate_k = cfg.replicate_k or contract.promotion.replicate_k
    promotion = contract.promotion.model_copy(update={"replicate_k": stored.replicate_k if stored else replicate_k})

    def new_state() -> RunState:
        return RunState(
            run_id=cfg.run_dir.name,
            contract_hash=contract.contract_hash,
            measurement_hash=measurement_hash,
            origin=store.snapshot_dir(cfg.policy_dir),
            replicate_k=replicate_k,
            shared=JudgeState.start(promotion),
        )

    journal = Journal.open(cfg.run_dir, ledger, new_state, cfg.on_event)  # reads and checks the policies
    project = run_project(cfg.repo_root)
    rounds = RoundRunner(journal, measure_ctx, backend, store, Guards(cfg.before_audits, cfg.anchor), cfg.execute)
    rounds.reserve_usd = canary_reserve(contract, measure_ctx.measurement_root, backend)
    rc = RunContext(
        loaded=loaded,
        promotion=promotion,
        measurement_hash=measurement_hash,
        approval_id=cfg.approval_id,
        policy_dir=cfg.policy_dir,
        journal=journal,
        rounds=rounds,
        store=store,
        refs=RunRefs(cfg.policy_repo, cfg.run_dir.name, store),
        backend=backend,
        measure=measure_ctx,
        project_root=cfg.repo_root,
    )
    rc.book.once(Keys.RUN, run_record(rc, cfg.trust, project))
    declared = rc.book.get("contract", Keys.RUN, RunRecord)
    if declared is not None and (why := declared.trust.mismatch(cfg.trust)):
        raise Refused(f"run {cfg.run_dir.name}: {why}")
    write_contract_snapshot(cfg.run_dir, contract)
    return rc


def refuse_a_lost_project(root: Path) -> None:
    """Refused, before anything is written, when the project's id is lost while earlier runs name
    one (a clone made without refs/sil/*, a deleted ref)."""
    try:
        check_project_id(root)
    except ProjectIdLost as ex:
        raise Refused(str(ex)) from None


def run_project(root: Path) -> str:
    """The project id this run names, made on the project's first run."""
    try:
        return project_id(root) or ""
    except ProjectIdLost as ex:
        raise Refused(str(ex)) from None


def run_record(rc: RunContext, trust: Trust, project: str) -> RunRecord:
    c = rc.contract
    described = rc.backend.describe(c)
    return RunRecord(
        contract_id=c.contract_id,
        contract_hash=c.contract_hash,
        measurement_hash=rc.measurement_hash,
        manifest_hash=c.measurement.manifest_hash,
        backend=c.backend,
        models={r: getattr(c.models, r).model for r in MODEL_ROLES},
        arms=list(c.arms),
        seed=c.seed,
        replicate_k=rc.promotion.replicate_k,
        approval=rc.approval_id,
        note=described.note,
        trust=trust,
        roles=described.roles,
        token_counting=described.token_counting,
        project=project,
    )


def approval_id(loaded: LoadedContract, root: Path) -> str:
    if loaded.contract.approval_free:
        return f"not required: {approval_free_reason(loaded.contract)}"
    approval = require_approval(loaded.contract, root)
    if approval is None:
        return f"not required: {approval_free_reason(loaded.contract)}"
    return (
        f"{approval.approver} until {approval.expires_at} (contract {approval.contract_hash[:12]}, "
        f"measurement {approval.measurement_hash[:12]}, signed by key {approval.key_fingerprint})"
    )


def approval_guard(loaded: LoadedContract, root: Path) -> Callable[[], None]:
    """Re-check the approval before every batch of audits of a run with real model calls."""
    if loaded.contract.approval_free:
        return _nothing

    def guard() -> None:
        try:
            require_approval(loaded.contract, root)
        except ApprovalError as ex:
            raise Halt(f"approval no longer valid, no further audits: {ex}") from None

    return guard


def signing_trust(signer: Signer | None) -> Trust:
    """The trust a command with this signer declares (SignatureError if the key is unreadable)."""
    if signer is None:
        return Trust()
    return Trust(signed=True, signer=signer.identity, key_fingerprints=[fingerprint(signer.key_path)])


def anchor_guard(
    run_dir: Path, root: Path, signer: Signer | None = None, witness: Witness | None = None
) -> Callable[[], None]:
    """Checkpoint the ledger head in git refs (signed when a signer is given) and in the witness."""
    repo = anchor_repo(root)

    def anchor() -> None:
        if repo is None:
            raise Halt(f"cannot anchor the ledger head: no git repository for checkpoints at {root}")
        try:
            write_checkpoint(run_dir / "ledger.jsonl", repo, signer, witness=witness)
        except CheckpointError as ex:
            raise Halt(f"cannot anchor the ledger head: {ex}") from None

    return anchor


def guarded_config(
    loaded: LoadedContract,
    root: Path,
    run_dir: Path,
    on_event: Callable[[Update], None],
    replicate_k: int | None = None,
) -> RunConfig:
    """The configuration of a real command: approval re-checks, signed anchoring, witness, refs in git."""
    signer = Signer.from_env()
    return RunConfig(
        repo_root=root,
        run_dir=run_dir,
        policy_dir=root / POLICIES,
        replicate_k=replicate_k,
        approval_id=approval_id(loaded, root),
        on_event=on_event,
        before_audits=approval_guard(loaded, root),
        anchor=anchor_guard(run_dir, root, signer, witness_from_env(root)),
        policy_repo=anchor_repo(root),
        trust=signing_trust(signer),
    )


def unrefused_run_dir(loaded: LoadedContract, root: Path, run_id: str, err: Console) -> Path | None:
    """The run's folder, or None after printing why `sil run` refuses before creating anything."""
    try:
        run_dir = run_dir_under(root / RUNS, run_id)
    except RunIdError as ex:
        err.print(f"[bold red]refused:[/] {escape(str(ex))}")
        return None
    proposer = proposer_check(loaded)
    refusals = run_refusals(loaded, root) + ([proposer] if proposer.status == "fail" else [])
    if not run_dir.exists() and (holdout := holdout_check(loaded, root)).status == "fail":
        refusals.append(holdout)  # a resumed run keeps the certification it may already have spent
    for item in refusals:
        err.print(f"[bold red]refused:[/] {escape(item.detail)}")
    if refusals:
        err.print("nothing was started; `sil check` lists every start-time check")
        return None
    return run_dir


def refuse_a_broken_start(root: Path, run_dir: Path, run_id: str) -> None:
    """Refused when the stored run cannot be resumed as it is: its ledger belongs elsewhere, or its
    snapshots, ledger or checkpoints are not what a run of this project leaves."""
    try:
        if conflict := start_conflict(run_dir / "ledger.jsonl", anchor_repo(root, create=False), run_id):
            raise Refused(f"{conflict}. Nothing was started")
    except CheckpointError as ex:
        raise Refused(
            f"run {run_id} cannot be resumed: its checkpoints do not verify ({ex}). Nothing was started"
        ) from None
    except OSError as ex:
        if is_disk_error(ex):
            raise
        raise Refused(
            f"run {run_id} cannot be resumed: its ledger cannot be read ({ex}). Nothing was started"
        ) from None
    if problems := stored_run_problems(run_dir):
        raise Refused(f"run {run_id} cannot be resumed: {'; '.join(problems)}. Nothing was started")


def execute_run(
    loaded: LoadedContract,
    root: Path,
    run_id: str,
    replicate: int | None,
    out: Console,
    err: Console,
    on_event: Callable[[Update], None] | None = None,
    before_summary: Callable[[], None] | None = None,
) -> int:
    """The whole `sil run` command; returns its exit code. Refusals leave no run folder."""
    run_dir = unrefused_run_dir(loaded, root, run_id, err)
    if run_dir is None:
        return ExitCode.REFUSED
    fresh = not run_dir.exists()  # a refusal of a first start must leave no run folder behind
    try:
        measurement_hash = frozen_measurement_hash(loaded.contract, root)
        emit = on_event or (lambda update: err.print(escape(update.event.text()), highlight=False))
        cfg = guarded_config(loaded, root, run_dir, emit, replicate)
        refuse_a_broken_start(root, run_dir, run_id)
        with run_lock(run_dir), policy_lock(root / POLICIES, root / LOCKS):
            check_free_space(run_dir, loaded.contract.budget.min_free_mb)
            stored = RunState.load(run_dir)
            if stored is not None and stored.phase == "done":
                if before_summary is not None:
                    before_summary()  # no progress bar for a run with nothing left to do
                out.print(f"run {run_id} is already complete (start another with --new):")
                rc = open_run(loaded, cfg, measurement_hash)
            else:
                err.print(f"{'resuming' if stored else 'starting'} run {run_id} ({loaded.contract.backend} backend)")
                rc = open_run(loaded, cfg, measurement_hash)
                run_phases(rc)
            records = list(read_records(run_dir / "ledger.jsonl"))
            if before_summary is not None:
                before_summary()  # e.g. the progress bar leaves the screen first
            render(build_summary(rc.state, records, loaded.contract, rc.note, rc.measure.higher_better), out)
            out.print(f"ledger: {run_dir / 'ledger.jsonl'}  (verify: sil ledger verify {run_id})")
            return ExitCode.HALTED if rc.state.phase == "halted" else ExitCode.OK
    except LockedError as ex:
        err.print(f"[bold red]locked:[/] {escape(str(ex))}")
        return ExitCode.LOCKED
    except (OSError, LedgerError) as ex:
        if not is_disk_error(ex):
            raise
        err.print(f"[bold red]halted (disk):[/] {describe_disk_error(ex)}; nothing further was written. {RESUME_HINT}")
        return ExitCode.HALTED
    except (
        ApprovalError,
        PolicyError,
        prepare.MeasurementError,
        measure.MeasurementChanged,
        Refused,
        SignatureError,
        WitnessError,
    ) as ex:
        err.print(f"[bold red]refused:[/] {escape(str(ex))}")
        if fresh:
            remove_lock_only_dir(run_dir)
        return ExitCode.REFUSED


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python train.py", description=__doc__.split("\n")[0])
    ap.add_argument("--contract", type=Path, default=Path("program.md"))
    args = ap.parse_args(argv)
    try:
        loaded = load_contract(args.contract)
    except ContractError as ex:
        Console(stderr=True).print(f"[bold red]error:[/] {ex}", markup=True)
        return ExitCode.REFUSED
    c = loaded.contract
    run_id = f"{c.contract_id}-{c.contract_hash[:8]}"
    return execute_run(loaded, Path.cwd(), run_id, None, Console(), Console(stderr=True))


if __name__ == "__main__":
    raise SystemExit(main())
