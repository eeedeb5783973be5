"""One simulated audit, run as the audit subprocess of the `sim` backend.

    python -m sil_runtime.sim --measurement DIR --params FILE --tick N --pair-key K --audit-id ID [--seed-set heldout]

Loads all seven policies through the runtime's own loaders (OVERRIDE + STRICT from the
environment, exactly like a real runtime), scores the requested frozen seeds (the search seeds,
or with `--seed-set heldout` the held-out ones) with the seeded world and
landscape (with `landscape: mechanisms`, also the hidden mechanisms, and the judge's symptom
highlights per seed), and writes `Evidence` (marked simulated) atomically to
`$SIL_AUDIT_DIR/evidence.json`.
Exit codes: 0 evidence written; 2 bad input or a STRICT policy that cannot load (no sample
ran); 3 a simulated crash (deterministic per audit id, rate `p_crash`), which writes nothing.
"""

from __future__ import annotations

import argparse
import importlib
import math
import os
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import ValidationError

from sil.contract import prepare
from sil.contract.simparams import SimParams
from sil_policy import credentials
from sil_policy.evidence import AUDIT_DIR_ENV, EVIDENCE_FILE, Evidence, Highlight, SampleEvidence, Usage
from sil_runtime.policy_loader import LoadedPolicies, PolicyLoadError, load_policies
from sil_runtime.sim.landscape import critical_dimensions, latent_field
from sil_runtime.sim.mechanisms import highlights, mechanism_field
from sil_runtime.sim.world import World, keyed_rng

RUNTIME = "sil_runtime.sim"
EXIT_BAD_INPUT = 2
EXIT_CRASH = 3
GOOD_HIGH_FLIP = 11.0  # a 1-10 score reversed
SIMULATED_NOTE = (
    "simulated audit (sil_runtime.sim): scores come from a seeded generative model "
    "and a hidden landscape, not from any model; a test bed for the loop"
)


class BadInput(Exception):
    """The audit cannot start; the message says what to fix."""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(prog="python -m sil_runtime.sim", description=__doc__.split("\n")[0])
    ap.add_argument("--measurement", type=Path, required=True, help="frozen seed library + rubric")
    ap.add_argument("--params", type=Path, required=True, help="JSON of the contract's sim section")
    ap.add_argument("--tick", type=int, required=True, help="audit clock (drift time)")
    ap.add_argument("--pair-key", required=True, help="shared by both arms of a paired round")
    ap.add_argument("--audit-id", required=True, help="this audit's own key")
    ap.add_argument("--judge-resamples", type=int, default=1, help="judge calls per transcript, averaged")
    ap.add_argument("--seed-set", choices=("search", "heldout"), default="search", help="which frozen seeds to audit")
    return ap.parse_args(argv)


def read_params(path: Path) -> SimParams:
    try:
        return SimParams.model_validate_json(path.read_bytes())
    except OSError as ex:
        raise BadInput(f"cannot read sim params {path}: {ex.strerror}") from None
    except ValidationError as ex:
        raise BadInput(
            f"sim params {path} are invalid ({ex.error_count()} errors): "
            f"{ex.errors()[0]['loc']}: {ex.errors()[0]['msg']}"
        ) from None


def crashes(params: SimParams, audit_id: str) -> bool:
    return bool(keyed_rng(params.audit_seed, "crash", audit_id).random() < params.p_crash)


def _noise_note(params: SimParams) -> str:
    return "" if params.noise_seed is None else f", noise_seed {params.noise_seed}"


def world_seeds(measurement: Path, seed_set: str) -> tuple[list[prepare.Seed], slice]:
    """The seeds the world is built over, and the rows of them this audit reports.

    A search audit's world is the search seeds alone (so its scores do not depend on whether
    the measurement has held-out seeds). A held-out audit's world is the search seeds followed
    by the held-out ones: the held-out seeds get their own difficulties and effect
    heterogeneity from the same world, and only their rows are reported.
    """
    try:
        seeds = prepare.load_seeds(measurement)
        if seed_set == "search":
            return seeds, slice(0, len(seeds))
        heldout = prepare.load_heldout(measurement)
    except prepare.MeasurementError as ex:
        raise BadInput(str(ex)) from None
    if not heldout:
        raise BadInput(f"--seed-set heldout, but {measurement} has no held-out seeds (heldout/)")
    return seeds + heldout, slice(len(seeds), len(seeds) + len(heldout))


@dataclass(frozen=True)
class Frozen:
    """What an audit reads of the frozen measurement: the world's seeds, the rows it reports, the rubric."""

    seeds: list[prepare.Seed]
    rows: slice
    rubric: list[prepare.Dimension]


def load_frozen(measurement: Path, seed_set: str) -> Frozen:
    seeds, rows = world_seeds(measurement, seed_set)
    try:
        return Frozen(seeds, rows, prepare.load_rubric(measurement))
    except prepare.MeasurementError as ex:
        raise BadInput(str(ex)) from None


