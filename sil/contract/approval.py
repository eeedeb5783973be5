"""Approvals of run contracts: who approved which contract and frozen measurement, until when.

An approval binds the contract hash, the frozen measurement hash (every seed and rubric
file, the measurement code, the pinned inspect-ai/inspect-petri/inspect-scout versions), the
approver and an expiry, and is signed with the approver's SSH key (`ssh-keygen -Y sign -n
sil-approval`). A run with real model calls re-checks it before every audit: a changed
contract field, frozen file, package version, expiry or signer invalidates it. Offline
contracts (every role simulated or scripted) need none.

    approve(contract, repo_root, "alice@example.org", 72, Path("~/.ssh/id_ed25519"))
    approval = require_approval(contract, repo_root)   # ApprovalError says what is wrong

Trust comes from an `allowed_signers` file (ssh-keygen(1)): `--allowed-signers`, else
$SIL_ALLOWED_SIGNERS, else `state/allowed_signers`. Keep it where the loop cannot write.
"""

from __future__ import annotations

import hashlib
import json
import sys
from datetime import UTC, datetime, timedelta
from importlib import metadata
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import AwareDatetime, BaseModel, ConfigDict, Field, ValidationError

from sil.base.fsutil import atomic_write_bytes
from sil.base.sshsig import (
    SignatureError,
    Signer,
    check_identity,
    fingerprint,
    resolve_allowed_signers,
    sign,
    verify,
)
from sil.contract import prepare
from sil.contract.history import LineageError, check_lineage
from sil.contract.schema import Contract

NAMESPACE = "sil-approval"
APPROVALS_DIR = Path("state") / "approvals"
ALLOWED_SIGNERS_DEFAULT = Path("state") / "allowed_signers"
MAX_HOURS = 24 * 90
CLOCK_SKEW = timedelta(minutes=5)
PINNED_PACKAGES = ("inspect-ai", "inspect-petri", "inspect-scout")
# Code that defines the measurement; a glob may match nothing (e.g. no petri backend yet).
MEASUREMENT_CODE = (
    "sil/contract/prepare.py",
    "sil/contract/simparams.py",
    "sil/exec/measure.py",
    "sil/exec/backends/*.py",
    "sil_policy/evidence.py",
    "sil_runtime/**/*.py",
)
CODE_ROOT = Path(prepare.__file__).resolve().parents[2]
Hex64 = Annotated[str, Field(pattern=r"^[0-9a-f]{64}$")]


class ApprovalError(RuntimeError):
    """No valid approval for this contract; the message says why and what to do."""


