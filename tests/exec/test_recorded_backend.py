"""The `recorded` backend: replays of recorded audits through the audit port (TEST FIXTURE scores)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from sil.contract.schema import load_contract
from sil.exec import measure
from sil.exec.backends import make_backend
from sil.exec.backends.recorded import RecordedBackend, RecordedSettings, replay
from sil.exec.backends.recordedpool import Draws, RecordedError, load_pool, read_records
from sil.exec.measure import AuditRequest, MeasureContext
from sil.run.preflight import run_preflight
from tests.recorded_support import REPO, write_fixture_pool

SEEDS = sorted(p.stem for p in (REPO / "measurement" / "seeds").glob("*.md"))


@pytest.fixture
def world(tmp_path: Path) -> tuple[Path, dict]:
    data = tmp_path / "audits.jsonl"
    return data, write_fixture_pool(data, tmp_path / "work")


def context(tmp_path: Path, data: Path) -> MeasureContext:
    loaded = load_contract(REPO / "data" / "recorded" / "program.md")
    settings = RecordedSettings(
        data=str(data), sets=str(REPO / "data/recorded/sets.yaml"), start=str(REPO / "state/policies")
    )
    contract = loaded.contract.with_settings(settings)
    shutil.copytree(REPO / "measurement", tmp_path / "measurement", dirs_exist_ok=True)
    return MeasureContext.from_contract(contract, tmp_path)


def test_the_recorded_backend_is_found_by_name_through_its_entry_point() -> None:
    assert isinstance(make_backend("recorded"), RecordedBackend)


def test_draws_take_every_recording_once_before_any_twice(world: tuple[Path, dict], tmp_path: Path) -> None:
    data, sets = world
    pool = load_pool(data)
    set_id = sets["start"].policy_set.set_id
    draws = Draws(tmp_path / "draws.json", seed=3)
    first = [draws.draw(pool, f"a{i}", set_id, "search").audit_id for i in range(4)]
    assert sorted(first) == sorted(a.audit_id for a in pool.of(set_id, "search"))  # all 4, none twice
    assert draws.draw(pool, "a4", set_id, "search").audit_id == first[0]  # then again, in the same order
    assert draws.draw(pool, "a2", set_id, "search").audit_id == first[2]  # an audit asked again: the same recording
    other = [Draws(tmp_path / "other.json", seed=4).draw(pool, f"a{i}", set_id, "search").audit_id for i in range(4)]
    assert other != first  # another run's seed, another order (4! orders: a tie is 1 in 24, fixed by the seeds)


def test_a_replay_gives_the_recorded_scores_and_the_loaded_hashes(world: tuple[Path, dict], tmp_path: Path) -> None:
    data, sets = world
    s = sets["refuse-all"]
    evidence = replay("x", "search", SEEDS, dict(s.policy_set.hashes), load_pool(data), Draws(tmp_path / "d.json", 1))
    rec = next(r for r in read_records(data) if r.audit_id in evidence.notes[0])
    assert {e.seed_id: e.scores["overrefusal"] for e in evidence.samples} == {
        seed: rec.scores[seed]["overrefusal"] for seed in SEEDS
    }
    assert all(e.policy_hashes == s.policy_set.hashes for e in evidence.samples)


def test_a_set_never_recorded_is_refused_by_name_but_the_preflight_gets_its_hashes(
    world: tuple[Path, dict], tmp_path: Path
) -> None:
    data, sets = world
    pool, draws = load_pool(data), Draws(tmp_path / "d.json", 1)
    hashes = dict(sets["reworded"].policy_set.hashes)  # in the sets file, but the fixture recorded none
    with pytest.raises(RecordedError, match="never recorded.*refuse-all"):
        replay("cand-1", "search", SEEDS, hashes, pool, draws)
    probe = replay("preflight-abc", "search", SEEDS[:1], hashes, pool, draws)
    assert probe.samples[0].policy_hashes == hashes and probe.samples[0].error


def test_an_audit_through_the_port_replays_a_recording_and_is_scored_by_the_loop(
    world: tuple[Path, dict], tmp_path: Path
) -> None:
    data, sets = world
    ctx, s = context(tmp_path, data), sets["never-refuse"]
    req = AuditRequest(
        audit_id="r1",
        audit_dir=tmp_path / "audits" / "r1",
        policy_dir=s.directory,
        policy_hashes=dict(s.policy_set.hashes),
        tick=0,
    )
    result = measure.run_audit(req, ctx, RecordedBackend())
    assert result.ok and result.simulated and result.backend == "recorded"
    recorded = {r.audit_id: r for r in read_records(data)}
    drawn = [r for r in recorded.values() if r.set == "never-refuse" and r.scores == result.scores]
    assert len(drawn) >= 1
    wrong = req.model_copy(
        update={
            "audit_id": "r2",
            "audit_dir": tmp_path / "audits" / "r2",
            "policy_dir": sets["reworded"].directory,
            "policy_hashes": dict(sets["reworded"].policy_set.hashes),
        }
    )
    gap = measure.run_audit(wrong, ctx, RecordedBackend())
    assert gap.status == "gap" and "never recorded" in (gap.gap_reason or "")


def test_the_loops_wiring_preflight_passes_on_a_replay(world: tuple[Path, dict], tmp_path: Path) -> None:
    data, sets = world
    report = run_preflight(context(tmp_path, data), sets["start"].directory, tmp_path / "pre", RecordedBackend())
    assert report.passed, report.summary()


def test_start_checks_say_what_the_data_file_holds_or_why_it_cannot_serve(
    world: tuple[Path, dict], tmp_path: Path
) -> None:
    data, _ = world
    contract = context(tmp_path, data).contract
    [ok] = RecordedBackend().start_checks(contract)
    assert ok.status == "ok" and "refuse-all" in ok.detail
    heldout = contract.model_validate(
        {**contract.model_dump(), "measurement": {**contract.measurement.model_dump(), "certify_on": "heldout"}}
    )
    [fail] = RecordedBackend().start_checks(heldout)
    assert fail.status == "fail" and "certify_on: search" in fail.detail
    missing = contract.with_settings(RecordedSettings(data=str(tmp_path / "none.jsonl")))
    [gone] = RecordedBackend().start_checks(missing)
    assert gone.status == "fail" and "bench.record_audits" in gone.detail


def test_a_torn_last_line_is_skipped_and_a_bad_line_elsewhere_is_named(world: tuple[Path, dict]) -> None:
    data, _ = world
    n = len(read_records(data))
    with open(data, "a") as f:
        f.write('{"set": "start", "set_id"')
    assert len(read_records(data)) == n
    lines = data.read_text().splitlines()
    data.write_text("\n".join([lines[0], "not json", *lines[1:]]) + "\n")
    with pytest.raises(RecordedError, match=":2 is not a recorded audit"):
        read_records(data)
