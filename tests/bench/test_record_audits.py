"""bench.record_audits: the order of a recording session (the audits themselves need the model)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.record_audits import chosen, plan
from tests.recorded_support import fixture_sets


def test_the_plan_grows_every_set_alike_in_batches_and_resumes_from_what_is_recorded(tmp_path: Path) -> None:
    sets = list(fixture_sets(tmp_path).values())[:3]
    a, b, c = (s.name for s in sets)
    order = [(s.name, seed_set) for s, seed_set in plan(sets, {(a, "search"): 3}, 4, ["search"], batch=2)]
    assert [n for n, _ in order] == [b, b, c, c, a, b, b, c, c]  # a had 3: one more, in the second round
    assert {seed_set for _, seed_set in order} == {"search"}
    assert plan(sets, {(s.name, "search"): 4 for s in sets}, 4, ["search"]) == []


def test_only_records_the_named_sets_and_refuses_a_name_the_sets_file_lacks(tmp_path: Path) -> None:
    sets = list(fixture_sets(tmp_path).values())
    names = [s.name for s in chosen(sets, [sets[2].name, sets[1].name])]
    assert names == [sets[1].name, sets[2].name]  # the sets file's order
    assert chosen(sets, None) == sets
    with pytest.raises(SystemExit, match="no-such-set"):
        chosen(sets, ["no-such-set"])
