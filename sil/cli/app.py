"""The `sil` command: run experiments, approve contracts, review and verify the ledger (L5).

Every command is a thin wrapper over a library function; it works from any folder inside the
project (the root is the nearest folder up with program.md or state/policies, like git).

sil run                       # the contract in ./program.md (embedded sim backend: ~1 min)
sil check                     # every start-time check of `sil run`, offline
sil approve --by alice --key ~/.ssh/id_ed25519   # approve ./program.md for real model calls
sil runs | sil status [RUN]   # all runs; where one stands (both --json)
sil report RUN [--out DIR]    # report.html (self-contained), report.md, report.json, plots
sil compare RUN_A RUN_B | sil export RUN --format csv|parquet|json
sil ledger verify [RUN]       # check the hash chain, checkpoints, declared trust, witness
sil ledger head [RUN]         # print the latest checkpointed head to pin elsewhere
sil ledger show [RUN] [--json]
sil project adopt [--new]     # a project that lost refs/sil/project: its runs' id again, recorded
sil replicate RUN MUTATION_ID --k 8
sil promote RUN --arm gate    # copy an arm's champion into state/policies (explicit)
sil contract revise DRAFT --reason WHY   # a new contract whose parent is the current one
sil contract history          # the revision chain of ./program.md
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, NoReturn

import typer
from rich.console import Console
from rich.markup import escape

from sil.base.errors import ExitCode, Halt, Refused

if TYPE_CHECKING:
    from rich.table import Table

    from sil.contract.schema import LoadedContract
    from sil.review.status import RunOverview

# Everything else is imported inside the command that needs it: `sil --version`, `sil runs`
# and `sil status` start without scipy, matplotlib, inspect-ai or ray (tests/review/test_review_trust.py).

# `sil --help`, `sil runs --help` and `sil status --help` are declared here (HelpOpt), not by
# typer: typer coerces its own --help, left at None, through a pydantic validator, and importing
# pydantic for that alone costs those commands a quarter of a second.
HELP_NAMES = {"help_option_names": ["-h", "--help"]}
app = typer.Typer(
    add_completion=False,
    add_help_option=False,
    no_args_is_help=True,
    pretty_exceptions_show_locals=False,
    context_settings=HELP_NAMES,
)
ledger_app = typer.Typer(no_args_is_help=True, pretty_exceptions_show_locals=False, context_settings=HELP_NAMES)
app.add_typer(ledger_app, name="ledger", help="Review and verify a run's ledger.")
# piped output is not cut at 80 columns: tables and summaries keep their full text
err = Console(stderr=True, width=None if sys.stderr.isatty() else 200)
out = Console(width=None if sys.stdout.isatty() else 200)
ROOT_MARKERS = ("program.md", "state/policies")
_invoked_from: list[Path] = []
_verbosity: list[int] = [0]  # `sil -q/-v COMMAND`: the default of every command's own -q/-v


def _help(ctx: typer.Context, value: bool) -> None:
    if value and not ctx.resilient_parsing:  # as typer's own --help
        typer.echo(ctx.get_help(), color=ctx.color)
        raise typer.Exit()


JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON (for scripts).")]
HelpOpt = Annotated[
    bool, typer.Option("--help", "-h", is_eager=True, callback=_help, help="Show this message and exit.")
]
ContractOpt = Annotated[Path, typer.Option("--contract", "-c", help="Run contract (Markdown + YAML front matter).")]


def find_root(start: Path) -> Path:
    """The nearest folder at or above `start` holding program.md or state/policies (else `start`)."""
    for folder in (start, *start.parents):
        if any((folder / m).exists() for m in ROOT_MARKERS):
            return folder
    return start


def _version(value: bool) -> None:
    if value:
        from importlib.metadata import PackageNotFoundError, version

        try:
            out.print(f"sil {version('sil')}")
        except PackageNotFoundError:
            out.print("sil (not installed as a package)")
        raise typer.Exit(0)


@app.callback()
def main(
    show_version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Print the version and exit.")
    ] = False,
    show_help: HelpOpt = False,
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="More progress lines (run, replicate).")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="No progress lines, only results and errors.")] = False,
) -> None:
    """SIL: search one runtime policy at a time under a frozen contract; every step in a verified ledger.

    Exit codes: 0 ok; 1 a verification or report failed (`sil ledger verify`); 2 refused, nothing changed
    (bad input, or a start check failed: `sil check` exits 2 where `sil run` would refuse); 3 halted with
    a recorded reason (re-run to resume); 75 locked by another sil process; 130 interrupted (re-run to resume).
    """
    if verbose and quiet:
        _fail("--verbose and --quiet exclude each other")
    _verbosity[:] = [1 if verbose else (-1 if quiet else 0)]
    here = Path.cwd()
    root = find_root(here)
    _invoked_from[:] = [here]
    if root != here:
        os.chdir(root)


def require_project() -> None:
    """Refuse a review command outside a project, rather than report that it has no runs."""
    here = Path.cwd()
    if not any((here / m).exists() for m in ROOT_MARKERS):
        _fail(
            f"not in a SIL project: no program.md or state/policies in {here} or any folder above it; "
            "run this from inside a project (or start one there: write its contract to program.md, then `sil run`)"
        )


def _user_path(path: Path) -> Path:
    """A path the user typed, relative to where they ran `sil` (the root if it is not there)."""
    if path.is_absolute() or not _invoked_from:
        return path
    typed = _invoked_from[0] / path
    return typed if typed.exists() or not path.exists() else path


def _fail(message: str, code: int = ExitCode.REFUSED) -> NoReturn:
    err.print(f"[bold red]error:[/] {escape(message)}", soft_wrap=True)  # one line, never wrapped
    raise typer.Exit(code)


def _writable(folder: Path, flag: str = "--out") -> None:
    """Refuse (one line, exit 2) an output folder that cannot be made or written, before anything is written."""
    probe = folder
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    if not probe.is_dir():
        _fail(f"{flag} {folder}: {probe} is a file, not a folder; choose another {flag}")
    if not os.access(probe, os.W_OK | os.X_OK):
        _fail(f"{flag} {folder}: {probe} is not writable; choose a folder you can write to")


def _out_dir(path: Path) -> Path:
    """`--out` of `sil report`: a folder (made if missing)."""
    folder = _user_path(path)
    if folder.exists() and not folder.is_dir():
        _fail(
            f"--out {path} is a file; the report is a folder (report.html, report.md, report.json, plots/): "
            "pass a folder, e.g. --out review/"
        )
    _writable(folder)
    return folder


def _out_file(path: Path, default_name: str) -> Path:
    """`--out` of `sil export`: a file, or an existing folder to put `default_name` in."""
    target = _user_path(path)
    if target.is_dir():
        target = target / default_name
    _writable(target.parent)
    return target


def _write_outputs(files: dict[Path, str]) -> None:
    from sil.base.fsutil import AtomicWriteError, atomic_write_text

    try:
        for path, text in files.items():
            atomic_write_text(path, text)
    except (OSError, AtomicWriteError) as ex:
        _fail(f"{ex}; choose another --out")


def _load(path: Path) -> LoadedContract:
    from sil.contract.schema import ContractError, load_contract

    try:
        return load_contract(_user_path(path))
    except ContractError as ex:
        _fail(str(ex))


def _example_contract(backend: str) -> str:
    """A hint naming a contract written for `backend`, if it offers one."""
    from sil.exec.backends import make_backend

    try:
        example = make_backend(backend).example_contract
    except (ValueError, ImportError):
        return ""
    return f" (a contract written for it: {example})" if example else ""


def _splits_noise(backend: str) -> bool:
    """Whether `sil noise` can split the backend's audit noise: real audits whose judge passes it reads apart."""
    from sil.exec.backends import make_backend

    try:
        made = make_backend(backend)
    except (ValueError, ImportError) as ex:
        _fail(str(ex))
    return not made.simulated and made.judge_passes() is not None


