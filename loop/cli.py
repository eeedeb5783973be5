"""The `sil` command: run experiments, approve contracts, review and verify the ledger.

sil run                       # the contract in ./program.md (embedded sim backend: ~1 min)
sil approve --by alice        # approve ./program.md for runs with real model calls
sil ledger verify [RUN]       # check the hash chain, checkpoints, declared trust, witness
sil ledger head [RUN]         # print the latest checkpointed head to pin elsewhere
sil ledger show [RUN] [--json]
sil replicate RUN MUTATION_ID --k 8
sil promote RUN --arm gate    # copy an arm's champion into state/policies (explicit)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

import ledger as ledger_mod
from loop.contract import ContractError, LoadedContract, load_contract
from loop.errors import ExitCode
from loop.runid import RunIdError, run_dir_under
from train import RUNS

app = typer.Typer(add_completion=False, no_args_is_help=True, pretty_exceptions_show_locals=False)
ledger_app = typer.Typer(no_args_is_help=True, pretty_exceptions_show_locals=False)
app.add_typer(ledger_app, name="ledger", help="Review and verify a run's ledger.")
err = Console(stderr=True)
out = Console()


ContractOpt = Annotated[Path, typer.Option("--contract", "-c", help="Run contract (Markdown + YAML front matter).")]


def _fail(message: str, code: int = ExitCode.REFUSED) -> NoReturn:
    err.print(f"[bold red]error:[/] {message}")
    raise typer.Exit(code)


def _load(path: Path) -> LoadedContract:
    try:
        return load_contract(path)
    except ContractError as ex:
        _fail(str(ex))


def _run_dir(root: Path, run: str | None) -> Path:
    runs = root / RUNS
    if run is None:
        candidates = sorted(runs.glob("*/ledger.jsonl"), key=lambda p: p.stat().st_mtime)
        if not candidates:
            _fail(f"no runs under {runs}; start one with `sil run`")
        return candidates[-1].parent
    try:
        path = run_dir_under(runs, run)
    except RunIdError as ex:
        _fail(f"{ex} (see `ls {runs}`)")
    if not path.is_dir():
        _fail(f"no run {run!r} under {runs}")
    return path


@app.command()
def run(
    contract: ContractOpt = Path("program.md"),
    run_id: Annotated[str | None, typer.Option(help="Name of the run (default: from the contract).")] = None,
    new: Annotated[bool, typer.Option("--new", help="Start a fresh run even if one exists.")] = False,
    replicate: Annotated[
        int | None,
        typer.Option(
            "--replicate",
            min=1,
            max=64,
            help="Confirmation rounds K per candidate (default: the contract's replicate_k).",
        ),
    ] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Plan and price the run; make no model calls.")] = False,
    backend: Annotated[str | None, typer.Option(help="Refuse unless the contract uses this backend.")] = None,
) -> None:
    """Run (or resume) the fixed-budget experiment of a run contract (from the project root)."""
    from loop.commands import plan_run
    from train import execute_run

    loaded = _load(contract)
    if backend is not None and backend != loaded.contract.backend:
        hint = " (an offline Petri contract: examples/program-petri-offline.md)" if backend == "petri" else ""
        _fail(
            f"{contract} uses backend {loaded.contract.backend!r}, not {backend!r}; the backend is frozen "
            f"in the contract, so pass a contract written for it with --contract{hint}"
        )
    root = Path.cwd()
    if dry_run:
        out.print(plan_run(loaded, root, replicate))
        return
    rid = run_id or f"{loaded.contract.contract_id}-{loaded.contract.contract_hash[:8]}"
    if new:
        rid = f"{rid}-{time.strftime('%Y%m%d-%H%M%S')}"
    code = execute_run(loaded, root, rid, replicate, out, err)
    raise typer.Exit(code)


@app.command()
def approve(
    by: Annotated[str, typer.Option("--by", help="Who approves (recorded).")],
    contract: ContractOpt = Path("program.md"),
    expires_in_hours: Annotated[float, typer.Option(min=0.1, max=24 * 90)] = 72.0,
    key: Annotated[Path | None, typer.Option(help="SSH private key to sign the approval.")] = None,
    allowed_signers: Annotated[Path | None, typer.Option(help="allowed_signers file to check the signature.")] = None,
) -> None:
    """Approve a contract and its frozen measurement for runs with real model calls."""
    from loop.approval import ApprovalError
    from loop.approval import approve as do_approve

    loaded = _load(contract)
    if key is None and not loaded.contract.offline:
        err.print(
            "[yellow]warning:[/] an unsigned approval is recorded, but runs with real model calls "
            "refuse it; pass --key to sign"
        )
    try:
        record = do_approve(loaded.contract, Path.cwd(), by, expires_in_hours, key, allowed_signers=allowed_signers)
    except ApprovalError as ex:
        _fail(str(ex))
    out.print(
        f"approved contract {record.contract_hash[:12]} (measurement {record.measurement_hash[:12]}) "
        f"by {record.approver} until {record.expires_at}"
    )


@ledger_app.command("verify")
def ledger_verify(
    run: Annotated[str | None, typer.Argument(help="Run id (default: the latest run).")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    allowed_signers: Annotated[
        Path | None, typer.Option(help="allowed_signers file for checkpoints (keep it outside the repository).")
    ] = None,
    require_signed: Annotated[bool, typer.Option("--require-signed", help="Fail on unsigned checkpoints.")] = False,
    expect_head: Annotated[
        str | None, typer.Option("--expect-head", help="A head pinned earlier with `sil ledger head` (SEQ:HASH).")
    ] = None,
) -> None:
    """Check a run's hash chain, its checkpoints, the trust it declared, and the outside witness."""
    from loop.ledgerverify import HeadError, parse_head, verify_run_ledger
    from loop.witness import WitnessError, witness_from_env

    root = Path.cwd()
    rdir = _run_dir(root, run)
    try:
        if expect_head is not None:
            parse_head(expect_head)
        witness = witness_from_env(root)
    except (HeadError, WitnessError) as ex:
        _fail(str(ex))
    report = verify_run_ledger(
        rdir / "ledger.jsonl",
        root,
        allowed_signers,
        require_signed=require_signed,
        witness=witness,
        expect_head=expect_head,
    )
    if as_json:
        out.print_json(report.model_dump_json())
        raise typer.Exit(ExitCode.OK if report.ok else ExitCode.FAILED)
    if report.ok:
        out.print(f"ok: {report.records} records, head {report.head_hash[:16]}, {report.checkpoints} checkpoints agree")
    else:
        err.print(f"[bold red]ledger does not verify[/] ({report.records} records):")
        for e in report.errors:
            err.print(f"  {escape(e)}")
    for note in report.notes:
        style = "bold yellow" if note.startswith(("NO OUTSIDE WITNESS", "warning", "ignored")) else "dim"
        err.print(f"[{style}]note:[/] {escape(note)}")
    raise typer.Exit(ExitCode.OK if report.ok else ExitCode.FAILED)


