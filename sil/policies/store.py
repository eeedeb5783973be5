"""Policy sets of a run: content-addressed snapshots and each arm's working policy files.

A policy *set* is the seven surface files, named by the hash of their hashes. Every set the
run ever audits is stored read-only under `sets/<set_id>/`, so any candidate, kept or
reverted, stays reachable and can be re-audited byte for byte. Each arm has a working
directory of policy files that mutations are applied to and reverted from; the loop writes
them atomically and refuses to touch a file whose content it did not write itself.

    store = PolicyStore(run_dir)
    origin = store.snapshot_dir(Path("state/policies"))
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from sil.base.fsutil import atomic_write_bytes
from sil.policies.setid import set_id_of
from sil_policy import SURFACES, PolicyError, canonical_bytes, content_hash, parse_surface
from sil_policy.files import read_regular
from sil_policy.format import MAX_FILE_BYTES


class HandEditedPolicy(RuntimeError):
    """A working policy file differs from what the loop last wrote: never auto-revert it."""


class PolicySet(BaseModel):
    """Seven surface hashes; `set_id` names the whole set."""

    model_config = ConfigDict(frozen=True)
    hashes: dict[str, str]

    @property
    def set_id(self) -> str:
        return set_id_of(self.hashes)


def read_policy_dir(directory: Path) -> tuple[PolicySet, dict[str, dict[str, Any]]]:
    """Validate all seven files of a policy directory; errors name the file and field."""
    hashes, documents = {}, {}
    for name, spec in SURFACES.items():
        path = Path(directory) / spec.filename
        if path.is_symlink():
            raise PolicyError(f"{path} is a symlink; policy files must be regular files")
        try:
            data = read_regular(path, MAX_FILE_BYTES)
        except OSError as ex:
            raise PolicyError(f"cannot read {path}: {ex.strerror}; policy files must be regular files") from None
        documents[name] = parse_surface(name, data)
        hashes[name] = content_hash(data)
    return PolicySet(hashes=hashes), documents


class PolicyStore:
    """Snapshots (`sets/`) and per-arm working policy files (`arms/<arm>/policies/`)."""

    def __init__(self, run_dir: Path) -> None:
        self.run_dir = Path(run_dir)
        self.sets_dir = self.run_dir / "sets"

    def set_dir(self, policy_set: PolicySet) -> Path:
        return self.sets_dir / policy_set.set_id

    def snapshot_dir(self, directory: Path) -> PolicySet:
        """Store a validated copy of a policy directory as a read-only set."""
        policy_set, _ = read_policy_dir(directory)
        dest = self.set_dir(policy_set)
        if not dest.exists():
            for _name, spec in SURFACES.items():
                atomic_write_bytes(dest / spec.filename, (Path(directory) / spec.filename).read_bytes(), 0o444)
        self.check_set(policy_set)
        return policy_set

    def store_documents(self, documents: dict[str, dict[str, Any]], base: PolicySet | None = None) -> PolicySet:
        """Store a set given as validated documents: a surface whose document means the same as
        `base`'s keeps base's bytes (the user's own formatting), any other is written canonical.
        Rewriting an untouched file would change its hash and make it look edited by hand."""
        data = {name: canonical_bytes(documents[name]) for name in SURFACES}
        if base is not None:
            for name, spec in SURFACES.items():
                kept = (self.set_dir(base) / spec.filename).read_bytes()
                if same_meaning(name, kept, data[name]):
                    data[name] = kept
        policy_set = PolicySet(hashes={n: content_hash(b) for n, b in data.items()})
        dest = self.set_dir(policy_set)
        for name, spec in SURFACES.items():
            if not (dest / spec.filename).exists():
                atomic_write_bytes(dest / spec.filename, data[name], 0o444)
        self.check_set(policy_set)
        return policy_set

    def check_set(self, policy_set: PolicySet) -> None:
        for name, spec in SURFACES.items():
            got = content_hash((self.set_dir(policy_set) / spec.filename).read_bytes())
            if got != policy_set.hashes[name]:
                raise PolicyError(f"stored policy set {policy_set.set_id} is corrupt: {name}")

    def stored_set(self, set_id: str) -> PolicySet:
        """A set stored by this run, by id (validated and re-hashed)."""
        policy_set, _ = read_policy_dir(self.sets_dir / set_id)
        if policy_set.set_id != set_id:
            raise PolicyError(f"stored policy set {set_id} is corrupt: its files hash to {policy_set.set_id}")
        return policy_set

    def documents(self, policy_set: PolicySet) -> dict[str, dict[str, Any]]:
        return read_policy_dir(self.set_dir(policy_set))[1]

    def working_dir(self, arm: str) -> Path:
        return self.run_dir / "arms" / arm / "policies"

    def init_working(self, arm: str, policy_set: PolicySet) -> None:
        dest = self.working_dir(arm)
        if dest.exists():
            return
        tmp = dest.with_name("policies.init")
        shutil.rmtree(tmp, ignore_errors=True)
        for spec in SURFACES.values():
            atomic_write_bytes(tmp / spec.filename, (self.set_dir(policy_set) / spec.filename).read_bytes())
        tmp.rename(dest)

    def working_hash(self, arm: str, surface: str) -> str | None:
        path = self.working_dir(arm) / SURFACES[surface].filename
        return content_hash(path.read_bytes()) if path.exists() else None

    def write_surface(self, arm: str, surface: str, source: PolicySet, expect_current: str) -> None:
        """Replace one working file with the stored set's version, if nobody edited it."""
        current = self.working_hash(arm, surface)
        target = source.hashes[surface]
        if current == target:
            return
        path = self.working_dir(arm) / SURFACES[surface].filename
        if current != expect_current and not self._means(surface, path, source, expect_current):
            raise HandEditedPolicy(
                f"{self.working_dir(arm) / SURFACES[surface].filename} was changed outside the loop "
                f"(hash {str(current)[:12]}, loop wrote {expect_current[:12]}); it is not reverted "
                "automatically. Inspect it, restore it, and resume the run."
            )
        data = (self.set_dir(source) / SURFACES[surface].filename).read_bytes()
        atomic_write_bytes(self.working_dir(arm) / SURFACES[surface].filename, data)
        if self.working_hash(arm, surface) != target:
            raise HandEditedPolicy(f"writing {surface} did not produce the expected bytes")

    def _means(self, surface: str, path: Path, source: PolicySet, expect: str) -> bool:
        """Whether the working file says what the loop wrote, in other formatting (an editor
        re-saving it with CRLF or a BOM): by meaning it was not changed, so it may be replaced."""
        wrote = next((d for d in self.sets_dir.glob(f"*/{SURFACES[surface].filename}") if _hash(d) == expect), None)
        if wrote is None or not path.is_file():
            return False
        return same_meaning(surface, path.read_bytes(), wrote.read_bytes())


def _hash(path: Path) -> str:
    return content_hash(path.read_bytes())


def same_meaning(surface: str, a: bytes, b: bytes) -> bool:
    """Whether two files of a structured surface hold the same document (formatting aside)."""
    if a == b:
        return True
    try:
        return parse_surface(surface, a) == parse_surface(surface, b)
    except PolicyError:
        return False