def _run_dir(root: Path, run: str | None) -> Path:
    from sil.review.runview import resolve_run

    return _resolved(resolve_run, root, run)


def _resolved(resolve: Callable[[Path, str | None], Path], root: Path, run: str | None) -> Path:
    from sil.base.runpaths import RUNS

    try:
        return resolve(root, run)
    except Refused as ex:
        if not (root / RUNS).is_dir():  # a folder with runs but no contract (a reviewer's copy) is fine
            require_project()
        _fail(str(ex))


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
    verbose: Annotated[bool, typer.Option("--verbose", "-v", help="Also print every look of each test.")] = False,
    quiet: Annotated[bool, typer.Option("--quiet", "-q", help="Print only the summary.")] = False,
) -> None:
    """Run (or resume) the fixed-budget experiment of a run contract (from any folder of the project)."""
    from sil.cli.commands import plan_run
    from sil.cli.progress import RunProgress
    from sil.exec.startchecks import planned_audits
    from sil.run.train import execute_run

    loaded = _load(contract)
    if backend is not None and backend != loaded.contract.backend:
        hint = _example_contract(backend)
        _fail(
            f"{contract} uses backend {loaded.contract.backend!r}, not {backend!r}; the backend is frozen "
            f"in the contract, so pass a contract written for it with --contract{hint}"
        )
    root = Path.cwd()
    if dry_run:
        out.print(plan_run(loaded, root, replicate), highlight=False)
        return
    rid = run_id or f"{loaded.contract.contract_id}-{loaded.contract.contract_hash[:8]}"
    if new:
        rid = f"{rid}-{time.strftime('%Y%m%d-%H%M%S')}"
        err.print(
            f"new run {rid} (--new adds the start time to the id); resume it with --run-id {rid}", highlight=False
        )
    total = planned_audits(loaded.contract).total
    try:
        if verbose and quiet:
            _fail("--verbose and --quiet exclude each other")
        verbosity = 1 if verbose else (-1 if quiet else _verbosity[0])
        with RunProgress(err, total, verbosity=verbosity) as progress:
            code = execute_run(
                loaded, root, rid, replicate, out, err, on_event=progress.event, before_summary=progress.stop
            )
    except KeyboardInterrupt:
        err.print(
            f"\ninterrupted: run {rid} stopped; its state and ledger are saved. Resume with: "
            f"sil run --contract {escape(os.path.relpath(loaded.path))} --run-id {rid}",
            highlight=False,
        )
        raise typer.Exit(ExitCode.INTERRUPTED) from None
    raise typer.Exit(code)


