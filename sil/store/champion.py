"""Each arm's champion and what became of it, read in one place (L3).

Every view of a run (the end-of-run summary, `sil report`, `sil runs`, `sil status`,
`sil promote`) names an arm's champion and its status through `champions`, so none can say
"certified" while another says "rolled back": the current champion comes from the run state,
its history (KEEPs, certification, demotions by certification or replication) from the ledger.

    status = champions(state, records)["gate"]
    status.words   # "rolled back to the starting policy: 3f2a demoted by replication (...)"
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from sil.integrity.ledger import Record
from sil.store.runstate import RunState

Standing = Literal["unchanged", "rolled_back", "certified", "not_certified", "kept"]


class Demotion(BaseModel):
    cause: Literal["certification", "replication"]
    policy_set: str
    mutation_id: str | None
    restored: bool  # the arm's champion was put back to the parent
    reason: str

    def words(self) -> str:
        if self.cause == "certification":
            return "failed certification against the start"
        return f"KEEP {self.mutation_id} demoted by a replication"


class ChampionStatus(BaseModel):
    arm: str
    set_id: str
    changed: bool  # differs from the run's starting policy
    keeps: int  # KEEP verdicts the arm made
    demoted: int  # of those, taken back later (certification or replication)
    certified: bool | None  # the current champion's certification (None: not certified as such)
    certified_sets: list[str]  # every set a certification passed (it may have been demoted since)
    demotions: list[Demotion]
    standing: Standing
    words: str


def _standing(changed: bool, keeps: int, certified: bool | None, demotions: list[Demotion]) -> Standing:
    if not changed:
        return "rolled_back" if demotions else "unchanged"
    if certified is None:
        return "kept"
    return "certified" if certified else "not_certified"


def _words(st: Standing, keeps: int, demotions: list[Demotion]) -> str:
    why = "; ".join(d.words() for d in demotions)
    base = {
        "unchanged": "unchanged (nothing kept)" if not keeps else "unchanged",
        "rolled_back": f"rolled back to the starting policy: {why}",
        "certified": "certified against the start",
        "not_certified": "NOT certified against the start",
        "kept": "kept, not certified against the start",
    }[st]
    return base if st == "rolled_back" or not demotions else f"{base}; earlier {why}"


def champion_status(state: RunState, records: list[Record], arm: str) -> ChampionStatus:
    champion = state.arms[arm].champion
    keeps = sum(
        1 for r in records if r.type == "verdict" and r.payload["arm"] == arm and r.payload["verdict"] == "keep"
    )
    certs = [r.payload for r in records if r.type == "certify" and r.payload["arm"] == arm]
    demotions = [
        Demotion(
            cause=p["cause"],
            policy_set=p["policy_set"],
            mutation_id=p.get("mutation_id"),
            restored=p.get("restored_set") is not None,
            reason=p["reason"],
        )
        for p in (r.payload for r in records if r.type == "demote")
        if p["arm"] == arm
    ]
    of_champion = [c for c in certs if c["policy_set"] == champion.set_id]
    certified = of_champion[-1]["certified"] if of_champion else None
    changed = champion != state.origin
    standing = _standing(changed, keeps, certified, demotions)
    return ChampionStatus(
        arm=arm,
        set_id=champion.set_id,
        changed=changed,
        keeps=keeps,
        demoted=len({(d.policy_set, d.mutation_id) for d in demotions}),
        certified=certified,
        certified_sets=[c["policy_set"] for c in certs if c["certified"]],
        demotions=demotions,
        standing=standing,
        words=_words(standing, keeps, demotions),
    )


def champions(state: RunState, records: list[Record]) -> dict[str, ChampionStatus]:
    """Every arm's champion status, in the arms' order."""
    return {a: champion_status(state, records, a) for a in state.arms}
