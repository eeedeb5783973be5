"""Approvals bind (issue 5 item 7, issue 2): every contract field, every frozen file, each pinned
package, the expiry and the signer invalidate an approval; offline contracts need none."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from sil.base.sshsig import allowed_signers_line, generate_key
from sil.contract import approval as apmod
from sil.contract.approval import (
    Approval,
    ApprovalError,
    approval_path,
    approve,
    frozen_measurement_hash,
    measurement_components,
    require_approval,
)
from sil.contract.history import ContractHistory
from sil.contract.schema import Contract, load_contract
from tests.conftest import with_value

REPO = Path(__file__).resolve().parents[2]
NOW = datetime(2026, 11, 29, 12, 0, tzinfo=UTC)
ALICE = "alice@example.org"
BOB = "bob@example.org"


def real_contract() -> Contract:
    """The default contract turned into one with paid models, every optional field set."""
    data = load_contract(REPO / "program.md").contract.model_dump(mode="json")
    role = {
        "credential_env": "ANTHROPIC_API_KEY",
        "temperature": 0.0,
        "price": {"input_per_mtok": 3.0, "output_per_mtok": 15.0},
        "context_tokens": 200_000,
    }
    data["models"] = {
        r: {"model": f"anthropic/claude-{r}-20261001", **role} for r in ("auditor", "target", "judge", "mutator")
    }
    parent = load_contract(REPO / "program.md").contract.contract_hash  # recorded in env's contract history
    data.update(
        backend="petri", backend_settings=None, parent=parent, revision_reason="paid run", contract_id="sil-real"
    )
    data["petri"] = {"target_agent_params": {"mode": "strict"}}
    data["measurement"]["canary_max_shift"] = None  # the canary runs on the sim backend only
    contract = Contract.model_validate(data)
    assert not contract.offline
    return contract


@pytest.fixture(scope="module")
def keys(tmp_path_factory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("keys")
    out = {name: generate_key(d / name, name) for name in ("alice", "bob", "mallory")}
    allowed = d / "allowed_signers"
    allowed.write_text(
        allowed_signers_line(ALICE, d / "alice.pub", ("sil-approval",))
        + allowed_signers_line(BOB, d / "bob.pub", ("sil-approval",))
    )
    out["allowed"] = allowed
    return out


@pytest.fixture
def env(tmp_path: Path, keys, monkeypatch) -> dict[str, Any]:
    """A project root with the frozen measurement and a copy of the measurement code."""
    monkeypatch.delenv("SIL_ALLOWED_SIGNERS", raising=False)
    root, code = tmp_path / "project", tmp_path / "code"
    shutil.copytree(REPO / "measurement", root / "measurement")
    for rel in (
        "sil/contract/prepare.py",
        "sil/contract/simparams.py",
        "sil/exec/measure.py",
        "sil_policy/evidence.py",
    ):
        (code / rel).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(REPO / rel, code / rel)
    shutil.copytree(
        REPO / "sil_runtime", code / "sil_runtime", ignore=shutil.ignore_patterns("__pycache__", "defaults")
    )
    ContractHistory(root).register(load_contract(REPO / "program.md"), (REPO / "program.md").read_text())
    return {"root": root, "code": code, "contract": real_contract(), **keys}


def do_approve(
    env,
    contract: Contract | None = None,
    *,
    key: str | None = "alice",
    approver: str = ALICE,
    hours: float = 72,
    with_allowed: bool = True,
) -> Approval:
    return approve(
        contract or env["contract"],
        env["root"],
        approver,
        hours,
        env[key] if key else None,
        now=NOW,
        code_root=env["code"],
        allowed_signers=env["allowed"] if with_allowed else None,
    )


def check(
    env, contract: Contract | None = None, *, now: datetime = NOW + timedelta(hours=1), **kwargs
) -> Approval | None:
    kwargs.setdefault("allowed_signers", env["allowed"])
    return require_approval(contract or env["contract"], env["root"], now, code_root=env["code"], **kwargs)


def test_signed_approval_records_who_what_when_until(env) -> None:
    made = do_approve(env)
    stored = json.loads(approval_path(made.contract_hash, env["root"]).read_text())
    assert stored["approver"] == ALICE
    assert stored["contract_hash"] == env["contract"].contract_hash
    assert stored["measurement_hash"] == frozen_measurement_hash(env["contract"], env["root"], env["code"])
    assert stored["approved_at"].startswith("2026-11-29T12:00:00")
    assert stored["expires_at"].startswith("2026-12-02T12:00:00")
    assert stored["key_fingerprint"].startswith("SHA256:")
    assert "BEGIN SSH SIGNATURE" in stored["signature"]
    got = check(env)
    assert got == made


def test_measurement_hash_covers_seeds_code_and_packages(env) -> None:
    parts = measurement_components(env["contract"], env["root"], env["code"])
    assert {
        "measurement/seeds/order_tool_error.md",
        "measurement/rubric/broken_tool_use.md",
        "code/sil/contract/prepare.py",
        "code/sil/contract/simparams.py",
        "code/sil/exec/measure.py",
        "code/sil_policy/evidence.py",
        "code/sil_runtime/policy_loader.py",
        "package/inspect-ai",
        "package/inspect-petri",
        "package/inspect-scout",
    } <= parts.keys()
    assert parts["package/inspect-ai"] == "0.3.285"


def test_offline_contract_needs_no_approval(env) -> None:
    offline = load_contract(REPO / "program.md").contract
    assert offline.offline
    assert require_approval(offline, env["root"]) is None
    assert not (env["root"] / "state" / "approvals").exists()


def test_missing_approval(env) -> None:
    with pytest.raises(ApprovalError, match="no approval for contract sil-real .*sil approve"):
        check(env)


# --- every contract field -------------------------------------------------------------


def _leaves(obj: Any, path: tuple = ()) -> list[tuple]:
    if isinstance(obj, dict) and obj:
        return [leaf for k, v in obj.items() for leaf in _leaves(v, (*path, k))]
    return [path]


def _candidates(value: Any) -> list[Any]:
    if value is None:  # an optional field left unset: try a few plausible values
        return [1, 0.5, "x", True, "ab" * 32, ["x"], {"x": "y"}, "http://127.0.0.1:1/v1", "SIL_X"]
    if isinstance(value, bool):
        return [not value]
    if isinstance(value, int):
        return [value + 1, value - 1]
    if isinstance(value, float):
        return [value * 1.1 + 0.01, value / 2, value - 0.01]
    if isinstance(value, str):
        if len(value) == 64 and all(c in "0123456789abcdef" for c in value):
            return [("1" if value[0] != "1" else "2") + value[1:]]
        return [
            value + "x",
            value + "X",
            "fixed" if value != "fixed" else "synthetic",
            "spg",
            "paired_margin",
            "elond",
            "even",
            "forecast",
            "bound",
            "pocock",
            "ray",
            "mutated",
            "search",
            "fwer",
            "two_stage",
        ]
    if isinstance(value, list):
        return [value[:-1], value[::-1], [*value, "admirable"], [*value, "auditor_failure"]]
    if isinstance(value, dict):
        return [{"extra": "value"}, {"extra": 1}]
    return []


def _changed_contracts(contract: Contract):
    base = contract.model_dump(mode="json")
    for path in _leaves(base):
        node = base
        for key in path:
            node = node[key]
        for value in _candidates(node):
            try:
                changed = Contract.model_validate(with_value(base, path, value))
            except ValueError:
                continue
            if changed.contract_hash != contract.contract_hash:
                yield path, changed
                break
        else:
            yield path, None


# Only with the other switched too, and then the contract is offline (sim): no approval needed.
COUPLED = {("backend",), ("sim",)}
# No other value validates: Literal[True].
FIXED = {("stop", "stop_on_uncertain_revert")}
# Only for the offline catalogue mutator; and `bound` hashes are computed (tested in test_contract).
COUPLED |= {("mutator", "catalogue"), ("bound", "programme")}
# Only with every non-offline role on a loopback base_url (each role's base_url is covered)
COUPLED |= {("local",)}
# Ray executor settings: only with executor.kind ray (kind itself is covered)
COUPLED |= {("executor", f) for f in ("address_env", "num_cpus", "resources", "max_in_flight")}
# The fresh-seed claim: only where the certification runs on held-out seeds (this contract's does not)
COUPLED |= {("certification", "claim")}


def test_every_contract_field_invalidates(env) -> None:
    do_approve(env)
    covered = 0
    for path, changed in _changed_contracts(env["contract"]):
        if path in COUPLED or path in FIXED:
            continue
        assert changed is not None, f"no valid change found for {'.'.join(map(str, path))}"
        with pytest.raises(ApprovalError) as info:
            check(env, changed)
        if path == ("contract_id",):  # another contract altogether: nothing approved under its id
            assert "no approval for contract sil-realx" in str(info.value)
            continue
        assert "contract changed since approval" in str(info.value)
        assert ".".join(map(str, path)) in str(info.value)  # names the field that changed
        covered += 1
    assert covered >= 60


def test_approval_file_moved_to_another_contract(env) -> None:
    made = do_approve(env)
    other = Contract.model_validate({**env["contract"].model_dump(mode="json"), "seed": 1})
    shutil.copy(approval_path(made.contract_hash, env["root"]), approval_path(other.contract_hash, env["root"]))
    with pytest.raises(ApprovalError, match="contract changed since approval"):
        check(env, other)


# --- every frozen file and package -----------------------------------------------------


def _frozen_files(env) -> list[Path]:
    seeds = sorted((env["root"] / "measurement").glob("*/*.md"))
    code = sorted(p for p in env["code"].rglob("*.py"))
    return seeds + code


def test_every_frozen_file_invalidates(env) -> None:
    do_approve(env)
    files = _frozen_files(env)
    assert len(files) >= 25
    for path in files:
        original = path.read_bytes()
        path.write_bytes(original + b"\n# changed\n")
        with pytest.raises(ApprovalError, match="frozen measurement changed") as info:
            check(env)
        assert path.name in str(info.value)
        path.write_bytes(original)
    check(env)  # restored: valid again


def test_added_measurement_file_invalidates(env) -> None:
    do_approve(env)
    (env["code"] / "sil" / "exec" / "backends").mkdir(parents=True)
    (env["code"] / "sil" / "exec" / "backends" / "petri.py").write_text("# a new backend\n")
    with pytest.raises(ApprovalError, match="code/sil/exec/backends/petri.py"):
        check(env)


@pytest.mark.parametrize("package", apmod.PINNED_PACKAGES)
def test_every_pinned_package_version_invalidates(env, monkeypatch, package: str) -> None:
    do_approve(env)
    real = apmod.metadata.version
    monkeypatch.setattr(apmod.metadata, "version", lambda name: "9.9.9" if name == package else real(name))
    with pytest.raises(ApprovalError, match=f"package/{package}"):
        check(env)


# --- expiry, stored fields, signer -------------------------------------------------------


def test_expiry(env) -> None:
    made = do_approve(env, hours=2)
    check(env, now=made.expires_at - timedelta(seconds=1))
    with pytest.raises(ApprovalError, match="expired at"):
        check(env, now=made.expires_at)


def test_dated_in_the_future(env) -> None:
    do_approve(env)
    with pytest.raises(ApprovalError, match="dated in the future"):
        check(env, now=NOW - timedelta(hours=1))


@pytest.mark.parametrize("hours", [0, -1, 24 * 91])
def test_expiry_bounds(env, hours: float) -> None:
    with pytest.raises(ApprovalError, match="expiry must be within"):
        do_approve(env, hours=hours)


def _edit_stored(env, field: str, value: Any) -> None:
    path = approval_path(env["contract"].contract_hash, env["root"])
    data = json.loads(path.read_text())
    data[field] = value
    path.write_text(json.dumps(data))


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("expires_at", "2027-12-31T00:00:00Z"),
        ("approved_at", "2026-11-29T13:00:00Z"),
        ("approver", BOB),
        ("measurement_hash", "0" * 64),
        ("measurement", {"code/sil/exec/measure.py": "0" * 64}),
        ("contract", {"contract_id": "sil-real"}),
        ("contract_id", "sil-other"),
        ("key_fingerprint", "SHA256:forged"),
    ],
)
def test_every_stored_field_is_covered_by_the_signature(env, field: str, value: Any) -> None:
    do_approve(env)
    _edit_stored(env, field, value)
    with pytest.raises(ApprovalError, match="signature is not valid: .*edited after signing"):
        check(env)


def test_edited_contract_hash_in_file(env) -> None:
    do_approve(env)
    _edit_stored(env, "contract_hash", "0" * 64)
    with pytest.raises(ApprovalError, match="contract changed since approval"):
        check(env)


def test_key_not_in_allowed_signers(env) -> None:
    do_approve(env, key="mallory", with_allowed=False)
    with pytest.raises(ApprovalError, match="signed by a key that is not in"):
        check(env)


def test_another_allowed_signers_key(env) -> None:
    do_approve(env, key="bob", with_allowed=False)  # bob's key, approval says alice
    with pytest.raises(ApprovalError, match=f"signed by {BOB}, not by '{ALICE}'"):
        check(env)


def test_approve_refuses_a_key_that_would_not_verify(env) -> None:
    with pytest.raises(ApprovalError, match="not in"):
        do_approve(env, key="mallory")
    assert not approval_path(env["contract"].contract_hash, env["root"]).exists()


def test_changed_allowed_signers_invalidates(env, tmp_path: Path) -> None:
    do_approve(env)
    only_bob = tmp_path / "only_bob"
    only_bob.write_text(env["allowed"].read_text().splitlines(keepends=True)[1])
    with pytest.raises(ApprovalError, match="not in"):
        check(env, allowed_signers=only_bob)


def test_signature_namespace_is_bound(env, keys) -> None:
    """A signature made for ledger checkpoints is not an approval signature."""
    from sil.base.sshsig import Signer, sign

    made = do_approve(env, key=None)
    forged = made.model_copy(
        update={"signature": sign(made.signed_bytes(), Signer(keys["alice"], ALICE), "sil-ledger")}
    )
    approval_path(made.contract_hash, env["root"]).write_text(forged.model_dump_json())
    with pytest.raises(ApprovalError, match="signature is not valid"):
        check(env)


def test_unsigned_approval(env, monkeypatch) -> None:
    do_approve(env, key=None)
    with pytest.raises(ApprovalError, match="approval is unsigned"):
        check(env)
    assert check(env, require_signed=False) is not None


def test_no_allowed_signers_file(env) -> None:
    do_approve(env)
    with pytest.raises(ApprovalError, match="no allowed_signers file"):
        check(env, allowed_signers=None)


def test_allowed_signers_from_environment(env, monkeypatch) -> None:
    do_approve(env)
    monkeypatch.setenv("SIL_ALLOWED_SIGNERS", str(env["allowed"]))
    assert check(env, allowed_signers=None) is not None


def test_malformed_approval_file(env) -> None:
    do_approve(env)
    approval_path(env["contract"].contract_hash, env["root"]).write_text("{not json")
    with pytest.raises(ApprovalError, match="unreadable or malformed"):
        check(env)


def test_bad_approver_identity(env) -> None:
    with pytest.raises(ApprovalError, match="identity"):
        do_approve(env, approver="alice example")