class Approval(BaseModel):
    """One approval as stored in `state/approvals/<contract_hash>.json`."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    version: Literal[1] = 1
    contract_id: str
    contract_hash: Hex64
    contract: dict[str, Any]
    measurement_hash: Hex64
    measurement: dict[str, str]
    approver: str
    approved_at: AwareDatetime
    expires_at: AwareDatetime
    key_fingerprint: str | None = None
    signature: str | None = None

    def signed_bytes(self) -> bytes:
        """What the signature covers: every field but the signature itself."""
        body = self.model_dump(mode="json", exclude={"signature"})
        return f"{NAMESPACE}/v1\n".encode() + json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def measurement_components(contract: Contract, repo_root: Path, code_root: Path | None = None) -> dict[str, str]:
    """Name → hash (or version) of everything the frozen measurement consists of."""
    seeds = Path(repo_root) / contract.measurement.seed_library
    try:
        files = prepare.build_manifest(seeds).files
    except (prepare.MeasurementError, OSError) as ex:
        raise ApprovalError(f"cannot hash the frozen measurement: {ex}") from None
    out = {f"measurement/{name}": digest for name, digest in files.items()}
    root = Path(code_root or CODE_ROOT)
    for name in ("sil/contract/prepare.py", "sil/exec/measure.py"):
        if not (root / name).is_file():
            raise ApprovalError(f"measurement code {root / name} is missing")
    for pattern in MEASUREMENT_CODE:
        for path in sorted(root.glob(pattern)):
            if path.is_file() and "__pycache__" not in path.parts:
                rel = path.relative_to(root).as_posix()
                out[f"code/{rel}"] = hashlib.sha256(path.read_bytes()).hexdigest()
    for package in PINNED_PACKAGES:
        out[f"package/{package}"] = _version(package)
    out["python"] = f"{sys.version_info.major}.{sys.version_info.minor}"
    return out


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "absent"


def _hash_components(components: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(components, sort_keys=True).encode()).hexdigest()


def frozen_measurement_hash(contract: Contract, repo_root: Path, code_root: Path | None = None) -> str:
    return _hash_components(measurement_components(contract, repo_root, code_root))


def approval_path(contract_hash: str, repo_root: Path, state_dir: Path | None = None) -> Path:
    base = Path(state_dir) / "approvals" if state_dir else Path(repo_root) / APPROVALS_DIR
    return base / f"{contract_hash}.json"


def approve(
    contract: Contract,
    repo_root: Path,
    approver: str,
    expires_in_hours: float = 72.0,
    key: Path | None = None,
    *,
    now: datetime | None = None,
    state_dir: Path | None = None,
    allowed_signers: Path | None = None,
    code_root: Path | None = None,
) -> Approval:
    """Record (and sign, if `key` is given) an approval; written atomically."""
    try:
        check_identity(approver)
    except SignatureError as ex:
        raise ApprovalError(str(ex)) from None
    if not 0 < expires_in_hours <= MAX_HOURS:
        raise ApprovalError(f"expiry must be within (0, {MAX_HOURS}] hours, got {expires_in_hours}")
    _check_lineage(contract, repo_root)
    now = now or datetime.now(UTC)
    components = measurement_components(contract, repo_root, code_root)
    approval = Approval(
        contract_id=contract.contract_id,
        contract_hash=contract.contract_hash,
        contract=contract.model_dump(mode="json"),
        measurement_hash=_hash_components(components),
        measurement=components,
        approver=approver,
        approved_at=now,
        expires_at=now + timedelta(hours=expires_in_hours),
    )
    path = approval_path(approval.contract_hash, repo_root, state_dir)
    if key is None and _is_signed(path):
        raise ApprovalError(
            f"{path} holds a signed approval of this contract; an unsigned one never replaces it. "
            "Sign the new approval with --key, or remove that file by hand if you mean to withdraw it"
        )
    if key is not None:
        approval = _signed(approval, Signer(Path(key).expanduser(), approver))
        trusted = resolve_allowed_signers(allowed_signers, Path(repo_root) / ALLOWED_SIGNERS_DEFAULT)
        if trusted is not None:
            _check_signature(approval, trusted)
    atomic_write_bytes(path, (approval.model_dump_json(indent=2) + "\n").encode())
    return approval


def _check_lineage(contract: Contract, repo_root: Path) -> None:
    try:
        check_lineage(contract, repo_root)
    except LineageError as ex:
        raise ApprovalError(str(ex)) from None


def _is_signed(path: Path) -> bool:
    try:
        return Approval.model_validate_json(path.read_bytes()).signature is not None
    except (OSError, ValidationError):
        return False


def _signed(approval: Approval, signer: Signer) -> Approval:
    try:
        with_key = approval.model_copy(update={"key_fingerprint": fingerprint(signer.key_path)})
        return with_key.model_copy(update={"signature": sign(with_key.signed_bytes(), signer, NAMESPACE)})
    except SignatureError as ex:
        raise ApprovalError(f"cannot sign the approval: {ex}") from None


def require_approval(
    contract: Contract,
    repo_root: Path,
    now: datetime | None = None,
    *,
    allowed_signers: Path | None = None,
    require_signed: bool = True,
    state_dir: Path | None = None,
    code_root: Path | None = None,
) -> Approval | None:
    """The valid approval for this contract (None if offline or local); ApprovalError otherwise."""
    if contract.approval_free:
        return None
    now = now or datetime.now(UTC)
    approval = _load(contract, repo_root, state_dir)
    if approval.contract_hash != contract.contract_hash:
        raise ApprovalError(
            f"contract changed since approval: approved {approval.contract_hash[:12]}, "
            f"now {contract.contract_hash[:12]}"
        )
    _check_lineage(contract, repo_root)  # an approval dies with its contract's supersession
    if require_signed:
        trusted = resolve_allowed_signers(allowed_signers, Path(repo_root) / ALLOWED_SIGNERS_DEFAULT)
        if approval.signature is None:
            raise ApprovalError(
                "approval is unsigned: runs with real model calls need one signed "
                "with the approver's SSH key (sil approve --key ~/.ssh/id_ed25519)"
            )
        if trusted is None:
            raise ApprovalError(
                "no allowed_signers file to check the approval's signature: set "
                f"$SIL_ALLOWED_SIGNERS or create {ALLOWED_SIGNERS_DEFAULT}"
            )
        _check_signature(approval, trusted)
    if now + CLOCK_SKEW < approval.approved_at:
        raise ApprovalError(f"approval is dated in the future ({approval.approved_at}); check the clock")
    if now >= approval.expires_at:
        raise ApprovalError(
            f"approval by {approval.approver} expired at {approval.expires_at}; "
            "review the contract and approve it again"
        )
    current = measurement_components(contract, repo_root, code_root)
    if _hash_components(current) != approval.measurement_hash or current != approval.measurement:
        raise ApprovalError(
            "frozen measurement changed since approval: " + _describe_changes(approval.measurement, current)
        )
    return approval


def _load(contract: Contract, repo_root: Path, state_dir: Path | None) -> Approval:
    path = approval_path(contract.contract_hash, repo_root, state_dir)
    if not path.exists():
        raise ApprovalError(_missing_message(contract, path))
    try:
        return Approval.model_validate_json(path.read_bytes())
    except (OSError, ValidationError) as ex:
        raise ApprovalError(
            f"approval file {path} is unreadable or malformed ({ex.__class__.__name__}); approve the contract again"
        ) from None


def _missing_message(contract: Contract, path: Path) -> str:
    for other in sorted(path.parent.glob("*.json")) if path.parent.is_dir() else []:
        try:
            old = Approval.model_validate_json(other.read_bytes())
        except (OSError, ValidationError):
            continue
        if old.contract_id == contract.contract_id:
            changed = _describe_changes(_flatten(old.contract), _flatten(contract.model_dump(mode="json")))
            return (
                f"contract changed since approval: {contract.contract_id} was approved as "
                f"{old.contract_hash[:12]}, now {contract.contract_hash[:12]} ({changed}); "
                "approve the new contract"
            )
    return (
        f"no approval for contract {contract.contract_id} ({contract.contract_hash[:12]}): it has "
        "real model calls; an administrator must run `sil approve --by <identity> --key <ssh key>`"
    )


def _check_signature(approval: Approval, trusted: Path) -> None:
    try:
        verify(approval.signed_bytes(), approval.signature or "", trusted, approval.approver, NAMESPACE)
    except SignatureError as ex:
        raise ApprovalError(f"approval signature is not valid: {ex}") from None


def _flatten(obj: object, prefix: str = "") -> dict[str, str]:
    if isinstance(obj, dict):
        out: dict[str, str] = {}
        for k, v in obj.items():
            out.update(_flatten(v, f"{prefix}.{k}" if prefix else str(k)))
        return out
    return {prefix: json.dumps(obj, sort_keys=True)}


def _describe_changes(old: dict[str, str], new: dict[str, str], limit: int = 6) -> str:
    keys = sorted(k for k in old.keys() | new.keys() if old.get(k) != new.get(k))
    parts = [f"{k} ({old.get(k, 'absent')[:16]} -> {new.get(k, 'absent')[:16]})" for k in keys[:limit]]
    more = f" and {len(keys) - limit} more" if len(keys) > limit else ""
    return ", ".join(parts) + more if parts else "no field differs"
