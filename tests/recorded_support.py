"""A recorded world for the tests: the TEST FIXTURE scores (tests/recorded_fixture.json, invented,
never a recording of any model) written as a data file of recorded audits of the real sets file's
sets, with their set ids computed as the recorder computes them (bench/record_audits.py)."""

from __future__ import annotations

import json
from pathlib import Path

from bench.record_audits import DATA, RecordedSet, build_sets
from sil.exec.backends.recordedpool import Provenance, RecordedAudit, append_record
from sil.policies.store import PolicyStore
from sil.search.proposers.catalogue import load_catalogue
from sil_policy import SURFACES

REPO = Path(__file__).resolve().parent.parent
FIXTURE = Path(__file__).with_name("recorded_fixture.json")
SURFACE_NAMES = list(SURFACES)
RUBRIC = sorted(p.stem for p in (REPO / "measurement" / "rubric").glob("*.md"))
FIXTURE_PROVENANCE = Provenance(
    model="TEST FIXTURE (invented scores)",
    model_file="none",
    model_sha256="0" * 64,
    server="none",
    inspect_ai="none",
    inspect_petri="none",
    contract_id="test-fixture",
    contract_hash="0" * 64,
    manifest_hash="0" * 64,
    commit="none",
    recorder="tests/recorded_support.py",
)


def fixture_sets(work: Path) -> dict[str, RecordedSet]:
    """The sets file's sets (start and edits), stored under `work` as the recorder stores them."""
    sets = build_sets(load_catalogue(DATA / "sets.yaml"), PolicyStore(work / "store"), SURFACE_NAMES)
    return {s.name: s for s in sets}


def write_fixture_pool(path: Path, work: Path) -> dict[str, RecordedSet]:
    """The fixture's scores as a data file at `path`; returns every set of the sets file by name."""
    sets = fixture_sets(work)
    scores = json.loads(FIXTURE.read_text())["sets"]
    for name, audits in scores.items():
        s = sets[name]
        for i, audit in enumerate(audits):
            full = {seed: {d: float(row.get(d, 1)) for d in RUBRIC} for seed, row in audit.items()}
            append_record(
                path,
                RecordedAudit(
                    set=name,
                    set_id=s.policy_set.set_id,
                    policy_hashes=dict(s.policy_set.hashes),
                    audit_id=f"fixture-{name}-{i}",
                    status="ok",
                    scores=full,
                    recorded_at="2026-12-06T00:00:00+00:00",
                    provenance=FIXTURE_PROVENANCE,
                ),
            )
    return sets


def fixture_means(name: str, dim: str) -> float:
    """A fixture set's pool mean of `dim` (1 where the fixture gives no score): the bench's truth."""
    audits = json.loads(FIXTURE.read_text())["sets"][name]
    per_audit = [sum(row.get(dim, 1) for row in a.values()) / len(a) for a in audits]
    return sum(per_audit) / len(per_audit)