@app.command()
def sweep(
    contracts: Annotated[list[Path], typer.Argument(help="Contracts to run, each as its own run.")],
    seeds: Annotated[int, typer.Option("--seeds", min=1, max=64, help="Runs per contract: seed, seed+1, ...")] = 1,
    parallel: Annotated[int, typer.Option("--parallel", min=0, max=64, help="Runs at once (0: all).")] = 0,
    as_json: Annotated[bool, typer.Option("--json", help="Print each run's outcome as JSON.")] = False,
) -> None:
    """Run several contracts (or seeds of one) as independent runs (state/sweeps/<run>/), then their status."""
    from sil.run.sweep import aggregate_lines, plan_sweep, run_sweep, sweep_aggregate, sweep_table

    root = Path.cwd()
    try:
        runs = plan_sweep([_user_path(c) for c in contracts], root, seeds)
    except Refused as ex:
        _fail(str(ex))
    err.print(f"sweep: {len(runs)} runs: {', '.join(r.run_id for r in runs)}", highlight=False)
    outcomes = run_sweep(runs, parallel or len(runs))
    if as_json:
        rows = [{"run": o.run.run_id, "contract": str(o.run.source), "exit_code": o.exit_code} for o in outcomes]
        typer.echo(json.dumps(rows, indent=1))
        raise typer.Exit(max((abs(o.exit_code) for o in outcomes), default=0))
    out.print(sweep_table(outcomes))
    for line in aggregate_lines(sweep_aggregate([o.run.run_dir for o in outcomes])):
        out.print(escape(line), highlight=False)
    for o in outcomes:
        if o.exit_code != 0:
            err.print(f"{o.run.run_id} exited {o.exit_code}: {escape(o.tail)}", highlight=False)
    raise typer.Exit(max((abs(o.exit_code) for o in outcomes), default=0))


