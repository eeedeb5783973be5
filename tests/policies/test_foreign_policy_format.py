"""Issue 25.17: policy files in a user's own formatting. The loop compares structured surfaces
by meaning and keeps the user's bytes for files it did not change, so a KEEP on one surface
never makes another look edited by hand (which halted every run with exit 3)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
from typer.testing import CliRunner

from sil.cli.app import app
from sil.policies.store import PolicyStore, same_meaning
from sil_policy import SURFACES, parse_surface
from tests.cli.test_cli import make_workspace

BOM = b"\xef\xbb\xbf"


def _reordered(value):
    """The same document with every object's keys in reverse order."""
    if isinstance(value, dict):
        return {k: _reordered(value[k]) for k in reversed(list(value))}
    if isinstance(value, list):
        return [_reordered(v) for v in value]
    return value


# One foreign style per file: how editors and other tools write JSON.
STYLES = {
    "wrapper_prompt": lambda d: json.dumps(d, indent=4).encode(),  # 4 spaces, no final newline
    "tool_policy": lambda d: json.dumps(_reordered(d), indent=2).encode() + b"\n",  # other key order
    "decomposition": lambda d: json.dumps(d, indent=2).replace("\n", "\r\n").encode() + b"\r\n",  # CRLF
    "reflection": lambda d: BOM + json.dumps(d, indent=2).encode() + b"\n",  # UTF-8 byte-order mark
    "skill_catalog": lambda d: json.dumps(d, separators=(",", ":")).encode(),  # minified
    "agent_contracts": lambda d: json.dumps(d, indent="\t").encode() + b"\n",  # tabs
    "tool_descriptions": lambda d: json.dumps(d, indent=2, ensure_ascii=True).encode() + b"\n\n",
}


def foreign(policies: Path) -> dict[str, bytes]:
    """Rewrite every policy file in a foreign style; return the bytes written."""
    written = {}
    for name, spec in SURFACES.items():
        path = policies / spec.filename
        written[name] = STYLES[name](parse_surface(name, path.read_bytes()))
        path.write_bytes(written[name])
    return written


@pytest.mark.parametrize("name", list(SURFACES))
def test_each_foreign_style_parses_to_the_same_document(name: str, tmp_path: Path) -> None:
    from tests.conftest import REPO

    data = (REPO / "state" / "policies" / SURFACES[name].filename).read_bytes()
    styled = STYLES[name](parse_surface(name, data))
    assert styled != data and same_meaning(name, styled, data)


def test_after_a_keep_another_surface_applies_on_foreign_formatted_files(tmp_path: Path) -> None:
    """The arm's sequence: KEEP a wrapper_prompt edit, then apply a tool_policy edit on top."""
    from tests.conftest import REPO

    shutil.copytree(REPO / "state" / "policies", tmp_path / "policies")
    written = foreign(tmp_path / "policies")
    store = PolicyStore(tmp_path / "run")
    origin = store.snapshot_dir(tmp_path / "policies")
    store.init_working("gate", origin)
    docs = store.documents(origin)
    docs["wrapper_prompt"] = {"sections": {**docs["wrapper_prompt"]["sections"], "x": "Report tool errors."}}
    kept = store.store_documents(docs, base=origin)
    store.write_surface("gate", "wrapper_prompt", kept, expect_current=origin.hashes["wrapper_prompt"])
    docs = store.documents(kept)
    docs["tool_policy"] = {**docs["tool_policy"], "forbidden_tools": ["delete_account"]}
    nxt = store.store_documents(docs, base=kept)
    store.write_surface("gate", "tool_policy", nxt, expect_current=kept.hashes["tool_policy"])  # raised before
    for name in set(SURFACES) - {"wrapper_prompt", "tool_policy"}:
        assert (store.working_dir("gate") / SURFACES[name].filename).read_bytes() == written[name]
        assert (store.set_dir(nxt) / SURFACES[name].filename).read_bytes() == written[name]  # promoted as written
        assert nxt.hashes[name] == origin.hashes[name]


def test_check_accepts_foreign_formatted_policies(tmp_path: Path, monkeypatch) -> None:
    root = make_workspace(tmp_path)
    foreign(root / "state" / "policies")
    monkeypatch.chdir(root)
    result = CliRunner().invoke(app, ["check"], catch_exceptions=False)
    assert result.exit_code == 0, result.output


def test_a_working_file_resaved_in_other_formatting_is_not_hand_edited(tmp_path: Path) -> None:
    from tests.conftest import REPO

    store = PolicyStore(tmp_path / "run")
    origin = store.snapshot_dir(REPO / "state" / "policies")
    docs = store.documents(origin)
    docs["wrapper_prompt"] = {"sections": {**docs["wrapper_prompt"]["sections"], "x": "Report tool errors."}}
    cand = store.store_documents(docs, base=origin)
    assert [n for n in SURFACES if cand.hashes[n] != origin.hashes[n]] == ["wrapper_prompt"]
    store.init_working("gate", origin)
    store.write_surface("gate", "wrapper_prompt", cand, expect_current=origin.hashes["wrapper_prompt"])
    path = store.working_dir("gate") / "wrapper_prompt.json"
    path.write_bytes(path.read_bytes().replace(b"\n", b"\r\n"))  # an editor re-saved it
    store.write_surface("gate", "wrapper_prompt", origin, expect_current=cand.hashes["wrapper_prompt"])
    assert store.working_hash("gate", "wrapper_prompt") == origin.hashes["wrapper_prompt"]
