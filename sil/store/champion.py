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
from sil.store.standing import Standing, arm_standing, demotion_words


class Demotion(BaseModel):
    cause: Literal["certification", "replication"]
    policy_set: str
    mutation_id: str | None
    restored: bool  # the arm's champion was put back to the parent
    reason: str

    def words(self) -> str:
        return demotion_words(self.cause, self.mutation_id)


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


def champion_status(state: RunState, records: list[Record], arm: str) -> ChampionStatus:
    champion = state.arms[arm].champion
    found = arm_standing(arm, champion.set_id, champion != state.origin, records)
    return ChampionStatus.model_validate({**found._asdict(), "demotions": [d._asdict() for d in found.demotions]})


def champions(state: RunState, records: list[Record]) -> dict[str, ChampionStatus]:
    """Every arm's champion status, in the arms' order."""
    return {a: champion_status(state, records, a) for a in state.arms}