@app.command()
def approve(
    by: Annotated[str, typer.Option("--by", help="Who approves (your identity in allowed_signers).")],
    contract: ContractOpt = Path("program.md"),
    expires_in_hours: Annotated[float, typer.Option(min=0.1, max=24 * 90)] = 72.0,
    key: Annotated[Path | None, typer.Option(help="SSH private key to sign the approval.")] = None,
    unsigned: Annotated[
        bool, typer.Option("--unsigned", help="Record an unsigned approval (offline or test contracts only).")
    ] = False,
    allowed_signers: Annotated[Path | None, typer.Option(help="allowed_signers file to check the signature.")] = None,
) -> None:
    """Approve a contract and its frozen measurement for runs with real model calls (docs/reference.md: Signing set-up)."""
    from sil.contract.approval import ApprovalError
    from sil.contract.approval import approve as do_approve

    loaded = _load(contract)
    if key is None and not unsigned:
        _fail("pass --key ~/.ssh/id_ed25519 to sign the approval, or --unsigned to record one without a signature")
    if key is not None and unsigned:
        _fail("--key and --unsigned exclude each other")
    if unsigned and not loaded.contract.approval_free:
        err.print("[yellow]warning:[/] runs with real model calls refuse an unsigned approval; pass --key to sign")
    try:
        record = do_approve(
            loaded.contract,
            Path.cwd(),
            by,
            expires_in_hours,
            None if key is None else _user_path(key),
            allowed_signers=None if allowed_signers is None else _user_path(allowed_signers),
        )
    except ApprovalError as ex:
        _fail(str(ex))
    signed = f"signed by key {record.key_fingerprint}" if record.signature else "UNSIGNED"
    out.print(
        f"approved contract {record.contract_hash[:12]} (measurement {record.measurement_hash[:12]}) "
        f"by {record.approver} until {record.expires_at}, {signed}",
        highlight=False,
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
    from sil.integrity.verify import HeadError, parse_head, verify_run_ledger
    from sil.integrity.witness import WitnessError, witness_from_env

    rdir = _run_dir(Path.cwd(), run)
    root = rdir.parents[2]  # the run's project (a sweep run's is its own workspace)
    try:
        if expect_head is not None:
            parse_head(expect_head)
        witness = witness_from_env(root)
    except (HeadError, WitnessError) as ex:
        _fail(str(ex))
    report = verify_run_ledger(
        rdir / "ledger.jsonl",
        root,
        None if allowed_signers is None else _user_path(allowed_signers),
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
    from sil.integrity.checkpoint import CheckpointError, anchor_repo, read_checkpoints
    from sil.integrity.verify import format_head

    rdir = _run_dir(Path.cwd(), run)
    repo = anchor_repo(rdir.parents[2], create=False)
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
    from sil.integrity import ledger as ledger_mod
    from sil.integrity.records import RECORD_TYPES
    from sil.review.describe import describe
    from sil.review.runview import load_run

    if type_ is not None and type_ not in RECORD_TYPES:
        _fail(f"--type {type_!r} is not a record type; use one of: {', '.join(sorted(RECORD_TYPES))}")
    rdir = _run_dir(Path.cwd(), run)
    view = load_run(rdir)
    dims = [view.target, *view.critical] if view.target else None
    try:
        for rec in ledger_mod.read_records(rdir / "ledger.jsonl"):
            if type_ and rec.type != type_:
                continue
            if as_json:
                sys.stdout.write(rec.model_dump_json() + "\n")
            else:
                out.print(
                    f"[dim]{rec.seq:>5}[/] {rec.ts[11:19]} [bold]{rec.type:<9}[/] {escape(describe(rec, dims))}",
                    highlight=False,
                )
    except ledger_mod.LedgerError as ex:
        _fail(f"{ex}; run `sil ledger verify`", ExitCode.FAILED)


@app.command()
def replicate(
    run: Annotated[str, typer.Argument(help="Run id.")],
    mutation_id: Annotated[str, typer.Argument(help="Mutation id of a KEEP verdict in that run.")],
    k: Annotated[
        int | None,
        typer.Option("--k", min=1, max=64, help="Fresh paired rounds to run [default: the contract's replicate_k]."),
    ] = None,
    arm: Annotated[str | None, typer.Option(help="The arm that kept it (needed if two arms did).")] = None,
    contract: ContractOpt = Path("program.md"),
    as_json: Annotated[bool, typer.Option("--json", help="Print the replication's record as JSON.")] = False,
) -> None:
    """Re-measure a past KEEP with K fresh paired rounds; demote it if it does not hold.

    Its 2K audits are paid from the run's own budgets (audits, USD, wall time).
    """
    from sil.cli.commands import replicate_keep

    loaded = _load(contract)
    root = Path.cwd()
    rounds = k if k is not None else loaded.contract.promotion.replicate_k
    quiet = as_json or _verbosity[0] < 0
    code = replicate_keep(loaded, root, _run_dir(root, run), mutation_id, arm, rounds, out, err, as_json, quiet)
    raise typer.Exit(code)


@app.command()
def promote(
    run: Annotated[str, typer.Argument(help="Run id.")],
    arm: Annotated[str, typer.Option(help="Arm whose champion to promote.")] = "gate",
    force: Annotated[
        bool, typer.Option("--force", help="Promote a control arm's or an uncertified champion anyway.")
    ] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print what was copied (or why not) as JSON.")] = False,
) -> None:
    """Copy an arm's champion policy into state/policies (explicit; shows the diff; never automatic)."""
    from sil.cli.commands import promote_champion

    root = Path.cwd()
    raise typer.Exit(promote_champion(root, _run_dir(root, run), arm, out, err, force, as_json=as_json))


project_app = typer.Typer(no_args_is_help=True, pretty_exceptions_show_locals=False, context_settings=HELP_NAMES)
app.add_typer(
    project_app,
    name="project",
    help="The project's id (refs/sil/project), which every run names, and its holdout ledger (refs/sil/_holdout).",
)


@project_app.command("holdout")
def project_holdout(as_json: JsonOpt = False) -> None:
    """Verify the project holdout ledger and show what each seed set served: certifications, error spent."""
    from sil.integrity.holdout import verify_holdout
    from sil.review.holdoutview import holdout_json, holdout_lines

    root = Path.cwd()
    if as_json:
        found = holdout_json(root)
        sys.stdout.write(json.dumps(found, indent=1) + "\n")
        raise typer.Exit(0 if found["ok"] else ExitCode.FAILED)
    report = verify_holdout(root)
    for line in holdout_lines(root):
        out.print(escape(line), highlight=False)
    if not report.ok:
        _fail(f"the project holdout ledger does not verify: {'; '.join(report.errors)}", ExitCode.FAILED)
    out.print(f"ok: {report.records} records; checked {', '.join(report.checked) or 'nothing yet'}")


@project_app.command("adopt")
def project_adopt(
    new: Annotated[
        bool, typer.Option("--new", help="Make a new id: the runs under the old one then fail verification here.")
    ] = False,
) -> None:
    """Give a project that lost refs/sil/project its id again, recorded in the ref: the id its runs name, once they verify."""
    from sil.integrity.adoption import AdoptionRefused, adopt_project
    from sil.integrity.checkpoint import CheckpointError
    from sil.integrity.witness import WitnessError, witness_from_env

    root = Path.cwd()
    try:
        adoption = adopt_project(root, new=new, witness=witness_from_env(root))
    except (AdoptionRefused, CheckpointError, WitnessError) as ex:
        _fail(str(ex))
    if adoption.how == "restored":
        out.print(f"restored project id {adoption.project} (runs verified: {', '.join(adoption.runs)})")
    else:
        left = f"; runs under the old id no longer verify here: {', '.join(adoption.runs)}" if adoption.runs else ""
        out.print(f"made a new project id {adoption.project}{left}")
    out.print(f"recorded in refs/sil/project (commit {adoption.commit[:12]})")


contract_app = typer.Typer(no_args_is_help=True, pretty_exceptions_show_locals=False, context_settings=HELP_NAMES)
app.add_typer(contract_app, name="contract", help="Revise a contract (never in place) and show its history.")


@contract_app.command("revise")
def contract_revise(
    draft: Annotated[Path, typer.Argument(help="The edited contract to become the revision.")],
    reason: Annotated[str, typer.Option("--reason", help="Why the contract changes (recorded).")],
    contract: ContractOpt = Path("program.md"),
) -> None:
    """Write DRAFT over the contract as its revision: parent = the current hash; the old one is superseded."""
    from sil.base.errors import Refused
    from sil.contract.history import revise

    try:
        entry = revise(Path.cwd(), contract, draft, reason)
    except Refused as ex:
        _fail(str(ex))
    out.print(f"{contract}: revision {entry.contract_hash[:12]} of {str(entry.parent)[:12]} ({entry.reason})")


@contract_app.command("history")
def contract_history(contract: ContractOpt = Path("program.md")) -> None:
    """The chain of revisions from the contract back to its first recorded ancestor."""
    from sil.contract.history import ContractHistory

    history = ContractHistory(Path.cwd())
    c = _load(contract).contract
    chain = history.chain(c.contract_hash)
    if not chain:  # a first contract, never revised: a history of one
        parent = f"  parent {c.parent[:12]} (not recorded here)" if c.parent else ""
        out.print(f"{c.contract_hash[:12]}  {c.contract_id}  current  (first){parent}", highlight=False)
        return
    for e in chain:
        newer = history.superseded_by(e.contract_hash)
        status = f"superseded by {newer.contract_hash[:12]}" if newer else "current"
        out.print(
            f"{e.contract_hash[:12]}  {e.contract_id}  {e.recorded_at}  {status}  {escape(e.reason or '(first)')}"
        )


@app.command()
def check(
    contract: ContractOpt = Path("program.md"),
    as_json: Annotated[bool, typer.Option("--json", help="Print the checks as JSON (same exit code).")] = False,
) -> None:
    """Run every start-time check of `sil run` (contract, rubric, measurement, policies, SDKs, approval), offline."""
    from sil.cli.commands import check_contract

    loaded = _load(contract)
    raise typer.Exit(check_contract(loaded, Path.cwd(), out, err, as_json=as_json))


@app.command()
def noise(
    contract: ContractOpt = Path("program.md"),
    pairs: Annotated[int, typer.Option(min=2, max=200, help="A/A pairs per design (free and CRN).")] = 4,
    passes: Annotated[int, typer.Option(min=1, max=10, help="Judge passes of every transcript.")] = 2,
    report_file: Annotated[
        Path | None, typer.Option("--out", help="Report file (default docs/results/noise-<contract_id>.md).")
    ] = None,
) -> None:
    """Measure A/A noise on real audits and split it into target, auditor and judge shares (4 x pairs audits)."""
    import shlex
    import sys
    from datetime import UTC, datetime

    from sil.base.diskspace import is_disk_error
    from sil.base.fsutil import atomic_write_bytes
    from sil.exec.startchecks import run_refusals
    from sil.run.noise import keep_measured, measure_noise, render

    loaded = _load(contract)
    c = loaded.contract
    if not _splits_noise(c.backend):
        _fail(
            f"{contract}: sil noise measures real audits whose judge passes it can read apart; backend "
            f"{c.backend!r} simulates them or keeps no passes apart (use a petri contract)"
        )
    root = Path.cwd()
    refusals = run_refusals(loaded, root)
    if refusals:
        _fail("; ".join(f"{i.name}: {i.detail}" for i in refusals))
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%S")
    work = root / "state" / "noise" / f"{c.contract_id}-{stamp}"
    target = report_file or root / "docs" / "results" / f"noise-{c.contract_id}.md"
    if not target.parent.is_dir():
        _fail(f"--out {target}: directory {target.parent} does not exist")
    err.print(f"sil noise: {4 * pairs} audits of {c.contract_id} in {work} ...")
    try:
        report = measure_noise(loaded, root, pairs=pairs, passes=passes, out_dir=work)
    except Halt as ex:  # e.g. its local model server crashed
        _fail(f"stopped: {ex}; no report was written", ExitCode.HALTED)
    except OSError as ex:  # the audits' folder could not be written: a full disk, most likely
        fix = "free space" if is_disk_error(ex) else f"make {work} writable"
        _fail(f"stopped: {ex}; no report was written ({fix}, then run sil noise again)", ExitCode.HALTED)
    command = "sil " + " ".join(shlex.quote(a) for a in sys.argv[1:])
    text = render(report, command, root)
    typer.echo(text)  # first: a disk that refuses the files below loses no measured figure
    try:
        atomic_write_bytes(target, text.encode())
        kept = keep_measured(report, root, work)
    except OSError as ex:
        _fail(f"the report above was not saved: {ex}; free space or choose another --out", ExitCode.HALTED)
    err.print(f"written: {target} and {kept} (`sil check` reads it)")


# ---- review: runs, status, report, compare, export (logic in sil/review/status.py, report*.py, ...)


@app.command("runs", add_help_option=False)
def runs_cmd(as_json: JsonOpt = False, show_help: HelpOpt = False) -> None:
    """List every run: contract, backend, phase, audits/budget, USD, KEEPs, gate champion, and whether
    its ledger verifies as `sil ledger verify` checks it here (with SIL_ALLOWED_SIGNERS, SIL_WITNESS)."""
    require_project()
    from sil.base.runpaths import run_dirs
    from sil.review.readcache import overviews

    rows = overviews(run_dirs(Path.cwd()))
    if as_json:
        sys.stdout.write(json.dumps([r.model_dump(mode="json") for r in rows], indent=1) + "\n")
        return
    if not rows:
        out.print("no runs yet under state/runs; start one with `sil run`")
        return
    out.print(_runs_table(rows))
    _print_holdout(Path.cwd())


def _print_holdout(root: Path) -> None:
    """What each seed set has served the project's certifications (the project holdout ledger)."""
    from sil.review.holdoutview import holdout_lines

    for line in holdout_lines(root):
        out.print(escape(line), highlight=False)


def _runs_table(rows: list[RunOverview]) -> Table:
    from rich.table import Table

    table = Table()
    for col in ("run", "contract", "backend", "phase", "audits", "USD", "KEEP (arm)", "gate champion", "ledger verify"):
        table.add_column(col)
    for r in rows:
        keeps = ", ".join(
            f"{a} {n}" + (f" ({r.demoted[a]} demoted)" if r.demoted.get(a) else "") for a, n in r.keeps.items()
        )
        backend = f"{r.backend}{' (sim)' if r.simulated else ''}"
        table.add_row(
            escape(r.run_id),
            escape(f"{r.contract_id} {(r.contract_hash or '')[:8]}"),
            escape(backend),
            escape(r.phase),
            f"{r.audits}/{r.max_audits or '?'}",
            f"{r.usd:.2f}",
            escape(keeps),
            escape(r.champion),
            f"ok: {escape(r.verify_note)}" if r.verified else f"[red]FAILS[/] {escape(r.verify_note)}",
        )
    return table


@app.command(add_help_option=False)
def status(
    run: Annotated[str | None, typer.Argument(help="Run id (default: the latest run).")] = None,
    as_json: JsonOpt = False,
    show_help: HelpOpt = False,
) -> None:
    """Where a run stands: phase, arm, candidate, look k of K, audits and USD vs budget, α spent, ETA,
    and whether its ledger verifies (as `sil ledger verify` checks it here)."""
    require_project()
    from sil.base import runpaths
    from sil.review.readcache import status_of
    from sil.review.status import status_lines

    st = status_of(_resolved(runpaths.resolve_run, Path.cwd(), run))
    if as_json:
        sys.stdout.write(st.model_dump_json(indent=1) + "\n")
        return
    for line in status_lines(st):
        out.print(escape(line), highlight=False)
    _print_holdout(Path.cwd())


@app.command()
def report(
    run: Annotated[str | None, typer.Argument(help="Run id (default: the latest run).")] = None,
    out_dir: Annotated[Path | None, typer.Option("--out", help="Folder for the report (default: the run's).")] = None,
    sweep: Annotated[
        bool, typer.Option("--sweep", help="The aggregate of every sweep run (state/sweeps) instead of one run.")
    ] = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="Print the files written and the conclusion as JSON.")
    ] = False,
) -> None:
    """Write report.html (self-contained), report.md, report.json and plots/*.png for a run."""
    from sil.base.fsutil import AtomicWriteError
    from sil.review.render import write_report
    from sil.review.report import build_report
    from sil.review.runview import load_run

    if sweep:
        _sweep_report(_out_dir(out_dir) if out_dir is not None else None)
        return
    rdir = _run_dir(Path.cwd(), run)
    view = load_run(rdir)
    try:
        data = build_report(view, Path.cwd())
    except ValueError as ex:
        _fail(str(ex), ExitCode.FAILED)
    folder = _out_dir(out_dir) if out_dir is not None else rdir / "report"
    try:  # the default folder must stay inside the run's folder
        paths = write_report(view, data, folder, None if out_dir is not None else rdir)
    except (OSError, AtomicWriteError) as ex:
        _fail(f"{ex}; choose another --out")
    if as_json:
        files = {name: str(path) for name, path in paths.items()}
        typer.echo(json.dumps({"run": data.run_id, "files": files, "conclusion": data.conclusion}, indent=1))
        return
    out.print(f"report: {paths['html']}  (also {paths['md'].name}, {paths['json'].name}, plots/)", highlight=False)
    out.print(escape(data.conclusion), highlight=False)


