"""The repository's contract history: every contract revision, its parent and reason (layer L2).

A contract is never edited in place. `revise` turns an edited draft into a revision of the
current contract: it sets the draft's `parent` to the current contract's hash and its
`revision_reason`, archives both under `state/contracts/<hash>.md`, appends one line per new
contract to `state/contracts/history.jsonl`, and writes the revision over the contract file.
A contract is *superseded* once a recorded revision names it as parent. `check_lineage`
refuses a contract whose parent is not in the history, or that is superseded (approvals use it).

    entry = revise(root, Path("program.md"), Path("draft.md"), "raise the audit budget")
    for e in ContractHistory(root).chain(entry.contract_hash): print(e.contract_hash, e.reason)
"""

from __future__ import annotations

import json
import os
import re
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from sil.base.errors import Refused
from sil.base.fsutil import atomic_write_text, fsync_dir
from sil.contract.schema import (
    Contract,
    ContractError,
    LoadedContract,
    load_contract,
    parse_contract,
    refuse_secrets,
    split_front_matter,
)

HISTORY_DIR = Path("state") / "contracts"
HISTORY_FILE = "history.jsonl"
_LINEAGE_KEY = re.compile(r"^(parent|revision_reason):.*\n?", re.MULTILINE)


class LineageError(Refused):
    """A contract whose place in the history is wrong: unknown parent, or superseded."""


class HistoryEntry(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")
    contract_hash: str
    contract_id: str
    parent: str | None
    reason: str | None
    recorded_at: str
    file: str


class ContractHistory:
    """The append-only history file of one repository."""

    def __init__(self, repo_root: Path) -> None:
        self.dir = Path(repo_root) / HISTORY_DIR
        self.path = self.dir / HISTORY_FILE

    def entries(self) -> list[HistoryEntry]:
        if not self.path.exists():
            return []
        lines = self.path.read_text(encoding="utf-8").splitlines()
        return [HistoryEntry.model_validate_json(line) for line in lines if line.strip()]

    def get(self, contract_hash: str) -> HistoryEntry | None:
        return next((e for e in self.entries() if e.contract_hash == contract_hash), None)

    def unresolved(self, contract_hash: str) -> str | None:
        """Why `contract_hash` is not a recorded contract: a history line alone proves nothing
        (one forged line would make any parent "known"); its archived text must hash to it."""
        entry = self.get(contract_hash)
        if entry is None:
            return "it is not in this repository's contract history"
        archived = self.dir / f"{contract_hash}.md"
        try:
            text = archived.read_text(encoding="utf-8")
            archived_hash = parse_contract(text, str(archived)).contract.contract_hash
        except (OSError, UnicodeDecodeError, ContractError):
            return f"its archived contract {archived} is missing or unreadable"
        if archived_hash != contract_hash:
            return f"its archived contract {archived} hashes to {archived_hash[:12]}, not {contract_hash[:12]}"
        return None

    def superseded_by(self, contract_hash: str) -> HistoryEntry | None:
        return next((e for e in self.entries() if e.parent == contract_hash), None)

    def chain(self, contract_hash: str) -> list[HistoryEntry]:
        """From `contract_hash` back to its first recorded ancestor."""
        out: list[HistoryEntry] = []
        entry = self.get(contract_hash)
        while entry is not None and entry not in out:
            out.append(entry)
            entry = self.get(entry.parent) if entry.parent else None
        return out

    def register(self, loaded: LoadedContract, text: str) -> HistoryEntry:
        """Record a contract (idempotent); its parent, if any, must already be recorded."""
        c = loaded.contract
        if (known := self.get(c.contract_hash)) is not None:
            return known
        if c.parent is not None and (why := self.unresolved(c.parent)) is not None:
            raise LineageError(
                f"{loaded.path}: parent {c.parent[:12]} does not resolve: {why} ({self.path}); "
                "a revision's parent must be a recorded contract (`sil contract history`)"
            )
        self.dir.mkdir(parents=True, exist_ok=True)
        archived = self.dir / f"{c.contract_hash}.md"
        atomic_write_text(archived, text)
        entry = HistoryEntry(
            contract_hash=c.contract_hash,
            contract_id=c.contract_id,
            parent=c.parent,
            reason=c.revision_reason,
            recorded_at=datetime.now(UTC).isoformat(timespec="seconds"),
            file=archived.name,
        )
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(entry.model_dump_json() + "\n")
            f.flush()
            os.fsync(f.fileno())
        fsync_dir(self.dir)
        return entry


def with_lineage(text: str, parent: str, reason: str) -> str:
    """The contract text with `parent` and `revision_reason` set (any earlier values replaced)."""
    front, prose = split_front_matter(text)
    front = _LINEAGE_KEY.sub("", front)
    lineage = f"parent: {parent}\nrevision_reason: {json.dumps(reason)}\n"
    return f"---\n{lineage}{front}---\n{prose}"


def revise(repo_root: Path, contract_path: Path, draft_path: Path, reason: str) -> HistoryEntry:
    """Write the draft as a revision of the current contract; the current one becomes superseded."""
    if not reason.strip():
        raise Refused("a revision needs a reason: --reason '<why the contract changes>'")
    history = ContractHistory(repo_root)
    try:
        current = load_contract(contract_path)
        draft_text = Path(draft_path).read_text(encoding="utf-8")
        # before anything is archived, with the draft's own line numbers
        refuse_secrets(draft_text, split_front_matter(draft_text)[0], str(draft_path))
    except (ContractError, OSError) as ex:
        raise Refused(str(ex)) from None
    history.register(current, Path(contract_path).read_text(encoding="utf-8"))
    if (newer := history.superseded_by(current.contract.contract_hash)) is not None:
        raise LineageError(
            f"{contract_path} ({current.contract.contract_hash[:12]}) is already superseded by "
            f"{newer.contract_hash[:12]}: revise the newest contract of the chain"
        )
    text = with_lineage(draft_text, current.contract.contract_hash, reason.strip())
    try:
        revised = parse_contract(text, str(draft_path))
    except ContractError as ex:
        raise Refused(str(ex)) from None
    if _settings(revised) == _settings(current):
        raise Refused(f"{draft_path} does not change the contract: nothing to revise")
    entry = history.register(revised, text)
    atomic_write_text(Path(contract_path), text)
    return entry


def _settings(loaded: LoadedContract) -> dict[str, Any]:
    return loaded.contract.model_dump(mode="json", exclude={"parent", "revision_reason"})


def check_lineage(c: Contract, repo_root: Path) -> None:
    """Refuse a contract with an unrecorded parent, or one a recorded revision superseded."""
    history = ContractHistory(repo_root)
    if c.parent is not None and (why := history.unresolved(c.parent)) is not None:
        raise LineageError(
            f"contract {c.contract_hash[:12]} names parent {c.parent[:12]}, which does not resolve: {why}; "
            "create revisions with `sil contract revise`"
        )
    if (newer := history.superseded_by(c.contract_hash)) is not None:
        raise LineageError(
            f"contract {c.contract_hash[:12]} was superseded by {newer.contract_hash[:12]} "
            f"({newer.reason}); approve or run the current contract instead"
        )
