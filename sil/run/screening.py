"""A candidate's screen against the champion's recent audits (`promotion.screen_reference: n`).

The screen audits the candidate alone and compares it, seed by seed, with the mean of the
champion's last `n` audits on the search seeds that no selection looked at: both sides of the
never arm's A/A rounds and the champion side of every paired candidate round (`note_paired`,
called by the arms). While the champion has fewer than 2 such audits, or with `n` < 2, the
screen is a paired round. The audits compared with are fixed when the round is planned, so a
resumed screen compares with the same ones. The screen only selects (its data enter neither a
test nor the noise pool), so a batch effect or drift it cannot pair away costs search power,
never the gate's level (docs/statistics.md §3).

    stat = run_screen(rc.rounds, "gate", label, candidate, champion, mutation_id)   # 1 or 2 audits
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sil.base.errors import Halt
from sil.base.faults import crashpoint
from sil.exec.measure import AuditResult, MeasureContext
from sil.policies.store import PolicySet
from sil.run.rounds import RoundRunner, audit_id
from sil.stats import fitness
from sil.stats.fitness import RoundStat
from sil.store.journal import RESULT_FILE
from sil.store.runstate import RunState

if TYPE_CHECKING:
    from pathlib import Path

    import numpy as np


def note_paired(state: RunState, keep: int, label: str, champ: PolicySet, aa: bool = False) -> None:
    """Remember the champion side of the paired search-seed round `label` (both sides of an A/A
    round) as unselected audits of `champ`: its last `keep` only, none when `keep` < 2."""
    if keep < 2:
        return
    have = state.references.get(champ.set_id, [])
    new = [audit_id(label, role) for role in (("champ", "cand") if aa else ("champ",))]
    fresh = [a for a in new if a not in have]  # a resumed round is noted once
    state.references = {**state.references, champ.set_id: [*have, *fresh][-keep:]}


def reference_for(state: RunState, keep: int, label: str, champ: PolicySet) -> list[str]:
    """The audits the screen `label` compares with: those planned with it when resuming it, else
    the champion's last `keep` unselected audits (none: a paired screen)."""
    planned = state.planned
    if planned is not None and planned.label == label:
        return list(planned.reference)
    have = state.references.get(champ.set_id, [])
    return list(have[-keep:]) if keep >= 2 and len(have) >= 2 else []


def mean_scores(ctx: MeasureContext, run_dir: Path, audit_ids: list[str]) -> np.ndarray:
    """The per-seed mean of the audits' oriented score matrices (a cell none scored stays NaN)."""
    import numpy as np

    try:
        results = [
            AuditResult.model_validate_json((run_dir / "audits" / a / RESULT_FILE).read_bytes()) for a in audit_ids
        ]
    except (OSError, ValueError) as ex:
        raise Halt(
            f"the screen compares with the champion's audits {', '.join(audit_ids)}, and one of their results "
            f"cannot be read ({ex}); restore the run folder from a copy, or start a new run with --new"
        ) from None
    stack = np.stack([ctx.matrix(r.scores) for r in results])
    counts = (~np.isnan(stack)).sum(axis=0)
    return np.where(counts > 0, np.nansum(stack, axis=0) / np.maximum(counts, 1), np.nan)


def run_screen(
    rounds: RoundRunner, arm: str, label: str, cand: PolicySet, champ: PolicySet, mutation_id: str
) -> RoundStat | None:
    """The candidate's screen round, against the champion's recent audits when it has them; None
    when the candidate's audit is a gap."""
    state, ctx = rounds.journal.state, rounds.ctx
    reference = reference_for(state, ctx.contract.promotion.screen_reference, label, champ)
    if not reference:
        return rounds.run_pair(arm, label, "screen", cand, champ, mutation_id)
    (a,) = rounds.run_batch(arm, label, "screen", [("cand", cand)], reference=reference, compared_with=champ)
    crashpoint("round.before_record")
    if not a.ok:
        rounds.record_gap(arm, label, "screen", mutation_id, a.gap_reason)
        return None
    champion = mean_scores(ctx, rounds.journal.run_dir, reference)
    stat = fitness.paired_round_for(ctx.matrix(a.scores), champion, ctx.dimensions, ctx.contract.promotion)
    rounds.scored(arm)
    return stat.model_copy(update={"reference": reference}).labelled(label)
