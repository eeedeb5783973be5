"""How many audits proved the use of the policy they were sent, per surface and per verdict (L3).

Each audit of a pair (and a screen's audit, against the champion) records, per surface where its
policy differs from the other side's, whether the target model's inputs show that text
(sil/exec/useproof.py): proven, not provable, or refuted (a refuted audit is a gap). A verdict whose audits could not prove use may rest on a
runtime that never read the change, so every view shows these counts beside the verdicts.

    per_surface = surface_counts(view.payloads("audit", AuditRecord))   # {"wrapper_prompt": {"proven": 4, ...}}
    words(verdict_counts(audits, rounds))                                # "proven 2, not provable 2"
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping

from sil.integrity.records import AuditRecord, RoundRecord

KINDS = ("proven", "not_provable", "refuted")
NOT_PROVABLE_MEANS = (
    "not provable: the audit cannot show whether the runtime read the change, because its backend does "
    "not record the target model's inputs (the simulated one) or the text that sets its policy apart is "
    "under 12 characters or on a path the target did not take; a verdict on such audits may be about a "
    "change the runtime never used"
)

NOT_PROVABLE_SHORT = "not provable = the audit cannot show that the runtime read the change"
COUNTED_OVER = "pair and screen audits"  # the audits told apart from another policy set: what use is counted over


def surface_counts(audits: Iterable[AuditRecord]) -> dict[str, dict[str, int]]:
    """Per surface, how many pair and screen audits proved, could not prove, or refuted its use."""
    out: dict[str, dict[str, int]] = {}
    for audit in audits:
        for surface, use in audit.use.items():
            row = out.setdefault(surface, dict.fromkeys(KINDS, 0))
            row[use] += 1
    return dict(sorted(out.items()))


def verdict_counts(audits: Iterable[AuditRecord], rounds: Collection[str]) -> dict[str, int]:
    """The use counts of the audits of a candidate's rounds, over every surface they differ on."""
    counts = dict.fromkeys(KINDS, 0)
    for audit in audits:
        if audit.round in rounds:
            for use in audit.use.values():
                counts[use] += 1
    return counts


def candidate_rounds(rounds: Iterable[RoundRecord], arm: str, mutation_id: str) -> set[str]:
    """The round numbers of one candidate (an arm's mutation; two arms may try the same edit)."""
    return {r.round for r in rounds if r.arm == arm and r.mutation_id == mutation_id}


def words(counts: Mapping[str, int]) -> str:
    """'proven 2, not provable 2' (kinds with no audit left out), or 'not checked'."""
    parts = [f"{kind.replace('_', ' ')} {counts[kind]}" for kind in KINDS if counts.get(kind)]
    return ", ".join(parts) or "not checked"


def surface_words(per_surface: Mapping[str, Mapping[str, int]]) -> str:
    """'wrapper_prompt: proven 4, not provable 2; tool_descriptions: not provable 6' or 'not checked'."""
    return "; ".join(f"{s}: {words(c)}" for s, c in per_surface.items()) or f"not checked (no {COUNTED_OVER})"
