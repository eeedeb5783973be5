"""How a certified arm's audits are split between its search and its certification.

`budget.certify_horizon: fixed` (the field's default, so a contract that leaves it out keeps its
meaning and hash): the arm searches on `arm_audits[arm]`, and its
certification has `certify_rounds` rounds (more when the proposer ran dry: sil/run/certify.py).

`budget.certify_horizon: search` (what program.md sets): the arm's search and its certification share one pool,
`arm_audits[arm] + 2 * certify_rounds` audits. While the search goes on it may spend all of it
but the rounds held back for certifying its current champion (sil/stats/horizon.reserved_looks:
sized from the champion's effect as the search estimated it, the frozen noise and the seeds the
certification runs on); the certification then has every round the pool has left. So a champion
that is clear to certify leaves its unneeded audits to the search, and one that needs more
rounds stops the search earlier. Only search-phase data enter, so the horizon is fixed before
the certification's first round (docs/statistics.md §3, "Sizing the certification").

    limit = arm_limit(contract, state, measure, "gate")      # the search's share, or arm_audits
    looks = pooled_looks(contract, state.arms["gate"])
"""

from __future__ import annotations

from sil.contract.prepare import SEED_SET_NAMES
from sil.contract.schema import MAX_CERTIFY_ROUNDS, Contract
from sil.exec.measure import MeasureContext
from sil.stats.fitness import NoiseEstimate
from sil.stats.holdout import rule_for
from sil.stats.horizon import Outlook, outlook, reserved_looks
from sil.stats.judges import seed_count_scale
from sil.store.events import CertificationOutlook
from sil.store.runstate import ArmState, RunState


def sized_by_search(contract: Contract, arm: str) -> bool:
    """Whether the arm's certification horizon is sized by its search (a certified arm under
    `certify_horizon: search`)."""
    return contract.budget.certify_horizon == "search" and arm in contract.certified_arms()


def pool_audits(contract: Contract, arm: str) -> int:
    """The audits the arm's search and certification share."""
    b = contract.budget
    return next((n for name, n in b.arm_audits.items() if name == arm), 0) + 2 * b.certify_rounds


def held_back(contract: Contract, state: RunState, measure: MeasureContext, arm: str) -> int:
    """Rounds held back for certifying the arm's current champion (its search still going on),
    planned at the level its certification will run at: under a project budget a share of the
    project's alpha, smaller than alpha_certify, so it needs more rounds."""
    b, arm_state = contract.budget, state.arms.get(arm)
    champion_moved = arm_state is not None and arm_state.champion != state.origin
    effect = arm_state.champion_effect if arm_state is not None and champion_moved else None
    pool = state.shared.pool
    noise = pool.estimate() if pool.n_pairs else None
    scale, level = certify_scale(measure), rule_for(contract).step
    return reserved_looks(contract.promotion, noise, effect, b.certify_rounds, b.certify_power, scale, level)


def certify_scale(measure: MeasureContext) -> float:
    """How much the frozen noise is widened for the certification's seeds."""
    return seed_count_scale(len(measure.seed_ids), len(measure.seeds_for(measure.certify_on)))


def certify_outlook(
    contract: Contract, state: RunState, measure: MeasureContext, looks: int | None = None
) -> Outlook | None:
    """What a certification of `looks` rounds (None: `certify_rounds`) can do for a clean champion,
    at the level it will run at and on its seeds (None: no certification, or no noise estimate yet).
    A planned power below `certify_power` means even a clean find is likely thrown away."""
    pool = state.shared.pool
    return outlook_at(contract, pool.estimate() if pool.n_pairs else None, measure, looks)


def outlook_at(
    contract: Contract, noise: NoiseEstimate | None, measure: MeasureContext, looks: int | None = None
) -> Outlook | None:
    """`certify_outlook` with a given noise estimate: a run's own, or before a run an earlier
    run's calibration (sil/run/outlookcheck.py)."""
    b = contract.budget
    if "gate" not in contract.certified_arms() or noise is None:
        return None
    n, level = b.certify_rounds if looks is None else looks, rule_for(contract).step
    return outlook(contract.promotion, noise, n, b.certify_power, certify_scale(measure), level)


def outlook_event(contract: Contract, seen: Outlook, measure: MeasureContext) -> CertificationOutlook:
    """The outlook as the run and `sil check` say it: on which seeds, and for which claim."""
    seeds = f"{len(measure.seeds_for(measure.certify_on))} {SEED_SET_NAMES[measure.certify_on]}"
    fresh = contract.certification.claim == "fresh"
    capped = seen.needed is None or seen.needed > MAX_CERTIFY_ROUNDS
    return CertificationOutlook(
        words=seen.words(),
        seeds=seeds,
        short=seen.short,
        fresh_claim=fresh,
        rounds_cap=MAX_CERTIFY_ROUNDS if capped else None,
    )


def search_limit(contract: Contract, state: RunState, measure: MeasureContext, arm: str) -> int | None:
    """The most audits the arm's search may spend, or None when its `arm_audits` entry says it."""
    if not sized_by_search(contract, arm):
        return None
    return pool_audits(contract, arm) - 2 * held_back(contract, state, measure, arm)


def pooled_looks(contract: Contract, arm: ArmState) -> int:
    """The certification's horizon under `certify_horizon: search`: every round the shared pool
    has left once the search stopped (at least 1)."""
    return max(1, (pool_audits(contract, arm.arm) - arm.audits) // 2)


def arm_limit(contract: Contract, state: RunState, measure: MeasureContext, arm: str | None) -> int | None:
    """The most audits the arm may spend: its `arm_audits` entry, or under a certification sized
    by the search its search's share of the pool (None: no limit of its own, only the run's)."""
    if arm is None:
        return None
    pooled = search_limit(contract, state, measure, arm)
    if pooled is not None:
        return pooled
    return next((n for name, n in contract.budget.arm_audits.items() if name == arm), None)


def held_for_champion(contract: Contract, arm: str | None) -> str:
    """What an arm budget message adds when the rest of the arm's pool is held back."""
    return "; the rest is held back to certify its champion" if arm and sized_by_search(contract, arm) else ""