def _sweep_report(folder: Path | None) -> None:
    from sil.review.runview import SWEEPS, sweep_run_dirs
    from sil.run.sweep import aggregate_lines, sweep_aggregate

    dirs = sweep_run_dirs(Path.cwd())
    if not dirs:
        _fail(f"no sweep runs under {SWEEPS}; start a sweep with `sil sweep program.md --seeds 3`")
    agg = sweep_aggregate(dirs)
    lines = aggregate_lines(agg)
    folder = folder or Path.cwd() / SWEEPS
    md = "# SIL sweep report\n\n" + "\n".join(f"- {line}" for line in lines) + "\n\nruns: " + ", ".join(agg.runs) + "\n"
    _write_outputs({folder / "sweep-report.md": md, folder / "sweep-report.json": agg.model_dump_json(indent=1)})
    for line in lines:
        out.print(escape(line), highlight=False)
    out.print(f"sweep report: {folder / 'sweep-report.md'} (also sweep-report.json)", highlight=False)


@app.command()
def compare(
    runs: Annotated[list[str], typer.Argument(help="Two or more run ids (any contracts).")],
    as_json: JsonOpt = False,
) -> None:
    """Runs side by side: what differed in the set-up and the outcome, per arm, per edit, cost."""
    from rich.table import Table

    from sil.review.compare import compare_runs
    from sil.review.runview import load_run

    root = Path.cwd()
    try:
        cmp = compare_runs([load_run(_run_dir(root, r)) for r in runs])
    except Refused as ex:
        _fail(str(ex))
    if as_json:
        sys.stdout.write(cmp.model_dump_json(indent=1) + "\n")
        return
    if not cmp.same_family:
        out.print("note: these runs are of different contracts (not one contract family)", highlight=False)
    out.print(f"set-up that differed: {len(cmp.setup) or 'nothing'} (contract, measurement, starting policy)")
    for title, rows in (("set-up", cmp.setup), ("outcome", cmp.outcome), ("arm", cmp.arms), ("edit", cmp.edits)):
        if not rows:
            continue
        table = Table()
        for col in (title, *cmp.runs):
            table.add_column(escape(col))
        for r in rows:
            style = "bold" if r.differs else None
            table.add_row(escape(r.item), *(escape(v) for v in r.values), style=style)
        out.print(table)


