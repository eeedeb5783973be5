"""What became of an arm's champion, from the ledger records alone (no pydantic: `sil runs` reads it).

`champion.champion_status` is this plus the run state's champion, as a model; the quick views
call `arm_standing` directly, so every view words a champion through the same code.

    arm_standing("gate", set_id, changed=champion != origin, records=records).words
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Literal, NamedTuple, Protocol

Standing = Literal["unchanged", "rolled_back", "certified", "not_certified", "kept"]


class Recorded(Protocol):
    """A ledger record as read by either reader: its type and payload."""

    @property
    def type(self) -> str: ...

    @property
    def payload(self) -> dict[str, Any]: ...


def demotion_words(cause: str, mutation_id: str | None) -> str:
    if cause == "certification":
        return "failed certification against the start"
    return f"KEEP {mutation_id} demoted by a replication"


class Demoted(NamedTuple):
    cause: str
    policy_set: str
    mutation_id: str | None
    restored: bool  # the arm's champion was put back to the parent
    reason: str


class ArmStanding(NamedTuple):
    """The fields of `champion.ChampionStatus`, as read from the records (values unvalidated)."""

    arm: str
    set_id: str
    changed: bool
    keeps: int
    demoted: int
    certified: Any  # the certify record's `certified` (a bool in any ledger that verifies)
    certified_sets: list[Any]
    demotions: list[Demoted]
    standing: Standing
    words: str


def _standing(changed: bool, certified: Any, demotions: list[Demoted]) -> Standing:
    if not changed:
        return "rolled_back" if demotions else "unchanged"
    if certified is None:
        return "kept"
    return "certified" if certified else "not_certified"


def _words(st: Standing, keeps: int, demotions: list[Demoted]) -> str:
    why = "; ".join(demotion_words(d.cause, d.mutation_id) for d in demotions)
    base = {
        "unchanged": "unchanged (nothing kept)" if not keeps else "unchanged",
        "rolled_back": f"rolled back to the starting policy: {why}",
        "certified": "certified against the start",
        "not_certified": "NOT certified against the start",
        "kept": "kept, not certified against the start",
    }[st]
    return base if st == "rolled_back" or not demotions else f"{base}; earlier {why}"


def arm_standing(arm: str, set_id: str, changed: bool, records: Iterable[Recorded]) -> ArmStanding:
    """The arm's KEEPs, certifications and demotions; `changed`: its champion is not the start."""
    records = list(records)
    keeps = sum(
        1 for r in records if r.type == "verdict" and r.payload["arm"] == arm and r.payload["verdict"] == "keep"
    )
    certs = [r.payload for r in records if r.type == "certify" and r.payload["arm"] == arm]
    demotions = [
        Demoted(
            cause=p["cause"],
            policy_set=p["policy_set"],
            mutation_id=p.get("mutation_id"),
            restored=p.get("restored_set") is not None,
            reason=p["reason"],
        )
        for p in (r.payload for r in records if r.type == "demote")
        if p["arm"] == arm
    ]
    of_champion = [c for c in certs if c["policy_set"] == set_id]
    certified = of_champion[-1]["certified"] if of_champion else None
    standing = _standing(changed, certified, demotions)
    return ArmStanding(
        arm=arm,
        set_id=set_id,
        changed=changed,
        keeps=keeps,
        demoted=len({(d.policy_set, d.mutation_id) for d in demotions}),
        certified=certified,
        certified_sets=[c["policy_set"] for c in certs if c["certified"]],
        demotions=demotions,
        standing=standing,
        words=_words(standing, keeps, demotions),
    )