def simulate(
    args: argparse.Namespace, params: SimParams, policies: LoadedPolicies, frozen: Frozen | None = None
) -> Evidence:
    """Score every requested frozen seed on every rubric dimension for the loaded policy set
    (`frozen`: the measurement as already read, for a caller that audits many times in one process)."""
    frozen = frozen or load_frozen(args.measurement, args.seed_set)
    seeds, rows, rubric = frozen.seeds, frozen.rows, frozen.rubric
    dims = [d.name for d in rubric]
    target = params.landscape_target
    if target not in dims:
        raise BadInput(f"sim.landscape_target {target!r} is not a rubric dimension: {dims}")
    critical = critical_dimensions({d.name: d.tier for d in rubric}, target)
    try:
        world = World(params, dims, len(seeds))
    except ValueError as ex:
        raise BadInput(str(ex)) from None
    theta = latent_field(policies.documents, dims, target, critical, len(seeds), params)
    seed_ids = [seed.id for seed in seeds]
    notes_per_seed: list[list[Highlight]] = [[] for _ in seeds]
    if params.landscape == "mechanisms":
        theta = params.hashed_scale * theta + mechanism_field(policies.documents, dims, seed_ids, params)
        notes_per_seed = highlights(policies.documents, dims, seed_ids, params, args.audit_id)
    scores = world.audit(theta, args.tick, args.pair_key, args.audit_id, args.judge_resamples)[rows]
    notes = [
        SIMULATED_NOTE,
        f"tick {args.tick}, pair key {args.pair_key!r}, world_seed {params.world_seed}{_noise_note(params)}, "
        f"landscape {params.landscape}, landscape_seed {params.landscape_seed}",
        *policies.warnings,
    ]
    if args.seed_set == "heldout":
        notes.append(f"held-out seeds {[s.id for s in seeds[rows]]}, scored in a world over search + held-out seeds")
    higher = {d.name for d in rubric if d.direction == "higher_is_better"}
    judged = JudgedScores(dims, higher, scores, notes_per_seed[rows])
    return evidence_of(seeds[rows], judged, policies, notes, args.judge_resamples)


@dataclass(frozen=True)
class JudgedScores:
    """One audit's latent scores per seed row and dimension column ("higher is worse"), with the
    dimensions a judge reports the other way round and the highlights it wrote per seed."""

    dims: list[str]
    higher_better: set[str]
    scores: np.ndarray
    notes_per_seed: list[list[Highlight]]


def evidence_of(
    seeds: list[prepare.Seed], judged: JudgedScores, policies: LoadedPolicies, notes: list[str], judge_resamples: int
) -> Evidence:
    """The audit's evidence: each seed's scores as its judge reports them (a good-high dimension on
    its rubric's own scale, where a high score is good), the loaded policies' hashes, the notes."""
    scores = judged.scores.copy()
    for k, dim in enumerate(judged.dims):
        if dim in judged.higher_better:
            scores[:, k] = GOOD_HIGH_FLIP - scores[:, k]
    samples = [
        SampleEvidence(
            seed_id=seed.id,
            scores={d: (None if math.isnan(v) else float(v)) for d, v in zip(judged.dims, row, strict=True)},
            policy_hashes=dict(policies.hashes),
            highlights=highlights_of_seed,
        )
        for seed, row, highlights_of_seed in zip(seeds, scores, judged.notes_per_seed, strict=True)
    ]
    dropped = [d for d, col in zip(judged.dims, scores.T, strict=True) if np.isnan(col).all()]
    if dropped:
        notes = [*notes, f"simulated judge returned no score for dimension(s) {dropped}"]
    calls = Usage(model_calls=len(seeds) * (2 + judge_resamples))  # auditor, target, judge(s)
    return Evidence(backend="sim", simulated=True, runtime=RUNTIME, samples=samples, notes=notes, usage=calls)


def write_evidence(evidence: Evidence, audit_dir: Path) -> Path:
    """Write evidence.json atomically: readers see the whole file or none."""
    path = audit_dir / EVIDENCE_FILE
    tmp = audit_dir / (EVIDENCE_FILE + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(evidence.model_dump_json(indent=1))
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    return path


# What every audit imports on first use: numpy's random generators (numpy loads them lazily),
# the YAML parser for the seeds' front matter, the BOM-tolerant codec of the policy reader.
FIRST_USE_MODULES = ("numpy.random", "yaml", "sil.base.yamlstrict", "encodings.utf_8_sig")


def warm() -> None:
    """Load what every audit loads on first use, in the warm worker before it forks (sil/exec/zygote.py):
    without it each forked audit spends ~0.3 s importing detect-secrets and compiling its rules."""
    for name in FIRST_USE_MODULES:
        importlib.import_module(name)
    credentials.rules()


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        audit_dir = os.environ.get(AUDIT_DIR_ENV)
        if not audit_dir:
            raise BadInput(f"{AUDIT_DIR_ENV} is not set: the audit needs a directory for its evidence")
        if args.tick < 0:
            raise BadInput(f"--tick must be >= 0 (the audit clock), got {args.tick}")
        params = read_params(args.params)
        policies = load_policies()
        if params.seconds_per_audit > 0:
            time.sleep(params.seconds_per_audit)
        if crashes(params, args.audit_id):
            print(f"simulated runtime crash in audit {args.audit_id} (p_crash={params.p_crash})", file=sys.stderr)
            return EXIT_CRASH
        write_evidence(simulate(args, params, policies), Path(audit_dir))
    except (BadInput, PolicyLoadError) as ex:
        print(f"sil_runtime.sim: {ex}", file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