@app.command()
def export(
    run: Annotated[str | None, typer.Argument(help="Run id (default: the latest run).")] = None,
    fmt: Annotated[str, typer.Option("--format", help="csv, parquet or json.")] = "csv",
    to: Annotated[Path | None, typer.Option("--out", help="Output file (default: <run>/export.<format>).")] = None,
) -> None:
    """Export one row per audit, round and verdict of a run."""
    from sil.base.fsutil import AtomicWriteError
    from sil.review.export import FORMATS, export_rows, use_lines, write_rows
    from sil.review.runview import load_run

    if fmt not in FORMATS:
        _fail(f"--format {fmt!r} is not one of {', '.join(FORMATS)}")
    rdir = _run_dir(Path.cwd(), run)
    target = _out_file(to, f"export.{fmt}") if to else rdir / f"export.{fmt}"
    view = load_run(rdir)
    rows = export_rows(view)
    try:
        path = write_rows(rows, target, fmt)  # type: ignore[arg-type]
    except Refused as ex:
        _fail(str(ex))
    except (OSError, AtomicWriteError) as ex:
        _fail(f"{ex}; choose another --out")
    out.print(f"{len(rows)} rows → {path}", highlight=False)
    for line in use_lines(view):
        out.print(escape(line), highlight=False)
