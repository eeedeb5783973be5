"""What the CLI commands do around the loop: locks, approval, planning, review actions.

Each function returns a process exit code (0 ok, 1 failed check, 2 refused, 3 halted).
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

import prepare
from loop.approval import ApprovalError, frozen_measurement_hash, require_approval
from loop.contract import LoadedContract
from loop.errors import Halt
from loop.locks import LOCKED_EXIT_CODE, LockedError, policy_lock, run_lock
from loop.policystore import read_policy_dir
from loop.report import build_summary, render
from loop.runstate import RunState
from sil_policy import PolicyError

RUNS = Path("state/runs")
POLICIES = Path("state/policies")


def _approval_id(loaded: LoadedContract, root: Path) -> str:
    if loaded.contract.offline:
        return "not required: every role is offline"
    approval = require_approval(loaded.contract, root)
    return (f"{approval.approver} until {approval.expires_at} (contract {approval.contract_hash[:12]}, "
            f"measurement {approval.measurement_hash[:12]}, signed by key {approval.key_fingerprint})")


def _approval_guard(loaded: LoadedContract, root: Path):
    """Re-check the approval before every batch of audits of a run with real model calls."""
    def guard() -> None:
        try:
            require_approval(loaded.contract, root)
        except ApprovalError as ex:
            raise Halt(f"approval no longer valid, no further audits: {ex}") from None

    return (lambda: None) if loaded.contract.offline else guard


def _anchor(run_dir: Path, root: Path):
    """Checkpoint the ledger head in git refs (signed when SIL_SIGNING_KEY is set)."""
    from loop.checkpoint import CheckpointError, anchor_repo, write_checkpoint
    from loop.sshsig import Signer

    signer = Signer.from_env()
    repo = anchor_repo(root)

    def anchor() -> None:
        try:
            write_checkpoint(run_dir / "ledger.jsonl", repo, signer)
        except CheckpointError as ex:
            raise Halt(f"cannot anchor the ledger head: {ex}") from None

    return anchor


def start_run(loaded: LoadedContract, root: Path, run_id: str, replicate: int | None,
              out: Console, err: Console) -> int:
    from loop.checkpoint import anchor_repo
    from train import RunConfig, Runner

    run_dir = root / RUNS / run_id
    try:
        approval = _approval_id(loaded, root)
        measurement_hash = frozen_measurement_hash(loaded.contract, root)
        with run_lock(run_dir), policy_lock(root / POLICIES):
            state = RunState.load(run_dir)
            if state is not None and state.phase == "done":
                out.print(f"run {run_id} is already complete (start another with --new):")
            else:
                verb = "resuming" if state is not None else "starting"
                err.print(f"{verb} run {run_id} ({loaded.contract.backend} backend)")
                cfg = RunConfig(repo_root=root, run_dir=run_dir, policy_dir=root / POLICIES,
                                replicate_k=replicate, approval_id=approval,
                                on_event=lambda line: err.print(line, highlight=False),
                                before_audits=_approval_guard(loaded, root),
                                anchor=_anchor(run_dir, root), policy_repo=anchor_repo(root))
                runner = Runner(loaded, cfg, measurement_hash)
                state = runner.run()
            records = _records(run_dir)
            render(build_summary(state, records, loaded.contract), out)
            out.print(f"ledger: {run_dir / 'ledger.jsonl'}  (verify: sil ledger verify {run_id})")
            return 3 if state.phase == "halted" else 0
    except LockedError as ex:
        err.print(f"[bold red]locked:[/] {ex}")
        return LOCKED_EXIT_CODE
    except (ApprovalError, PolicyError, prepare.MeasurementError) as ex:
        err.print(f"[bold red]refused:[/] {ex}")
        return 2


def _records(run_dir: Path):
    import ledger

    return list(ledger.read_records(run_dir / "ledger.jsonl"))


def plan_run(loaded: LoadedContract, root: Path, replicate: int | None) -> str:
    """The planned audits and the worst-case cost, with no model call."""
    c = loaded.contract
    b = c.budget
    k = replicate or c.promotion.replicate_k
    lines = [
        f"contract {c.contract_id} ({c.contract_hash[:12]}), backend {c.backend}, "
        f"{'offline' if c.offline else 'REAL MODEL CALLS'}",
        f"baseline: {c.promotion.baseline_k} audits; never arm: {c.promotion.calibration_pairs} A/A pairs",
        "arm budgets (audits): " + ", ".join(f"{a}={n}" for a, n in b.arm_audits.items()),
        f"gate: screen round + up to {k} confirmation rounds per candidate (2 audits each)",
        f"hard limits: {b.max_audits} audits, {b.max_wall_s:g}s wall time, ${b.max_usd:g}",
    ]
    if c.backend == "petri":
        from loop.backends.petri import worst_case_cost

        seeds = len(prepare.load_seeds(root / c.measurement.seed_library))
        lines.append(f"worst-case cost at the audit limit: ${worst_case_cost(c, n_seeds=seeds):.2f} "
                     f"(every sample at its token limit, dearest prices); no model call was made")
    else:
        lines.append("worst-case cost: $0 (embedded simulated audit, no model calls)")
    return "\n".join(lines)


def check_contract(loaded: LoadedContract, root: Path, out: Console, err: Console) -> int:
    c = loaded.contract
    try:
        manifest = prepare.verify(root / c.measurement.seed_library, c.measurement.manifest_hash)
        policy_set, _ = read_policy_dir(root / POLICIES)
    except (prepare.MeasurementError, PolicyError) as ex:
        err.print(f"[bold red]check failed:[/] {ex}")
        return 1
    out.print(f"contract {c.contract_id}: ok (hash {c.contract_hash[:12]})")
    out.print(f"measurement: ok ({len(manifest.files)} files, {manifest.manifest_hash[:12]})")
    out.print(f"policies: ok (set {policy_set.set_id})")
    if not c.offline:
        try:
            require_approval(c, root)
            out.print("approval: valid")
        except ApprovalError as ex:
            out.print(f"approval: missing or invalid — {ex}")
    return 0


def replicate_keep(loaded: LoadedContract, root: Path, run_dir: Path, mutation_id: str, k: int,
                   out: Console, err: Console) -> int:
    """Re-audit a past KEEP against its parent in K fresh paired rounds; demote if it does not hold."""
    from loop.replication import ReplicationError, replicate

    try:
        approval = _approval_id(loaded, root)
        with run_lock(run_dir):
            result = replicate(loaded, root, run_dir, mutation_id, k, approval,
                               frozen_measurement_hash(loaded.contract, root),
                               on_event=lambda line: err.print(line, highlight=False))
    except (ApprovalError, LockedError, ReplicationError) as ex:
        err.print(f"[bold red]refused:[/] {ex}")
        return 2
    out.print(result.describe())
    return 0


def promote_champion(root: Path, run_dir: Path, arm: str, out: Console, err: Console) -> int:
    """Copy an arm's champion into state/policies, if those files are still the run's origin."""
    from loop.replication import PromotionError, promote_to_user

    try:
        with run_lock(run_dir), policy_lock(root / POLICIES):
            message = promote_to_user(run_dir, root / POLICIES, arm)
    except (LockedError, PromotionError, PolicyError) as ex:
        err.print(f"[bold red]refused:[/] {ex}")
        return 2
    out.print(message)
    return 0
