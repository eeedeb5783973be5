"""What the review commands do around a run: check, plan, replicate, promote.

Each function returns a process exit code (sil/base/errors.ExitCode). `sil run` itself is
train.execute_run.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rich.console import Console
from rich.markup import escape

from sil.base.errors import ExitCode, Halt, Refused
from sil.base.locks import LockedError, policy_lock, run_lock
from sil.base.sshsig import SignatureError, Signer
from sil.contract.approval import ApprovalError, frozen_measurement_hash
from sil.contract.schema import LoadedContract
from sil.exec.backends import make_backend
from sil.exec.startchecks import most_seeds, planned_audits, start_checks
from sil.integrity.witness import WitnessError, witness_from_env
from sil.run.canary import reserve as canary_reserve
from sil.run.outlookcheck import outlook_check
from sil.run.proposing import proposer_check
from sil.run.replication import power_note, replicate
from sil.run.train import LOCKS, PHASES, POLICIES, anchor_guard, check_same_run, guarded_config, open_run, signing_trust
from sil.search.proposers.llm import worst_case_cost as mutator_worst_case
from sil.store.events import Update
from sil.store.release import champion_diff, promote_to_user, promotion_risks
from sil.store.runstate import RunState
from sil_policy import PolicyError


def plan_run(loaded: LoadedContract, root: Path, replicate_k: int | None) -> str:
    """Every audit the run can make, and the worst-case cost, with no model call."""
    c = loaded.contract
    b = c.budget
    k = replicate_k or c.promotion.replicate_k
    backend = make_backend(c.backend)
    note = backend.describe(c).note
    seeds = most_seeds(root / c.measurement.seed_library)
    plan = planned_audits(c)
    worst = plan.total * backend.audit_cost_bound(c, seeds)
    mutator_calls, mutator_usd = mutator_worst_case(c)
    canary_checks = len(PHASES)  # before every phase but the preflight, and at the end
    canary_usd = canary_checks * canary_reserve(c, root / c.measurement.seed_library, backend)
    seen = outlook_check(loaded, root)
    return "\n".join(
        [
            f"contract {c.contract_id} ({c.contract_hash[:12]}), backend {c.backend}, "
            f"{'offline' if c.offline else 'REAL MODEL CALLS (local, loopback only)' if c.approval_free else 'REAL MODEL CALLS'}",
            f"preflight: {plan.preflight} audit; baseline: {plan.baseline} audits; "
            f"never arm: {c.promotion.calibration_pairs} A/A pairs",
            "arm budgets (audits): " + ", ".join(f"{a}={n}" for a, n in plan.arms.items()),
            screen_plan(c.promotion.screen_reference, k),
            f"final: certification of the gate champion up to {plan.certification} audits; "
            f"final check of the random champion up to {plan.final_checks} audits"
            + (
                f"; of the gate champion on the search seeds up to {plan.search_check} (certified on held-out seeds)"
                if plan.search_check
                else ""
            ),
            f"audits the run can make: {plan.total} (hard limit {b.max_audits} + preflight)",
            f"hard limits: {b.max_audits} audits, {b.max_wall_s:g}s wall time, ${b.max_usd:g}",
            (
                f"mutator {c.models.mutator.model}: offline, no cost"
                if c.models.mutator.offline
                else f"mutator {c.models.mutator.model}: at most {mutator_calls} calls, worst case ${mutator_usd:.2f}"
            ),
            f"worst-case cost at the audit limit: ${worst:.2f}"
            + (f" + ${mutator_usd:.2f} for the mutator" if mutator_usd else "")
            + (f" + ${canary_usd:.2f} for {canary_checks} judge-drift canary checks" if canary_usd else "")
            + f" ({note}); the run stops at max_usd ${b.max_usd:g}; no model call was made",
            *([seen.detail] if seen else []),
        ]
    )


def screen_plan(reference: int, confirmations: int) -> str:
    """What `sil check` says a gate candidate's rounds cost."""
    rounds = f"up to {confirmations} confirmation rounds per candidate (2 audits each)"
    if reference < 2:
        return f"gate: screen round + {rounds}"
    return f"gate: screen of the candidate's audit alone against the champion's last {reference} audits + {rounds}"


