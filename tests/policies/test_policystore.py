"""Policy sets and working files: snapshots, byte-identical reverts, hand edits never reverted."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sil.policies.store import HandEditedPolicy, PolicyStore, read_policy_dir
from sil_policy import SURFACES, PolicyError, canonical_bytes


@pytest.fixture
def store(workspace: Path) -> PolicyStore:
    return PolicyStore(workspace / "run")


def _edited(store: PolicyStore, origin):
    docs = store.documents(origin)
    docs["wrapper_prompt"] = {"sections": {**docs["wrapper_prompt"]["sections"], "errors": "Report tool errors."}}
    return store.store_documents(docs)


def test_snapshot_is_read_only_and_content_addressed(store, workspace) -> None:
    a = store.snapshot_dir(workspace / "state" / "policies")
    b = store.snapshot_dir(workspace / "state" / "policies")
    assert a == b and a.set_id == b.set_id
    for spec in SURFACES.values():
        assert (store.set_dir(a) / spec.filename).stat().st_mode & 0o222 == 0


def test_revert_restores_byte_identical_files(store, workspace) -> None:
    origin = store.snapshot_dir(workspace / "state" / "policies")
    before = {s.filename: (store.set_dir(origin) / s.filename).read_bytes() for s in SURFACES.values()}
    cand = _edited(store, origin)
    store.init_working("gate", origin)
    store.write_surface("gate", "wrapper_prompt", cand, expect_current=origin.hashes["wrapper_prompt"])
    assert store.working_hash("gate", "wrapper_prompt") == cand.hashes["wrapper_prompt"]
    store.write_surface("gate", "wrapper_prompt", origin, expect_current=cand.hashes["wrapper_prompt"])
    after = {s.filename: (store.working_dir("gate") / s.filename).read_bytes() for s in SURFACES.values()}
    assert after == before


def test_hand_edited_file_is_never_reverted(store, workspace) -> None:
    origin = store.snapshot_dir(workspace / "state" / "policies")
    cand = _edited(store, origin)
    store.init_working("gate", origin)
    store.write_surface("gate", "wrapper_prompt", cand, expect_current=origin.hashes["wrapper_prompt"])
    path = store.working_dir("gate") / "wrapper_prompt.json"
    by_hand = canonical_bytes({"sections": {"role": "edited by a person"}})
    path.write_bytes(by_hand)
    with pytest.raises(HandEditedPolicy, match="changed outside the loop"):
        store.write_surface("gate", "wrapper_prompt", origin, expect_current=cand.hashes["wrapper_prompt"])
    assert path.read_bytes() == by_hand


def test_repeated_write_is_idempotent(store, workspace) -> None:
    origin = store.snapshot_dir(workspace / "state" / "policies")
    cand = _edited(store, origin)
    store.init_working("gate", origin)
    for _ in range(2):
        store.write_surface("gate", "wrapper_prompt", cand, expect_current=origin.hashes["wrapper_prompt"])
    assert store.working_hash("gate", "wrapper_prompt") == cand.hashes["wrapper_prompt"]


def test_invalid_policy_file_names_file_and_field(workspace) -> None:
    path = workspace / "state" / "policies" / "tool_policy.json"
    doc = json.loads(path.read_text())
    doc["allowed_tools"] = "lookup_order"
    path.write_text(json.dumps(doc))
    with pytest.raises(PolicyError, match="allowed_tools"):
        read_policy_dir(workspace / "state" / "policies")


def test_symlinked_policy_file_is_refused(workspace, tmp_path) -> None:
    target = workspace / "state" / "policies" / "reflection.json"
    outside = tmp_path / "elsewhere.json"
    outside.write_bytes(target.read_bytes())
    target.unlink()
    target.symlink_to(outside)
    with pytest.raises(PolicyError, match="symlink"):
        read_policy_dir(workspace / "state" / "policies")