@ledger_app.command("head")
def ledger_head(run: Annotated[str | None, typer.Argument(help="Run id (default: the latest run).")] = None) -> None:
    """Print the run's latest checkpointed head (SEQ:HASH) to pin outside the repository."""
    from loop.checkpoint import CheckpointError, anchor_repo, read_checkpoints
    from loop.ledgerverify import format_head

    root = Path.cwd()
    rdir = _run_dir(root, run)
    repo = anchor_repo(root, create=False)
    try:
        checkpoints = read_checkpoints(repo, rdir.name) if repo is not None else []
    except CheckpointError as ex:
        _fail(str(ex), ExitCode.FAILED)
    if not checkpoints:
        _fail(f"run {rdir.name} has no checkpoint yet; nothing to pin", ExitCode.FAILED)
    latest = checkpoints[-1]
    sys.stdout.write(format_head(latest) + "\n")
    signed = f"signed as {latest.signer}" if latest.signature else "UNSIGNED"
    err.print(
        f"[dim]{rdir.name}: {latest.records} records, {signed}, {latest.created_at}; "
        f"check later with `sil ledger verify {rdir.name} --expect-head <this>`[/]"
    )


@ledger_app.command("show")
def ledger_show(
    run: Annotated[str | None, typer.Argument(help="Run id (default: the latest run).")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON record per line.")] = False,
    type_: Annotated[str | None, typer.Option("--type", help="Only records of this type.")] = None,
) -> None:
    """Print a run's ledger readably."""
    from loop.review import describe

    rdir = _run_dir(Path.cwd(), run)
    try:
        for rec in ledger_mod.read_records(rdir / "ledger.jsonl"):
            if type_ and rec.type != type_:
                continue
            if as_json:
                sys.stdout.write(rec.model_dump_json() + "\n")
            else:
                out.print(
                    f"[dim]{rec.seq:>5}[/] {rec.ts[11:19]} [bold]{rec.type:<9}[/] {escape(describe(rec))}",
                    highlight=False,
                )
    except ledger_mod.LedgerError as ex:
        _fail(f"{ex}; run `sil ledger verify`", ExitCode.FAILED)


@app.command()
def replicate(
    run: Annotated[str, typer.Argument(help="Run id.")],
    mutation_id: Annotated[str, typer.Argument(help="Mutation id of a KEEP verdict in that run.")],
    k: Annotated[int, typer.Option("--k", min=1, max=64, help="Fresh paired rounds to run.")] = 8,
    arm: Annotated[str | None, typer.Option(help="The arm that kept it (needed if two arms did).")] = None,
    contract: ContractOpt = Path("program.md"),
) -> None:
    """Re-measure a past KEEP with K fresh paired rounds; demote it if it does not hold."""
    from loop.commands import replicate_keep

    loaded = _load(contract)
    root = Path.cwd()
    raise typer.Exit(replicate_keep(loaded, root, _run_dir(root, run), mutation_id, arm, k, out, err))


@app.command()
def promote(
    run: Annotated[str, typer.Argument(help="Run id.")],
    arm: Annotated[str, typer.Option(help="Arm whose champion to promote.")] = "gate",
) -> None:
    """Copy an arm's champion policy into state/policies (explicit; never automatic)."""
    from loop.commands import promote_champion

    root = Path.cwd()
    raise typer.Exit(promote_champion(root, _run_dir(root, run), arm, out, err))


@app.command()
def check(contract: ContractOpt = Path("program.md")) -> None:
    """Validate a contract, the frozen measurement and the policy files, offline."""
    from loop.commands import check_contract

    loaded = _load(contract)
    raise typer.Exit(check_contract(loaded, Path.cwd(), out, err))