def check_contract(loaded: LoadedContract, root: Path, out: Console, err: Console, as_json: bool = False) -> int:
    """Print every start-time check of `sil run`: exit 1 if the measurement or policies fail, 2 if refused."""
    report = start_checks(loaded, root)
    report.items.append(proposer_check(loaded))
    if (seen := outlook_check(loaded, root)) is not None:
        report.items.append(seen)
    if as_json:
        sys.stdout.write(report.model_dump_json(indent=1) + "\n")
    for item in [] if as_json else report.items:
        colour = {"ok": "green", "warn": "yellow", "fail": "bold red"}[item.status]
        line = f"[{colour}]{item.status:>4}[/] {item.name}: {escape(item.detail)}"
        (err if item.status == "fail" else out).print(line, highlight=False)
    if not report.ok:
        if not as_json:
            err.print(f"check failed: {len(report.failures)} of {len(report.items)} checks; `sil run` would refuse")
        broken = any(i.name in ("measurement", "policies") for i in report.failures)
        return ExitCode.FAILED if broken else ExitCode.REFUSED
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
    as_json: bool = False,
    quiet: bool = False,
) -> int:
    """Re-audit a past KEEP against its parent in K fresh paired rounds, under the run's guards."""

    def say(line: str) -> None:
        if not quiet:
            err.print(line, highlight=False)

    def show(update: Update) -> None:
        say(update.event.text())

    try:
        with run_lock(run_dir):
            if RunState.load(run_dir) is None:
                raise Refused(f"{run_dir} has no run state")
            cfg = guarded_config(loaded, root, run_dir, show)
            rc = open_run(loaded, cfg, frozen_measurement_hash(loaded.contract, root))
            try:
                check_same_run(rc)
            except Halt as ex:
                raise Refused(f"{ex}; pass the run's own contract with --contract") from None
            if note := power_note(rc, mutation_id, arm, k):
                err.print(f"[yellow]warning:[/] {escape(note)}", highlight=False)
            left = loaded.contract.budget.max_audits - rc.state.audits
            say(f"replication: {2 * k} audits from the run's budget ({left} of it left)")
            result = replicate(rc, mutation_id, arm, k, cfg.trust)
    except LockedError as ex:
        err.print(f"[bold red]locked:[/] {escape(str(ex))}")
        return ExitCode.LOCKED
    except (ApprovalError, Refused, PolicyError, SignatureError, WitnessError) as ex:
        err.print(f"[bold red]refused:[/] {escape(str(ex))}")
        return ExitCode.REFUSED
    except Halt as ex:
        err.print(f"[bold red]stopped:[/] {escape(str(ex))} — fix the cause, then run the same command again")
        return ExitCode.HALTED
    if as_json:
        out.print_json(result.model_dump_json())
        return ExitCode.OK
    ti = "—" if result.target_interval is None else "{:+.3f} [{:+.3f}, {:+.3f}]".format(*result.target_interval)
    verdict = "DEMOTED" if result.demoted else ("holds" if result.conclusive else "INCONCLUSIVE")
    extra = " (the arm's champion was restored to its parent)" if result.champion_reverted else ""
    out.print(
        f"replication of {result.mutation_id} ({result.arm}): {result.rounds} fresh paired rounds; "
        f"Δ{result.target} {ti}; {verdict}: {result.reason}{extra}",
        highlight=False,
    )
    return ExitCode.OK


def diff_size(diff: str) -> str:
    """A unified diff's size in words: files and changed lines."""
    lines = diff.splitlines()
    files = sum(1 for x in lines if x.startswith("+++ "))
    added = sum(1 for x in lines if x.startswith("+") and not x.startswith("+++ "))
    removed = sum(1 for x in lines if x.startswith("-") and not x.startswith("--- "))
    return f"the diff: {files} file(s), +{added} −{removed} lines" if files else "no difference from state/policies"


def promote_champion(
    root: Path, run_dir: Path, arm: str, out: Console, err: Console, force: bool = False, as_json: bool = False
) -> int:
    """Copy an arm's champion into state/policies, if those files are still the run's origin.

    A control arm's or an uncertified champion is refused unless `force`, before its diff is shown
    (only its size); a promotion shows the diff first.
    """
    try:
        with run_lock(run_dir), policy_lock(root / POLICIES, root / LOCKS):
            risks = promotion_risks(run_dir, arm)
            diff = champion_diff(run_dir, root / POLICIES, arm)
            if risks and not force:
                raise Refused(
                    "; ".join(risks) + f". Nothing was copied ({diff_size(diff)}); pass --force to promote it anyway"
                )
            if not as_json:
                out.print(escape(diff) if diff else "(no difference from state/policies)", highlight=False)
            for risk in risks:
                err.print(f"[yellow]warning (--force):[/] {escape(risk)}")
            signer = Signer.from_env()
            message = promote_to_user(run_dir, root / POLICIES, arm, signing_trust(signer))
            anchor_guard(run_dir, root, signer, witness_from_env(root))()
    except LockedError as ex:
        err.print(f"[bold red]locked:[/] {escape(str(ex))}")
        return ExitCode.LOCKED
    except (Refused, PolicyError, SignatureError, WitnessError) as ex:
        err.print(f"[bold red]refused:[/] {escape(str(ex))}")
        if as_json:
            out.print_json(json.dumps({"copied": False, "arm": arm, "refused": str(ex)}))
        return ExitCode.REFUSED
    except Halt as ex:
        err.print(f"[bold red]copied, but the ledger head is not anchored:[/] {escape(str(ex))}")
        return ExitCode.FAILED
    if as_json:
        out.print_json(json.dumps({"copied": True, "arm": arm, "diff": diff, "message": message}))
    else:
        out.print(escape(message), highlight=False)
    return ExitCode.OK
