"""Which arms' final champions a contract certifies against the start (no pydantic: `sil status`
reads it; `Contract.certified_arms` is this on a contract)."""

from __future__ import annotations

from collections.abc import Sequence


def certified_arms(arms: Sequence[str], certify_rounds: int, certify_random: bool) -> list[str]:
    """The gate's whenever there are certification rounds, the random arm's too with `certify_random`."""
    wanted = ["random", "gate"] if certify_random else ["gate"]
    return [a for a in wanted if a in arms] if certify_rounds > 0 else []
