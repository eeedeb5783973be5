"""Local endpoints as contract fields: bound by the hash, passed to the audit explicitly, $0 only on loopback."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from sil.contract.schema import ContractError, approval_free_reason, parse_contract, run_note
from sil.exec.backends.petri import role_config
from sil.exec.measure import GapError

ROOT = Path(__file__).resolve().parents[2]
LOCAL = (ROOT / "examples" / "program-local-model.md").read_text()
TARGET_URL = "base_url: http://127.0.0.1:8765/v1"


def contract(text: str = LOCAL):
    return parse_contract(text, str(ROOT / "examples" / "program-local-model.md")).contract


def test_contracts_without_the_new_fields_keep_their_hash() -> None:
    # the example as it was before the local fields existed (commit 9b0a7c2), and its hash then
    old = subprocess.run(
        ["git", "show", "9b0a7c2:examples/program-petri-offline.md"], cwd=ROOT, capture_output=True, text=True
    )
    if old.returncode != 0:
        pytest.skip("this clone lacks commit 9b0a7c2's history")
    offline = parse_contract(old.stdout).contract
    assert offline.contract_hash == "f6d73e0af7d667c4957dafb11befd83a28e217d41a2ec7192ece84fc082150b6"
    canonical = json.loads(offline.canonical_json())
    assert "local" not in canonical and "base_url" not in canonical["models"]["target"]


def test_the_endpoint_and_call_limits_are_bound_by_the_hash() -> None:
    base = contract().contract_hash
    for old, new in [
        (TARGET_URL, "base_url: http://127.0.0.1:8766/v1"),
        ("max_tokens: 160", "max_tokens: 161"),
        ("timeout_s: 120", "timeout_s: 121"),
        ("max_retries: 1", "max_retries: 2"),
    ]:
        assert old in LOCAL
        assert contract(LOCAL.replace(old, new)).contract_hash != base, new


def test_a_local_loopback_role_is_free_and_needs_no_approval() -> None:
    c = contract()
    assert c.approval_free and not c.offline and c.models.target.price is None
    assert "local model on loopback (target)" in approval_free_reason(c)
    assert c.role_kinds()["target"] == "real model (local)" and c.role_kinds()["judge"] == "rule-based judge"
    assert run_note(c).startswith("real model (local), rule-based judge")


@pytest.mark.parametrize(
    ("old", "new", "fragment"),
    [
        (TARGET_URL, "base_url: http://localhost:8765/v1", "do not name a loopback base_url"),
        (TARGET_URL, "base_url: http://10.0.0.5:8765/v1", "do not name a loopback base_url"),
        ("local: true ", "local: false ", "call paid models but have no price"),
        (TARGET_URL, TARGET_URL + "\n    base_url_env: LOCAL_URL", "base_url or base_url_env, not both"),
        ("max_retries: 1", "max_retries: 1\n    model_args: {api_key: x}", "have their own fields"),
        (TARGET_URL, "base_url: ftp://127.0.0.1/v1", "base_url"),
    ],
)
def test_invalid_local_contracts_name_the_problem(old: str, new: str, fragment: str) -> None:
    assert old in LOCAL
    with pytest.raises(ContractError, match=fragment):
        contract(LOCAL.replace(old, new, 1))


def test_a_priced_local_role_still_needs_an_approval() -> None:
    priced = LOCAL.replace(
        "max_retries: 1", "max_retries: 1\n    price: {input_per_mtok: 1, output_per_mtok: 1}\n    context_tokens: 8192"
    )
    assert not contract(priced).approval_free


def test_the_audit_subprocess_gets_the_endpoint_and_limits_explicitly() -> None:
    config = role_config(contract().models.target)
    assert config["model_args"] == {"base_url": "http://127.0.0.1:8765/v1"}
    assert config["max_tokens"] == 160 and config["max_retries"] == 1
    assert config["attempt_timeout"] == 120 and config["timeout"] == 240


def test_an_endpoint_from_an_unset_env_var_is_a_gap(monkeypatch: pytest.MonkeyPatch) -> None:
    text = LOCAL.replace("local: true ", "local: false ").replace(
        TARGET_URL, "base_url_env: SIL_TEST_URL\n    price: {input_per_mtok: 0, output_per_mtok: 0}"
    )
    role = contract(text).models.target
    monkeypatch.delenv("SIL_TEST_URL", raising=False)
    with pytest.raises(GapError, match=r"\$SIL_TEST_URL, which is not set"):
        role_config(role)
    monkeypatch.setenv("SIL_TEST_URL", "http://127.0.0.1:9999/v1")
    assert role_config(role)["model_args"]["base_url"] == "http://127.0.0.1:9999/v1"
