"""SSH signatures (SSHSIG) through `ssh-keygen -Y`, the format git uses for signed commits.

A signer is an SSH private key plus the identity (principal) it signs as. Verification reads
an `allowed_signers` file (`<identity> namespaces="sil-ledger,sil-approval" <public key>`,
see ssh-keygen(1) ALLOWED SIGNERS), so the trust decision is a file a human controls. The
namespace is part of every signature: a ledger checkpoint can never pass as an approval.

    signer = Signer(Path("~/.ssh/id_ed25519").expanduser(), "alice@example.org")
    sig = sign(b"data", signer, "sil-ledger")
    verify(b"data", sig, allowed_signers, "alice@example.org", "sil-ledger")
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

SSH_KEYGEN = "ssh-keygen"
TIMEOUT_S = 30.0
SIGNING_KEY_ENV = "SIL_SIGNING_KEY"
SIGNER_ENV = "SIL_SIGNER"
ALLOWED_SIGNERS_ENV = "SIL_ALLOWED_SIGNERS"
IDENTITY_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@+-]{0,127}$")


class SignatureError(RuntimeError):
    """Signing failed, or a signature does not verify; the message says which and why."""


@dataclass(frozen=True)
class Signer:
    """An SSH private key and the identity it signs as (must match `allowed_signers`)."""

    key_path: Path
    identity: str

    def __post_init__(self) -> None:
        check_identity(self.identity)

    @classmethod
    def from_env(cls) -> Signer | None:
        """`SIL_SIGNING_KEY` + `SIL_SIGNER`, or None when no key is configured."""
        key = os.environ.get(SIGNING_KEY_ENV)
        if not key:
            return None
        identity = os.environ.get(SIGNER_ENV)
        if not identity:
            raise SignatureError(
                f"{SIGNING_KEY_ENV} is set but {SIGNER_ENV} (your identity in allowed_signers, e.g. an email) is not"
            )
        return cls(Path(key).expanduser(), identity)


def check_identity(identity: str) -> str:
    if not isinstance(identity, str) or not IDENTITY_PATTERN.match(identity):
        raise SignatureError(
            f"signer identity {identity!r} must be 1-128 of letters, digits, "
            "'.', '_', '@', '+', '-' (e.g. alice@example.org)"
        )
    return identity


def available() -> bool:
    return shutil.which(SSH_KEYGEN) is not None


def _run(args: list[str], data: bytes) -> subprocess.CompletedProcess[bytes]:
    if not available():
        raise SignatureError("ssh-keygen not found: install openssh-client to sign or verify")
    try:
        return subprocess.run([SSH_KEYGEN, *args], input=data, capture_output=True, timeout=TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise SignatureError(
            f"ssh-keygen {args[0]} {args[1]} timed out (passphrase prompt?); "
            "use a key without a passphrase or one loaded in ssh-agent"
        ) from None


def _message(proc: subprocess.CompletedProcess[bytes]) -> str:
    lines = (proc.stderr or proc.stdout).decode(errors="replace").strip().splitlines()
    return lines[-1] if lines else f"exit {proc.returncode}"


def sign(data: bytes, signer: Signer, namespace: str) -> str:
    """Armored SSHSIG signature of `data` in `namespace`."""
    if not signer.key_path.is_file():
        raise SignatureError(f"signing key {signer.key_path} does not exist")
    proc = _run(["-Y", "sign", "-f", str(signer.key_path), "-n", namespace], data)
    if proc.returncode != 0 or b"BEGIN SSH SIGNATURE" not in proc.stdout:
        raise SignatureError(f"signing with {signer.key_path} failed: {_message(proc)}")
    return proc.stdout.decode()


def _with_sigfile(signature: str, args: list[str], data: bytes) -> subprocess.CompletedProcess[bytes]:
    with tempfile.TemporaryDirectory(prefix="sil-sig-") as tmp:
        sig = Path(tmp) / "data.sig"
        sig.write_text(signature)
        return _run([*args, "-s", str(sig)], data)


def verify(data: bytes, signature: str, allowed_signers: Path, identity: str, namespace: str) -> None:
    """Raise SignatureError unless `identity`'s allowed key signed `data` in `namespace`."""
    allowed = Path(allowed_signers)
    if not allowed.is_file():
        raise SignatureError(f"allowed_signers file {allowed} does not exist")
    if not _intact(data, signature, namespace):
        raise SignatureError("signature does not match the signed content (edited after signing?)")
    principals = find_principals(signature, allowed)
    if not principals:
        raise SignatureError(f"signed by a key that is not in {allowed}")
    if identity not in principals:
        raise SignatureError(f"signed by {', '.join(principals)}, not by {identity!r}")
    proc = _with_sigfile(signature, ["-Y", "verify", "-f", str(allowed), "-I", identity, "-n", namespace], data)
    if proc.returncode != 0:
        raise SignatureError(f"signature rejected for {identity!r}: {_message(proc)}")


def _intact(data: bytes, signature: str, namespace: str) -> bool:
    """The signature is valid for `data` under some key (trust is checked separately)."""
    proc = _with_sigfile(signature, ["-Y", "check-novalidate", "-n", namespace], data)
    return proc.returncode == 0


def find_principals(signature: str, allowed_signers: Path) -> list[str]:
    """Identities in `allowed_signers` whose key made `signature` (empty if none)."""
    proc = _with_sigfile(signature, ["-Y", "find-principals", "-f", str(allowed_signers)], b"")
    if proc.returncode != 0:
        return []
    return [line.strip() for line in proc.stdout.decode().splitlines() if line.strip()]


def fingerprint(key_path: Path) -> str:
    """`SHA256:...` fingerprint of a key (private or public), as `ssh-keygen -l` prints it."""
    proc = _run(["-l", "-E", "sha256", "-f", str(key_path)], b"")
    fields = proc.stdout.decode().split()
    if proc.returncode != 0 or len(fields) < 2:
        raise SignatureError(f"cannot read key {key_path}: {_message(proc)}")
    return fields[1]


def resolve_allowed_signers(explicit: Path | None, default: Path) -> Path | None:
    """The allowed_signers file to trust: explicit, else $SIL_ALLOWED_SIGNERS, else `default`."""
    if explicit is not None:
        return Path(explicit)
    if os.environ.get(ALLOWED_SIGNERS_ENV):
        return Path(os.environ[ALLOWED_SIGNERS_ENV]).expanduser()
    return default if default.is_file() else None


def generate_key(path: Path, comment: str) -> Path:
    """Create an ed25519 key pair without passphrase (tests, demos); return the private key."""
    path = Path(path)
    proc = subprocess.run(
        [SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)],
        capture_output=True,
        timeout=TIMEOUT_S,
        check=False,
    )
    if proc.returncode != 0:
        raise SignatureError(f"ssh-keygen could not create {path}: {_message(proc)}")
    return path


def allowed_signers_line(identity: str, public_key: Path, namespaces: tuple[str, ...]) -> str:
    """One `allowed_signers` line that trusts `public_key` as `identity` for `namespaces`."""
    key = Path(public_key).read_text().split()
    return f'{check_identity(identity)} namespaces="{",".join(namespaces)}" {key[0]} {key[1]}\n'
