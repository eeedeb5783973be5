"""The outside witness of a run's checkpoints: an append-only copy the repository cannot rewrite (L2).

A hash chain plus checkpoints in git refs shows any edit to what a checkpoint covers, but an
attacker who can write the repository can delete the refs, or point them back at an older
(genuinely signed) checkpoint, and cut the ledger to match. Every checkpoint is therefore
also appended to a witness named by `SIL_WITNESS`: a file (one JSON line per checkpoint, all
runs) or a folder (one `<run_id>.jsonl` per run), ideally on another disk, mount or machine
that the loop's user can append to but not rewrite (e.g. `chattr +a`). `sil ledger verify`
checks the ledger and the git checkpoints against it whenever it is set.

The `Witness` protocol is what a second git remote or a transparency log would implement.

    witness = witness_from_env(project_root)     # None when SIL_WITNESS is unset
    witness.append(WitnessEntry(run_id="r1", records=12, size=4096, head_hash="ab..."))
    entries = witness.entries("r1")              # oldest first
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Protocol

from pydantic import BaseModel, ConfigDict, ValidationError

from sil.base.runid import check_run_id

WITNESS_ENV = "SIL_WITNESS"
RUN_FILE_SUFFIX = ".jsonl"


class WitnessError(RuntimeError):
    """The witness cannot be written or read, or is not outside the repository."""


class WitnessEntry(BaseModel):
    """One witnessed checkpoint: enough to check a ledger prefix and a signature again."""

    model_config = ConfigDict(frozen=True, extra="forbid")
    run_id: str
    records: int
    size: int
    head_hash: str
    signer: str | None = None
    signature: str | None = None
    created_at: str | None = None


class Witness(Protocol):
    name: str

    def append(self, entry: WitnessEntry) -> None: ...

    def entries(self, run_id: str) -> list[WitnessEntry]: ...


class FileWitness:
    """A witness file or folder: lines appended with O_APPEND and fsynced, never rewritten."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        self.name = str(self.path)

    def _file(self, run_id: str) -> Path:
        if self.path.is_dir():
            return self.path / f"{check_run_id(run_id)}{RUN_FILE_SUFFIX}"
        return self.path

    def append(self, entry: WitnessEntry) -> None:
        path = self._file(entry.run_id)
        line = (json.dumps(entry.model_dump(mode="json"), sort_keys=True) + "\n").encode()
        try:
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
            try:
                if os.write(fd, line) != len(line):
                    raise OSError(f"short write to {path}")
                os.fsync(fd)
            finally:
                os.close(fd)
        except OSError as ex:
            raise WitnessError(f"cannot append to the witness {path}: {ex}") from None

    def entries(self, run_id: str) -> list[WitnessEntry]:
        path = self._file(run_id)
        try:
            data = path.read_bytes()
        except FileNotFoundError:
            return []
        except OSError as ex:
            raise WitnessError(f"cannot read the witness {path}: {ex.strerror}") from None
        found = []
        for n, line in enumerate(data.split(b"\n")[:-1], start=1):  # a torn last line is not yet witnessed
            try:
                entry = WitnessEntry.model_validate_json(line)
            except ValidationError:
                raise WitnessError(f"witness {path} line {n} is not a witness entry (edited?)") from None
            if entry.run_id == run_id:
                found.append(entry)
        return found


def witness_from_env(root: Path) -> Witness | None:
    """The witness `SIL_WITNESS` names, refused if it lies inside the repository at `root`."""
    value = os.environ.get(WITNESS_ENV)
    if not value:
        return None
    path = Path(value).expanduser()
    if not path.is_absolute():
        raise WitnessError(f"{WITNESS_ENV}={value!r} must be an absolute path outside the repository")
    if path.resolve().is_relative_to(Path(root).resolve()):
        raise WitnessError(
            f"{WITNESS_ENV}={value} is inside the repository {root}: whoever can rewrite the repository "
            "could rewrite it too; point it at another disk, mount or machine"
        )
    if not path.parent.is_dir():
        raise WitnessError(f"{WITNESS_ENV}={value}: {path.parent} does not exist")
    return FileWitness(path)
