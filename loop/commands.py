"""What the review commands do around a run: check, plan, replicate, promote.

Each function returns a process exit code (loop/errors.ExitCode). `sil run` itself is
train.execute_run.
"""

from __future__ import annotations

from pathlib import Path

from rich.console import Console

import prepare
from loop.approval import ApprovalError, frozen_measurement_hash, require_approval
from loop.backends import make_backend
from loop.contract import LoadedContract
from loop.errors import ExitCode, Halt, Refused
from loop.locks import LockedError, policy_lock, run_lock
from loop.policystore import read_policy_dir
from loop.release import promote_to_user
from loop.replication import replicate
from loop.runstate import RunState
from loop.sshsig import SignatureError, Signer
from loop.witness import WitnessError, witness_from_env
from sil_policy import PolicyError
from train import LOCKS, POLICIES, anchor_guard, check_same_run, guarded_config, open_run, signing_trust

PREFLIGHT_AUDITS = 1


def plan_run(loaded: LoadedContract, root: Path, replicate_k: int | None) -> str:
    """The planned audits and the worst-case cost, with no model call."""
    c = loaded.contract
    b = c.budget
    k = replicate_k or c.promotion.replicate_k
    backend = make_backend(c.backend)
    seeds = len(prepare.load_seeds(root / c.measurement.seed_library))
    worst = (b.max_audits + PREFLIGHT_AUDITS) * backend.audit_cost_bound(c, seeds)
    return "\n".join(
        [
            f"contract {c.contract_id} ({c.contract_hash[:12]}), backend {c.backend}, "
            f"{'offline' if c.offline else 'REAL MODEL CALLS'}",
            f"baseline: {c.promotion.baseline_k} audits; never arm: {c.promotion.calibration_pairs} A/A pairs",
            "arm budgets (audits): " + ", ".join(f"{a}={n}" for a, n in b.arm_audits.items()),
            f"gate: screen round + up to {k} confirmation rounds per candidate (2 audits each)",
            f"hard limits: {b.max_audits} audits, {b.max_wall_s:g}s wall time, ${b.max_usd:g}",
            f"worst-case cost at the audit limit: ${worst:.2f} ({backend.note}); no model call was made",
        ]
    )


def check_contract(loaded: LoadedContract, root: Path, out: Console, err: Console) -> int:
    c = loaded.contract
    try:
        manifest = prepare.verify(root / c.measurement.seed_library, c.measurement.manifest_hash)
        policy_set, _ = read_policy_dir(root / POLICIES)
    except (prepare.MeasurementError, PolicyError) as ex:
        err.print(f"[bold red]check failed:[/] {ex}")
        return ExitCode.FAILED
    out.print(f"contract {c.contract_id}: ok (hash {c.contract_hash[:12]})")
    out.print(f"measurement: ok ({len(manifest.files)} files, {manifest.manifest_hash[:12]})")
    out.print(f"policies: ok (set {policy_set.set_id})")
    if not c.offline:
        try:
            require_approval(c, root)
            out.print("approval: valid")
        except ApprovalError as ex:
            out.print(f"approval: missing or invalid — {ex}")
    return ExitCode.OK


def replicate_keep(
    loaded: LoadedContract,
    root: Path,
    run_dir: Path,
    mutation_id: str,
    arm: str | None,
    k: int,
    out: Console,
    err: Console,
) -> int:
    """Re-audit a past KEEP against its parent in K fresh paired rounds, under the run's guards."""
    try:
        with run_lock(run_dir):
            if RunState.load(run_dir) is None:
                raise Refused(f"{run_dir} has no run state")
            cfg = guarded_config(loaded, root, run_dir, lambda line: err.print(line, highlight=False))
            rc = open_run(loaded, cfg, frozen_measurement_hash(loaded.contract, root))
            try:
                check_same_run(rc)
            except Halt as ex:
                raise Refused(f"{ex}; pass the run's own contract with --contract") from None
            result = replicate(rc, mutation_id, arm, k, cfg.trust)
    except LockedError as ex:
        err.print(f"[bold red]locked:[/] {ex}")
        return ExitCode.LOCKED
    except (ApprovalError, Refused, PolicyError, SignatureError, WitnessError) as ex:
        err.print(f"[bold red]refused:[/] {ex}")
        return ExitCode.REFUSED
    except Halt as ex:
        err.print(f"[bold red]stopped:[/] {ex}")
        return ExitCode.HALTED
    ti = "—" if result.target_interval is None else "{:+.3f} [{:+.3f}, {:+.3f}]".format(*result.target_interval)
    verdict = "DEMOTED" if result.demoted else "holds"
    extra = " (the arm's champion was restored to its parent)" if result.champion_reverted else ""
    out.print(
        f"replication of {result.mutation_id} ({result.arm}): {result.rounds} fresh paired rounds; "
        f"Δ{result.target} {ti}; {verdict}: {result.reason}{extra}"
    )
    return ExitCode.OK


def promote_champion(root: Path, run_dir: Path, arm: str, out: Console, err: Console) -> int:
    """Copy an arm's champion into state/policies, if those files are still the run's origin."""
    try:
        with run_lock(run_dir), policy_lock(root / POLICIES, root / LOCKS):
            signer = Signer.from_env()
            message = promote_to_user(run_dir, root / POLICIES, arm, signing_trust(signer))
            anchor_guard(run_dir, root, signer, witness_from_env(root))()
    except LockedError as ex:
        err.print(f"[bold red]locked:[/] {ex}")
        return ExitCode.LOCKED
    except (Refused, PolicyError, SignatureError, WitnessError) as ex:
        err.print(f"[bold red]refused:[/] {ex}")
        return ExitCode.REFUSED
    except Halt as ex:
        err.print(f"[bold red]copied, but the ledger head is not anchored:[/] {ex}")
        return ExitCode.FAILED
    out.print(message)
    return ExitCode.OK
