"""Each arm's champion and what became of it, read in one place (L3).

Every view of a run (the end-of-run summary, `sil report`, `sil runs`, `sil status`,
`sil promote`) names an arm's champion and its status through `champions`, so none can say
"certified" while another says "rolled back": the current champion comes from the run state,
its history (KEEPs, certification, demotions by certification or replication) from the ledger,
read through the record models (a malformed record raises ValueError naming it).

    status = champions(state, records)["gate"]
    status.words   # "rolled back to the starting policy: 3f2a demoted by replication (...)"
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from pydantic import BaseModel, ConfigDict

if TYPE_CHECKING:  # the models alone are light: `sil runs` reads a cached row without the record models
    from sil.integrity.ledger import Record
    from sil.integrity.records import Payload
    from sil.store.runstate import RunState

Standing = Literal["unchanged", "rolled_back", "certified", "not_certified", "kept"]


def demotion_words(cause: str, mutation_id: str | None) -> str:
    if cause == "certification":
        return "failed certification against the start"
    return f"KEEP {mutation_id} demoted by a replication"


class Demotion(BaseModel):
    model_config = ConfigDict(defer_build=True)  # built on first use: `sil runs` needs only its row
    cause: Literal["certification", "replication"]
    policy_set: str
    mutation_id: str | None
    restored: bool  # the arm's champion was put back to the parent
    reason: str

    def words(self) -> str:
        return demotion_words(self.cause, self.mutation_id)


class ChampionStatus(BaseModel):
    model_config = ConfigDict(defer_build=True)  # built on first use: `sil runs` needs only its row
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


def typed[P: Payload](records: list[Record], kind: str, model: type[P]) -> list[P]:
    """The payloads of every `kind` record as `model`; ValueError naming a malformed one."""
    from sil.integrity.records import parse_payload

    found = []
    for r in records:
        if r.type == kind:
            try:
                payload = parse_payload(kind, r.payload)
            except ValueError as ex:
                raise ValueError(f"ledger record {r.seq} ({kind}) is malformed: {_first_error(ex)}") from None
            if not isinstance(payload, model):
                raise TypeError(f"a {kind!r} record reads as {type(payload).__name__}, not {model.__name__}")
            found.append(payload)
    return found


def _first_error(ex: ValueError) -> str:
    errors = getattr(ex, "errors", None)
    if callable(errors) and errors():
        e = errors()[0]
        return f"{'.'.join(str(p) for p in e['loc']) or 'payload'}: {e['msg']}"
    return str(ex).splitlines()[0]


def _standing(changed: bool, certified: bool | None, demotions: list[Demotion]) -> Standing:
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


def arm_standing(arm: str, set_id: str, changed: bool, records: list[Record]) -> ChampionStatus:
    """The arm's KEEPs, certifications and demotions; `changed`: its champion is not the start."""
    from sil.integrity.records import CertifyRecord, DemoteRecord, VerdictRecord

    keeps = sum(1 for v in typed(records, "verdict", VerdictRecord) if v.arm == arm and v.verdict == "keep")
    certs = [c for c in typed(records, "certify", CertifyRecord) if c.arm == arm]
    demotions = [
        Demotion(
            cause=d.cause,
            policy_set=d.policy_set,
            mutation_id=d.mutation_id,
            restored=d.restored_set is not None,
            reason=d.reason,
        )
        for d in typed(records, "demote", DemoteRecord)
        if d.arm == arm
    ]
    of_champion = [c for c in certs if c.policy_set == set_id]
    certified = of_champion[-1].certified if of_champion else None
    standing = _standing(changed, certified, demotions)
    return ChampionStatus(
        arm=arm,
        set_id=set_id,
        changed=changed,
        keeps=keeps,
        demoted=len({(d.policy_set, d.mutation_id) for d in demotions}),
        certified=certified,
        certified_sets=[c.policy_set for c in certs if c.certified],
        demotions=demotions,
        standing=standing,
        words=_words(standing, keeps, demotions),
    )


def champion_status(state: RunState, records: list[Record], arm: str) -> ChampionStatus:
    champion = state.arms[arm].champion
    return arm_standing(arm, champion.set_id, champion != state.origin, records)


def champions(state: RunState, records: list[Record]) -> dict[str, ChampionStatus]:
    """Every arm's champion status, in the arms' order."""
    return {a: champion_status(state, records, a) for a in state.arms}
