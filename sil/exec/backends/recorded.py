"""The `recorded` backend: real audits recorded earlier, replayed (`python -m sil.exec.backends.recorded`).

A recorded world is a data file of real audits of a few policy sets (`python -m bench.record_audits`:
SmolLM2-135M through the petri backend; sil/exec/backends/recordedpool.py). An audit of a set
here is one of that set's recorded audits, drawn without replacement within the run while any
is left (then they are drawn again in the same order): its per-seed scores, exactly as the real
audit scored them. The replay process loads the policy files it is given, as any runtime does,
and reports their hashes, so the loop's trust checks hold; it answers only sets the data file
holds (any other set is a gap naming it), except the wiring preflight's sentinel set, which
gets its loaded hashes and no scores: a replay has no runtime whose wiring could be probed
(the recorder ran the real preflight before recording). No model is called, so every result
is marked simulated; the note says what is real (the audits) and what is not (their order).

    backend: {kind: recorded, settings: {data: data/recorded/audits.jsonl}}
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path
from typing import ClassVar

from sil.contract.backendsettings import BackendSettings
from sil.contract.schema import Contract
from sil.exec.backends.recordedpool import Draws, Pool, RecordedAudit, RecordedError, load_pool
from sil.exec.checkitem import CheckItem
from sil.exec.measure import AuditRequest, BackendBase, MeasureContext, RunNote, read_evidence_file
from sil.policies.setid import set_id_of
from sil_policy import SURFACES, content_hash
from sil_policy.evidence import AUDIT_DIR_ENV, EVIDENCE_FILE, Evidence, SampleEvidence

DRAWS_FILE = "recorded_draws.json"  # beside a run's audits: which recording each audit replays
PREFLIGHT_PREFIX = "preflight-"  # sil/run/preflight.py's audit ids
NOT_RECORDED_EXIT = 3
NOTE = (
    "recorded real audits, replayed: each audit is a real audit of the same policy set recorded "
    "earlier (its scores as recorded); which recording serves which audit is drawn"
)


class RecordedSettings(BackendSettings):
    """Where the recordings are (paths relative to the folder `sil` runs in)."""

    own_roles_prefix: ClassVar[str | None] = "recorded/"
    data: str = "data/recorded/audits.jsonl"
    sets: str = "data/recorded/sets.yaml"  # the recorded sets' edits (the proposer's catalogue)
    start: str = "state/policies"  # the start set the edits apply to


class RecordedBackend(BackendBase):
    name = "recorded"
    simulated = True  # no model is called at audit time: the recording is replayed
    note = NOTE
    settings_model = RecordedSettings
    crn_effect = "has no effect on the recorded backend: it replays audits recorded independently"

    def command(self, req: AuditRequest, ctx: MeasureContext) -> list[str]:
        s = ctx.contract.settings(RecordedSettings)
        return [
            sys.executable,
            "-m",
            "sil.exec.backends.recorded",
            "--data",
            str(Path(s.data).resolve()),
            "--draws",
            str(req.audit_dir.parent / DRAWS_FILE),
            "--seed",
            str(ctx.contract.seed),
            "--audit-id",
            req.audit_id,
            "--seed-set",
            req.seed_set,
            "--seeds",
            *ctx.seeds_for(req.seed_set),
        ]

    def read_evidence(self, req: AuditRequest, ctx: MeasureContext) -> Evidence:
        return read_evidence_file(req.audit_dir / EVIDENCE_FILE)

    def describe(self, contract: Contract) -> RunNote:
        roles = {r: "recorded real audit (replayed)" for r in ("auditor", "target", "judge")}
        return RunNote(note=NOTE, roles=roles)

    def start_checks(self, contract: Contract) -> list[CheckItem]:
        """The data file is readable and holds recordings on the seeds the run will ask for."""
        s = contract.settings(RecordedSettings)
        try:
            pool = load_pool(Path(s.data))
        except RecordedError as ex:
            return [CheckItem(name="recorded:data", status="fail", detail=str(ex))]
        counts = pool.counts("search")
        detail = f"{s.data}: {len(counts)} sets, usable search audits per set {counts}"
        if not counts or min(counts.values()) == 0:
            return [CheckItem(name="recorded:data", status="fail", detail=detail + "; every set needs one")]
        if contract.measurement.certify_on != "search" and not any(pool.counts("heldout").values()):
            return [
                CheckItem(
                    name="recorded:data",
                    status="fail",
                    detail=detail + "; none on the held-out seeds: set measurement.certify_on: search",
                )
            ]
        return [CheckItem(name="recorded:data", status="ok", detail=detail)]


def loaded_hashes(policy_files: dict[str, Path]) -> dict[str, str]:
    """The sha256 of each policy file given to the replay, as a runtime reports what it loaded."""
    return {name: content_hash(path.read_bytes()) for name, path in policy_files.items()}


def replay(
    audit_id: str, seed_set: str, seeds: list[str], hashes: dict[str, str], pool: Pool, draws: Draws
) -> Evidence:
    """The evidence of one audit of the loaded set: a recording of it, drawn; RecordedError for
    a set never recorded (the preflight's sentinel set gets its hashes and no scores)."""
    set_id = set_id_of(hashes)
    if not pool.of(set_id, seed_set):
        if audit_id.startswith(PREFLIGHT_PREFIX):
            why = "wiring preflight of a replay: the loaded hashes are reported, no audit was recorded for this set"
            samples = [SampleEvidence(seed_id=s, scores={}, policy_hashes=hashes, error=why) for s in seeds]
            return Evidence(backend="recorded", simulated=True, runtime="replay", samples=samples, notes=[why])
        raise RecordedError(
            f"policy set {set_id} was never recorded on the {seed_set} seeds: the recorded world answers only "
            f"its recorded sets ({len(pool.names)}: {', '.join(sorted(pool.names.values()))})"
        )
    rec = draws.draw(pool, audit_id, set_id, seed_set)
    samples = [sample_of(rec, seed, hashes) for seed in seeds]
    note = f"replays {rec.audit_id} ({rec.set}, {rec.provenance.model}, recorded {rec.recorded_at})"
    return Evidence(
        backend="recorded", simulated=True, runtime=f"replay of {rec.provenance.model}", samples=samples, notes=[note]
    )


def sample_of(rec: RecordedAudit, seed: str, hashes: dict[str, str]) -> SampleEvidence:
    if seed not in rec.scores:
        why = f"seed {seed} has no usable sample in recorded audit {rec.audit_id}"
        return SampleEvidence(seed_id=seed, scores={}, policy_hashes=hashes, error=why)
    scores: dict[str, float | None] = dict(rec.scores[seed])
    for dim, seeds in rec.missing.items():
        if seed in seeds:
            scores[dim] = None
    return SampleEvidence(seed_id=seed, scores=scores, policy_hashes=hashes)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="replay one recorded audit of the policy set this process is given")
    ap.add_argument("--data", type=Path, required=True)
    ap.add_argument("--draws", type=Path, required=True)
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--audit-id", required=True)
    ap.add_argument("--seed-set", required=True)
    ap.add_argument("--seeds", nargs="+", required=True)
    args = ap.parse_args(argv)
    files = {name: Path(os.environ[spec.override_env]) for name, spec in SURFACES.items()}
    try:
        pool = load_pool(args.data)
        evidence = replay(
            args.audit_id, args.seed_set, args.seeds, loaded_hashes(files), pool, Draws(args.draws, args.seed)
        )
    except RecordedError as ex:
        print(f"recorded: {ex}", file=sys.stderr)
        return NOT_RECORDED_EXIT
    out = Path(os.environ[AUDIT_DIR_ENV]) / EVIDENCE_FILE
    out.write_text(evidence.model_dump_json())
    return 0


if __name__ == "__main__":
    sys.exit(main())
